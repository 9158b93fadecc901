"""The original flywheel's result files (abhid1234/flywheel,
``integrations/daytona/learn/results/*.json``) read into glyph's documents,
so its published curve, replication and bands can be redrawn and set beside
a glyph run (``glyph flywheel import``).

Three schemas, told apart by their fields:

* a **run** (``rl-loop.mjs`` writes it, lines 120-125: ``experiment:
  "rl-on-trajectories"``, ``holdout``, ``train``, ``repeats`` (K),
  ``noise_band_pp``, ``baseline``, ``final``, ``policy``, ``curve`` (per
  round ``mean``, ``lo``, ``hi``, ``status``, ``gain``) and ``lessons``).
  Its gate is glyph's ``band`` gate: keep if ``gain > 1.96 *
  sqrt(0.25 / (holdout * K))`` (rl-loop.mjs:57 and :101), ``gain`` being the
  candidate's rate minus the accepted level, so a candidate's rate is the
  level before it plus its gain;
* a **replication** (``replication-report.mjs``'s ``aggregate``: ``agg``
  and ``runs``, each run ``baseline``, ``final``, ``lessons``, no K, no
  holdout size, no curve);
* a **credit** report (``credit-real.mjs``, lines 108 and 129-130:
  ``experiment: "credit-assignment-real"``, ``forks``, ``criticalStep``,
  ``located``, ``checkpoints`` with ``pass``/``forks``/``passRate``).

What it guarantees: a field the file does not hold is ``None`` and named
in ``imported.unknown`` (the seed, the exclusions, the stop reason, the
task file, per-task rates), never filled in; what is derived (a
candidate's rate, the formula and two-rate bands from ``holdout`` and
``repeats``, a replication run's curve from its lessons) is derived by the
original's own rules, and checked against what the file reports
(``imported.checks`` lists every disagreement). The paired gate needs
per-task rates, which none of these files hold: it is reported unavailable.
The source is named by its file name and sha256, never by its path.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from glyph.flywheel import gate as gates
from glyph.report.stats import wilson

PAIRED_UNAVAILABLE = "unavailable: the original's result files hold no per-task rates"
RUN_UNKNOWN = ("seed", "excluded", "stop", "tasks", "tasks_sha256", "paired", "agent.model", "writer.model")
TOL = 1e-9


class OriginalFormatError(ValueError):
    """A file that is none of the original's result schemas."""


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


def kind_of(src: dict) -> str:
    """``run``, ``replication`` or ``credit``."""
    if src.get("experiment") == "rl-on-trajectories" and "curve" in src and "repeats" in src:
        return "run"
    if isinstance(src.get("agg"), dict) and isinstance(src.get("runs"), list):
        return "replication"
    if src.get("experiment") == "credit-assignment-real" and "checkpoints" in src:
        return "credit"
    raise OriginalFormatError("not a result file of the original flywheel (expected a run with experiment "
                       "'rl-on-trajectories', a replication with agg and runs, or a credit report with "
                       "experiment 'credit-assignment-real')")


