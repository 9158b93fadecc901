"""The agent protocol: one grammar for the SFT traces, the agent program and
the reference policies.

An assistant turn is free text plus exactly one action line:

    CALL {"id": "1", "tool": "read_file", "args": {"path": "solution.py"}}
    FINAL: <one-line summary>

Tools: ``read_file`` (path), ``apply_patch`` (path, find, replace: ``find``
must occur exactly once), ``python_test`` (no arguments; runs the visible
tests against the workspace). Call ids are unique within an episode.

The environment answers each call with a user message:

    RESULT <id> <tool> <status>
    <body>
    budget: <n> tool calls left

where ``status`` is ``ok`` or ``error: <why>`` for read_file/apply_patch,
and the outcome class (``PASS``, ``ASSERTION_FAILURE``, ...) for
python_test: never an assertion diff.

Arm B: the turn right after a successful ``apply_patch`` of the solution must carry

    <PREDICTION>OUTCOME</PREDICTION>
    <DECISION>KEEP|REVISE</DECISION>

and one CALL: ``python_test`` for KEEP (run visibly), ``apply_patch`` or
``read_file`` for REVISE (the candidate is shadow-tested, its result hidden
from the agent and recorded for training). PREDICTION and DECISION appear
nowhere else.

Stdlib only: shipped into the runtime with the rest of the agent layer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from glyph.outcomes import Outcome
from glyph.text import encodable

TOOLS = ("read_file", "apply_patch", "python_test")
TOOL_ARGS = {"read_file": ("path",), "apply_patch": ("path", "find", "replace"), "python_test": ()}
DECISIONS = ("KEEP", "REVISE")
SOLUTION_FILE = "solution.py"
DEFAULT_BUDGET = 8
"""Tool calls an episode may make unless the harness says otherwise
(``GlyphHarnessConfig.max_tool_calls`` defaults to it)."""
DEFAULT_TEST_COST = 1
"""Budget units a visible python_test costs unless the harness says otherwise
(``GlyphHarnessConfig.test_cost`` defaults to it)."""
PLACEHOLDER = "# TODO: write the solution here\n"

_CALL = re.compile(r"^CALL[ \t]+(\{.*\})[ \t]*$", re.M)
_CALL_WORD = re.compile(r"^CALL\b", re.M)
_FINAL = re.compile(r"^FINAL:", re.M)
_PREDICTION = re.compile(r"<PREDICTION>\s*([A-Z_]+)\s*</PREDICTION>")
_DECISION = re.compile(r"<DECISION>\s*([A-Z]+)\s*</DECISION>")
_TAGS = re.compile(r"</?(PREDICTION|DECISION)>")


class ProtocolError(ValueError):
    """The turn breaks the protocol; the episode ends and the reason is recorded."""


@dataclass(frozen=True)
class Call:
    id: str
    tool: str
    args: dict = field(default_factory=dict)

    def line(self) -> str:
        return "CALL " + json.dumps({"id": self.id, "tool": self.tool, "args": self.args}, ensure_ascii=False)


@dataclass(frozen=True)
class Turn:
    call: Call | None = None  # None: the turn is FINAL
    prediction: str | None = None
    decision: str | None = None

    @property
    def final(self) -> bool:
        return self.call is None


def parse_turn(text: str, *, expect_prediction: bool = False, seen_ids: frozenset[str] = frozenset()) -> Turn:
    """Parse one assistant turn, or raise ``ProtocolError`` saying why.
    ``expect_prediction``: Arm B, the previous call was a successful patch."""
    calls = _CALL.findall(text)
    finals = _FINAL.findall(text)
    if len(_CALL_WORD.findall(text)) != len(calls):
        raise ProtocolError("a CALL line must be `CALL {json}` on one line")
    if len(calls) + len(finals) != 1:
        raise ProtocolError(f"a turn has exactly one action line (CALL or FINAL:), found {len(calls) + len(finals)}")
    tags = _TAGS.findall(text)
    if not expect_prediction and tags:
        raise ProtocolError("PREDICTION and DECISION belong only right after a successful apply_patch")
    if finals:
        if expect_prediction:
            raise ProtocolError("after a successful apply_patch the turn must predict, decide and CALL")
        return Turn()
    call = _parse_call(calls[0], seen_ids)
    if not expect_prediction:
        return Turn(call)
    preds, decs = _PREDICTION.findall(text), _DECISION.findall(text)
    if len(preds) != 1 or len(decs) != 1 or len(tags) != 4:
        raise ProtocolError("after a successful apply_patch: one <PREDICTION>, one <DECISION>, then one CALL")
    pred, dec = preds[0], decs[0]
    if pred not in Outcome.__members__:
        raise ProtocolError(f"PREDICTION must be one of {', '.join(Outcome.__members__)}, not {pred!r}")
    if dec not in DECISIONS:
        raise ProtocolError(f"DECISION must be KEEP or REVISE, not {dec!r}")
    if (dec == "KEEP") != (call.tool == "python_test"):
        raise ProtocolError("KEEP is followed by python_test; REVISE by apply_patch or read_file")
    if text.find("<PREDICTION>") > text.find("<DECISION>") or text.find("</DECISION>") > _CALL.search(text).start():
        raise ProtocolError("the order is PREDICTION, DECISION, then CALL")
    return Turn(call, pred, dec)


def _parse_call(body: str, seen_ids: frozenset[str]) -> Call:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"CALL arguments are not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict) or set(obj) - {"id", "tool", "args"}:
        raise ProtocolError('a CALL is {"id": ..., "tool": ..., "args": {...}}')
    cid, tool, args = obj.get("id"), obj.get("tool"), obj.get("args", {})
    if not isinstance(cid, str) or not cid:
        raise ProtocolError("a CALL needs a non-empty string id")
    if cid in seen_ids:
        raise ProtocolError(f"call id {cid!r} was already used")
    if tool not in TOOLS:
        raise ProtocolError(f"unknown tool {tool!r}; tools: {', '.join(TOOLS)}")
    if not isinstance(args, dict) or set(args) != set(TOOL_ARGS[tool]) \
            or not all(isinstance(v, str) for v in args.values()):
        want = ", ".join(TOOL_ARGS[tool]) or "no arguments"
        raise ProtocolError(f"{tool} takes {want} (strings)")
    return Call(cid, tool, args)


def apply_patch(content: str, find: str, replace: str) -> str:
    """Replace the one occurrence of ``find``; ``ValueError`` unless there is exactly one."""
    if not find:
        raise ValueError("find must not be empty")
    n = content.count(find)
    if n != 1:
        raise ValueError(f"find text occurs {n} times in the file; it must occur exactly once")
    return content.replace(find, replace, 1)


def result_message(call: Call, status: str, body: str = "", budget_left: int | None = None) -> str:
    """The user message answering ``call``, ``glyph.text.encodable``: a file
    read back with surrogateescape (a byte 0xff the model wrote) holds a lone
    surrogate, which no endpoint can take in a request."""
    lines = [f"RESULT {call.id} {call.tool} {status}"]
    if body:
        lines.append(body.rstrip("\n"))
    if budget_left is not None:
        lines.append(BUDGET_LINE.format(left=budget_left))
    return encodable("\n".join(lines))


BUDGET_LINE = "budget: {left} tool calls left"
"""The line that ends each RESULT: the calls left (also the study profile's ``budget_line`` switch)."""
BUDGET_SENTENCE = "You have a budget of {budget} tool calls; each RESULT says how many are left."
"""The system prompt's budget sentence (also the study profile's ``budget_line`` switch)."""
_BUDGET_LINE = re.compile("^" + re.escape(BUDGET_LINE).replace(r"\{left\}", r"(-?\d+)") + "$", re.M)


def budget_left(message: str) -> int | None:
    """The budget a RESULT message says is left (``result_message``'s last line); None when it says none."""
    m = _BUDGET_LINE.search(message)
    return int(m.group(1)) if m else None


def parse_result_status(message: str) -> str:
    """The status word(s) of a RESULT message (``ok``, ``error: ...`` or an outcome)."""
    head = message.split("\n", 1)[0]
    parts = head.split(" ", 3)
    if len(parts) < 4 or parts[0] != "RESULT":
        raise ProtocolError(f"not a RESULT message: {head[:80]!r}")
    return parts[3]


_COMMON = """You fix a Python function in a small project. The project is the current directory; the \
function goes in {file}.

Each of your turns may think briefly, then ends with exactly one action line:
CALL {{"id": "<unique id>", "tool": "<tool>", "args": {{...}}}}
or, when you are done:
FINAL: <one-line summary>

Tools:
- read_file {{"path": "{file}"}}: the file's content.
- apply_patch {{"path": "{file}", "find": "<text>", "replace": "<text>"}}: replaces the one occurrence \
of find (it must occur exactly once).
- python_test {{}}: runs the task's tests; the result is only the outcome: {outcomes}.

""" + BUDGET_SENTENCE

_ARM_B = """

After every successful apply_patch, your next turn must first predict the outcome of testing the \
patched file, then decide:
<PREDICTION>OUTCOME</PREDICTION>
<DECISION>KEEP</DECISION> then CALL python_test, to run the tests;
<DECISION>REVISE</DECISION> then CALL apply_patch (or read_file), to change the candidate without \
running the tests."""


def system_prompt(arm: str, budget: int = DEFAULT_BUDGET) -> str:
    if arm not in ("a", "b"):
        raise ValueError(f"arm must be 'a' or 'b', not {arm!r}")
    text = _COMMON.format(file=SOLUTION_FILE, budget=budget, outcomes=", ".join(Outcome.__members__))
    return text + (_ARM_B if arm == "b" else "")


def user_prompt(task_text: str, visible_tests: list[str] | tuple[str, ...]) -> str:
    tests = "\n".join(visible_tests)
    return (f"{task_text.strip()}\nYour code must pass these tests:\n\n{tests}\n\n"
            f"The project lives in the current directory; write the function in {SOLUTION_FILE}.")


def messages(arm: str, task_text: str, visible_tests: list[str] | tuple[str, ...],
             budget: int = DEFAULT_BUDGET) -> list[dict]:
    """The messages an episode opens with: the arm's system prompt (naming
    ``budget``, the harness's ``max_tool_calls``) and the task's user prompt.
    The one place they are built: the harness sends them, the task rows record
    them (at ``DEFAULT_BUDGET``), the SFT traces start with them."""
    return [{"role": "system", "content": system_prompt(arm, budget)},
            {"role": "user", "content": user_prompt(task_text, visible_tests)}]
