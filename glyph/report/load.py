"""Eval run directories in, one flat record per rollout out.

Three writers are read, all in verifiers' episode format (one JSON episode a
line of ``traces.jsonl``): ``vf-eval`` (0.4.0; beside
``configs/resolved/eval.json``), ``eval`` (the PRIME-RL pin's verifiers;
beside ``configs/eval.json``) and PRIME-RL's orchestrator at its pin (every
eval episode, errored ones included, in
``<output_dir>/rollouts/step_<N>/eval/all/traces.jsonl``; the ``effective``
file beside it is a subset and never read; checkpoint ``step<N>``).

What each rollout is, and how it counts:

* ``status`` is ``glyph.record.status``: ``ok``, or an incident
  (``tampered``, ``timed_out``, ``errored``). An incident is a failure in
  every rate and keeps its reason; none is dropped.
* An errored or timed-out trajectory is *incomplete*: no REVISE decision,
  predictions or tool-call count, so both verifiers versions (the pin records
  nothing of it) report it alike. A tampered one keeps its record.
* arm, seed and checkpoint: a ``--label`` wins; else the task record's arm
  (or the run config's), a recorded sampling seed, and PRIME-RL's step or the
  model name. Each run says where its values came from.
* pass@1 is the reward (what the taskset's ``hidden`` chose: ``base`` or
  ``plus``); ``base_passed`` and ``plus_passed`` are kept where recorded.
* A run, or a cell (arm x seed x checkpoint), that mixes arms or
  configurations (the protocol profile among them) is refused
  (:class:`MixedRuns`) unless every run in it is labelled.
* ``profile`` is the protocol profile the rollout ran, as the harness
  recorded it (``trace.info["glyph_protocol"]["profile"]``, trusted; glyph's
  where absent), and it picks the definitions of the episode metrics
  (``first_patch``, ``executed_failure``, ``recovered``) and of a
  prediction: the **study**'s (JayZenith/PREDICT ``src/glyph/taskset.py``,
  metrics ``first_patch_correct``, ``had_executed_failure``,
  ``recovered_after_executed_failure``; ``src/glyph/passk.py``, ``report``):
  the first patch is correct when the first prediction target's outcome is
  PASS, else (no prediction, Arm A) when the first visible python_test
  passed; recovered is a visible PASS after the first visible failure; every
  prediction target counts, a sampled label that is no outcome class as
  ``INVALID``. **glyph**'s (``glyph.envs.mbpp.finalize.compute_metrics``):
  the first candidate's verified outcome; recovered is passed after a
  visible failure; only predictions with an outcome-class label.

Bad input is a :class:`RunError` whose message names the file and line.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from glyph import record
from glyph.agent.program import own_words
from glyph.agent.protocol import DEFAULT_BUDGET
from glyph.errors import RunError
from glyph.outcomes import Outcome
from glyph.record import ERRORED, MBPP_ENV_ID, OK, TIMED_OUT
from glyph.text import encodable_data
from glyph.vfcompat import AGENT_TIMEOUT_PREFIX, STAGE_TIMEOUTS

TRACES = "traces.jsonl"
LABEL_KEYS = ("arm", "seed", "ckpt")
ARMS = ("a", "b")
OUTCOMES = frozenset(o.value for o in Outcome)
PROFILES = ("study", "glyph")
INVALID = "INVALID"  # the study's class for a sampled prediction that is no outcome class (src/glyph/passk.py)
_PRIME_STEP = re.compile(r"^step_(\d+)$")
# What makes two rollouts the same configuration, as the trace's agent config records it.
HARNESS_KEYS = ("max_tool_calls", "test_cost", "revise_feedback", "tool_timeout")
TASKSET_KEYS = ("split", "challenge_tests", "seed", "plus_path")


class MixedRuns(RunError):
    """A run or a cell mixing arms or configurations, none of it labelled."""


@dataclass(slots=True)
class Rollout:
    run: int  # index into the loaded runs
    line: int  # line of traces.jsonl (1-based)
    task: str
    arm: str | None
    seed: str | None
    ckpt: str | None
    status: str
    reason: str
    passed: bool
    base: bool | None  # the ``base_passed`` metric where finalize recorded it
    plus: bool | None  # ``plus_passed`` where finalize graded the task's plus tests
    suite: str  # what the reward graded: base (the study's hidden tests) or plus (``--env.taskset.hidden``)
    predictions: tuple  # (sampled, verified, decision) per candidate with a prediction
    # Ever chose REVISE; None (and no predictions, calls or cap hit) for an incomplete trajectory.
    revised: bool | None
    tool_calls: int | None
    cap_hit: bool | None
    config: tuple  # ((name, value), ...): what must agree within a run and a cell
    profile: str | None = None  # the protocol profile the rollout ran (None: unknown); it picks the definitions
    # The episode metrics by the profile's definitions (module docstring); None: incomplete, or not recorded.
    first_patch: bool | None = None
    executed_failure: bool | None = None
    recovered: bool | None = None


@dataclass
class Run:
    path: str
    source: str  # "vf-eval", "eval" or "prime-rl"
    verifiers: str | None = None
    labels: dict = field(default_factory=dict)
    env_name: str | None = None
    step: int | None = None
    config: dict = field(default_factory=dict)  # the run's eval config, what the report shows of it
    rollouts: int = 0
    values: dict = field(default_factory=dict)  # arm/seed/ckpt -> the values its rollouts carry
    sources: dict = field(default_factory=dict)  # arm/seed/ckpt -> where they came from

    @property
    def labelled(self) -> bool:
        return bool(self.labels)


def parse_label(spec: str) -> dict[str, str]:
    """``arm=b,seed=42,ckpt=step100`` -> a dict; an empty spec labels nothing."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in LABEL_KEYS or not value:
            raise RunError(f"--label {spec!r}: expected comma-separated arm=..., seed=..., ckpt=...")
        if key == "arm" and value not in ARMS:
            raise RunError(f"--label {spec!r}: arm is a or b")
        out[key] = value
    return out


