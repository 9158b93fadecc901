"""Snapshot/replay credit assignment for a failed multi-step glyph-mbpp trajectory.

A failed episode says *that* the agent failed, not *which step* did it. This
module answers: from which step on was success no longer reachable?

1. **Snapshots.** The trajectory's assistant turns are replayed in order in a
   scratch workspace that starts as the runtime's does (the placeholder
   ``solution.py`` where its profile puts it, the full tool budget), through
   the episode its profile's program runs (``glyph.agent.profiles``: the
   grammar, the tools, the budget rule, Arm B's rules). Every ``python_test``
   (and a REVISE's shadow test) is graded by glyph's trusted grader on the
   visible tests, and every observation is compared with the recorded one;
   any difference is reported as a divergence, never hidden. Snapshot ``k``
   is the state after step ``k``: the workspace (``solution.py``), the budget
   left, and the turns that led there (a continuation replays them to reach
   it); snapshot 0 is the start.
2. **Replay.** From every snapshot a fixed continuation (:class:`Continuation`)
   plays on with the budget left there, through the same episode, its
   ``python_test`` graded by glyph's trusted grader on the visible tests. It
   succeeds by the study's reward rule (``glyph.envs.mbpp.finalize``): it ends with
   ``FINAL:``, a visible test it ran passed, and the final ``solution.py``
   passes the hidden tests, graded by ``glyph.grading.grade`` in the sandbox
   (model-written code never runs in this process).
3. **Credit.** The earliest unreachable step is the first ``k`` such that the
   continuation fails from snapshot ``k`` and from every later one; ``None``
   when it still succeeds from the final state (the failure was in how the
   episode ended, not caused by a step); ``0`` when it fails even from the
   start (no step is to blame).

The built-in continuation, :class:`Repair`, is a yardstick whose cost grows
with how far a state is from a correct one: one ``python_test`` to see the
state (PASS: ``FINAL``), else one ``apply_patch`` per difflib hunk between
``solution.py`` and the task's reference solution, then ``python_test`` and
``FINAL``; written in the trajectory's own grammar (where that grammar tests
only right after a patch, the study's Arm B, the first test is left out). It
knows the snapshot's ``solution.py`` without reading it (a reference policy's
privilege, like the oracle knowing the reference). See ``docs/credit.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
import os
import random
import tempfile
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Protocol

from glyph import profiles
from glyph.agent import program
from glyph.agent.profiles.base import AgentProfile, Call, Episode
from glyph.agent.profiles.glyph import apply_patch
from glyph.agent.trace import FINAL, PROTOCOL_ERROR, sha256
from glyph.credit import rates
from glyph.credit.trajectory import Trajectory
from glyph.data.mbpp import MbppTask
from glyph.errors import RunError
from glyph.outcomes import Outcome

# ---------------------------------------------------------------- the turn semantics


@dataclass(frozen=True)
class Snapshot:
    """The episode's state after step ``step`` (0: before the first)."""

    step: int
    solution: str
    budget: int
    replies: tuple[str, ...]  # the assistant turns that lead here from the start
    messages: tuple[dict, ...]  # the conversation a continuation from here sees
    seen_ids: frozenset[str] = frozenset()  # call ids the episode used
    may_test: bool = True  # the grammar allows a python_test as the next turn


@dataclass
class TurnResult:
    tool: str  # the call's tool, FINAL, or "-" for a turn that broke the protocol
    call: Call | None
    status: str
    message: dict | None  # the observation that answers it; None when the turn ended the episode
    end: str | None  # final / protocol_error / budget_exhausted: the episode ended at this turn