def load(path: str | Path) -> tuple[dict, dict]:
    """(the parsed file, its provenance: file name and sha256)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        src = json.loads(data)
    except ValueError as exc:
        raise OriginalFormatError(f"{path.name}: not JSON ({exc})") from exc
    if not isinstance(src, dict):
        raise OriginalFormatError(f"{path.name}: not a JSON object")
    return src, {"file": path.name, "sha256": hashlib.sha256(data).hexdigest()}


def _bands(n_holdout: int | None, K: int | None) -> dict:
    known = bool(n_holdout and K)
    n = (n_holdout or 0) * (K or 0)
    return {"formula_pp": _r(100 * gates.band_for(n), 4) if known else None,
            "two_rate_pp": _r(100 * gates.two_rate_band(n), 4) if known else None,
            "aa_pp": None, "aa": None, "gated_by": "formula"}


RECORDED_INTERVAL = {"method": "recorded", "level": None,
                     "of": "the accepted level's lo/hi as the original's curve records them"}
"""A run file's curve interval: the original's own (its method is not in the file)."""
NO_INTERVAL = {f"{p}{k}": None for p in ("", "candidate_") for k in ("lo", "hi", "n", "task_lo", "task_hi")}


def _recorded(c: dict) -> dict:
    """A curve point's interval fields: the accepted level's lo/hi as recorded, none for the candidate."""
    return NO_INTERVAL | {"lo": _r(c.get("lo")), "hi": _r(c.get("hi"))}


def _decisions(gain: float | None, band_pp: float | None) -> dict | None:
    """The gates a run file allows: the formula and two-rate bands from its gain; no paired comparison
    (no per-task rates in any file) and no A/A measurement."""
    if gain is None or band_pp is None:
        return None
    return gates.decisions(gain, band_pp / 100, None, None)


def run_doc(src: dict, provenance: dict) -> dict:
    """A run file as glyph's ``run.json`` document (plus ``imported``)."""
    K, n_holdout, n_train = src["repeats"], src["holdout"], src.get("train")
    band_pp = _bands(n_holdout, K)["formula_pp"]
    checks: list[str] = []
    reported = src.get("noise_band_pp")
    if reported is not None and abs(reported - band_pp) > 0.05 + 1e-9:
        checks.append(f"noise_band_pp {reported} recorded, the formula gives {band_pp:.2f} for "
                      f"holdout {n_holdout}, K {K}")
    curve_src = sorted(src["curve"], key=lambda c: c["round"])
    curve = [{"round": curve_src[0]["round"], "accepted": _r(curve_src[0]["mean"]), "candidate": None,
              "kept": None, "band_pp": None, **_recorded(curve_src[0])}]
    candidates: dict[int, float] = {}
    for prev, c in zip(curve_src, curve_src[1:]):
        kept = c.get("status") == "learned"
        cand = prev["mean"] + c["gain"] if c.get("gain") is not None else None
        candidates[c["round"]] = cand
        if kept and cand is not None and abs(cand - c["mean"]) > TOL:
            checks.append(f"round {c['round']}: kept, but level {prev['mean']:.6f} + gain {c['gain']:.6f} "
                          f"!= the recorded level {c['mean']:.6f}")
        if not kept and abs(c["mean"] - prev["mean"]) > TOL:
            checks.append(f"round {c['round']}: rejected, yet the level moved")
        if cand is not None and kept != (c["gain"] > band_pp / 100):
            checks.append(f"round {c['round']}: status {c.get('status')!r} disagrees with gain > band")
        decisions = _decisions(c.get("gain"), band_pp)
        curve.append({"round": c["round"], "accepted": _r(c["mean"]), "candidate": _r(cand), "kept": kept,
                      "level_before": _r(prev["mean"]), "band_pp": band_pp,
                      "decisions": None if decisions is None else gates.verdicts(decisions), **_recorded(c)})
    lessons = [{"round": les["round"], "mode": les["mode"], "text": les.get("lesson", ""),
                "cluster_size": les.get("cluster"), "candidate": _r(candidates.get(les["round"])),
                "gain_pp": _r(100 * les["gain"], 4) if les.get("gain") is not None else None,
                "band_pp": band_pp, "paired": None, "kept": les.get("status") == "learned", "error": ""}
               | gates.lesson_fields(_decisions(les.get("gain"), band_pp), "band")
               for les in sorted(src.get("lessons", []), key=lambda x: x["round"])]
    baseline, final = src["baseline"], src["final"]
    gain_pp = _r(100 * (final - baseline), 4)
    if src.get("gain_pp") is not None and abs(src["gain_pp"] - gain_pp) > 0.05 + 1e-9:
        checks.append(f"gain_pp {src['gain_pp']} recorded, final - baseline is {gain_pp:.2f}")
    if abs(curve[-1]["accepted"] - final) > 1e-6:
        checks.append("the curve's last level is not the recorded final")
    return {
        "baseline": _r(baseline), "final": _r(final), "gain_pp": gain_pp, "noise_band_pp": band_pp,
        "K": K, "n_holdout": n_holdout, "n_train": n_train, "gate": "band", "seed": None,
        "agent": {"kind": src.get("agent"), "base_url": None, "model": None, "p_lucky": None, "p_slip": None},
        "writer": {"kind": src.get("lesson_writer"), "base_url": None, "model": None},
        "excluded": None, "rounds": len(curve) - 1, "stop": None,
        "kept_lessons": [p["text"] for p in src.get("policy", [])],
        "lessons": lessons, "curve": curve, "curve_interval": RECORDED_INTERVAL, "tasks": None,
        "tasks_sha256": None, "bands": _bands(n_holdout, K),
        "imported": provenance | {
            "schema": "run", "backend": src.get("backend"), "unknown": list(RUN_UNKNOWN), "paired": PAIRED_UNAVAILABLE,
            "reported": {k: src.get(k) for k in ("noise_band_pp", "gain_pp", "lessons_kept")},
            "interval": "curve lo/hi as recorded (the original's per-round interval on the pooled rate)",
            "checks": checks},
    }


