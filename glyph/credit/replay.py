"""Snapshot/replay credit assignment for a failed multi-step glyph-mbpp trajectory.

A failed episode says *that* the agent failed, not *which step* did it. This
module answers: from which step on was success no longer reachable?

1. **Snapshots.** The trajectory's assistant turns are replayed in order in a
   scratch workspace that starts as the runtime's does (``solution.py`` =
   ``protocol.PLACEHOLDER``, the full tool budget), through the same code the
   agent program runs: ``protocol.parse_turn`` (the one grammar),
   ``glyph.agent.program.execute`` (the runtime's ``read_file`` /
   ``apply_patch`` / ``python_test``; ``apply_patch`` is ``protocol.apply_patch``)
   and the program's budget rule (a call that costs more than is left ends
   the episode unexecuted). A recorded ``python_test`` answers with its
   recorded outcome (a test changes no state); every ``read_file`` and
   ``apply_patch`` is compared with its recorded RESULT, and any difference is
   reported as a divergence, never hidden. Snapshot ``k`` is the workspace
   (``solution.py``), the budget left, and the protocol state (Arm B's pending
   prediction, the call ids used) after step ``k``; snapshot 0 is the start.
2. **Replay.** From every snapshot a fixed continuation (:class:`Continuation`)
   plays on with the budget left there, through the same turn semantics, its
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
``FINAL``. It knows the snapshot's ``solution.py`` without reading it (a
reference policy's privilege, like the oracle knowing the reference). See
``docs/credit.md``.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import os
import random
import tempfile
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Protocol

from glyph.agent import program, protocol
from glyph.agent.tools import sha256
from glyph.credit import rates
from glyph.credit.trajectory import Trajectory
from glyph.data.mbpp import MbppTask
from glyph.errors import RunError
from glyph.outcomes import Outcome

NOT_RECORDED = "NOT_RECORDED"  # a python_test whose RESULT the trajectory does not hold (the program was killed)


# ---------------------------------------------------------------- the turn semantics


@dataclass(frozen=True)
class Snapshot:
    """The episode's state after step ``step`` (0: before the first)."""

    step: int
    solution: str
    budget: int
    expect_prediction: bool  # Arm B: the next turn must predict and decide
    seen_ids: frozenset[str]
    messages: tuple[dict, ...]  # the conversation a continuation from here sees


@dataclass
class TurnResult:
    tool: str  # read_file / apply_patch / python_test, FINAL, or "-" for a turn that broke the protocol
    call: protocol.Call | None
    status: str
    message: str | None  # the RESULT the runtime answers with; None when the turn ended the episode
    end: str | None  # final / protocol_error / budget_exhausted: the episode ended at this turn
    head: str = ""  # that RESULT without its budget line