class Workspace:
    """A scratch runtime workspace and the trajectory's episode (its profile's, as the
    program runs it): ``turn`` is one iteration of the program's loop."""

    def __init__(self, root: str, traj: Trajectory, task: MbppTask, tester) -> None:
        agent = profiles.get(traj.profile).agent
        self.agent, self.tester = agent, tester
        project = agent.project(task.task_id)
        self.path = agent.lay_out(root, project)
        cfg = {"arm": traj.arm, "max_tool_calls": traj.budget, "test_cost": traj.test_cost,
               "revise_feedback": "none", "project": project, "switches": traj.switches,
               "limits": {"cpu_s": 1.0, "wall_s": 1.0}}  # the tester grades under its own limits
        self.episode: Episode = agent.episode(cfg, agent.trace_type(), root)
        self.seen: set[str] = set()

    @property
    def budget(self) -> int:
        return self.episode.budget

    @property
    def end(self) -> str | None:
        return self.episode.end

    def solution(self) -> str:
        with open(self.path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()

    def turn(self, reply: str) -> TurnResult:
        """One turn; python_test and a REVISE's shadow test are answered by the tester."""
        ep = self.episode
        step = ep.turn(reply[:program.REPLY_CAP], self.tester)
        if step is None:
            if ep.end == PROTOCOL_ERROR:
                return TurnResult("-", None, f"protocol error: {ep.error}", None, ep.end)
            if ep.end == FINAL:
                return TurnResult("FINAL", None, "FINAL", None, ep.end)
            return TurnResult(ep.call.tool, ep.call, f"budget exhausted: {ep.error}", None, ep.end)
        call, status, _ = step
        self.seen.add(call.id)
        return TurnResult(call.tool, call, status, ep.observation(step), None)

    def snapshot(self, step: int, replies: tuple[str, ...], messages: tuple[dict, ...]) -> Snapshot:
        return Snapshot(step, self.solution(), self.budget, replies, messages, frozenset(self.seen),
                        self.episode.may_test)


# ---------------------------------------------------------------- replaying the trajectory


@dataclass
class Step:
    index: int  # 1-based: the index-th assistant turn
    tool: str
    call_id: str | None
    summary: str
    status: str
    budget_left: int
    changed: bool  # solution.py differs from the step before


@dataclass
class Replay:
    steps: list[Step]
    snapshots: list[Snapshot]  # snapshots[k]: after step k; [0]: the start
    divergences: list[str]
    notes: list[str]


def summarize(call: Call | None) -> str:
    """A call's path (its first argument), and for a patch the lines it takes out and puts in."""
    if call is None:
        return ""
    first = next(iter(call.args.values()), "")
    if call.tool == "apply_patch":
        return f"{first}: -{_lines(call.args.get('find', ''))} +{_lines(call.args.get('replace', ''))} lines"
    return first


def _lines(text: str) -> int:
    return len(text.splitlines()) or int(bool(text))


def replay(traj: Trajectory, task: MbppTask, grader: Grader) -> Replay:
    """Snapshot the workspace before the first step and after each one."""
    msgs = traj.messages
    steps, divergences, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="glyph-credit-") as root:
        ws = Workspace(root, traj, task, lambda source, shadow: grader.visible(source))
        snaps = [ws.snapshot(0, (), msgs[:2])]
        i = 2
        while i < len(msgs):
            if msgs[i]["role"] != "assistant":
                raise RunError(f"{traj.where}: message {i} is a {msgs[i]['role']} message where the next "
                               f"assistant turn should be")
            k = len(steps) + 1
            recorded = msgs[i + 1] if i + 1 < len(msgs) and msgs[i + 1]["role"] != "assistant" else None
            before = snaps[-1].solution
            replies = snaps[-1].replies + (msgs[i]["content"],)
            r = ws.turn(msgs[i]["content"])
            if r.end is None:
                if recorded is None:
                    notes.append(f"step {k} has no recorded observation (the trajectory was cut off after it)")
                elif _content(recorded) != _content(r.message):
                    divergences.append(f"step {k}: recorded {_first(recorded)!r}, "
                                       f"replay gives {_first(r.message)!r}")
                snaps.append(ws.snapshot(k, replies, msgs[:i + 1] + ((recorded or r.message),)))
            else:  # the step ended the episode and changed nothing: a continuation resumes before it
                snaps.append(dataclasses.replace(snaps[-1], step=k, messages=msgs[:i]))
            steps.append(Step(k, r.tool, r.call.id if r.call else None, summarize(r.call), r.status, ws.budget,
                              snaps[-1].solution != before))
            if r.end is not None:
                if i + 1 < len(msgs):
                    notes.append(f"the episode ended at step {k} ({r.end}); the {len(msgs) - i - 1} messages "
                                 f"after it are not replayed")
                break
            i += 1 if recorded is None else 2
    if not steps:
        notes.append("the trajectory has no assistant turn")
    return Replay(steps, snaps, divergences, notes)


