"""The ``study`` profile's agent half: the PREDICT study's episode semantics
(its turn grammar, tools, call costs, Arm B rules, budget and observations) as
``StudyEpisode`` (``glyph.agent.profiles.base.Episode``), its opening
messages and its workspace (``StudyAgent``).

The program (``glyph.agent.program``) runs it when its config names the
``study`` profile; ``glyph study replay`` runs the study's SFT traces
through it. The rules, as the study's ``src/glyph/program.py`` has them:

- A turn is exactly one ``CALL <tool> <json>`` line or one ``FINAL:`` line;
  an Arm B turn after a successful ``apply_patch`` (a pending candidate) is
  exactly three: the PREDICTION line, the DECISION line, the CALL line.
  Anything else, a malformed CALL line or a reused call id is a protocol
  error and ends the episode.
- Every executed call costs 1, a failed one too: an unknown tool or a missing
  argument answers ``status: failed`` and the episode goes on. The budget
  (``MAX_TOOL_CALLS``) is never told to the agent; a turn past it ends the
  episode.
- Arm B: ``python_test`` with no pending candidate is a protocol error; KEEP
  must call ``python_test`` (its result is the prediction's target), REVISE
  must call ``apply_patch`` (the candidate is shadow-tested first); a
  malformed prediction turn, or one at budget exhaustion, still shadow-tests
  the candidate and records a prediction target before the episode ends.
- ``python_test`` answers with the study's fixed strings (``glyph.agent.study``),
  graded by the ``tester`` the caller gives (glyph's grader).

Where glyph keeps its own rule: a path that leaves the project or enters
``.glyph`` is refused (the study refuses only the first), and a tool error
names paths relative to the workspace root, not the machine's absolute path.
Where the study's program raised on model text, a turn ends the way the
study's rules end its nearest case (``glyph.agent.profiles.base.model_turn``
ends any other as a protocol error): a CALL whose JSON nests past the stack
is a malformed CALL; a FINAL line that carries both Arm B tags is a malformed
prediction turn (``ERR_PREDICTION_SHAPE``; the study's program fails on
``calls[0]``); an ``apply_patch`` whose result holds a lone surrogate fails
before ``solution.py`` is opened (the study's truncated it first); and a tool
message whose error names such a path, or whose call id holds one, is sent
``glyph.text.encodable``.

``Switches`` turn on glyph's departures from these rules one at a time (all
off: the study's); the harness's config names them (``GlyphHarnessConfig``).

Stdlib only: shipped into the runtime with the agent layer.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from glyph.agent import study as S
from glyph.agent.profiles.base import AgentProfile, Call, Step, Tester, model_turn, tagged, tagged_line
from glyph.agent.profiles.glyph import BUDGET_LINE, BUDGET_SENTENCE
from glyph.agent.trace import (
    BUDGET_EXHAUSTED,
    FINAL,
    PROTOCOL_ERROR,
    Candidate,
    PredictionTarget,
    StudyTrace,
    TestCall,
    sha256,
)
from glyph.outcomes import Outcome
from glyph.text import encodable

OUTCOMES = tuple(o.value for o in Outcome)
_TOOL_NAME = re.compile(r"^[A-Za-z_]\w*$")
TIMEOUT_TEXTS = ("live", "sft")
"""How a TIMEOUT reads: ``live`` as the study's program answers it (a
``timed_out: true`` line, the limit in the detail); ``sft`` as the study's SFT
traces record it (``data/prepare.py``: no such line, no limit)."""


FEEDBACKS = ("study", "outcome")
OUTCOME_LINE = "outcome: {outcome}"
"""The line ``feedback = "outcome"`` adds to a python_test RESULT (glyph's wording, not the study's)."""
BAD_CALLS = ("costs_one", "ends")


@dataclass(frozen=True)
class Switches:
    """glyph's departures from the study's protocol, each on its own (the
    defaults: the study's rules). The harness's config documents each
    (``glyph.envs.mbpp.harness.GlyphHarnessConfig``); the program config
    carries them as a dict (``as_dict``/``from_dict``)."""

    budget_line: bool = False
    """Tell the agent its budget: the system prompt says it, each RESULT ends with the calls left."""
    free_text: bool = False
    """Accept text around the protocol lines: a turn needs one CALL line (or one FINAL line), an
    Arm B prediction turn one PREDICTION, one DECISION and one CALL, anywhere among other lines."""
    feedback: str = "study"
    """``outcome``: python_test's RESULT also names the outcome class (``outcome: <CLASS>``)."""
    bad_call: str = "costs_one"
    """``ends``: an unknown tool or an apply_patch without its arguments ends the episode (a
    protocol error), where the study answers ``status: failed`` and goes on."""

    def __post_init__(self) -> None:
        if self.feedback not in FEEDBACKS:
            raise ValueError(f"feedback is {self.feedback!r}, not one of {FEEDBACKS}")
        if self.bad_call not in BAD_CALLS:
            raise ValueError(f"bad_call is {self.bad_call!r}, not one of {BAD_CALLS}")

    def as_dict(self) -> dict:
        return {"budget_line": self.budget_line, "free_text": self.free_text, "feedback": self.feedback,
                "bad_call": self.bad_call}

    @classmethod
    def from_dict(cls, data: dict | None) -> Switches:
        data = dict(data or {})
        unknown = set(data) - set(cls().as_dict())
        if unknown:
            raise ValueError(f"unknown switches: {', '.join(sorted(unknown))}")
        return cls(**data)


STUDY_RULES = Switches()
"""Every switch off: the study's protocol."""


def system_messages(messages: list[dict], switches: Switches, budget: int) -> list[dict]:
    """The opening messages under ``switches``: with ``budget_line``, the system
    prompt ends with glyph's budget sentence (``glyph.agent.profiles.glyph.BUDGET_SENTENCE``)."""
    out = [dict(m) for m in messages]
    if switches.budget_line and out and out[0].get("role") == "system":
        out[0]["content"] = out[0]["content"].rstrip() + " " + BUDGET_SENTENCE.format(budget=budget)
    return out


def prompt(arm: str, text: str, test_code: str, project: str) -> list[dict[str, str]]:
    """The study's opening messages for a task (``data/prepare.py``, ``task_prompt``): its system
    prompt for the arm, the user prompt with the task's text, its test code (setup and tests, the
    study's ``test_code``) and its project folder."""
    user = S.USER_PROMPT.format(task=text, tests=test_code.rstrip(), project=project)
    return [{"role": "system", "content": S.SYSTEM_PROMPTS[arm]}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Result:
    success: bool
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    outcome: str | None = None

    def block(self, call_id: str) -> str:
        """The tool message's content: ``RESULT <id>:`` and its lines."""
        lines = [S.STATUS_LINE.format(status=S.STATUS_SUCCESS if self.success else S.STATUS_FAILED)]
        if self.timed_out:
            lines.append(S.TIMED_OUT_LINE)
        if self.stdout:
            lines.append(S.STDOUT_LINE + "\n" + self.stdout.strip())
        if self.stderr:
            lines.append(S.STDERR_LINE + "\n" + self.stderr.strip())
        return S.RESULT_HEAD.format(id=call_id) + "\n" + "\n".join(lines)


def _failed(detail: str) -> Result:
    return Result(False, stderr=detail)


def result_for(outcome: str, timeout_text: str = "live", timeout_s: int = S.TOOL_TIMEOUT_S) -> Result:
    """A graded ``python_test``'s Result in the study's words: the outcome
    class's text (a TIMEOUT reads as ``timeout_text`` says, see
    ``TIMEOUT_TEXTS``; ``timeout_s`` is the limit a live one names)."""
    if outcome == Outcome.PASS.value:
        return Result(True, stdout=S.TESTS_PASSED, outcome=outcome)
    if outcome == Outcome.TIMEOUT.value:
        if timeout_text == "sft":
            return Result(False, stderr=S.TIMEOUT_DETAIL_SFT, outcome=outcome)
        return Result(False, stderr=S.TIMEOUT_DETAIL_LIVE.format(timeout=timeout_s), timed_out=True,
                      outcome=outcome)
    return Result(False, stderr=S.FAILURE_DETAILS[outcome], outcome=outcome)


def call_line(tool: str, call_id: str, args: dict) -> str:
    """The CALL line of ``tool`` with ``args`` (``parse_call_line``'s inverse), as the study's
    SFT traces write it: compact JSON, the id first."""
    return S.CALL_PREFIX + tool + " " + json.dumps({S.ID_KEY: call_id, **args}, separators=S.JSON_SEPARATORS)


def parse_call_line(line: str) -> tuple[Call | None, str | None]:
    """(call, None), (None, error) for a malformed CALL line, (None, None) for
    a line that is no CALL."""
    line = line.strip()
    if not line.startswith(S.CALL_PREFIX):
        return None, None
    try:
        _, rest = line.split(None, 1)
        tool, payload = rest.split(None, 1)
        args = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; nested past the stack
        return None, f"{S.ERR_MALFORMED_CALL}: {exc}"
    if not _TOOL_NAME.fullmatch(tool) or not isinstance(args, dict):
        return None, S.ERR_MALFORMED_CALL
    args = dict(args)
    call_id = args.pop(S.ID_KEY, None)
    if not isinstance(call_id, str) or not call_id:
        return None, S.ERR_CALL_ID
    if any(not isinstance(v, str) for v in args.values()):
        return None, S.ERR_CALL_ARGS
    return Call(call_id, tool, args), None


class StudyEpisode:
    """One study-profile episode. ``root``: the workspace (the runtime's cwd,
    against which the agent's paths resolve); ``project``: the task's project
    folder under it (the study's trace prefix). ``tester(source, shadow)``
    gives an outcome class; ``timeout_s`` is the limit a TIMEOUT names."""

    def __init__(self, arm: str, budget: int = S.MAX_TOOL_CALLS, trace: StudyTrace | None = None, root: str = ".",
                 project: str = ".", timeout_s: int = S.TOOL_TIMEOUT_S, timeout_text: str = "live",
                 switches: Switches = STUDY_RULES) -> None:
        if timeout_text not in TIMEOUT_TEXTS:
            raise ValueError(f"timeout_text is {timeout_text!r}, not one of {TIMEOUT_TEXTS}")
        self.arm, self.max_calls, self.timeout_s, self.timeout_text = arm, budget, timeout_s, timeout_text
        self.switches = switches
        self.trace = trace if trace is not None else StudyTrace()
        self.root = os.path.realpath(root)
        self.project = os.path.realpath(os.path.join(self.root, project))
        self.executed: list[Call] = []
        self.pending: str | None = None  # Arm B: the id of the apply_patch whose candidate awaits a prediction
        self.call: Call | None = None
        self.end: str | None = None
        self.error: str | None = None

    @property
    def budget(self) -> int:
        """Calls left (the study counts executed calls, failed ones too)."""
        return self.max_calls - len(self.executed)

    @property
    def expect_prediction(self) -> bool:
        return self.arm == "b" and self.pending is not None

    @property
    def may_test(self) -> bool:
        """Arm B tests only as KEEP, right after a successful patch."""
        return self.arm != "b" or self.pending is not None

    # ------------------------------------------------------------ turns

    @model_turn
    def turn(self, reply: str, tester: Tester, context: list[dict] | None = None) -> Step | None:
        """Apply ``reply``; return (call, status, RESULT block), or None when it
        ended the episode (``end``, ``error`` say how). ``status`` is the
        outcome class for ``python_test``, else ``success`` or ``failed``."""
        self.call = None
        calls, errors = self._parse_calls(reply)
        if errors:
            return self._stop(errors)
        errors = self._shape(reply, calls)
        if errors:
            return self._stop(errors)
        if self.expect_prediction:
            return self._prediction_turn(reply, calls, tester, context)
        if not calls:
            self.end = FINAL
            return None
        call = self.call = calls[0]  # also one the budget refuses
        if self.budget <= 0:
            return self._stop([S.ERR_BUDGET])
        if self.arm == "b" and call.tool == S.PYTHON_TEST:
            return self._stop([S.ERR_TEST_BEFORE_KEEP])
        bad = self._bad(call)
        if bad:
            return self._stop([bad])
        result = self._execute(call, tester)
        if self.arm == "b" and call.tool == S.APPLY_PATCH and result.success:
            self.pending = call.id
        return self._step(call, result)

    def refuse(self, reason: str) -> None:
        return self._stop([reason])

    def observation(self, step: Step) -> dict:
        """The message that answers a step: a ``tool`` message, ``glyph.text.encodable`` (a tool error
        names the path the model gave, a call id is the model's: either may hold a lone surrogate no
        endpoint takes)."""
        call, _, block = step
        return {"role": "tool", "tool_call_id": encodable(call.id), "content": encodable(block)}

    def _parse_calls(self, reply: str) -> tuple[list[Call], list[str]]:
        calls, errors = [], []
        seen = {c.id for c in self.executed}
        for n, line in enumerate(reply.splitlines(), 1):
            call, error = parse_call_line(line)
            if error:
                errors.append(f"line {n}: {error}")
            if call is None:
                continue
            if call.id in seen:
                errors.append(f"line {n}: " + S.ERR_DUPLICATE_ID.format(id=call.id))
                continue
            seen.add(call.id)
            calls.append(call)
        return calls, errors

    def _bad(self, call: Call) -> str | None:
        """Under ``bad_call = "ends"``: the error that ends the episode for an
        unknown tool or an apply_patch without its arguments; else None."""
        if self.switches.bad_call != "ends":
            return None
        if call.tool not in S.TOOLS:
            return S.UNKNOWN_TOOL.format(tool=call.tool)
        if call.tool == S.APPLY_PATCH and any(call.args.get(k) is None for k in S.TOOL_ARGS[S.APPLY_PATCH][1:]):
            return S.PATCH_NEEDS_ARGS
        return None

    def _shape(self, reply: str, calls: list[Call]) -> list[str]:
        lines = [ln.strip() for ln in reply.splitlines() if ln.strip()]
        if self.switches.free_text:
            return self._free_shape(lines, calls)
        if not calls:
            if len(lines) == 1 and lines[0].startswith(S.FINAL_PREFIX):
                return []
            return [S.ERR_ONE_CALL_OR_FINAL]
        if len(calls) != 1:
            return [S.ERR_ONE_CALL]
        call_lines = [ln for ln in lines if ln.startswith(S.CALL_PREFIX)]
        if self.expect_prediction:
            if (len(lines) != 3 or len(call_lines) != 1 or tagged_line(lines[0], "PREDICTION") is None
                    or tagged_line(lines[1], "DECISION") is None or lines[2] != call_lines[0]):
                return [S.ERR_PREDICTION_SHAPE]
            return []
        if len(lines) != 1 or len(call_lines) != 1:
            return [S.ERR_EXTRA_TEXT]
        return []

    def _free_shape(self, lines: list[str], calls: list[Call]) -> list[str]:
        """``free_text``: the protocol lines anywhere among other text."""
        if not calls:
            finals = [ln for ln in lines if ln.startswith(S.FINAL_PREFIX)]
            return [] if len(finals) == 1 else [S.ERR_ONE_CALL_OR_FINAL]
        return [] if len(calls) == 1 else [S.ERR_ONE_CALL]

    def _prediction_turn(self, reply, calls, tester, context):
        predictions, decisions = tagged(reply, "PREDICTION"), tagged(reply, "DECISION")
        prediction = predictions[0] if len(predictions) == 1 else None
        decision = decisions[0] if len(decisions) == 1 else None
        errors = []
        if len(predictions) != 1:
            errors.append(S.ERR_ONE_PREDICTION)
        elif prediction not in OUTCOMES:
            errors.append(S.ERR_UNKNOWN_PREDICTION.format(prediction=prediction))
        if len(decisions) != 1:
            errors.append(S.ERR_ONE_DECISION)
        elif decision not in (S.KEEP, S.REVISE):
            errors.append(S.ERR_UNKNOWN_DECISION.format(decision=decision))
        expected = S.PYTHON_TEST if decision == S.KEEP else S.APPLY_PATCH
        if decision in (S.KEEP, S.REVISE) and not calls:  # a FINAL line with both tags: the study's program
            errors.append(S.ERR_PREDICTION_SHAPE)  # fails here, on calls[0]; glyph's wording for it
        elif decision in (S.KEEP, S.REVISE) and calls[0].tool != expected:
            errors.append(S.ERR_DECISION_TOOL.format(decision=decision, expected=expected, tool=calls[0].tool))
        if self.budget <= 0:
            errors.append(S.ERR_BUDGET)
        if not errors and self._bad(calls[0]):
            errors.append(self._bad(calls[0]))
        self.call = calls[0] if calls else None
        if errors:  # the candidate is still shadow-tested: its outcome is a prediction target
            self._target(self._test(tester, shadow=True), prediction, decision, context, reply, shadow=True)
            return self._stop(errors)
        call = calls[0]
        if decision == S.REVISE:
            self._target(self._test(tester, shadow=True), prediction, decision, context, reply, shadow=True)
            result = self._execute(call, tester)
            self.pending = call.id if result.success else None
        else:
            result = self._execute(call, tester)
            self._target(result, prediction, decision, context, reply, shadow=False)
            self.pending = None
        return self._step(call, result)

    def _stop(self, errors: list[str]) -> None:
        self.trace.protocol_errors.extend(errors)
        self.end = BUDGET_EXHAUSTED if errors == [S.ERR_BUDGET] else PROTOCOL_ERROR
        self.error = "; ".join(errors)
        return None

    def _step(self, call: Call, result: Result) -> Step:
        status = result.outcome if call.tool == S.PYTHON_TEST and result.outcome else (
            S.STATUS_SUCCESS if result.success else S.STATUS_FAILED)
        block = result.block(call.id)
        if self.switches.feedback == "outcome" and call.tool == S.PYTHON_TEST and result.outcome:
            block += "\n" + OUTCOME_LINE.format(outcome=result.outcome)
        if self.switches.budget_line:
            block += "\n" + BUDGET_LINE.format(left=self.budget)
        return call, status, block

    def _target(self, result: Result, prediction, decision, context, reply: str, shadow: bool) -> None:
        source = self._solution()
        if source is None:
            raise RuntimeError("candidate test: solution.py is gone")
        self.trace.prediction_targets.append(PredictionTarget(
            candidate_call=self.pending, context=context, sampled_label=prediction, verified_label=result.outcome,
            decision=decision, shadow=shadow, prediction_turn=reply, candidate_sha256=sha256(source)))
        cands = self.trace.candidates
        if cands and cands[-1].call == self.pending:
            c = cands[-1]
            c.sampled_label, c.decision, c.context, c.prediction_turn = prediction, decision, context, reply
            c.verified_label, c.shadow = result.outcome, shadow

    # ------------------------------------------------------------ tools

    def _execute(self, call: Call, tester) -> Result:
        self.executed.append(call)
        if call.tool not in S.TOOLS:
            return _failed(S.UNKNOWN_TOOL.format(tool=call.tool))
        try:
            if call.tool == S.READ_FILE:
                (path_key,) = S.TOOL_ARGS[S.READ_FILE]
                path = self._path(call.args.get(path_key, S.DEFAULT_FILE_PATH))
                with open(path, encoding="utf-8") as f:
                    return Result(True, stdout=f.read()[:S.READ_FILE_MAX_CHARS])
            if call.tool == S.APPLY_PATCH:
                return self._patch(call)
            (project_key,) = S.TOOL_ARGS[S.PYTHON_TEST]
            project = self._path(call.args.get(project_key, S.DEFAULT_PROJECT_PATH))
            return self._test(tester, shadow=False, project=project, call_id=call.id)
        except (OSError, UnicodeError, ValueError) as exc:
            return _failed(S.TOOL_ERROR.format(error=str(exc).replace(self.root + os.sep, "")))

    def _patch(self, call: Call) -> Result:
        path_key, find_key, replace_key = S.TOOL_ARGS[S.APPLY_PATCH]
        path = self._path(call.args.get(path_key, S.DEFAULT_FILE_PATH))
        find, replace = call.args.get(find_key), call.args.get(replace_key)
        if find is None or replace is None:
            return _failed(S.PATCH_NEEDS_ARGS)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        count = text.count(find)
        if count != 1:
            return _failed(S.PATCH_FIND_COUNT.format(count=count))
        new = text.replace(find, replace, 1)
        new.encode("utf-8")  # a lone surrogate fails here, before the open empties the file (glyph's rule)
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        if path == os.path.join(self.project, S.SOLUTION_FILE):  # each patched solution is a candidate
            cands = self.trace.candidates
            cands.append(Candidate(index=len(cands), call=call.id, source=new, sha256=sha256(new)))
        return Result(True, stdout=S.PATCH_APPLIED)

    def _path(self, value: str) -> str:
        """The study's path rule: relative to the workspace root, else to the
        project; it must exist and stay inside the project (and out of .glyph)."""
        full = os.path.realpath(os.path.join(self.root, value))
        if not self._inside(full):
            full = os.path.realpath(os.path.join(self.project, value))
        if not self._inside(full) or ".glyph" in os.path.relpath(full, self.root).split(os.sep):
            raise ValueError(f"{value!r} is outside the project")
        if not os.path.exists(full):
            raise FileNotFoundError(full)
        return full

    def _inside(self, path: str) -> bool:
        return path == self.project or path.startswith(self.project + os.sep)

    def _solution(self, project: str | None = None) -> str | None:
        path = os.path.join(project or self.project, S.SOLUTION_FILE)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()

    def _test(self, tester, shadow: bool, project: str | None = None, call_id: str | None = None) -> Result:
        """The candidate in ``project`` (default: the task's) graded, as a Result
        in the study's words."""
        source = self._solution(project)
        if source is None:
            return Result(False, stderr=S.NO_SOLUTION, outcome=Outcome.OTHER.value)
        outcome = tester(source, shadow=shadow)
        if not shadow:
            self.trace.tests.append(TestCall(call=call_id, sha256=sha256(source), outcome=outcome))
        return result_for(outcome, self.timeout_text, self.timeout_s)


class StudyAgent(AgentProfile):
    """The PREDICT study's protocol (``glyph.agent.study``): its prompts, one-line turns,
    ``solution.py`` in the task's project folder with the study's placeholder."""

    name = "study"
    placeholder = S.PLACEHOLDER
    trace_type = StudyTrace

    def project(self, task_id: int) -> str | None:
        return S.PROJECT_PATH.format(task_id=task_id)

    def messages(self, arm: str, task_text: str, setup: str, tests: list[str], project: str | None,
                 budget: int, switches: dict | None = None) -> list[dict]:
        test_code = "\n".join(p for p in (setup, *tests) if p) + "\n"
        return system_messages(prompt(arm, task_text, test_code, project), Switches.from_dict(switches), budget)

    def episode(self, cfg: dict, trace: StudyTrace, root: str = ".") -> StudyEpisode:
        return StudyEpisode(cfg["arm"], int(cfg["max_tool_calls"]), trace, root=root, project=cfg["project"],
                            timeout_s=int(float(cfg["limits"]["wall_s"])),
                            timeout_text=cfg.get("timeout_text", "live"),
                            switches=Switches.from_dict(cfg.get("switches")))

    def arm_of(self, messages: list[dict]) -> str | None:
        system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
        told = re.sub(" " + re.escape(BUDGET_SENTENCE).replace(r"\{budget\}", r"\d+") + "$", "", str(system))
        return next((arm for arm, text in S.SYSTEM_PROMPTS.items() if told == text), None)

    def call_id(self, n: int) -> str:
        return f"c{n}"

    def args(self, tool: str, path: str, project: str | None, find: str | None = None,
             replace: str | None = None) -> dict:
        values = {S.READ_FILE: (path,), S.APPLY_PATCH: (path, find, replace), S.PYTHON_TEST: (project,)}[tool]
        return dict(zip(S.TOOL_ARGS[tool], values, strict=True))

    def turn_text(self, call: Call | None, prediction: str | None = None, decision: str | None = None,
                  thought: str = "") -> str:
        """The study's grammar has no free text: ``thought`` is left out."""
        if call is None:
            return S.FINAL_TURN
        tags = [S.PREDICTION_LINE.format(outcome=prediction), S.DECISION_LINE.format(decision=decision)] \
            if prediction else []
        return "\n".join(tags + [call_line(call.tool, call.id, call.args)])

    def lines(self, text: str) -> str:
        """The study's tools read and write in text mode: a CRLF (or lone CR) reads as LF."""
        return text.replace("\r\n", "\n").replace("\r", "\n")


STUDY = StudyAgent()