@dataclass(frozen=True)
class RunFile:
    traces: Path
    source: str
    step: int | None = None


def find_runs(root: Path) -> list[RunFile]:
    """The eval runs under ``root``: ``root`` itself when it holds a
    traces.jsonl, else every vf-eval/eval run and PRIME-RL eval step file
    below it."""
    if not root.exists():
        raise RunError(f"{root}: no such directory")
    if not root.is_dir():
        raise RunError(f"{root}: not a directory (give an eval run directory)")
    files = [root / TRACES] if (root / TRACES).is_file() else sorted(root.rglob(TRACES))
    parts = root.resolve().parts
    if (
        len(parts) >= 4
        and parts[-4] == "rollouts"
        and _PRIME_STEP.match(parts[-3])
        and parts[-2:] != ("eval", "all")
    ):
        raise RunError(
            f"{root}: PRIME-RL writes every eval rollout, errored ones included, to "
            f"{parts[-3]}/eval/all; {'/'.join(parts[-2:])} is "
            + ("the non-errored subset" if parts[-2:] == ("eval", "effective") else "not an eval")
            + "; give the eval/all folder or the run's output directory"
        )
    runs = []
    for f in files:
        parts = f.parent.parts
        if len(parts) >= 4 and parts[-4] == "rollouts" and _PRIME_STEP.match(parts[-3]):
            if parts[-2:] == ("eval", "all"):  # train rollouts, and the effective subset, are not read
                runs.append(RunFile(f, "prime-rl", int(_PRIME_STEP.match(parts[-3]).group(1))))
        elif (f.parent / "configs" / "resolved" / "eval.json").is_file():
            runs.append(RunFile(f, "vf-eval"))
        elif (f.parent / "configs" / "eval.json").is_file():
            runs.append(RunFile(f, "eval"))
        elif f.parent == root:
            runs.append(RunFile(f, "traces"))
    if not runs:
        raise RunError(
            f"{root}: no eval run under it (no traces.jsonl of vf-eval, eval or PRIME-RL's "
            f"rollouts/step_N/eval/all)"
        )
    return runs