def _content(message: dict | None) -> str:
    return ((message or {}).get("content") or "").rstrip()


def _first(message: dict | None) -> str:
    return _content(message).splitlines()[0][:120] if _content(message) else ""


# ---------------------------------------------------------------- continuations


@dataclass(frozen=True)
class Context:
    """What a continuation's policy sees before each of its turns."""

    task: MbppTask
    arm: str
    agent: AgentProfile  # the grammar to write turns in
    project: str | None  # the task's project folder (where solution.py is, under the profile)
    messages: tuple[dict, ...]  # the original conversation up to the snapshot, then the continuation's turns
    budget: int  # tool calls left
    test_cost: int
    expect_prediction: bool  # Arm B: this turn must carry <PREDICTION> and <DECISION>
    may_test: bool  # the grammar allows a python_test now
    seen_ids: frozenset[str]  # call ids already used in the episode
    snapshot: Snapshot  # where the continuation started
    solution: str  # solution.py now (a reference policy's privilege)
    status: str = ""  # the status of the continuation's last call ("" before its first)
    fork: int = 0  # which of the snapshot's forks this is (0-based)


Policy = Callable[[Context], str]
"""One assistant turn (protocol text) for the episode so far."""


class Continuation(Protocol):
    """A fixed policy that plays an episode on from a snapshot. ``start`` is
    called once per snapshot and returns a fresh policy (it may keep state).
    It may also offer ``needed(task, snapshot, test_cost, visible)``: the
    budget it would need from ``snapshot`` (``visible(source)`` grades the
    visible tests), shown beside the outcome; :class:`Repair` does."""

    name: str

    def start(self, task: MbppTask, snapshot: Snapshot) -> Policy: ...


def repair_patches(source: str, reference: str) -> list[tuple[str, str]] | None:
    """``(find, replace)`` pairs that, applied in order with
    ``apply_patch``, turn ``source`` into ``reference``: one per
    difflib hunk (line-wise), each ``find`` the hunk's lines widened by
    context lines on both sides until it occurs exactly once (at worst the
    whole file: a whole-file replacement). ``None`` when ``source`` is empty:
    ``apply_patch`` has no anchor in an empty file."""
    patches, current = [], source
    b = reference.splitlines(keepends=True)
    for _ in range(len(source.splitlines()) + len(b) + 1):
        a = current.splitlines(keepends=True)
        hunks = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
        if not hunks:
            return patches
        if not current:
            return None
        _, i1, i2, j1, j2 = hunks[0]
        lo, hi = i1, i2
        while not ("".join(a[lo:hi]) and current.count("".join(a[lo:hi])) == 1):
            lo, hi = max(0, lo - 1), min(len(a), hi + 1)
        find = "".join(a[lo:hi])
        replace = "".join(a[lo:i1] + b[j1:j2] + a[i2:hi])
        current = apply_patch(current, find, replace)
        patches.append((find, replace))
    return patches + [(current, reference)]  # difflib did not converge (never seen): replace the whole file


