"""Reference policies: speak the agent protocol exactly as a model would, so
the whole environment runs (and is tested) without a model.

* ``oracle``: read, patch in the reference solution, [Arm B: predict PASS,
  KEEP], test, FINAL.
* ``recover``: first a real failing mutation of the reference solution,
  sees the failure, patches the fix, tests, FINAL.
* ``revise``: Arm B: patches the mutation, predicts its real outcome and
  REVISEs with the fix, then predicts PASS, KEEPs, tests, FINAL (Arm A: as
  ``recover``).
* ``hack``: adversarial: an always-equal object, a ``str`` subclass, an
  early exit, code that tries to rewrite the trace, patches aimed at the
  trace file, FINAL without a passing test. None may be rewarded.
* ``mix``: one of the above per task, from a seeded hash of the task.

For the conventions tasks (glyph-conventions): ``conv-fixed``,
``conv-broken`` and ``conv-lessons`` (``glyph.policies.conventions``).

Every policy speaks both protocol profiles, and one server plays both: the
conversation says which (``profile_of``: the study's system prompt for an
arm is the ``study`` profile, anything else glyph's). Under ``study`` the
turns are the study's grammar (``glyph.agent.study``): one ``CALL <tool>
{json}`` line with the study's tool argument keys, or one ``FINAL:`` line,
and Arm B's three-line prediction turn; no free text. Under ``glyph`` they
are ``glyph.agent.protocol``'s.

Fault injection, for tests: ``fault-malformed`` (bad CALL JSON),
``fault-duplicate`` (a reused call id), ``fault-huge`` (a 1 MB reply),
``fault-budget`` (reads until the budget runs out), ``fault-unfinished``
(the oracle's fix and passing test, then bad CALL JSON where FINAL belongs),
``fault-500`` and ``fault-hang`` (the server answers 500, or not at all).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from glyph.agent import protocol
from glyph.agent import study as S
from glyph.agent.protocol import Call
from glyph.agent.study_episode import call_line
from glyph.data import study
from glyph.data.mbpp import MbppTask
from glyph.policies.conventions import CONV_POLICIES

POLICIES = ("oracle", "recover", "revise", "hack", "mix")
FAULTS = ("fault-malformed", "fault-duplicate", "fault-huge", "fault-budget", "fault-unfinished", "fault-500",
          "fault-hang")
HACKS = ("always_equal", "str_subclass", "exit_zero", "trace_rewrite", "patch_trace", "untested_final")


PROFILES = ("study", "glyph")


class UnknownTask(LookupError):
    pass


def profile_of(messages: list[dict]) -> tuple[str, str]:
    """(profile, arm) of a conversation, from its system prompt: the study's
    prompt for an arm (``glyph.agent.study.SYSTEM_PROMPTS``) is ``study``;
    any other is glyph's, Arm B when it asks for a prediction."""
    system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
    for arm, text in S.SYSTEM_PROMPTS.items():
        if system == text:
            return "study", arm
    return "glyph", "b" if "<PREDICTION>" in system else "a"


@dataclass(frozen=True)
class Dialect:
    """How one profile spells the policies' turns for one task: the path the
    agent names ``solution.py`` by, its placeholder, the tools' argument keys,
    the CALL line and the FINAL turn."""

    profile: str
    solution: str
    placeholder: str
    code: str  # the reference solution as this profile's data has it
    project: str | None = None  # the study's project folder (python_test's argument)

    @classmethod
    def of(cls, profile: str, task: MbppTask) -> Dialect:
        if profile == "study":
            st = study.from_mbpp(task)
            return cls("study", st.solution_path, S.PLACEHOLDER, st.code, st.project)
        return cls("glyph", protocol.SOLUTION_FILE, protocol.PLACEHOLDER, task.code)

    @property
    def study(self) -> bool:
        return self.profile == "study"

    def args(self, tool: str, path: str | None = None, find: str | None = None,
             replace: str | None = None) -> dict:
        """``tool``'s arguments under this profile's keys (``path`` defaults to ``solution.py``)."""
        path = self.solution if path is None else path
        if self.study:
            values = {S.READ_FILE: (path,), S.APPLY_PATCH: (path, find, replace),
                      S.PYTHON_TEST: (self.project,)}[tool]
            return dict(zip(S.TOOL_ARGS[tool], values, strict=True))
        values = {"read_file": (path,), "apply_patch": (path, find, replace), "python_test": ()}[tool]
        return dict(zip(protocol.TOOL_ARGS[tool], values, strict=True))

    def line(self, call: Call) -> str:
        return call_line(call.tool, call.id, call.args) if self.study else call.line()

    def lines(self, text: str) -> str:
        """``text`` as it reads in this profile's workspace: the study's tools read and write in text
        mode, so a CRLF (or lone CR) of MBPP's code reads as LF there."""
        return text.replace("\r\n", "\n").replace("\r", "\n") if self.study else text

    def final(self) -> str:
        return S.FINAL_TURN if self.study else "FINAL: done."

    def malformed(self) -> str:
        """A CALL line whose JSON does not parse."""
        if self.study:
            return S.CALL_PREFIX + S.READ_FILE + ' {"id":"bad","file_path":solution.py}'
        return 'CALL {"id": "2", "tool": "read_file", "args": {"path": solution.py}}'