def _same_run(run: dict, doc: dict) -> bool:
    if abs(run["baseline"] - doc["baseline"]) > 1e-6 or abs(run["final"] - doc["final"]) > 1e-6:
        return False
    mine = [(les["round"], les["mode"], les["kept"]) for les in doc["lessons"]]
    theirs = [(les["round"], les["mode"], les.get("status") == "learned") for les in run.get("lessons", [])]
    return mine == theirs


def _partial_run(run: dict) -> dict:
    """A replication run with no run file of its own: its curve rebuilt from its
    lessons by the original's rule (a kept lesson moves the level by its gain)."""
    level = run["baseline"]
    curve = [{"round": 0, "accepted": _r(level), "candidate": None, "kept": None, "band_pp": None} | NO_INTERVAL]
    lessons = []
    for les in sorted(run.get("lessons", []), key=lambda x: x["round"]):
        kept = les.get("status") == "learned"
        cand = level + les["gain"]
        lessons.append({"round": les["round"], "mode": les["mode"], "text": les.get("lesson", ""),
                        "cluster_size": les.get("cluster"), "candidate": _r(cand), "gain_pp": _r(100 * les["gain"], 4),
                        "band_pp": None, "paired": None, "kept": kept, "error": ""}
                       | gates.lesson_fields(None, "band"))
        before = level
        level = cand if kept else level
        curve.append({"round": les["round"], "accepted": _r(level), "candidate": _r(cand), "kept": kept,
                      "level_before": _r(before), "band_pp": None, "decisions": None} | NO_INTERVAL)
    return {"baseline": _r(run["baseline"]), "final": _r(run["final"]),
            "gain_pp": _r(100 * (run["final"] - run["baseline"]), 4), "noise_band_pp": None, "K": None,
            "n_holdout": None, "n_train": None, "gate": "band", "seed": None, "agent": None, "writer": None,
            "excluded": None, "rounds": len(curve) - 1, "stop": None, "lessons": lessons, "curve": curve,
            "curve_interval": None, "bands": _bands(None, None)}


def replicate_doc(src: dict, provenance: dict, runs: dict[str, dict]) -> tuple[dict, list[dict], list[str]]:
    """A replication file as glyph's ``replicate.json`` document, each of its runs
    matched to a run file imported beside it (same baseline, final and lessons)
    where there is one; returns (document, the run documents, their names)."""
    from glyph.flywheel.aggregate import _spread, keep_rates, run_row

    docs, names, checks = [], [], []
    for i, run in enumerate(src["runs"]):
        match = next((name for name, d in runs.items() if name not in names and _same_run(run, d)), None)
        docs.append(runs[match] if match else _partial_run(run))
        names.append(match or f"run {i + 1} (no run file imported: K, holdout and band unknown)")
        if abs(docs[-1]["curve"][-1]["accepted"] - run["final"]) > 1e-6:
            checks.append(f"run {i + 1}: the lessons' gains do not lead to the recorded final")
    agg = src["agg"]
    for what in ("baseline", "final"):
        vals = [d[what] for d in docs]
        if agg.get(what, {}).get("mean") is not None and abs(sum(vals) / len(vals) - agg[what]["mean"]) > 1e-6:
            checks.append(f"agg.{what}.mean {agg[what]['mean']} differs from the runs' mean")
    rows = []
    for d, name in zip(docs, names):
        row = run_row(d, name)
        rows.append(row)
    known = [r["climbed"] for r in rows]
    Ks = sorted({d["K"] for d in docs if d["K"] is not None})
    first = docs[0]
    doc = {
        "n_runs": len(docs), "K": Ks[0] if len(Ks) == 1 and all(d["K"] for d in docs) else (Ks or None),
        "gate": "band", "n_holdout": first["n_holdout"], "n_train": first["n_train"], "agent": first["agent"],
        "writer": first["writer"], "runs": rows, "gain_pp": _spread([d["gain_pp"] for d in docs]),
        "baseline": _spread([d["baseline"] for d in docs]), "final": _spread([d["final"] for d in docs]),
        "climbed": None if None in known else sum(known), "keep_rate_by_mode": keep_rates(docs),
        "imported": provenance | {"schema": "replication", "matched_run_files": [n for n in names if n in runs],
                                  "reported": agg, "paired": PAIRED_UNAVAILABLE, "checks": checks},
    }
    return doc, docs, names