class Repair:
    """The built-in continuation: test; PASS -> FINAL; else one apply_patch
    per hunk to the reference solution, test, FINAL (see the module docstring).

    ``slip``: the chance, before each planned call, of a detour first (one
    ``read_file`` of ``solution.py``, which changes nothing and costs one
    call), drawn from ``random.Random`` seeded with (``seed``, task,
    snapshot, fork): each fork of a snapshot draws its own detours, and the
    same seed gives the same draws. No detour is taken on Arm B's prediction
    turn (the protocol lets only a REVISE precede a read). ``slip = 0`` (the
    default) is the deterministic yardstick: every fork plays alike."""

    def __init__(self, slip: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= slip < 1.0:
            raise ValueError(f"slip is a probability in [0, 1), not {slip}")
        self.slip, self.seed = slip, seed
        self.name = "repair" if slip == 0 else f"repair, slip {slip:g}"

    def needed(self, task: MbppTask, snapshot: Snapshot, test_cost: int,
               visible: Callable[[str], str]) -> int | None:
        """The budget a full repair takes from ``snapshot`` without detours; None: it cannot succeed (empty file)."""
        if snapshot.may_test and visible(snapshot.solution) == Outcome.PASS.value:
            return test_cost
        patches = _plan(snapshot, task)
        return None if patches is None else (2 if snapshot.may_test else 1) * test_cost + len(patches)

    def start(self, task: MbppTask, snapshot: Snapshot) -> Policy:
        return _GeneratorPolicy(self._play(task, snapshot))

    def _play(self, task: MbppTask, snapshot: Snapshot) -> Generator[str, Context, None]:
        ctx = yield ""
        rng = random.Random(f"{self.seed}:{task.task_id}:{snapshot.step}:{ctx.fork}") if self.slip else None
        ids = (f"repair-{n}" for n in itertools.count(1) if f"repair-{n}" not in snapshot.seen_ids)
        seen_outcome = Outcome.ASSERTION_FAILURE.value

        def turn(tool: str, ctx: Context, decision: str, find: str | None = None,
                 replace: str | None = None) -> str:
            agent = ctx.agent
            call = Call(next(ids), tool, agent.args(tool, agent.solution(ctx.project), ctx.project, find, replace))
            if not ctx.expect_prediction:
                return agent.turn_text(call)
            return agent.turn_text(call, Outcome.PASS.value if decision == "KEEP" else seen_outcome, decision)

        def planned(tool: str, ctx: Context, decision: str, **args: str) -> Generator[str, Context, Context]:
            """A detour first (with chance ``slip``), then the call; the context after the call."""
            if rng is not None and rng.random() < self.slip and not ctx.expect_prediction:
                ctx = yield turn("read_file", ctx, decision)
            return (yield turn(tool, ctx, decision, **args))

        if ctx.may_test:
            ctx = yield from planned("python_test", ctx, "KEEP")
            if ctx.status == Outcome.PASS.value:
                yield "FINAL: the state already passes the tests."
                return
            if ctx.status in Outcome.__members__:
                seen_outcome = ctx.status
        patches = _plan(snapshot, task)
        if patches is None:
            yield "FINAL: cannot repair: solution.py is empty, so apply_patch has no anchor."
            return
        for find, replace in patches:
            want = apply_patch(ctx.solution, find, replace)
            ctx = yield from planned("apply_patch", ctx, "REVISE", find=find, replace=replace)
            if ctx.solution != want:
                yield f"FINAL: a planned patch failed ({ctx.status})."
                return
        ctx = yield from planned("python_test", ctx, "KEEP")
        yield "FINAL: repaired."


def _plan(snapshot: Snapshot, task: MbppTask) -> list[tuple[str, str]] | None:
    """The repair's patches from ``snapshot``: to the reference (``repair_patches``); where the grammar tests
    only after a patch and the state is already the reference, one patch that changes nothing."""
    patches = repair_patches(snapshot.solution, task.code)
    if patches == [] and not snapshot.may_test:
        return [(snapshot.solution, snapshot.solution)]
    return patches


class _GeneratorPolicy:
    def __init__(self, gen: Generator[str, Context, None]) -> None:
        self.gen = gen
        next(gen)

    def __call__(self, ctx: Context) -> str:
        try:
            return self.gen.send(ctx)
        except StopIteration:
            return "FINAL: nothing left to do."


class ChatContinuation:
    """A model continues: each turn is ``chat(messages)`` on the conversation
    so far (the original turns up to the snapshot, then its own); with
    ``forked``, ``chat(messages, fork)``, so each fork can sample its own
    draw (:func:`endpoint_chat` sends a seed per fork). Use
    :func:`endpoint_chat` for an OpenAI-compatible endpoint."""

    def __init__(self, chat: Callable[..., str], name: str = "chat", *, forked: bool = False,
                 seed: int | None = None) -> None:
        self.chat, self.name, self.forked = chat, name, forked
        self.seed = seed  # the seed ``chat`` samples with, for the report (``endpoint_chat(seed=...)``)

    def start(self, task: MbppTask, snapshot: Snapshot) -> Policy:
        if self.forked:
            return lambda ctx: self.chat([dict(m) for m in ctx.messages], ctx.fork)
        return lambda ctx: self.chat([dict(m) for m in ctx.messages])


def endpoint_chat(base_url: str, model: str, temperature: float = 0.0, timeout: float = 300.0,
                  api_key: str | None = None, seed: int | None = None) -> Callable[..., str]:
    """One chat completion per turn from an OpenAI-compatible endpoint, through
    the agent program's own client (``glyph.agent.program.chat``: retries on
    429/502/503/504 and dropped connections; a final failure raises
    ``program.EndpointError``). The key: ``api_key``, else ``$OPENAI_API_KEY``.
    The returned ``chat(messages, fork=0)`` sends ``seed + fork`` as the
    request's sampling ``seed`` when ``seed`` is given (a server that honours
    it, vLLM's for one, then draws each fork reproducibly)."""
    key = api_key or os.environ.get("OPENAI_API_KEY", "")

    def chat(messages: list[dict], fork: int = 0) -> str:
        sampling = {"temperature": temperature} | ({} if seed is None else {"seed": seed + fork})
        endpoint = {"base_url": base_url, "model": model, "sampling": sampling}
        return program.chat(endpoint, messages, timeout, key)

    return chat


# ---------------------------------------------------------------- continuing from a snapshot


@dataclass
class Attempt:
    """How a continuation from one snapshot went."""

    outcome: str  # PASS, or why not: BUDGET_EXHAUSTED, PROTOCOL_ERROR, NO_PASSING_TEST, a hidden-test outcome
    reachable: bool
    end: str | None
    used: int  # budget units it spent
    needed: int | None  # the budget it would need from the snapshot, where the continuation says (None: unknown)
    hidden: str | None  # its final solution.py on the hidden tests (graded when it ended with FINAL)
    calls: list[str] = field(default_factory=list)  # "tool summary -> status", in order
    final: str = ""  # its FINAL line, or why it stopped


class Grader:
    """glyph's trusted grader on the task's visible and hidden tests, each distinct source graded once,
    reading each run as ``profile``'s env does (its ``semantics``: a study rollout is continued with
    the study's verdicts)."""

    def __init__(self, task: MbppTask, limits=None, profile: str = "glyph") -> None:
        from glyph.envs.mbpp.finalize import Regrader, TaskTests
        from glyph.sandbox import Limits

        tests = TaskTests(task.test_setup_code, tuple(task.test_list), tuple(task.test_list))
        self.rg = Regrader(tests, limits or Limits(cpu_s=10, wall_s=20), semantics=profiles.get(profile).semantics)
        self._hidden: dict[str, str] = {}  # by sha256 (the Regrader caches the visible outcomes itself)

    def visible(self, source: str) -> str:
        return self.rg.visible(source)

    def hidden(self, source: str) -> str:
        key = sha256(source)
        if key not in self._hidden:
            self._hidden[key] = self.rg.hidden(source)["base"][0]
        return self._hidden[key]


def continue_from(snap: Snapshot, traj: Trajectory, task: MbppTask, continuation: Continuation,
                  grader: Grader, fork: int = 0, root: str | None = None) -> Attempt:
    """Play ``continuation`` on from ``snap`` under the trajectory's turn semantics (as fork ``fork``):
    the snapshot's turns are replayed to reach it, then the continuation's, in a scratch directory of
    its own, or in ``root``: the tools write no file but ``solution.py`` (``apply_patch`` creates none),
    which the workspace rewrites first, so one directory serves many continuations (``assign`` reuses
    one: removing a directory per fork costs more than the fork)."""
    with contextlib.nullcontext(root) if root is not None else tempfile.TemporaryDirectory(
            prefix="glyph-credit-") as where:
        ws = Workspace(where, traj, task, lambda source, shadow: grader.visible(source))
        for reply in snap.replies:
            ws.turn(reply)
        before = len(ws.episode.trace.tests)  # the continuation's own tests count, not the trajectory's
        project = ws.agent.project(task.task_id)
        policy = continuation.start(task, snap)
        messages = list(snap.messages)
        calls, final, status = [], "", ""
        while ws.end is None:  # every turn either spends budget or ends the episode
            ep = ws.episode
            reply = policy(Context(task, traj.arm, ws.agent, project, tuple(messages), ws.budget, traj.test_cost,
                                   ep.expect_prediction, ep.may_test, frozenset(ws.seen), snap, ws.solution(),
                                   status, fork))
            messages.append({"role": "assistant", "content": reply})
            r = ws.turn(reply)
            status = r.status
            if r.end == FINAL:
                final = next((ln for ln in reply.splitlines() if ln.startswith("FINAL:")), "FINAL:")
            elif r.end is not None:
                final = r.status
            if r.call is not None:
                calls.append(f"{r.call.tool} {summarize(r.call)}".strip() + f" -> {r.status}")
            if r.message is not None:
                messages.append(r.message)
        source = ws.solution()
        tested = any(t.outcome == Outcome.PASS.value for t in ws.episode.trace.tests[before:])
    used = snap.budget - ws.budget
    estimate = getattr(continuation, "needed", None)
    needed = estimate(task, snap, traj.test_cost, grader.visible) if callable(estimate) else None
    if ws.end != FINAL:
        return Attempt(ws.end.upper(), False, ws.end, used, needed, None, calls, final)
    hidden = grader.hidden(source)
    outcome = hidden if tested else "NO_PASSING_TEST"
    return Attempt(outcome, outcome == Outcome.PASS.value, ws.end, used, needed, hidden, calls, final)


# ---------------------------------------------------------------- credit


def earliest_unreachable(reachable: list[bool]) -> int | None:
    """The first k with reachable[k:] all False; None if the last is reachable."""
    if not reachable or reachable[-1]:
        return None
    k = len(reachable) - 1
    while k > 0 and not reachable[k - 1]:
        k -= 1
    return k


@dataclass
class Row:
    index: int  # 0: the start; k: after step k
    tool: str
    call_id: str | None
    summary: str
    status: str
    budget_left: int
    changed: bool
    solution_sha256: str
    solution: str
    continuation: Attempt  # the first fork's
    forks: int = 1
    passes: int = 0  # forks that succeeded
    pass_rate: float = 0.0
    wilson_lo: float = 0.0  # the pass rate's 95% Wilson interval
    wilson_hi: float = 1.0
    outcomes: dict[str, int] = field(default_factory=dict)  # each fork's outcome, counted


@dataclass
class Report:
    source: str
    task: str
    arm: str
    budget: int
    test_cost: int
    continuation: str
    recorded: str  # how the original run ended, as recorded
    final_outcome: str  # the final state's outcome on the hidden tests
    earliest_unreachable: int | None  # no fork succeeds from here on
    verdict: str
    steps: list[Row]
    divergences: list[str]
    notes: list[str]
    forks: int = 1
    seed: int | None = None  # the continuation's seed, where it has one
    rate_verdict: rates.ThresholdVerdict | None = None  # the earliest step whose pass rate stays below a threshold
    rate_verdict_text: str = ""

    def to_json(self) -> dict:
        """The report, plus the original flywheel's credit fields where they correspond
        (``glyph.credit.rates.original_fields``)."""
        doc = asdict(self)
        doc.update(rates.original_fields([_rate(r) for r in self.steps]), backend="glyph")
        return doc


def _rate(r: Row) -> rates.Rate:
    return rates.Rate(r.forks, r.passes, r.pass_rate, r.wilson_lo, r.wilson_hi, r.outcomes)


def assign(traj: Trajectory, task: MbppTask, continuation: Continuation | None = None, *, forks: int = 1,
           threshold: float = rates.DEFAULT_THRESHOLD, notes: list[str] | None = None, grader: Grader | None = None,
           on_progress: Callable[[int, int], None] | None = None) -> Report:
    """Replay ``traj``, continue ``forks`` times from every snapshot, and name
    the earliest step from which success was no longer reachable (no fork
    succeeds from there on) and the earliest from which the pass rate stays
    below ``threshold`` (``glyph.credit.rates``). ``on_progress(done, total)``
    is called after each continuation (``total`` = snapshots x forks)."""
    if forks < 1:
        raise ValueError(f"forks must be at least 1, not {forks}")
    continuation = continuation or Repair()
    grader = grader or Grader(task, profile=traj.profile)
    rp = replay(traj, task, grader)
    total = len(rp.snapshots) * forks
    attempts: list[list[Attempt]] = []
    with tempfile.TemporaryDirectory(prefix="glyph-credit-") as root:
        for snap in rp.snapshots:
            mine = []
            for fork in range(forks):
                mine.append(continue_from(snap, traj, task, continuation, grader, fork, root))
                if on_progress is not None:
                    on_progress(len(attempts) * forks + len(mine), total)
            attempts.append(mine)
    per_snap = [rates.rate_of([a.outcome for a in mine], [a.reachable for a in mine]) for mine in attempts]
    k = earliest_unreachable([r.passes > 0 for r in per_snap])
    heads = [("start", None, "", "", traj.budget, False)] + \
        [(s.tool, s.call_id, s.summary, s.status, s.budget_left, s.changed) for s in rp.steps]
    rows = [Row(i, *head, sha256(snap.solution), snap.solution, mine[0], rate.forks, rate.passes, rate.pass_rate,
                rate.wilson_lo, rate.wilson_hi, rate.outcomes)
            for i, (head, snap, mine, rate) in enumerate(zip(heads, rp.snapshots, attempts, per_snap))]
    final_outcome = grader.hidden(rp.snapshots[-1].solution)
    some = "" if forks == 1 else f" (none of its {forks} forks)"
    if k is None and final_outcome == Outcome.PASS.value:
        verdict = ("reachable at the end: the final solution.py already passes the hidden tests, so no step "
                   "made success unreachable; a failed reward came from how the episode ended (no passing "
                   "visible test, no FINAL)")
    elif k is None:
        verdict = (f"reachable at the end: the {continuation.name} continuation still succeeds from the final "
                   f"state, so no step made success unreachable; the failure lies in how the episode ended")
    elif k == 0:
        verdict = (f"unreachable from the start: the {continuation.name} continuation fails{some} even with the "
                   f"full budget, so no step is to blame")
    else:
        verdict = f"{_step_name(rp.steps[k - 1])} is the earliest step from which success was no longer reachable" \
            + ("" if forks == 1 else f" (no fork of {forks} succeeds from there on)")
    tv = rates.threshold_verdict(per_snap, threshold)
    names = ["the start"] + [_step_name(s) for s in rp.steps]
    return Report(traj.where, task.id, traj.arm, traj.budget, traj.test_cost, continuation.name, traj.recorded,
                  final_outcome, k, verdict, rows, rp.divergences, (notes or []) + rp.notes, forks,
                  getattr(continuation, "seed", None), tv, rates.describe(tv, forks, names))


def _step_name(s: Step) -> str:
    return f"step {s.index} ({s.tool} {s.summary}".rstrip() + f", {s.budget_left} calls left after it)"


def table(report: Report):
    """The report as a terminal table (with several forks: the passes and the pass rate's interval too),
    laid out for the terminal's width (``glyph.report.terminal``: no cell wraps, no header is cut)."""
    from rich.markup import escape

    from glyph.report.tables import Table
    from glyph.report.terminal import render

    forked = report.forks > 1
    cols = ["step", "action", "status", "left", "solution", "continuation", "used", "needs", "reachable"]
    if forked:
        cols[5:6] = ["fork 0"]
        cols += ["passes", "pass rate [95% Wilson]"]
    t = Table("credit", f"credit: {report.task} (arm {report.arm}, budget {report.budget}, "
              f"continuation {report.continuation}" + (f", {report.forks} forks" if forked else "") + ")",
              cols, keys=1, markup=True,
              right_columns=tuple(i for i, c in enumerate(cols)
                                  if c in ("step", "left", "used", "needs", "passes")))
    tv = report.rate_verdict
    for r in report.steps:
        c = r.continuation
        mark = "[green]yes[/green]" if r.passes else "[red]no[/red]"
        if r.index == report.earliest_unreachable:
            mark += " [bold red]<- earliest[/bold red]"
        sol = r.solution_sha256[:8] + (" changed" if r.changed else "")
        row = [str(r.index), escape(f"{r.tool} {r.summary}".strip()), escape(r.status), str(r.budget_left),
               sol, escape(c.outcome), str(c.used), "-" if c.needed is None else str(c.needed), mark]
        if forked:
            rate = f"{100 * r.pass_rate:.0f}% [{100 * r.wilson_lo:.0f}, {100 * r.wilson_hi:.0f}]"
            rate = escape(rate)
            if tv is not None and r.index == tv.earliest_below:
                rate += f" [bold red]<- below {100 * tv.threshold:g}%[/bold red]"
            row += [f"{r.passes}/{r.forks}", rate]
        t.rows.append(row)
    return render(t)
