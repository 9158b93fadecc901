"""Rollouts -> the report document: every figure of every table, as plain
JSON. Tables, plots and the HTML page only format what is here.

The document (``schema`` ``"glyph.report/1"``)::

  schema            "glyph.report/1"
  intervals         {"level": 0.95, "proportion": "wilson",
                     "other": "percentile bootstrap", "resamples": int, "seed": int}
  runs              [Run]
  cells             [Cell]        one per arm x echo x seed x checkpoint
  comparisons       [Comparison]  paired, on identical tasks
  seed_aggregates   [SeedAggregate]
  factorial         [Factorial]   the cells {arm A, arm B} x {observation CE off, on}, where runs carry
                                  an ``echo`` label
  incidents         [Incident]    every errored, timed-out or tampered rollout
  notes             [str]

  Proportion  {"successes": int, "n": int, "value": float | null, "ci": [lo, hi] | null}
              a 95% Wilson interval; value and ci are null when n is 0
  Estimate    {"value": float | null, "ci": [lo, hi] | null, "n": int}
              a 95% percentile bootstrap interval (n: resampled units)
  CellKey     {"arm": "a" | "b" | null, "seed": str | null, "ckpt": str | null,
               "echo": "on" | "off" | null}
              echo: whether the policy was trained with ECHO's observation CE (a ``--label``;
              null: not labelled)

  Run         {"path", "source": "vf-eval" | "eval" | "prime-rl" | "traces", "verifiers": str | null,
               "rollouts": int, "labels": {key: str}, "values": {"arm"|"seed"|"ckpt"|"echo": [str | null]},
               "sources": {"arm"|"seed"|"ckpt"|"echo": str}, "config": {...}, "env_name": str | null,
               "step": int | null}
  Cell        CellKey + {
    "runs": [int]                 indices into runs
    "rollouts": int, "tasks": int
    "incidents": {"errored": int, "timed_out": int, "tampered": int}
    "pass_at_1": Proportion       passed rollouts / all rollouts (incidents are failures)
    "pass_at_k": [{"k": int, "tasks": int, "tasks_short": int} + Estimate]
                                  Chen et al.'s unbiased estimator averaged over the tasks
                                  with >= k rollouts (tasks_short: those with fewer);
                                  bootstrap over tasks
    "reward_suite": "base" | "plus"
                                  what pass@1 (the reward) graded: the taskset's ``hidden``
    "base": null | {"pass_at_1": Proportion, "recorded": int, "ungraded": int}
    "plus": null | {"pass_at_1": Proportion, "recorded": int, "ungraded": int}
                                  the base_passed / plus_passed metrics where any rollout
                                  recorded them (plus: only where the task has plus tests);
                                  a rollout without one counts as
                                  a failure (recorded: how many have it; ungraded: how many
                                  of the rollouts without it are no incident)
    "definitions": "study" | "glyph" | "mixed"
                                  whose definitions the episode metrics and predictions use:
                                  the profile the cell's rollouts ran (``glyph.report.load``
                                  says both; a labelled mix uses each rollout's own)
    "episode": {"definitions": str, "first_patch_correct": Proportion (over all rollouts),
                "executed_failure": Proportion (over all rollouts),
                "recovered": Proportion (over those with an executed failure: passed and
                             recovered, the study's executed_failure_recovery_rate),
                "unrecorded": int (complete rollouts whose record lacks what a definition
                                   reads; counted as not correct / not recovered)}
    "revise_split": null | {"convention": "study" | "glyph", "never": Group, "revised": Group,
                            "incomplete": Group | null, "never_incomplete": int}
        Group {"n": int, "share": Proportion, "pass_at_1": Proportion}
                                  arm B (or any cell with decisions): by whether the
                                  trajectory ever chose REVISE. Incomplete trajectories
                                  (errored or timed-out rollouts and those that left no
                                  trace: failures in pass@1, nothing in the gate, confusion
                                  or tool calls): the ``study`` convention (the study's
                                  seed-42 split, 409 + 91 = 500) counts them in never
                                  (never_incomplete says how many; incomplete is null);
                                  ``glyph``'s shows them apart (never_incomplete 0)
    "gate": null | {"failing": Proportion, "passing": Proportion}
                                  REVISE rate over predicted patches whose verified outcome
                                  fails / passes
    "tool_calls": {"never": Calls, "revised": Calls, "incomplete": int}
        Calls {"n": int, "mean": Estimate, "cap_hit": Proportion, "histogram": [[calls, count]]}
                                  visible tool calls per trajectory (bootstrap over
                                  trajectories); cap hit: the budget ran out or was used up
    "confusion": null | {"labels": [6 outcome classes], "predicted_labels": [the 6, and
                         "INVALID" under the study's definitions], "matrix": [[int]] (rows:
                         verified, columns: predicted), "n": int, "invalid": int,
                         "accuracy": Proportion,
                         "classes": [{"label", "predicted": int, "verified": int,
                                      "precision": Proportion, "recall": Proportion,
                                      "prediction_share": Proportion, "base_rate": Proportion}]}
  }
  Comparison  {"kind": "arm" | "checkpoint", "first": CellKey, "second": CellKey, "pairs": int,
               "both": int, "first_only": int, "second_only": int, "neither": int,
               "first_pass_at_1": Proportion, "second_pass_at_1": Proportion (over the pairs),
               "difference": Estimate (second - first, bootstrap over pairs),
               "mcnemar_p": float (exact, two-sided),
               "unpaired_first": int, "unpaired_second": int}
              rollouts pair by task and by order within the task (the j-th rollout of a
              task in one cell with the j-th in the other)
  SeedAggregate {"arm", "ckpt", "echo", "seeds": [str | null], "per_seed": [Proportion],
                 "mean": Estimate (mean of the seeds' pass@1; bootstrap over tasks, the
                 same draw for every seed), "min": float, "max": float}
  Incident    {"run": int, "path": str, "line": int, "task": str, "kind": "errored" |
               "timed_out" | "tampered", "reason": str} + CellKey
  Factorial   {"profile": str, "seed": str | null, "ckpt": str | null,
               "cells": [CellKey + {"rollouts": int, "pass_at_1": Proportion,
                                    "prediction_accuracy": Proportion | null,
                                    "gate": null | {"failing": Proportion, "passing": Proportion}}],
               "pairs": [Comparison]}
              one per profile (the cells' definitions) x seed x checkpoint holding at least two of
              the four cells (arm a | b, echo off | on); pairs: every two of its cells, paired on the
              tasks both ran (kind "factorial"); the prediction figures are the arm B cells'
              (accuracy and the gate, as in the cell)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np

from glyph import profiles
from glyph.outcomes import Outcome
from glyph.profiles.study import INVALID
from glyph.record import ERRORED, INCIDENTS, OK, TAMPERED, TIMED_OUT
from glyph.report.load import Rollout, Run
from glyph.report.stats import Bootstrap, mcnemar_exact, pass_at_k, wilson

SCHEMA = "glyph.report/1"
LABELS = [o.value for o in Outcome]
PASS = Outcome.PASS.value


AUTO_KS = (1, 2, 5, 10, 20, 50, 100)


@dataclass(frozen=True)
class Options:
    ks: tuple[int, ...] | None = None
    """pass@k for these k; None: 1 and every k of AUTO_KS up to the most rollouts any task has."""
    baseline: str = "sft"
    """The checkpoint that the checkpoint comparisons start from (SFT vs RL)."""
    resamples: int = 2000
    seed: int = 0
    convention: str = "study"
    """How the REVISE split counts incomplete trajectories: ``study`` (in never revised, as failures: the
    study's 409 + 91 = 500) or ``glyph`` (apart)."""

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention {self.convention!r}: use {' or '.join(CONVENTIONS)}")


CONVENTIONS = {"study": False, "glyph": True}
"""The REVISE split's conventions: whether incomplete trajectories count apart."""

def proportion(successes: int, n: int) -> dict:
    ci = wilson(successes, n)
    return {
        "successes": int(successes),
        "n": int(n),
        "value": successes / n if n else None,
        "ci": list(ci) if ci else None,
    }


def estimate(value: float | None, ci, n: int) -> dict:
    return {"value": None if value is None else float(value), "ci": list(ci) if ci else None, "n": int(n)}


def _seed_order(seed: str | None) -> tuple:
    if seed is None:
        return (0, 0, "")
    return (1, int(seed), "") if seed.lstrip("-").isdigit() else (2, 0, seed)


ECHO_ORDER = {None: 0, "off": 1, "on": 2}


def cell_order(key: tuple) -> tuple:
    arm, seed, ckpt, echo = key
    return (arm is None, arm or "", ECHO_ORDER.get(echo, 3), echo or "", _seed_order(seed), ckpt is None,
            ckpt or "")


def key_json(key: tuple) -> dict:
    """A cell's key (arm, seed, ckpt, echo) as the document's CellKey."""
    return {"arm": key[0], "seed": key[1], "ckpt": key[2], "echo": key[3]}


def build(
    runs: list[Run], rollouts: list[Rollout], options: Options | None = None, notes: list[str] = ()
) -> dict:
    """The report document (the schema above) of ``rollouts``, loaded from ``runs``."""
    options = options or Options()
    boot = Bootstrap(options.resamples, options.seed)
    cells: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        cells[(r.arm, r.seed, r.ckpt, r.echo)].append(r)
    keys = sorted(cells, key=cell_order)
    notes = list(notes)
    if options.ks is None:
        most = max(Counter(r.task for r in rs).most_common(1)[0][1] for rs in cells.values())
        options = replace(options, ks=tuple(k for k in AUTO_KS if k == 1 or k <= most))
    doc = {
        "schema": SCHEMA,
        "intervals": {
            "level": 0.95,
            "proportion": "wilson",
            "other": "percentile bootstrap",
            "resamples": options.resamples,
            "seed": options.seed,
        },
        "runs": [_run_json(run) for run in runs],
        "cells": [_cell(key, cells[key], options, boot) for key in keys],
        "comparisons": _comparisons(keys, cells, options, boot),
        "seed_aggregates": _seed_aggregates(keys, cells, boot),
        "factorial": [],
        "incidents": [
            {
                "run": r.run,
                "path": runs[r.run].path,
                "line": r.line,
                "task": r.task,
                "kind": r.status,
                "reason": r.reason,
                **key_json((r.arm, r.seed, r.ckpt, r.echo)),
            }
            for r in sorted(rollouts, key=lambda r: (r.run, r.line))
            if r.status != OK
        ],
        "notes": notes,
    }
    doc["factorial"] = factorial(doc["cells"], cells, boot)
    if any(len(c["runs"]) > 1 for c in doc["cells"]):
        notes.append("a cell merges several runs: their rollouts of one task count as several samples of it")
    if any(max(Counter(r.task for r in cells[k]).values()) > 1 for k in keys):
        notes.append(
            "several rollouts per task: the Wilson intervals of rollout-level rates treat rollouts "
            "as independent, which understates the spread between tasks; pass@k's bootstrap "
            "resamples tasks"
        )
    for c in doc["cells"]:
        if c["plus"] and c["plus"]["ungraded"]:
            notes.append(
                f"arm {c['arm']}, seed {c['seed']}, ckpt {c['ckpt']}: {c['plus']['ungraded']} scored "
                "rollout(s) have no plus grade (no plus tests were found for their tasks); pass@1 plus "
                "counts them as failures"
            )
    if any(c["confusion"] for c in doc["cells"]):
        notes.append(
            "patch-level rates (gate, confusion) count every predicted patch; a trajectory's "
            "patches are not independent, so their Wilson intervals are somewhat narrow"
        )
    if not doc["comparisons"] and len(keys) > 1:
        notes.append(
            "no paired comparison: arms pair on equal seed and checkpoint, checkpoints on the "
            f"baseline checkpoint {options.baseline!r} of the same arm; label the runs "
            "(--label arm=...,seed=...,ckpt=...) so that they line up"
        )
    return doc


def _run_json(run: Run) -> dict:
    return {
        "path": run.path,
        "source": run.source,
        "verifiers": run.verifiers,
        "rollouts": run.rollouts,
        "labels": run.labels,
        "values": run.values,
        "sources": run.sources,
        "config": run.config,
        "env_name": run.env_name,
        "step": run.step,
    }


def _by_task(rs: list[Rollout]) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = defaultdict(list)
    for r in sorted(rs, key=lambda r: (r.run, r.line)):
        out[r.task].append(r.passed)
    return out


def _pass_at_k(by_task: dict[str, list[bool]], k: int, boot: Bootstrap, salt: str) -> dict:
    n = np.array([len(v) for v in by_task.values()])
    c = np.array([sum(v) for v in by_task.values()])
    keep = n >= k
    values = pass_at_k(n[keep], c[keep], k)
    mean = float(values.mean()) if len(values) else None
    return {
        "k": k,
        "tasks": int(keep.sum()),
        "tasks_short": int((~keep).sum()),
        **estimate(mean, boot.mean(values, f"pass@{k}|{salt}"), len(values)),
    }


def _suite(rs: list[Rollout], name: str) -> dict | None:
    recorded = sum(getattr(r, name) is not None for r in rs)
    if not recorded:
        return None
    return {
        "pass_at_1": proportion(sum(getattr(r, name) is True for r in rs), len(rs)),
        "recorded": recorded,
        "ungraded": sum(r.status == OK and getattr(r, name) is None for r in rs),
    }


def _group(rs: list[Rollout], total: int) -> dict:
    return {
        "n": len(rs),
        "share": proportion(len(rs), total),
        "pass_at_1": proportion(sum(r.passed for r in rs), len(rs)),
    }


def _calls(rs: list[Rollout], boot: Bootstrap, salt: str) -> dict:
    calls = np.array([r.tool_calls for r in rs], dtype=float)
    mean = float(calls.mean()) if len(calls) else None
    return {
        "n": len(rs),
        "mean": estimate(mean, boot.mean(calls, f"calls|{salt}"), len(rs)),
        "cap_hit": proportion(sum(bool(r.cap_hit) for r in rs), len(rs)),
        "histogram": [[k, v] for k, v in sorted(Counter(r.tool_calls for r in rs).items())],
    }


def _cell(key: tuple, rs: list[Rollout], options: Options, boot: Bootstrap) -> dict:
    salt = repr(key)
    n = len(rs)
    by_task = _by_task(rs)
    status = Counter(r.status for r in rs)
    out = {
        **key_json(key),
        "runs": sorted({r.run for r in rs}),
        "rollouts": n,
        "tasks": len(by_task),
        "incidents": {k: status.get(k, 0) for k in INCIDENTS},
        "pass_at_1": proportion(sum(r.passed for r in rs), n),
        "pass_at_k": [_pass_at_k(by_task, k, boot, salt) for k in options.ks],
    }
    out["reward_suite"] = Counter(r.suite for r in rs).most_common(1)[0][0]
    out["base"] = _suite(rs, "base")
    out["plus"] = _suite(rs, "plus")
    ran = {r.profile for r in rs if r.profile is not None} or {"glyph"}
    out["definitions"] = next(iter(ran)) if len(ran) == 1 else "mixed"
    out["episode"] = _episode(rs, out["definitions"])
    never = [r for r in rs if r.revised is False]
    revised = [r for r in rs if r.revised is True]
    unknown = [r for r in rs if r.revised is None]
    preds = [p for r in rs for p in r.predictions]
    decides = key[0] == "b" or any(p[2] for p in preds)
    out["revise_split"] = _split(never, revised, unknown, n, options.convention) if decides else None
    failing = [p for p in preds if p[1] != PASS]
    passing = [p for p in preds if p[1] == PASS]
    out["gate"] = (
        {
            "failing": proportion(sum(p[2] == "REVISE" for p in failing), len(failing)),
            "passing": proportion(sum(p[2] == "REVISE" for p in passing), len(passing)),
        }
        if preds
        else None
    )
    out["tool_calls"] = {
        "never": _calls(never, boot, "never|" + salt),
        "revised": _calls(revised, boot, "revised|" + salt),
        "incomplete": len(unknown),
    }
    out["confusion"] = _confusion(preds, any(profiles.get(p).invalid_class for p in ran)) if preds else None
    return out


def _episode(rs: list[Rollout], definitions: str) -> dict:
    failed = [r for r in rs if r.executed_failure]
    complete = [r for r in rs if r.revised is not None]  # recorded trajectories
    return {
        "definitions": definitions,
        "first_patch_correct": proportion(sum(r.first_patch is True for r in rs), len(rs)),
        "executed_failure": proportion(len(failed), len(rs)),
        "recovered": proportion(sum(r.passed and r.recovered is True for r in failed), len(failed)),
        "unrecorded": sum(r.first_patch is None or (r.executed_failure and r.recovered is None) for r in complete),
    }


def _split(never: list[Rollout], revised: list[Rollout], unknown: list[Rollout], n: int, convention: str) -> dict:
    if not CONVENTIONS[convention]:  # the study's: every rollout counted, a cut-short one never revised and failed
        return {"convention": convention, "never": _group(never + unknown, n), "revised": _group(revised, n),
                "incomplete": None, "never_incomplete": len(unknown)}
    return {"convention": convention, "never": _group(never, n), "revised": _group(revised, n),
            "incomplete": _group(unknown, n), "never_incomplete": 0}


def _confusion(preds: list[tuple], invalid_class: bool) -> dict:
    """Rows: the verified outcome; columns: the sampled label, with the study's INVALID column when
    ``invalid_class`` (a label that is no outcome class)."""
    index = {label: i for i, label in enumerate(LABELS)}
    columns = LABELS + [INVALID] if invalid_class else LABELS
    col = {label: i for i, label in enumerate(columns)}
    m = np.zeros((len(LABELS), len(columns)), dtype=int)
    for sampled, verified, _ in preds:
        if sampled in col and verified in index:
            m[index[verified], col[sampled]] += 1
    total = int(m.sum())
    classes = []
    for i, label in enumerate(LABELS):
        predicted, verified, correct = int(m[:, i].sum()), int(m[i, :].sum()), int(m[i, i])
        classes.append(
            {
                "label": label,
                "predicted": predicted,
                "verified": verified,
                "precision": proportion(correct, predicted),
                "recall": proportion(correct, verified),
                "prediction_share": proportion(predicted, total),
                "base_rate": proportion(verified, total),
            }
        )
    return {
        "labels": LABELS,
        "predicted_labels": columns,
        "matrix": m.tolist(),
        "n": total,
        "invalid": int(m[:, col[INVALID]].sum()) if invalid_class else 0,
        "accuracy": proportion(int(np.trace(m[:, : len(LABELS)])), total),
        "classes": classes,
    }


def _pairs(first: list[Rollout], second: list[Rollout]) -> tuple[np.ndarray, np.ndarray, int, int]:
    a, b = _by_task(first), _by_task(second)
    xa, xb = [], []
    for task in sorted(a.keys() & b.keys()):
        m = min(len(a[task]), len(b[task]))
        xa += a[task][:m]
        xb += b[task][:m]
    return np.array(xa, dtype=bool), np.array(xb, dtype=bool), len(first) - len(xa), len(second) - len(xb)


def _compare(kind: str, k1: tuple, k2: tuple, cells: dict, boot: Bootstrap) -> dict:
    xa, xb, ua, ub = _pairs(cells[k1], cells[k2])
    both, a_only = int((xa & xb).sum()), int((xa & ~xb).sum())
    b_only, neither = int((~xa & xb).sum()), int((~xa & ~xb).sum())
    diff = xb.astype(float) - xa.astype(float)
    return {
        "kind": kind,
        "first": key_json(k1),
        "second": key_json(k2),
        "pairs": len(xa),
        "both": both,
        "first_only": a_only,
        "second_only": b_only,
        "neither": neither,
        "first_pass_at_1": proportion(int(xa.sum()), len(xa)),
        "second_pass_at_1": proportion(int(xb.sum()), len(xb)),
        "difference": estimate(
            float(diff.mean()) if len(diff) else None, boot.mean(diff, f"diff|{k1}|{k2}"), len(diff)
        ),
        "mcnemar_p": mcnemar_exact(a_only, b_only),
        "unpaired_first": ua,
        "unpaired_second": ub,
    }


def _comparisons(keys: list[tuple], cells: dict, options: Options, boot: Bootstrap) -> list[dict]:
    out = []
    for k in keys:  # arm A vs arm B at equal seed, checkpoint and observation CE
        if k[0] == "a" and ("b", *k[1:]) in cells:
            out.append(_compare("arm", k, ("b", *k[1:]), cells, boot))
    for base in keys:  # the baseline checkpoint (SFT) vs every other checkpoint of its arm
        if base[2] != options.baseline:
            continue
        for k in keys:
            same_arm = (k[0], k[3]) == (base[0], base[3])
            if same_arm and k[2] != options.baseline and (base[1] is None or base[1] == k[1]):
                out.append(_compare("checkpoint", base, k, cells, boot))
    return out


def _seed_aggregates(keys: list[tuple], cells: dict, boot: Bootstrap) -> list[dict]:
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for k in keys:
        groups[(k[0], k[2], k[3])].append(k)
    out = []
    for (arm, ckpt, echo), members in groups.items():
        if len(members) < 2:
            continue
        per_task = [_by_task(cells[k]) for k in members]
        tasks = sorted(set().union(*per_task))
        num = np.array([[sum(pt.get(t, ())) for pt in per_task] for t in tasks], dtype=float)
        den = np.array([[len(pt.get(t, ())) for pt in per_task] for t in tasks], dtype=float)
        per_seed = [proportion(sum(r.passed for r in cells[k]), len(cells[k])) for k in members]
        values = [p["value"] for p in per_seed]
        out.append(
            {
                "arm": arm,
                "ckpt": ckpt,
                "echo": echo,
                "seeds": [k[1] for k in members],
                "per_seed": per_seed,
                "mean": estimate(
                    float(np.mean(values)), boot.ratio(num, den, f"seeds|{arm}|{ckpt}"), len(tasks)
                ),
                "min": float(min(values)),
                "max": float(max(values)),
            }
        )
    return out


FACTORIAL_CELLS = (("a", "off"), ("a", "on"), ("b", "off"), ("b", "on"))
"""The 2x2 {arm A, arm B} x {observation CE off, on}, in the order the report shows them."""


def factorial(cell_docs: list[dict], cells: dict, boot: Bootstrap) -> list[dict]:
    """The four-cell comparison (the schema's Factorial): the cells whose runs carry an ``echo`` label,
    grouped by profile, seed and checkpoint; in each group every two cells paired on their shared tasks."""
    groups: dict[tuple, list[tuple[tuple, dict]]] = defaultdict(list)
    for c in cell_docs:
        key = (c["arm"], c["seed"], c["ckpt"], c["echo"])
        if (c["arm"], c["echo"]) in FACTORIAL_CELLS:
            groups[(c["definitions"], c["seed"], c["ckpt"])].append((key, c))
    out = []
    for (profile, seed, ckpt), members in sorted(groups.items(), key=lambda g: (g[0][0], _seed_order(g[0][1]),
                                                                               g[0][2] or "")):
        if len(members) < 2:
            continue
        members.sort(key=lambda m: FACTORIAL_CELLS.index((m[0][0], m[0][3])))
        out.append({
            "profile": profile,
            "seed": seed,
            "ckpt": ckpt,
            "cells": [{**key_json(k), "rollouts": c["rollouts"], "pass_at_1": c["pass_at_1"],
                       "prediction_accuracy": c["confusion"]["accuracy"] if c["confusion"] else None,
                       "gate": c["gate"]} for k, c in members],
            "pairs": [_compare("factorial", k1, k2, cells, boot)
                      for i, (k1, _) in enumerate(members) for k2, _ in members[i + 1:]],
        })
    return out


__all__ = ["ERRORED", "LABELS", "OK", "Options", "SCHEMA", "TAMPERED", "TIMED_OUT", "build", "cell_order"]