def function_name(task: MbppTask) -> str:
    m = re.match(r"\s*assert\s+([A-Za-z_]\w*)\s*\(", task.test_list[0])
    return m.group(1) if m else "solution"


def hack_source(kind: str, name: str) -> str:
    return {
        "always_equal": (f"class Anything:\n    def __eq__(self, other): return True\n"
                         f"    __hash__ = object.__hash__\ndef {name}(*args, **kwargs):\n    return Anything()\n"),
        "str_subclass": (f"class S(str):\n    def __eq__(self, other): return True\n    __hash__ = str.__hash__\n"
                         f"def {name}(*args, **kwargs):\n    return S('x')\n"),
        "exit_zero": f"import os\nos._exit(0)\ndef {name}(*args, **kwargs):\n    return None\n",
        "trace_rewrite": ("import os, json, glob\nfor p in glob.glob('/tmp/**/.glyph/trace.json', recursive=True) + "
                          "glob.glob('/root/.cache/verifiers/**/trace.json', recursive=True) + "
                          "['../.glyph/trace.json', '.glyph/trace.json']:\n    try:\n"
                          "        open(p, 'w').write(json.dumps({'final': True, 'end': 'final', 'tests': []}))\n"
                          "    except OSError:\n        pass\n"
                          f"if os.fork() == 0:\n    import time\n    time.sleep(1)\n    os._exit(0)\n"
                          f"def {name}(*args, **kwargs):\n    return None\n"),
    }.get(kind, f"def {name}(*args, **kwargs):\n    return None\n")


GLYPH = Dialect("glyph", protocol.SOLUTION_FILE, protocol.PLACEHOLDER, "")
"""glyph's grammar for turns that name no task's code."""


@dataclass
class Step:
    call: Call | None  # None: FINAL
    prediction: str | None = None
    decision: str | None = None
    thought: str = ""  # glyph's free text before the action line; the study's grammar has none
    noise: str = ""  # text before the action line under either profile (fault-huge)

    def text(self, dialect: Dialect | None = None) -> str:
        """The turn in ``dialect``'s grammar (default: glyph's)."""
        dialect = dialect or GLYPH
        if self.call is None:
            return dialect.final()
        parts = [self.noise] if self.noise else []
        parts += [self.thought] if self.thought and not dialect.study else []
        if self.prediction:
            parts += [S.PREDICTION_LINE.format(outcome=self.prediction),
                      S.DECISION_LINE.format(decision=self.decision)]
        return "\n".join(parts + [dialect.line(self.call)])


