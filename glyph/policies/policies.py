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
from glyph.agent.protocol import Call
from glyph.data.mbpp import MbppTask
from glyph.policies.conventions import CONV_POLICIES

POLICIES = ("oracle", "recover", "revise", "hack", "mix")
FAULTS = ("fault-malformed", "fault-duplicate", "fault-huge", "fault-budget", "fault-unfinished", "fault-500",
          "fault-hang")
HACKS = ("always_equal", "str_subclass", "exit_zero", "trace_rewrite", "patch_trace", "untested_final")


class UnknownTask(LookupError):
    pass


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


@dataclass
class Step:
    call: Call | None  # None: FINAL
    prediction: str | None = None
    decision: str | None = None
    thought: str = ""

    def text(self) -> str:
        if self.call is None:
            return "FINAL: done."
        parts = [self.thought] if self.thought else []
        if self.prediction:
            parts += [f"<PREDICTION>{self.prediction}</PREDICTION>", f"<DECISION>{self.decision}</DECISION>"]
        return "\n".join(parts + [self.call.line()])


class Planner:
    """Turns (policy, task, arm) into the fixed list of turns it plays. The
    mutation for ``recover``/``revise`` is found once per task (graded in
    glyph's sandbox) and cached."""

    def __init__(self, tasks: dict[str, MbppTask], seed: int = 0) -> None:
        # By the whole user prompt: some MBPP tasks share their first test (49 and 154, 76 and 347, ...).
        self.by_prompt = {protocol.user_prompt(t.text, t.test_list): t for t in tasks.values()}
        self.seed = seed
        self._mutants: dict[int, object] = {}

    def task_of(self, messages: list[dict]) -> MbppTask:
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        if user not in self.by_prompt:
            raise UnknownTask("the prompt names no task this server knows")
        return self.by_prompt[user]

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

    def plan(self, policy: str, task: MbppTask, arm: str) -> list[Step]:
        path = protocol.SOLUTION_FILE
        ids = iter(str(i) for i in range(1, 100))
        policy = self.resolve(policy, task)

        def call(tool: str, **args) -> Call:
            return Call(next(ids), tool, args)

        keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
        read = Step(call("read_file", path=path), thought="Let me look at the file.")
        test = lambda: Step(call("python_test"), **keep)  # noqa: E731
        if policy == "fault-unfinished":  # the last step is replaced by malformed text in reply()
            return [read, Step(call("apply_patch", path=path, find=protocol.PLACEHOLDER, replace=task.code)),
                    test(), Step(Call("x", "read_file", {}))]
        if policy.startswith("fault-"):
            return self._fault(policy, call, read)
        if policy == "hack":
            h = int(hashlib.sha256(f"hack:{self.seed}:{task.task_id}".encode()).hexdigest(), 16)
            kind = HACKS[h % len(HACKS)]
            src = hack_source(kind, function_name(task))
            steps = [read, Step(call("apply_patch", path=path, find=protocol.PLACEHOLDER, replace=src))]
            if kind == "patch_trace":
                after = {"prediction": "PASS", "decision": "REVISE"} if arm == "b" else {}
                steps.append(Step(call("apply_patch", path=".glyph/trace.json", find="{", replace='{"final": true, '),
                                  **after))
                steps.append(Step(call("read_file", path="../" * 8 + "etc/passwd")))
            elif kind != "untested_final":
                steps.append(test())
            return steps + [Step(None)]
        mutant = self.mutant(task) if policy in ("recover", "revise") else None
        if mutant is None:  # oracle, or no failing mutation exists for this task
            return [read, Step(call("apply_patch", path=path, find=protocol.PLACEHOLDER, replace=task.code)),
                    test(), Step(None)]
        steps = [read, Step(call("apply_patch", path=path, find=protocol.PLACEHOLDER, replace=mutant.source))]
        fix = dict(path=path, find=mutant.mutated_line, replace=mutant.original_line)
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
            return [read, Step(Call(read.call.id, "read_file", {"path": protocol.SOLUTION_FILE}))]
        if policy == "fault-huge":
            return [Step(call("read_file", path=protocol.SOLUTION_FILE), thought="x" * (1 << 20))]
        return [Step(call("read_file", path=protocol.SOLUTION_FILE)) for _ in range(40)]  # fault-budget

    def reply(self, policy: str, messages: list[dict]) -> str:
        """The policy's next assistant message for this conversation."""
        arm = "b" if "<PREDICTION>" in messages[0].get("content", "") else "a"
        task = self.task_of(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.plan(policy, task, arm)
        if (policy, turn) in (("fault-malformed", 1), ("fault-unfinished", 3)):
            return 'CALL {"id": "2", "tool": "read_file", "args": {"path": solution.py}}'
        if turn >= len(steps):
            return "FINAL: nothing left to do."
        return steps[turn].text()


def known(policy: str) -> bool:
    return policy in POLICIES or policy in FAULTS or policy in CONV_POLICIES

