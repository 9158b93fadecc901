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

This module is the ``glyph`` profile's agent half: that grammar (read by
``parse_turn``, written by ``GlyphAgent.turn_text``), the prompts, and the
episode (``GlyphEpisode``: its budget, call ids and Arm B duty, one turn at a
time) and its tools (``execute``: what ``read_file``, ``apply_patch`` and
``python_test`` do to a workspace). The tools' guarantees: a path is resolved
inside the workspace root (symlinks followed) and refused if it leaves it or
enters ``.glyph`` (the program's own files, its config and its trace); files
are read and written as UTF-8 with ``surrogateescape`` and no newline
translation, so any bytes round-trip; each patch of ``solution.py`` is
recorded as a candidate, each python_test with the sha256 of what it tested.

Stdlib only: shipped into the runtime with the rest of the agent layer.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from glyph.agent.profiles.base import (
    LABEL,
    AgentProfile,
    Call,
    ProtocolError,
    Step,
    Tester,
    model_turn,
    tagged,
)
from glyph.agent.trace import BUDGET_EXHAUSTED, FINAL, PROTOCOL_ERROR, Candidate, TestCall, Trace, sha256
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
_DECISION_LABEL = re.compile(r"[A-Z]+")
_TAGS = re.compile(r"</?(PREDICTION|DECISION)>")


def call_line(call: Call) -> str:
    """``call`` as this grammar's CALL line."""
    return "CALL " + json.dumps({"id": call.id, "tool": call.tool, "args": call.args}, ensure_ascii=False)


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
    preds, decs = tagged(text, "PREDICTION", LABEL), tagged(text, "DECISION", _DECISION_LABEL)
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
    except (ValueError, RecursionError) as exc:  # an integer past Python's digit limit; nested past the stack
        raise ProtocolError(f"CALL arguments cannot be read: {type(exc).__name__}") from None
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


# ---------------------------------------------------------------- the tools


def workspace_path(path: str, root: str = ".") -> str | None:
    """The path inside the workspace, or None if it points outside (or into .glyph). A name no file
    can have (a NUL byte, a lone surrogate outside surrogateescape's range) raises ``ValueError``."""
    root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(root, path))
    inside = full.startswith(root + os.sep) and ".glyph" not in os.path.relpath(full, root).split(os.sep)
    return full if inside else None