def iter_episodes(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, episode) for each non-blank line; a line that is not a
    JSON episode is a RunError naming ``path:line``."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise RunError(f"{path}: cannot read it ({exc.strerror})") from None
    with f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                episode = _decode(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise RunError(
                    f"{path}:{number}: not valid JSON ({_json_why(exc)}); a run cut off mid-write "
                    f"can be resumed with the eval CLI's --resume"
                ) from None
            if not isinstance(episode, dict) or not isinstance(episode.get("traces"), list):
                raise RunError(f"{path}:{number}: not a verifiers episode (no 'traces' list)")
            yield number, episode


class _Trace(msgspec.Struct):
    """The fields of a trace the report reads (a line's nodes, calls and timing are skipped unparsed)."""

    task: Any = None
    agent: Any = None
    info: Any = None
    metrics: Any = None
    rewards: Any = None
    errors: Any = None
    ok: Any = None
    is_timeout: Any = None
    verifiers: Any = None


class _Episode(msgspec.Struct):
    traces: list[_Trace] | None = None
    task: Any = None
    errors: Any = None
    ok: Any = None
    is_timeout: Any = None
    env: Any = None


_EPISODE = msgspec.json.Decoder(_Episode)


def _fields(struct: msgspec.Struct) -> dict:
    return {k: v for k, v in msgspec.structs.asdict(struct).items() if v is not None}


def _decode(raw: bytes) -> object:
    """One traces.jsonl line as the dict the report reads: the episode's and its
    traces' fields that matter, decoded without building the rest (a 30 KB
    episode is mostly token ids). A line that does not fit is read by ``json``,
    whose result (or error) the caller judges, its strings made encodable
    (``glyph.text``: msgspec refuses a JSON-escaped lone surrogate, ``json``
    returns it, and the report's own files are UTF-8)."""
    try:
        episode = _EPISODE.decode(raw)
    except msgspec.DecodeError:
        return encodable_data(json.loads(raw))
    out = _fields(episode)
    if episode.traces is not None:
        out["traces"] = [_fields(t) for t in episode.traces]
    return out


def _json_why(exc: Exception) -> str:
    return f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)


def _read_config(rf: RunFile) -> dict:
    name = {"vf-eval": "configs/resolved/eval.json", "eval": "configs/eval.json"}.get(rf.source)
    if name is None:
        return {}
    path = rf.traces.parent / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: not a readable eval config ({exc})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: not a readable eval config (not a JSON object)")
    return data


def _run_config(cfg: dict) -> dict:
    env = cfg.get("env") or {}
    taskset = env.get("taskset") or {}
    harness = (env.get("agent") or {}).get("harness") or {}
    out = {"model": cfg.get("model"), "arm": taskset.get("arm"), "profile": taskset.get("profile")}
    out |= {k: taskset[k] for k in TASKSET_KEYS if k in taskset}
    out |= {k: harness[k] for k in HARNESS_KEYS if k in harness}
    out["sampling"] = {k: v for k, v in (cfg.get("sampling") or {}).items() if v is not None}
    out["num_rollouts"] = cfg.get("num_rollouts")
    return {k: v for k, v in out.items() if v is not None}


