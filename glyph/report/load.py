"""Eval run directories in, one flat record per rollout out.

The runs and their episodes are found and read by ``glyph.report.episodes``
(the one reader of saved rollouts). What each rollout is, and how it counts:

* ``status`` is ``glyph.record.status``: ``ok``, or an incident
  (``tampered``, ``timed_out``, ``errored``). An incident is a failure in
  every rate and keeps its reason; none is dropped.
* An errored or timed-out trajectory is *incomplete*: no REVISE decision,
  predictions or tool-call count, so both verifiers versions (the pin records
  nothing of it) report it alike. A tampered one keeps its record.
* arm, seed and checkpoint: a ``--label`` wins; else the task record's arm
  (or the run config's), a recorded sampling seed, and PRIME-RL's step or the
  model name. Each run says where its values came from. ``echo`` (``on`` or
  ``off``: whether the policy was trained with ECHO's observation CE) comes
  from a label only: an eval run cannot tell how its checkpoint was trained.
* pass@1 is the reward (what the taskset's ``hidden`` chose: ``base`` or
  ``plus``); ``base_passed`` and ``plus_passed`` are kept where recorded.
* A run, or a cell (arm x echo x seed x checkpoint), that mixes arms or
  configurations (the protocol profile among them) is refused
  (:class:`MixedRuns`) unless every run in it is labelled.
* ``profile`` is the protocol profile the rollout ran, as the harness
  recorded it (``glyph.report.episodes.profile_of``), and its definitions
  (``glyph.profiles``) give the episode metrics (``first_patch``,
  ``executed_failure``, ``recovered``: finalize recorded them by those
  definitions) and which of the record's candidates are the predictions the
  confusion counts (``Profile.predictions``).

Bad input is a ``glyph.errors.RunError`` whose message names the file and line.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from glyph import profiles
from glyph.agent.profiles.glyph import DEFAULT_BUDGET
from glyph.errors import RunError
from glyph.record import ERRORED, MBPP_ENV_ID, OK, TIMED_OUT
from glyph.report.episodes import RunFile, find_runs, iter_episodes, judge, profile_of, task_data

LABEL_KEYS = ("arm", "seed", "ckpt", "echo")
ARMS = ("a", "b")
ECHO = ("off", "on")
"""``--label echo=...``: the policy trained without / with ECHO's observation CE (the recipe's
``arm_{a,b}`` / ``arm_{a,b}_echo``)."""
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
    echo: str | None = None  # ``--label echo=on|off`` only (the module docstring)


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
    """``arm=b,seed=42,ckpt=step100,echo=on`` -> a dict; an empty spec labels nothing."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in LABEL_KEYS or not value:
            raise RunError(
                f"--label {spec!r}: expected comma-separated arm=..., seed=..., ckpt=..., echo=...")
        if key == "arm" and value not in ARMS:
            raise RunError(f"--label {spec!r}: arm is a or b")
        if key == "echo" and value not in ECHO:
            raise RunError(f"--label {spec!r}: echo is on or off")
        out[key] = value
    return out


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
    metrics = t.get("metrics") or (g.metrics.flat() if g is not None else {}) or {}
    # A trajectory cut short by the machinery is incomplete: whether it would have chosen REVISE, how
    # many calls it would have made, are unknown (and at the pin nothing of it is recorded at all).
    recorded = g is not None and not metrics.get("no_trace") and status not in (ERRORED, TIMED_OUT)
    plus = metrics.get("plus_passed")  # absent where the task has no plus tests
    base = metrics.get("base_passed")
    profile = profile_of(trace, run_cfg.get("profile"))
    predictions, revised, calls, cap = (), None, None, None
    first, failure, recovered_ = None, None, None
    if recorded:
        predictions = profiles.get(profile or "glyph").predictions(g.candidates)
        first, failure, recovered_ = (metrics.get(k) == 1.0 for k in (
            "first_patch_correct", "had_executed_failure", "recovered_after_executed_failure"))
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
            "echo": "label" if "echo" in run.labels else "not recorded",
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
    """Refuse a cell (arm x echo x seed x checkpoint) that merges runs of different
    configurations unless every run in it is labelled."""
    cells: dict[tuple, dict] = defaultdict(lambda: {"config": Counter(), "profile": Counter(), "runs": set()})
    for r in rollouts:
        cell = cells[(r.arm, r.seed, r.ckpt, r.echo)]
        cell["runs"].add(r.run)
        if r.config:
            cell["config"][r.config] += 1
        if r.profile is not None:
            cell["profile"][r.profile] += 1
    notes = []
    for (arm, seed, ckpt, echo), cell in cells.items():
        diffs = [_config_diff(cell["config"])] if len(cell["config"]) > 1 else []
        if len(cell["profile"]) > 1:
            diffs.append("profile: " + " vs ".join(sorted(cell["profile"])))
        if diffs:
            paths = ", ".join(runs[i].path for i in sorted(cell["runs"]))
            what = _cell_name(arm, seed, ckpt) + (f", echo {echo}" if echo else "")
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