def credit_doc(src: dict, provenance: dict) -> dict:
    """A credit report: the pass rate after each step with its Wilson interval."""
    rows, checks = [], []
    for c in sorted(src["checkpoints"], key=lambda c: c["checkpoint"]):
        lo, hi = wilson(c["pass"], c["forks"]) or (None, None)
        if c.get("passRate") is not None and abs(c["passRate"] - c["pass"] / c["forks"]) > TOL:
            checks.append(f"checkpoint {c['checkpoint']}: passRate is not pass / forks")
        rows.append({"step": c["checkpoint"], "forks": c["forks"], "passes": c["pass"],
                     "pass_rate": _r(c["pass"] / c["forks"]), "wilson_lo": _r(lo), "wilson_hi": _r(hi)})
    return {"steps": src.get("steps"), "forks": src.get("forks"), "continuation": src.get("continuation"),
            "critical_step": src.get("criticalStep"), "located": src.get("located"), "checkpoints": rows,
            "imported": provenance | {"schema": "credit", "backend": src.get("backend"), "checks": checks}}


# ---------------------------------------------------------------- pictures


def bands_doc(runs: dict[str, dict]) -> dict:
    """Per imported run: K, holdout size, the recorded band, the formula and two-rate bands."""
    return {"runs": [{"run": name, "K": d["K"], "n_holdout": d["n_holdout"],
                      "recorded_pp": d["imported"]["reported"]["noise_band_pp"],
                      "formula_pp": d["bands"]["formula_pp"], "two_rate_pp": d["bands"]["two_rate_pp"],
                      "aa_pp": None} for name, d in runs.items()],
            "aa": "not measured: the original's files hold no A/A re-rolls"}


def bands_png(doc: dict) -> bytes:
    import numpy as np

    from glyph.report.plots import figure, legend_below, png

    fig = figure(7.0, 4.0)
    ax = fig.add_subplot()
    rows = [r for r in doc["runs"] if r["K"]]
    ax.scatter([r["K"] for r in rows], [r["recorded_pp"] for r in rows], color="#d62728", zorder=3, s=40,
               label="recorded noise_band_pp")
    for n in sorted({r["n_holdout"] for r in rows}):
        ks = [r["K"] for r in rows if r["n_holdout"] == n]
        grid = np.linspace(max(1, min(ks) - 2), max(ks) + 4, 100)
        ax.plot(grid, 100 * 1.96 * np.sqrt(0.25 / (n * grid)), "--", color="#7f7f7f",
                label=f"formula 1.96*sqrt(0.25/({n}K))")
        ax.plot(grid, 100 * 1.96 * np.sqrt(0.5 / (n * grid)), "-.", color="#1f77b4",
                label=f"two-rate (sqrt(2) x formula), n={n}")
    ax.set_xlabel("K (rollouts per task)")
    ax.set_ylabel("band (pp)")
    ax.grid(alpha=0.3)
    legend_below(fig)
    ax.set_title("The original's noise bands, recorded and by formula (no A/A measured)", fontsize=10)
    return png(fig)


def credit_png(doc: dict) -> bytes:
    from glyph.report.plots import figure, legend_below, png

    fig = figure(7.0, 4.0)
    ax = fig.add_subplot()
    steps = [c["step"] for c in doc["checkpoints"]]
    rates = [100 * c["pass_rate"] for c in doc["checkpoints"]]
    lo = [100 * (c["pass_rate"] - c["wilson_lo"]) for c in doc["checkpoints"]]
    hi = [100 * (c["wilson_hi"] - c["pass_rate"]) for c in doc["checkpoints"]]
    ax.errorbar(steps, rates, yerr=[lo, hi], fmt="o-", capsize=4, color="#1f77b4",
                label=f"pass rate of {doc['forks']} forks (Wilson 95%)")
    if doc.get("located") is not None:
        ax.axvline(doc["located"] + 0.5, color="#d62728", ls="--", label=f"located: step {doc['located']} (0-based; between checkpoints "
                   f"{doc['located']} and {doc['located'] + 1})")
    ax.set_xlabel("checkpoint k (the state after k steps), continued by forks")
    ax.set_ylabel("pass rate (%)")
    ax.set_ylim(-5, 105)
    ax.set_xticks(steps)
    ax.grid(alpha=0.3)
    legend_below(fig, ncols=1)
    ax.set_title(f"The original's credit run: critical step {doc['critical_step']}, located {doc['located']}",
                 fontsize=10)
    return png(fig)