def _fingerprint(acfg: dict, run_cfg: dict, data: dict) -> tuple:
    harness = acfg.get("harness") or {}
    sampling = acfg.get("sampling") if "sampling" in acfg else run_cfg.get("sampling")
    items = [
        ("model", acfg.get("model", run_cfg.get("model"))),
        ("hidden", _suite(data, run_cfg)),
    ]
    items += [(k, _same(harness.get(k, run_cfg.get(k)))) for k in HARNESS_KEYS]
    items += [(k, _same(run_cfg.get(k))) for k in TASKSET_KEYS]
    items += sorted(
        (f"sampling.{k}", _same(v))
        for k, v in (sampling or {}).items()
        if v is not None and not isinstance(v, (dict, list))
    )
    return tuple(items)


def _suite(data: dict, run_cfg: dict) -> str:
    """What the reward graded; a run from before ``--env.taskset.hidden`` graded base, the study's tests."""
    return data.get("hidden") or run_cfg.get("hidden") or "base"


def _same(value):
    """One spelling per value: the pin records a seed as "42" where 0.4.0 writes 42; 30 and 30.0 are one."""
    if isinstance(value, bool) or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(number)) if number.is_integer() else repr(number)


def _timed_out(trace: dict, episode: dict, errors: list) -> bool:
    if trace.get("is_timeout") or episode.get("is_timeout"):
        return True
    last = errors[-1].get("message", "") if errors else ""
    return last.startswith(AGENT_TIMEOUT_PREFIX) or last in STAGE_TIMEOUTS


def task_data(episode: dict, trace: dict | None) -> dict:
    """The task's data as the trace (else the episode) records it."""
    return ((trace or {}).get("task") or {}).get("data") or (episode.get("task") or {}).get("data") or {}


class Judged(NamedTuple):
    """A rollout's record and what it was (``glyph.record.status``)."""

    record: record.MbppRecord | None
    status: str
    reward: float | None
    reason: str
    passed: bool


def _error_text(error: object) -> str:
    """An error verifiers recorded, as a line: its message, with a JSON error body
    (``upstream 404: {"error": {"message": ...}}``, a model call's) reduced to the
    endpoint's own message (``glyph.agent.program.own_words``, the rule the
    program's fault reason follows); at most 500 characters."""
    message = str(error.get("message") or error.get("type") or "") if isinstance(error, dict) else str(error)
    return own_words(message)[:500]


def judge(episode: dict, trace: dict | None, where: str = "") -> Judged:
    """One rollout's status and reward, by ``glyph.record``'s rule, from a
    saved episode and one of its traces (None: the episode has none). A
    record of the wrong shape is a RunError naming ``where``."""
    t = trace or {}
    try:
        rec = record.mbpp_record(t.get("info"))
    except record.RecordError as exc:
        raise RunError(f"{where}: {exc}") from None
    reward = ((t.get("rewards") or {}).get("passed") or {}).get("score")
    errors = [*(episode.get("errors") or []), *(t.get("errors") or [])]
    ok = trace is not None and t.get("ok") is True and episode.get("ok") is True
    facts = {"ok": ok, "reward": reward, "timed_out": _timed_out(t, episode, errors)}
    status = record.status(rec, **facts)
    said = "; ".join(dict.fromkeys(filter(None, (_error_text(e) for e in errors))))
    reason = (rec.reason if rec is not None else "") or said
    if said and said not in reason:  # the framework's error says why (an unknown model's valid names)
        reason = f"{reason} ({said})"
    if not reason:
        reason = "no trace" if trace is None else "no reward recorded" if reward is None else "not ok"
    return Judged(rec, status, reward, reason, record.passed(rec, **facts))


def recorded_profile(trace: dict | None, run_cfg: dict) -> str | None:
    """The profile the rollout ran: as the harness recorded it (trusted; a record without one is glyph's,
    from before the study profile), else as the run's config asked (the pin keeps no info of an errored
    rollout); None where neither says."""
    proto = ((trace or {}).get("info") or {}).get("glyph_protocol")
    if isinstance(proto, dict):
        profile = proto.get("profile", "glyph")
    else:
        profile = run_cfg.get("profile")
    return profile if profile in PROFILES else None