def read_text(path: str) -> str | None:
    """The file's text, or None where there is no such file. Any other failure to read it (a name
    too long, no permission, a loop of symlinks) raises ``OSError``."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def execute(call: Call, tester: Tester, trace: Trace, root: str = ".") -> tuple[str, str]:
    """Run one tool call in the workspace at ``root``; return (status, body).
    Records tests and candidates in ``trace``. A path the system refuses (a NUL byte, a lone
    surrogate, a name too long, no permission) is a failed call (``error: ...``), never an exception."""
    if call.tool == "python_test":
        return _test(call, tester, trace, root)
    try:
        return _file_tool(call, trace, root)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "no file can have that name"
        return f"error: cannot use the path {call.args['path']!r}: {why}", ""


def _test(call: Call, tester: Tester, trace: Trace, root: str) -> tuple[str, str]:
    source = read_text(os.path.join(root, SOLUTION_FILE)) or ""
    outcome = tester(source, shadow=False)
    trace.tests.append(TestCall(call=call.id, sha256=sha256(source), outcome=outcome))
    last = trace.candidates[-1] if trace.candidates else None
    if last is not None and last.sha256 == sha256(source) and last.verified_label is None:
        last.verified_label = outcome
    return outcome, ""


def _file_tool(call: Call, trace: Trace, root: str) -> tuple[str, str]:
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
        new = apply_patch(text, call.args["find"], call.args["replace"])
    except ValueError as exc:
        return f"error: {exc}", ""
    try:
        new.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape in the call: no file holds it
        return "error: the patched text holds a character a UTF-8 file cannot hold (a lone surrogate)", ""
    with open(full, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(new)
    if os.path.relpath(full, os.path.realpath(root)) == SOLUTION_FILE:  # each patched solution is a candidate
        trace.candidates.append(Candidate(index=len(trace.candidates), call=call.id, source=new,
                                          sha256=sha256(new)))
    return "ok", ""


# ---------------------------------------------------------------- the episode


class GlyphEpisode:
    """One episode under glyph's grammar (``glyph.agent.profiles.base.Episode``): the budget
    (a python_test costs ``test_cost``, any other call 1; a call that costs more than is left
    ends the episode unexecuted), the call ids used, whether Arm B's next turn must predict.
    ``revise_feedback = "outcome"`` shows the agent a REVISE's shadow-test outcome."""

    def __init__(self, arm: str, budget: int, test_cost: int, trace: Trace, root: str = ".",
                 revise_feedback: str = "none") -> None:
        self.arm, self.budget, self.test_cost, self.trace, self.root = arm, budget, test_cost, trace, root
        self.revise_feedback = revise_feedback
        self.seen: set[str] = set()
        self.expect_prediction = False
        self.call: Call | None = None
        self.end: str | None = None
        self.error: str | None = None
        self._feedback: str | None = None

    @model_turn
    def turn(self, reply: str, tester: Tester, context: list[dict] | None = None) -> Step | None:
        self.call = None
        try:
            turn = parse_turn(reply, expect_prediction=self.expect_prediction, seen_ids=frozenset(self.seen))
        except ProtocolError as exc:
            self.end, self.error = PROTOCOL_ERROR, str(exc)
            return None
        if turn.final:
            self.end = FINAL
            return None
        call = self.call = turn.call
        cost = self.test_cost if call.tool == "python_test" else 1
        if cost > self.budget:
            self.end, self.error = BUDGET_EXHAUSTED, f"{call.tool} costs {cost}, {self.budget} left"
            return None
        self.seen.add(call.id)
        if turn.prediction is not None:
            cand = self.trace.candidates[-1]
            cand.sampled_label, cand.decision, cand.context = turn.prediction, turn.decision, context
            cand.prediction_turn, cand.prediction_call = reply, call.id
            if turn.decision == "REVISE":
                cand.verified_label, cand.shadow = tester(cand.source, shadow=True), True
                if self.revise_feedback == "outcome":
                    self._feedback = f"(shadow test of the revised candidate: {cand.verified_label})"
        self.budget -= cost
        status, body = execute(call, tester, self.trace, self.root)
        if self._feedback:
            body = (body + "\n" if body else "") + self._feedback
            self._feedback = None
        new_candidate = bool(self.trace.candidates) and self.trace.candidates[-1].call == call.id
        self.expect_prediction = self.arm == "b" and new_candidate
        return call, status, body

    def refuse(self, reason: str) -> None:
        self.end, self.error = PROTOCOL_ERROR, reason

    may_test = True  # glyph's grammar allows a python_test at any turn

    def observation(self, step: Step) -> dict:
        """A user message with the RESULT and the budget left."""
        call, status, body = step
        return {"role": "user", "content": result_message(call, status, body, self.budget)}


_SYSTEM = re.compile(re.escape(BUDGET_SENTENCE).replace(r"\{budget\}", r"(\d+)"))


class GlyphAgent(AgentProfile):
    """glyph's protocol: its prompts with a tool manual and the budget, free text around one CALL line,
    ``solution.py`` at the workspace root."""

    name = "glyph"
    placeholder = PLACEHOLDER

    def project(self, task_id: int) -> str | None:
        return None

    def messages(self, arm: str, task_text: str, setup: str, tests: list[str], project: str | None,
                 budget: int, switches: dict | None = None) -> list[dict]:
        return messages(arm, task_text, tests, budget)

    def episode(self, cfg: dict, trace: Trace, root: str = ".") -> GlyphEpisode:
        return GlyphEpisode(cfg["arm"], int(cfg["max_tool_calls"]), int(cfg["test_cost"]), trace, root,
                            revise_feedback=cfg["revise_feedback"])

    def arm_of(self, messages: list[dict]) -> str | None:
        system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
        budget = _SYSTEM.search(system) if isinstance(system, str) else None
        return next((arm for arm in ("a", "b") if budget and system == system_prompt(arm, int(budget.group(1)))),
                    None)

    def call_id(self, n: int) -> str:
        return str(n)

    def args(self, tool: str, path: str, project: str | None, find: str | None = None,
             replace: str | None = None) -> dict:
        values = {"read_file": (path,), "apply_patch": (path, find, replace), "python_test": ()}[tool]
        return dict(zip(TOOL_ARGS[tool], values, strict=True))

    def turn_text(self, call: Call | None, prediction: str | None = None, decision: str | None = None,
                  thought: str = "") -> str:
        if call is None:
            return f"FINAL: {thought or 'done.'}"
        tags = [f"<PREDICTION>{prediction}</PREDICTION>", f"<DECISION>{decision}</DECISION>"] if prediction else []
        return "\n".join(([thought] if thought else []) + tags + [call_line(call)])


GLYPH = GlyphAgent()
