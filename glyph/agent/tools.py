"""The agent's tools: what ``read_file``, ``apply_patch`` and ``python_test``
do to a workspace, in one place.

Stdlib only: shipped into the runtime with the agent program, which
answers every call through ``execute``; the SFT replay (``glyph.data.sft.replay``) and the credit
replay (``glyph.credit.replay``, through ``glyph.agent.program``) run their
traces through the same function, so a recorded RESULT is checked against
the semantics the agent met, not a copy of them. The grammar of a call and
the patch rule (``find`` occurs exactly once) are ``glyph.agent.protocol``'s.

Guarantees: a path is resolved inside the workspace root (symlinks
followed) and refused if it leaves it or enters ``.glyph`` (the program's
own files, its config and its trace); files are read and written as UTF-8
with ``surrogateescape`` and no newline translation, so any bytes
round-trip; each patch of ``solution.py`` is recorded as a candidate, each
python_test with the sha256 of what it tested.
"""

from __future__ import annotations

import hashlib
import os

from glyph.agent import protocol
from glyph.text import source_bytes


def sha256(text: str) -> str:
    """The sha256 of ``text`` as the workspace holds it (UTF-8, surrogateescape:
    ``glyph.text.source_bytes``, which never raises, so finalize hashes a
    tampered trace's source too)."""
    return hashlib.sha256(source_bytes(text)).hexdigest()


def workspace_path(path: str, root: str = ".") -> str | None:
    """The path inside the workspace, or None if it points outside (or into .glyph)."""
    root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(root, path))
    inside = full.startswith(root + os.sep) and ".glyph" not in os.path.relpath(full, root).split(os.sep)
    return full if inside else None


def read_text(path: str) -> str | None:
    """The file's text, or None where there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def execute(call: protocol.Call, tester, trace: dict, root: str = ".") -> tuple[str, str]:
    """Run one tool call in the workspace at ``root``; return (status, body).
    ``tester(source, shadow)`` gives an outcome class. Records tests and
    candidates in ``trace`` (its ``tests`` and ``candidates`` lists)."""
    if call.tool == "python_test":
        source = read_text(os.path.join(root, protocol.SOLUTION_FILE)) or ""
        outcome = tester(source, shadow=False)
        trace["tests"].append({"call": call.id, "sha256": sha256(source), "outcome": outcome})
        if trace["candidates"] and trace["candidates"][-1]["sha256"] == sha256(source):
            cand = trace["candidates"][-1]
            cand.setdefault("verified_label", outcome)
            cand.setdefault("shadow", False)
        return outcome, ""
    full = workspace_path(call.args["path"], root)
    if full is None:
        return "error: the path is outside the project", ""
    if call.tool == "read_file":
        text = read_text(full)
        return ("ok", text) if text is not None else (f"error: no such file {call.args['path']!r}", "")
    text = read_text(full)
    if text is None:
        return f"error: no such file {call.args['path']!r}", ""
    try:
        new = protocol.apply_patch(text, call.args["find"], call.args["replace"])
    except ValueError as exc:
        return f"error: {exc}", ""
    try:
        new.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape in the call: no file holds it
        return "error: the patched text holds a character a UTF-8 file cannot hold (a lone surrogate)", ""
    with open(full, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(new)
    if os.path.relpath(full, os.path.realpath(root)) == protocol.SOLUTION_FILE:  # each patched solution is a candidate
        trace["candidates"].append({"index": len(trace["candidates"]), "call": call.id, "source": new,
                                    "sha256": sha256(new)})
    return "ok", ""