def _predictions(g: record.MbppRecord, profile: str) -> tuple:
    """(sampled, verified, decision) per prediction, by the profile's definition."""
    if profile == "study":  # every prediction target: a candidate with a prediction turn
        return tuple(
            (c.sampled_label if c.sampled_label in OUTCOMES else INVALID, c.verified_label, c.decision)
            for c in g.candidates
            if c.prediction_turn is not None and c.verified_label in OUTCOMES
        )
    return tuple(
        (c.sampled_label, c.verified_label, c.decision)
        for c in g.candidates
        if c.sampled_label in OUTCOMES and c.verified_label in OUTCOMES
    )


def _episode_metrics(g: record.MbppRecord, metrics: dict, profile: str) -> tuple:
    """(first_patch, executed_failure, recovered) by the profile's definitions."""
    if profile != "study":
        return tuple(
            metrics.get(k) == 1.0
            for k in ("first_patch_correct", "had_executed_failure", "recovered_after_executed_failure")
        )
    targets = [c for c in g.candidates if c.prediction_turn is not None]
    first_target = targets[0].verified_label if targets else None
    visible = g.visible_outcomes
    if visible is None:  # a record from before finalize kept the visible outcomes
        first = None if first_target is None else record.study_episode(first_target, [])[0]
        return first, metrics.get("had_executed_failure") == 1.0, None
    return record.study_episode(first_target, visible)


def _rollout(
    run_index: int, line: int, episode: dict, trace: dict | None, run_cfg: dict, where: str
) -> Rollout:
    data = task_data(episode, trace)
    task = data.get("name") or data.get("id")
    if not isinstance(task, str):
        raise RunError(f"{where}:{line}: an episode names no task (task.data.name)")
    t = trace or {}
    acfg = (t.get("agent") or {}).get("config") or {}
    j = judge(episode, trace, f"{where}:{line}")
    g, status = j.record, j.status
    metrics = t.get("metrics") or (g.metrics if g is not None else {}) or {}
    # A trajectory cut short by the machinery is incomplete: whether it would have chosen REVISE, how
    # many calls it would have made, are unknown (and at the pin nothing of it is recorded at all).
    recorded = g is not None and not metrics.get("no_trace") and status not in (ERRORED, TIMED_OUT)
    plus = metrics.get("plus_passed")  # absent where the task has no plus tests
    base = metrics.get("base_passed")
    profile = recorded_profile(trace, run_cfg)
    predictions, revised, calls, cap = (), None, None, None
    first, failure, recovered_ = None, None, None
    if recorded:
        predictions = _predictions(g, profile or "glyph")
        first, failure, recovered_ = _episode_metrics(g, metrics, profile or "glyph")
        revised = any(c.decision == "REVISE" for c in g.candidates)
        calls = int(metrics.get("visible_tool_calls", 0))
        harness = acfg.get("harness") or {}
        budget = harness.get("max_tool_calls", run_cfg.get("max_tool_calls", DEFAULT_BUDGET))
        cost = harness.get("test_cost", run_cfg.get("test_cost", 1))
        used = calls + (cost - 1) * int(metrics.get("visible_test_calls", 0))
        cap = bool(metrics.get("budget_exhausted")) or used >= budget
    arm = data.get("arm") or run_cfg.get("arm")
    seed = (acfg.get("sampling") or {}).get("seed", (run_cfg.get("sampling") or {}).get("seed"))
    return Rollout(
        run=run_index,
        line=line,
        task=task,
        arm=arm,
        seed=None if seed is None else str(seed),
        ckpt=acfg.get("model", run_cfg.get("model")),
        status=status,
        reason=j.reason,
        passed=j.passed,
        base=None if base is None else (status == OK and base == 1.0),
        plus=None if plus is None else (status == OK and plus == 1.0),
        suite=_suite(data, run_cfg),
        predictions=predictions,
        revised=revised,
        tool_calls=calls,
        cap_hit=cap,
        config=_fingerprint(acfg, run_cfg, data) if trace is not None else (),
        profile=profile,
        first_patch=first,
        executed_failure=failure,
        recovered=recovered_,
    )


