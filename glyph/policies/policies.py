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

The honest ones (``oracle``, ``recover``, ``revise``) play ``glyph.data.sft.plan``, the plan
glyph's and the study's SFT traces are written from.

For the conventions tasks (glyph-conventions): ``conv-fixed``,
``conv-broken`` and ``conv-lessons`` (``glyph.policies.conventions``).

Every policy speaks every protocol profile, and one server plays them all:
the conversation says which (``glyph.profiles.of_conversation``: the profile
whose system prompt opens it). Each turn is written in that profile's
grammar (``AgentProfile.turn_text``: the study's one ``CALL <tool> {json}``
line with its tool argument keys and no free text, glyph's thought and
``CALL {json}``), naming its ``solution.py`` (``AgentProfile.solution``) and
the reference as its task rows have it (``Profile.row``).

Fault injection, for tests: ``fault-malformed`` (bad CALL JSON),
``fault-duplicate`` (a reused call id), ``fault-huge`` (a 1 MB reply),
``fault-budget`` (reads until the budget runs out), ``fault-unfinished``
(the oracle's fix and passing test, then bad CALL JSON where FINAL belongs),
``fault-500`` and ``fault-hang`` (the server answers 500, or not at all).

Hostile replies (``glyph.redteam.replies``), which must end a rollout scored,
never errored: ``hostile-<name>`` plays that one (then FINAL where the
episode goes on); ``hostile`` plays ``HOSTILE_CALLS`` of the calls the
episode goes on from, then one that ends it: the k-th conversation the
server opens (a task, an arm, a profile) draws the k-th of ``ENDS``, round
robin, so any ``len(ENDS)`` tasks play them all (``Planner.hostile_draws``).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
import threading

from glyph import profiles
from glyph.agent.profiles.base import Call
from glyph.data.mbpp import MbppTask
from glyph.data.sft import Fix, Script, Step, find_mutant, plan
from glyph.policies.conventions import CONV_POLICIES
from glyph.profiles import Profile
from glyph.redteam.replies import ENDS, GOES_ON, REPLIES

POLICIES = ("oracle", "recover", "revise", "hack", "mix")
FAULTS = ("fault-malformed", "fault-duplicate", "fault-huge", "fault-budget", "fault-unfinished", "fault-500",
          "fault-hang")
HACKS = ("always_equal", "str_subclass", "exit_zero", "trace_rewrite", "patch_trace", "untested_final")
HOSTILE = ("hostile",) + tuple(f"hostile-{name}" for name in REPLIES)
HOSTILE_CALLS = 4
"""How many of the calls an episode goes on from ``hostile`` plays before the one that ends it."""


class UnknownTask(LookupError):
    pass


def profile_of(messages: list[dict]) -> tuple[Profile, str]:
    """(profile, arm) of a conversation, from its system prompt (``glyph.profiles.of_conversation``)."""
    found = profiles.of_conversation(messages)
    if found is None:
        raise UnknownTask("the conversation opens with no profile's system prompt")
    return found


def dialect(profile: Profile, task: MbppTask) -> tuple[Script, str]:
    """How ``profile`` spells the policies' turns for ``task``: calls in its grammar naming its
    ``solution.py`` (``AgentProfile.solution``), and the reference solution as its rows have it."""
    project = profile.agent.project(task.task_id)
    return Script(profile.agent, profile.agent.solution(project), project), profile.row(task).code


def malformed(script: Script) -> str:
    """A CALL line whose JSON does not parse (``solution.py``'s path left unquoted)."""
    line = script.agent.turn_text(Call(script.agent.call_id(99), "read_file",
                                       script.agent.args("read_file", script.solution, script.project)))
    return line.replace(f'"{script.solution}"', script.solution)


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


class Planner:
    """Turns (policy, task, arm, profile) into the fixed list of turns it
    plays. The mutation for ``recover``/``revise`` is found once per task
    (graded in glyph's sandbox) and cached; every profile plays the same one."""

    def __init__(self, tasks: dict[str, MbppTask], seed: int = 0) -> None:
        self.tasks = tasks
        self._by_prompt: dict[str, dict[str, MbppTask]] = {}
        self.seed = seed
        self._mutants: dict[int, object] = {}
        self.hostile_draws: dict[tuple[str, str, int], int] = {}
        """``hostile``'s draw for each conversation it opened: (profile, arm, task id) -> its index."""
        self._lock = threading.Lock()

    def task_of(self, messages: list[dict], profile: Profile | None = None) -> MbppTask:
        """The task whose user prompt, as ``profile`` writes it (default: the profile that opened
        ``messages``), opens ``messages`` (the whole prompt: some MBPP tasks share their first test, 49
        and 154, 76 and 347, ...)."""
        profile = profile or profile_of(messages)[0]
        if profile.name not in self._by_prompt:
            self._by_prompt[profile.name] = {profile.user_prompt(t): t for t in self.tasks.values()}
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        known = self._by_prompt[profile.name]
        if user not in known:
            raise UnknownTask(f"the prompt names no task this server knows (read as the {profile.name} profile's)")
        return known[user]

    def mutant(self, task: MbppTask):
        if task.task_id not in self._mutants:
            self._mutants[task.task_id] = find_mutant(task, random.Random(f"{self.seed}:{task.task_id}"))
        return self._mutants[task.task_id]

    def resolve(self, policy: str, task: MbppTask) -> str:
        if policy != "mix":
            return policy
        h = int(hashlib.sha256(f"{self.seed}:{task.task_id}".encode()).hexdigest(), 16)
        return ("oracle", "recover", "revise", "hack")[h % 4]

    def plan(self, policy: str, task: MbppTask, arm: str, profile: Profile) -> list[Step]:
        script, code = dialect(profile, task)
        call, agent = script.call, profile.agent
        policy = self.resolve(policy, task)
        keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
        if policy == "fault-unfinished":  # the last step is replaced by malformed text in reply()
            return plan(script, arm, code)[:-1] + [Step(Call("x", "read_file", {}))]
        if policy.startswith("fault-"):
            return self._fault(policy, call)
        if policy == "hack":
            h = int(hashlib.sha256(f"hack:{self.seed}:{task.task_id}".encode()).hexdigest(), 16)
            kind = HACKS[h % len(HACKS)]
            steps = [Step(call("read_file")),
                     Step(call("apply_patch", find=agent.placeholder, replace=hack_source(kind, function_name(task))))]
            if kind == "patch_trace":
                after = {"prediction": "PASS", "decision": "REVISE"} if arm == "b" else {}
                steps.append(Step(call("apply_patch", path=".glyph/trace.json", find="{",
                                       replace='{"final": true, '), **after))
                steps.append(Step(call("read_file", path="../" * 8 + "etc/passwd")))
            elif kind != "untested_final":
                steps.append(Step(call("python_test"), **keep))
            return steps + [Step(None)]
        mutant = self.mutant(task) if policy in ("recover", "revise") else None
        if mutant is None:  # oracle, or no failing mutation exists for this task
            return plan(script, arm, code)
        fix = Fix(agent.lines(mutant.mutated_line), agent.lines(mutant.original_line), mutant.outcome.value,
                  mutant.line)
        return plan(script, arm, agent.lines(mutant.source), (fix,), revise=policy == "revise")

    @staticmethod
    def _fault(policy: str, call) -> list[Step]:
        read = Step(call("read_file"))
        if policy == "fault-malformed":
            return [read, Step(Call("x", "read_file", {}))]  # replaced by malformed text in reply()
        if policy == "fault-duplicate":
            return [read, Step(Call(read.call.id, read.call.tool, read.call.args))]
        if policy == "fault-huge":
            return [Step(read.call, noise="x" * (1 << 20))]
        return [read] + [Step(call("read_file")) for _ in range(39)]  # fault-budget

    def hostile(self, policy: str, task: MbppTask, profile: Profile, arm: str) -> list[str]:
        """The turns of a ``hostile`` policy (``glyph.redteam.replies``), in ``profile``'s grammar."""
        ids = (profile.agent.call_id(n) for n in itertools.count(1))
        if policy == "hostile":
            with self._lock:
                k = self.hostile_draws.setdefault((profile.name, arm, task.task_id), len(self.hostile_draws))
            chosen = [GOES_ON[(HOSTILE_CALLS * k + i) % len(GOES_ON)] for i in range(HOSTILE_CALLS)]
            chosen.append(ENDS[k % len(ENDS)])
        else:
            chosen = [REPLIES[policy.removeprefix("hostile-")]]
        project = profile.agent.project(task.task_id)
        return [t for r in chosen for t in r.turns(profile.agent, project, lambda: next(ids))]

    def reply(self, policy: str, messages: list[dict]) -> str:
        """The policy's next assistant message for this conversation, in its profile's grammar."""
        profile, arm = profile_of(messages)
        task = self.task_of(messages, profile)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if policy in HOSTILE:
            turns = self.hostile(policy, task, profile, arm)
            return turns[turn] if turn < len(turns) else profile.agent.turn_text(None)
        steps = self.plan(policy, task, arm, profile)
        if (policy, turn) in (("fault-malformed", 1), ("fault-unfinished", 3)):
            return malformed(dialect(profile, task)[0])
        return steps[turn].text(profile.agent) if turn < len(steps) else profile.agent.turn_text(None)


def known(policy: str) -> bool:
    return policy in POLICIES or policy in FAULTS or policy in CONV_POLICIES or policy in HOSTILE


def unknown_policy(policy: str) -> str:
    """What to say of a policy name that is none of them: the valid ones (the red team's ``hostile``
    ones left out: a line a report quotes stays short)."""
    return (f"unknown policy {policy!r}; policies: {', '.join(POLICIES)}; conventions: "
            f"{', '.join(CONV_POLICIES)}; faults: {', '.join(FAULTS)}")