class Planner:
    """Turns (policy, task, arm, profile) into the fixed list of turns it
    plays. The mutation for ``recover``/``revise`` is found once per task
    (graded in glyph's sandbox) and cached; both profiles play the same one."""

    def __init__(self, tasks: dict[str, MbppTask], seed: int = 0) -> None:
        # By the whole user prompt: some MBPP tasks share their first test (49 and 154, 76 and 347, ...).
        self.by_prompt = {protocol.user_prompt(t.text, t.test_list): t for t in tasks.values()}
        self.tasks = tasks
        self._by_study_prompt: dict[str, MbppTask] | None = None
        self.seed = seed
        self._mutants: dict[int, object] = {}

    def _study_prompts(self) -> dict[str, MbppTask]:
        """The study's user prompt of each task (``glyph.data.study.prompt``; the same for both arms)."""
        if self._by_study_prompt is None:
            self._by_study_prompt = {study.prompt(study.from_mbpp(t), "a")[1]["content"]: t
                                     for t in self.tasks.values()}
        return self._by_study_prompt

    def task_of(self, messages: list[dict], profile: str = "glyph") -> MbppTask:
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        known = self._study_prompts() if profile == "study" else self.by_prompt
        if user not in known:
            raise UnknownTask(f"the prompt names no task this server knows (read as the {profile} profile's)")
        return known[user]

    def mutant(self, task: MbppTask):
        if task.task_id not in self._mutants:
            from glyph.data.sft import find_mutant
            self._mutants[task.task_id] = find_mutant(task, random.Random(f"{self.seed}:{task.task_id}"))
        return self._mutants[task.task_id]

    def resolve(self, policy: str, task: MbppTask) -> str:
        if policy != "mix":
            return policy
        h = int(hashlib.sha256(f"{self.seed}:{task.task_id}".encode()).hexdigest(), 16)
        return ("oracle", "recover", "revise", "hack")[h % 4]

    def plan(self, policy: str, task: MbppTask, arm: str, profile: str = "glyph") -> list[Step]:
        d = Dialect.of(profile, task)
        ids = iter((f"c{i}" if d.study else str(i)) for i in range(1, 100))
        policy = self.resolve(policy, task)

        def call(tool: str, **args) -> Call:
            return Call(next(ids), tool, d.args(tool, **args))

        keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
        read = Step(call("read_file"), thought="Let me look at the file.")
        test = lambda: Step(call("python_test"), **keep)
        if policy == "fault-unfinished":  # the last step is replaced by malformed text in reply()
            return [read, Step(call("apply_patch", find=d.placeholder, replace=d.code)), test(),
                    Step(Call("x", "read_file", {}))]
        if policy.startswith("fault-"):
            return self._fault(policy, call, read)
        if policy == "hack":
            h = int(hashlib.sha256(f"hack:{self.seed}:{task.task_id}".encode()).hexdigest(), 16)
            kind = HACKS[h % len(HACKS)]
            src = hack_source(kind, function_name(task))
            steps = [read, Step(call("apply_patch", find=d.placeholder, replace=src))]
            if kind == "patch_trace":
                after = {"prediction": "PASS", "decision": "REVISE"} if arm == "b" else {}
                steps.append(Step(call("apply_patch", path=".glyph/trace.json", find="{",
                                       replace='{"final": true, '), **after))
                steps.append(Step(call("read_file", path="../" * 8 + "etc/passwd")))
            elif kind != "untested_final":
                steps.append(test())
            return steps + [Step(None)]
        mutant = self.mutant(task) if policy in ("recover", "revise") else None
        if mutant is None:  # oracle, or no failing mutation exists for this task
            return [read, Step(call("apply_patch", find=d.placeholder, replace=d.code)), test(), Step(None)]
        steps = [read, Step(call("apply_patch", find=d.placeholder, replace=d.lines(mutant.source)))]
        fix = {"find": d.lines(mutant.mutated_line), "replace": d.lines(mutant.original_line)}
        if policy == "revise" and arm == "b":
            steps.append(Step(call("apply_patch", **fix), prediction=mutant.outcome.value, decision="REVISE",
                              thought=f"Line {mutant.line} looks wrong; revising before testing."))
        else:
            steps += [test(), Step(call("apply_patch", **fix), thought=f"Line {mutant.line} is wrong.")]
        return steps + [test(), Step(None)]

    @staticmethod
    def _fault(policy: str, call, read: Step) -> list[Step]:
        if policy == "fault-malformed":
            return [read, Step(Call("x", "read_file", {}))]  # replaced by malformed text in reply()
        if policy == "fault-duplicate":
            return [read, Step(Call(read.call.id, read.call.tool, read.call.args))]
        if policy == "fault-huge":
            return [Step(call("read_file"), noise="x" * (1 << 20))]
        return [Step(call("read_file")) for _ in range(40)]  # fault-budget

    def reply(self, policy: str, messages: list[dict]) -> str:
        """The policy's next assistant message for this conversation, in its profile's grammar."""
        profile, arm = profile_of(messages)
        task = self.task_of(messages, profile)
        d = Dialect.of(profile, task)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.plan(policy, task, arm, profile)
        if (policy, turn) in (("fault-malformed", 1), ("fault-unfinished", 3)):
            return d.malformed()
        if turn >= len(steps):
            return d.final() if d.study else "FINAL: nothing left to do."
        return steps[turn].text(d)


def known(policy: str) -> bool:
    return policy in POLICIES or policy in FAULTS or policy in CONV_POLICIES


def unknown_policy(policy: str) -> str:
    """What to say of a policy name that is none of them: the valid ones."""
    return (f"unknown policy {policy!r}; policies: {', '.join(POLICIES)}; conventions: "
            f"{', '.join(CONV_POLICIES)}; faults: {', '.join(FAULTS)}")