class Loaded(NamedTuple):
    runs: list[Run]
    rollouts: list[Rollout]
    notes: list[str]  # what labelled mixes were accepted


def load(roots: list[Path], labels: list[dict] | None = None) -> Loaded:
    """Every run under ``roots`` and its rollouts; ``labels[i]`` labels every
    run under ``roots[i]``. Raises RunError on bad input and MixedRuns on
    an unlabelled mix."""
    labels = labels or [{} for _ in roots]
    runs: list[Run] = []
    rollouts: list[Rollout] = []
    seen: dict[Path, Path] = {}
    for root, label in zip(roots, labels, strict=True):
        for rf in find_runs(root):
            resolved = rf.traces.resolve()
            if resolved in seen:
                raise RunError(
                    f"{rf.traces} is given twice (under {seen[resolved]} and {root}); each run counts once"
                )
            seen[resolved] = root
            raw = _read_config(rf)
            run_cfg = _run_config(raw)
            by_env: dict[str | None, Run] = {}
            other: Counter = Counter()
            for line, episode in iter_episodes(rf.traces):
                env = episode.get("env") or {}
                if env.get("id") not in (None, "", MBPP_ENV_ID):
                    other[env.get("id")] += 1
                    continue
                key = env.get("name") if rf.source == "prime-rl" else None
                if key not in by_env:
                    path = str(rf.traces.parent) + (f"#{key}" if key and rf.source == "prime-rl" else "")
                    runs.append(
                        Run(
                            path=path,
                            source=rf.source,
                            labels=dict(label),
                            env_name=key,
                            step=rf.step,
                            config=run_cfg,
                        )
                    )
                    by_env[key] = (len(runs) - 1, runs[-1])
                index, run = by_env[key]
                traces = episode["traces"] or [None]
                for trace in traces:
                    if not isinstance(trace, (dict, type(None))):
                        raise RunError(f"{rf.traces}:{line}: a trace is not a JSON object")
                    r = _rollout(index, line, episode, trace, run_cfg, str(rf.traces))
                    if trace is not None and run.verifiers is None:
                        run.verifiers = (trace.get("verifiers") or {}).get("version")
                    rollouts.append(r)
                    run.rollouts += 1
            if not by_env:
                what = ", ".join(f"{k} ({n})" for k, n in other.items())
                raise RunError(
                    f"{rf.traces}: no {MBPP_ENV_ID} episodes" + (f" (only {what})" if what else " (empty)")
                )
    notes = check_runs(runs, rollouts)  # on what the runs record
    _assign(runs, rollouts)
    return Loaded(runs, rollouts, notes + check_cells(runs, rollouts))  # on the cells, labels applied


def _assign(runs: list[Run], rollouts: list[Rollout]) -> None:
    """Labels over records; PRIME-RL's step as the checkpoint; each run's values and their sources."""
    for r in rollouts:
        run = runs[r.run]
        if run.step is not None:
            r.ckpt = f"step{run.step}"
        for key in LABEL_KEYS:
            if key in run.labels:
                setattr(r, key, run.labels[key])
    seen: dict[int, dict[str, Counter]] = defaultdict(lambda: {k: Counter() for k in LABEL_KEYS})
    for r in rollouts:
        for key in LABEL_KEYS:
            seen[r.run][key][getattr(r, key)] += 1
    for i, run in enumerate(runs):
        run.values = {k: sorted(seen[i][k], key=lambda v: (v is None, str(v))) for k in LABEL_KEYS}
        run.sources = {
            "arm": "label" if "arm" in run.labels else "task records",
            "seed": "label"
            if "seed" in run.labels
            else ("sampling.seed" if run.values["seed"] != [None] else "not recorded"),
            "ckpt": "label"
            if "ckpt" in run.labels
            else ("PRIME-RL step" if run.step is not None else "model name"),
        }