class Workspace:
    """A scratch runtime workspace and the agent program's own episode state
    (``glyph.agent.program.Episode``): ``turn`` is one iteration of the
    program's loop, through the same code."""

    def __init__(self, root: str, solution: str, budget: int, test_cost: int, arm: str,
                 expect_prediction: bool = False, seen_ids: frozenset[str] = frozenset()) -> None:
        self.root = root
        # Resuming where Arm B must predict: the snapshot's solution is the candidate predicted on.
        candidates = [{"index": 0, "call": "", "source": solution, "sha256": sha256(solution)}] \
            if expect_prediction else []
        self.episode = program.Episode(arm, budget, test_cost, {"candidates": candidates, "tests": []}, root)
        self.episode.expect_prediction, self.episode.seen = expect_prediction, set(seen_ids)
        with open(self.path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(solution)

    @property
    def budget(self) -> int:
        return self.episode.budget

    @property
    def end(self) -> str | None:
        return self.episode.end

    @property
    def path(self) -> str:
        return os.path.join(self.root, protocol.SOLUTION_FILE)

    def solution(self) -> str:
        with open(self.path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()

    def turn(self, reply: str, tester: Callable[[str, bool], str]) -> TurnResult:
        """One turn. ``tester`` answers python_test (and a REVISE's shadow
        test, which changes neither the workspace nor the reward)."""
        ep = self.episode
        step = ep.turn(reply[:program.REPLY_CAP], tester)
        if step is None:
            if ep.end == "protocol_error":
                return TurnResult("-", None, f"protocol error: {ep.error}", None, ep.end)
            if ep.end == "final":
                return TurnResult("FINAL", None, "FINAL", None, ep.end)
            return TurnResult(ep.call.tool, ep.call, f"budget exhausted: {ep.error}", None, ep.end)
        call, status, body = step
        return TurnResult(call.tool, call, status, protocol.result_message(call, status, body, ep.budget), None,
                          protocol.result_message(call, status, body))

    def snapshot(self, step: int, messages: tuple[dict, ...]) -> Snapshot:
        ep = self.episode
        return Snapshot(step, self.solution(), ep.budget, ep.expect_prediction, frozenset(ep.seen), messages)


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


def summarize(call: protocol.Call | None) -> str:
    if call is None:
        return ""
    a = call.args
    if call.tool == "apply_patch":
        return f"{a['path']}: -{_lines(a['find'])} +{_lines(a['replace'])} lines"
    return a.get("path", "")


def _lines(text: str) -> int:
    return len(text.splitlines()) or int(bool(text))


def replay(traj: Trajectory) -> Replay:
    """Snapshot the workspace before the first step and after each one."""
    msgs = traj.messages
    steps, divergences, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="glyph-credit-") as root:
        ws = Workspace(root, protocol.PLACEHOLDER, traj.budget, traj.test_cost, traj.arm)
        snaps = [ws.snapshot(0, msgs[:2])]
        i = 2
        while i < len(msgs):
            if msgs[i]["role"] != "assistant":
                raise RunError(f"{traj.where}: message {i} is a {msgs[i]['role']} message where the next "
                                  f"assistant turn should be")
            k = len(steps) + 1
            recorded = msgs[i + 1]["content"] if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user" else None
            before = snaps[-1].solution
            r = ws.turn(msgs[i]["content"], lambda source, shadow, rec=recorded: _recorded_outcome(rec))
            status = r.status + (" (recorded)" if r.tool == "python_test" and r.end is None and recorded else "")
            if r.end is None:
                if recorded is None:
                    notes.append(f"step {k} has no recorded RESULT (the trajectory was cut off after it)")
                _compare(k, r, recorded, ws.budget, divergences)
                conversation = msgs[:i + 1] + ({"role": "user", "content": recorded or r.message},)
            else:  # the step ended the episode and changed nothing: a continuation resumes before it
                conversation = msgs[:i]
            snaps.append(ws.snapshot(k, conversation))
            steps.append(Step(k, r.tool, r.call.id if r.call else None, summarize(r.call), status, ws.budget,
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


def _recorded_outcome(recorded: str | None) -> str:
    if recorded is None:
        return NOT_RECORDED
    try:
        return protocol.parse_result_status(recorded)
    except protocol.ProtocolError:
        return NOT_RECORDED


def _compare(k: int, r: TurnResult, recorded: str | None, budget: int, out: list[str]) -> None:
    if recorded is None:
        return
    want = r.head
    if not recorded.startswith(want):
        out.append(f"step {k}: recorded {recorded.splitlines()[0][:120]!r}, replay gives "
                   f"{want.splitlines()[0][:120]!r}")
    left = protocol.budget_left(recorded)
    if left is not None and left != budget:
        out.append(f"step {k}: recorded {left} tool calls left, replay gives {budget}")


# ---------------------------------------------------------------- continuations


@dataclass(frozen=True)
class Context:
    """What a continuation's policy sees before each of its turns."""

    task: MbppTask
    arm: str
    messages: tuple[dict, ...]  # the original conversation up to the snapshot, then the continuation's turns
    budget: int  # tool calls left
    test_cost: int
    expect_prediction: bool  # Arm B: this turn must carry <PREDICTION> and <DECISION>
    seen_ids: frozenset[str]  # call ids already used in the episode
    snapshot: Snapshot  # where the continuation started
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
    ``protocol.apply_patch``, turn ``source`` into ``reference``: one per
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
        current = protocol.apply_patch(current, find, replace)
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
        if visible(snapshot.solution) == Outcome.PASS.value:
            return test_cost
        patches = repair_patches(snapshot.solution, task.code)
        return None if patches is None else 2 * test_cost + len(patches)

    def start(self, task: MbppTask, snapshot: Snapshot) -> Policy:
        return _GeneratorPolicy(self._play(task, snapshot))

    def _play(self, task: MbppTask, snapshot: Snapshot) -> Generator[str, Context, None]:
        ctx = yield ""
        rng = random.Random(f"{self.seed}:{task.task_id}:{snapshot.step}:{ctx.fork}") if self.slip else None
        ids = (f"repair-{n}" for n in itertools.count(1) if f"repair-{n}" not in snapshot.seen_ids)
        seen_outcome = Outcome.ASSERTION_FAILURE.value

        def turn(tool: str, ctx: Context, decision: str, **args: str) -> str:
            line = protocol.Call(next(ids), tool, args).line()
            if not ctx.expect_prediction:
                return line
            label = Outcome.PASS.value if decision == "KEEP" else seen_outcome
            return f"<PREDICTION>{label}</PREDICTION>\n<DECISION>{decision}</DECISION>\n{line}"

        def planned(tool: str, ctx: Context, decision: str, **args: str) -> Generator[str, Context, Context]:
            """A detour first (with chance ``slip``), then the call; the context after the call."""
            if rng is not None and rng.random() < self.slip and not ctx.expect_prediction:
                ctx = yield turn("read_file", ctx, decision, path=protocol.SOLUTION_FILE)
            return (yield turn(tool, ctx, decision, **args))

        ctx = yield from planned("python_test", ctx, "KEEP")
        status = _last_status(ctx)
        if status == Outcome.PASS.value:
            yield "FINAL: the state already passes the tests."
            return
        if status in Outcome.__members__:
            seen_outcome = status
        patches = repair_patches(snapshot.solution, task.code)
        if patches is None:
            yield "FINAL: cannot repair: solution.py is empty, so apply_patch has no anchor."
            return
        for find, replace in patches:
            ctx = yield from planned("apply_patch", ctx, "REVISE", path=protocol.SOLUTION_FILE, find=find,
                                     replace=replace)
            if _last_status(ctx) != "ok":
                yield f"FINAL: a planned patch failed ({_last_status(ctx)})."
                return
        ctx = yield from planned("python_test", ctx, "KEEP")
        yield "FINAL: repaired."


class _GeneratorPolicy:
    def __init__(self, gen: Generator[str, Context, None]) -> None:
        self.gen = gen
        next(gen)

    def __call__(self, ctx: Context) -> str:
        try:
            return self.gen.send(ctx)
        except StopIteration:
            return "FINAL: nothing left to do."


def _last_status(ctx: Context) -> str:
    try:
        return protocol.parse_result_status(ctx.messages[-1]["content"])
    except (protocol.ProtocolError, IndexError):
        return ""


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
    """glyph's trusted grader on the task's visible and hidden tests, each distinct source graded once."""

    def __init__(self, task: MbppTask, limits=None) -> None:
        from glyph.envs.mbpp.finalize import Regrader, TaskTests
        from glyph.sandbox import Limits

        tests = TaskTests(task.test_setup_code, tuple(task.test_list), tuple(task.test_list))
        self.rg = Regrader(tests, limits or Limits(cpu_s=10, wall_s=20))
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
    """Play ``continuation`` on from ``snap`` under the runtime's turn semantics (as fork ``fork``),
    in a scratch directory of its own, or in ``root``: the tools write no file but ``solution.py``
    (``apply_patch`` creates none), which the workspace rewrites first, so one directory serves
    many continuations (``assign`` reuses one: removing a directory per fork costs more than the fork)."""
    with contextlib.nullcontext(root) if root is not None else tempfile.TemporaryDirectory(
            prefix="glyph-credit-") as where:
        ws = Workspace(where, snap.solution, snap.budget, traj.test_cost, traj.arm, snap.expect_prediction,
                       snap.seen_ids)
        policy = continuation.start(task, snap)
        messages = list(snap.messages)
        calls, final = [], ""
        while ws.end is None:  # every turn either spends budget or ends the episode
            reply = policy(Context(task, traj.arm, tuple(messages), ws.budget, traj.test_cost,
                                   ws.episode.expect_prediction, frozenset(ws.episode.seen), snap, fork))
            messages.append({"role": "assistant", "content": reply})
            r = ws.turn(reply, lambda source, shadow: grader.visible(source))
            if r.end == "final":
                final = next((ln for ln in reply.splitlines() if ln.startswith("FINAL:")), "FINAL:")
            elif r.end is not None:
                final = r.status
            if r.call is not None:
                calls.append(f"{r.call.tool} {summarize(r.call)}".strip() + f" -> {r.status}")
            if r.message is not None:
                messages.append({"role": "user", "content": r.message})
        source = ws.solution()
    used = snap.budget - ws.budget
    estimate = getattr(continuation, "needed", None)
    needed = estimate(task, snap, traj.test_cost, grader.visible) if callable(estimate) else None
    tested = any(t["outcome"] == Outcome.PASS.value for t in ws.episode.trace["tests"])
    if ws.end != "final":
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
    grader = grader or Grader(task)
    rp = replay(traj)
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
