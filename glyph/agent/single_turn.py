"""The single-turn program of glyph-conventions, run inside the rollout's
runtime: one chat completion from the rollout's endpoint, and ``solution.py``
= the code in the reply.

Stdlib only. It is shipped into the runtime beside ``glyph/agent/program.py``
(the agent program), whose ``chat`` it calls, so both programs talk to the
endpoint one way (``glyph.agent.httppost``): the rollout secret as the bearer token, the same
retries on transient failures and the same timeout. It reads its
configuration (the messages, the endpoint, the model timeout) from
``$GLYPH_CONFIG`` and the secret from ``$GLYPH_ROLLOUT_SECRET``, never from
argv. Nothing it is given holds a hidden test: those stay on the trusted side.

Exit status: 0 with ``solution.py`` written; ``ENDPOINT_FAILED`` (97,
verifiers' reserved ``MODEL_TRANSPORT_ERROR_EXIT_CODE``) when the model call
failed for good, with the reason on stderr. The harness turns that into an
errored, unscored rollout: a model that did not answer is not a wrong answer.
No reply raises: any text (NUL bytes, control characters, a lone surrogate
from a JSON escape, which ``glyph.text.source_bytes`` writes as bytes Python
then refuses to compile) becomes ``solution.py``, graded as it is.

``extract_code`` is the one place a reply becomes a solution; the trusted side
(``glyph.data.conventions.extract_code``) re-exports it.
"""

from __future__ import annotations

import json
import os
import re
import sys

if not __package__:  # run as the shipped script: the root that holds glyph/ is two folders up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from glyph.agent.program import CONFIG, ENDPOINT_FAILED, EndpointError, chat, read_secret  # noqa: E402,F401
from glyph.text import source_bytes  # noqa: E402

SOLUTION_FILE = "solution.py"

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)```", re.S | re.I)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*)\Z", re.S | re.I)


def extract_code(reply: str) -> str:
    """The solution in a model's reply: the last fenced code block (untagged,
    ``python``, ``python3`` or ``py``, any case); else, when the reply opens one fence and
    never closes it (cut off at the token limit), everything after it; else the
    whole reply."""
    reply = reply or ""
    blocks = _FENCE.findall(reply)
    if blocks:
        return blocks[-1]
    if reply.count("```") == 1 and (m := _OPEN_FENCE.search(reply)):
        return m.group(1)
    return reply


def run(cfg: dict, secret: str, root: str = ".") -> dict:
    """Ask once and write ``solution.py`` under ``root``; returns what
    happened (``end``: ``answered`` or ``endpoint_error``, and the error)."""
    try:
        reply = chat(cfg["endpoint"], cfg["messages"], float(cfg.get("model_timeout", 300)), secret)
    except EndpointError as exc:
        return {"end": "endpoint_error", "error": str(exc)}
    code = extract_code(reply)
    with open(os.path.join(root, SOLUTION_FILE), "wb") as f:
        f.write(source_bytes(code))  # never raises: an escaped lone surrogate becomes bytes Python refuses
    return {"end": "answered", "error": None, "reply_chars": len(reply), "code_chars": len(code),
            "fenced": bool(_FENCE.search(reply))}


def main() -> int:
    with open(os.environ.get("GLYPH_CONFIG", CONFIG)) as f:
        cfg = json.load(f)
    result = run(cfg, read_secret())
    print(json.dumps(result))
    if result["end"] == "endpoint_error":
        print(f"endpoint_error: {result['error']}", file=sys.stderr)
        return ENDPOINT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