def _describe(counter: Counter, name: str) -> str:
    return " and ".join(
        f"{name} {v} ({n} rollouts)" for v, n in sorted(counter.items(), key=lambda kv: str(kv[0]))
    )


def _config_diff(configs: Counter) -> str:
    keys = {k for cfg in configs for k, _ in cfg}
    diff = [k for k in sorted(keys) if len({dict(cfg).get(k, "<unset>") for cfg in configs}) > 1]
    return "; ".join(
        f"{k}: " + " vs ".join(sorted({str(dict(cfg).get(k, "<unset>")) for cfg in configs})) for k in diff
    )


def _cell_name(arm, seed, ckpt) -> str:
    return f"arm {arm or 'unset'}, seed {seed or 'unset'}, ckpt {ckpt or 'unset'}"


def check_runs(runs: list[Run], rollouts: list[Rollout]) -> list[str]:
    """Refuse a run whose records mix arms or configurations unless it is
    labelled; the notes say what labelled mixes were taken."""
    seen: dict[int, dict[str, Counter]] = defaultdict(
        lambda: {"arm": Counter(), "config": Counter(), "profile": Counter()}
    )
    for r in rollouts:
        seen[r.run]["arm"][r.arm] += 1
        if r.config:  # an episode that left no trace has no agent config to compare
            seen[r.run]["config"][r.config] += 1
        if r.profile is not None:  # one whose profile is unknown (the pin's errored trace) mixes nothing
            seen[r.run]["profile"][r.profile] += 1
    notes = []
    for i, s in seen.items():
        problems = []
        if len(s["arm"]) > 1:
            problems.append("mixes " + _describe(s["arm"], "arm"))
        if len(s["profile"]) > 1:
            problems.append("mixes " + _describe(s["profile"], "profile"))
        if len(s["config"]) > 1:
            problems.append("mixes configurations (" + _config_diff(s["config"]) + ")")
        if problems and not runs[i].labelled:
            raise MixedRuns(
                f"{runs[i].path}: {'; '.join(problems)}; label it (--label arm=...,seed=...,ckpt=...) "
                f"to take it as one cell, or report its parts separately"
            )
        notes += [f"{runs[i].path} {p}; taken as labelled ({_label_text(runs[i].labels)})" for p in problems]
    return notes


def check_cells(runs: list[Run], rollouts: list[Rollout]) -> list[str]:
    """Refuse a cell (arm x seed x checkpoint) that merges runs of different
    configurations unless every run in it is labelled."""
    cells: dict[tuple, dict] = defaultdict(lambda: {"config": Counter(), "profile": Counter(), "runs": set()})
    for r in rollouts:
        cell = cells[(r.arm, r.seed, r.ckpt)]
        cell["runs"].add(r.run)
        if r.config:
            cell["config"][r.config] += 1
        if r.profile is not None:
            cell["profile"][r.profile] += 1
    notes = []
    for (arm, seed, ckpt), cell in cells.items():
        diffs = [_config_diff(cell["config"])] if len(cell["config"]) > 1 else []
        if len(cell["profile"]) > 1:
            diffs.append("profile: " + " vs ".join(sorted(cell["profile"])))
        if diffs:
            paths = ", ".join(runs[i].path for i in sorted(cell["runs"]))
            what = _cell_name(arm, seed, ckpt)
            if not all(runs[i].labelled for i in cell["runs"]):
                raise MixedRuns(
                    f"runs {paths} would form one cell ({what}) but differ in configuration "
                    f"({'; '.join(diffs)}); label each run (--label arm=...,seed=...,"
                    f"ckpt=...) to say which cell it belongs to"
                )
            notes.append(
                f"the cell {what} merges runs that differ in configuration "
                f"({'; '.join(diffs)}): {paths}; taken as labelled"
            )
    return notes


def _label_text(labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())
