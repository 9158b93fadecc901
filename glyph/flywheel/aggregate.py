"""Reports over several flywheel runs: ``replicate`` (the same configuration,
seeds seed..seed+R-1) and ``sweep`` (a run per K, and per seed).

Each is computed from the runs' ``run.json`` documents alone, so it can be
recomputed from a directory of finished runs. ``climbed`` means the final
holdout rate clears the baseline by more than the run's noise band. The
band-vs-K fit is least squares of ``band = c / sqrt(K)`` (``c =
sum(b/sqrt(K)) / sum(1/K)``); the band is the formula's, so its residuals
are zero unless excluded rollouts shrank a run's sample (the fit then shows
by how much).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Sequence

from glyph.flywheel.outputs import draw_curve
from glyph.report.plots import figure, png


def _spread(xs: Sequence[float | None]) -> dict:
    v = [x for x in xs if x is not None]
    if not v:
        return {"mean": None, "min": None, "max": None, "sd": None, "n": 0}
    return {"mean": round(statistics.fmean(v), 6), "min": min(v), "max": max(v),
            "sd": round(statistics.stdev(v), 6) if len(v) > 1 else None, "n": len(v)}


def climbed(doc: dict) -> bool | None:
    """final > baseline + band; ``None`` where the band is unknown (an imported run)."""
    if doc["noise_band_pp"] is None:
        return None
    return (doc["baseline"] is not None and doc["final"] is not None
            and doc["final"] > doc["baseline"] + doc["noise_band_pp"] / 100)


def keep_rates(docs: Sequence[dict]) -> dict[str, dict]:
    """Per lesson mode (or cluster signature): how often it was tried, kept, and the rate."""
    out: dict[str, dict] = {}
    for d in docs:
        for les in d["lessons"]:
            row = out.setdefault(les["mode"], {"tried": 0, "kept": 0})
            row["tried"] += 1
            row["kept"] += bool(les["kept"])
    for row in out.values():
        row["rate"] = round(row["kept"] / row["tried"], 6)
    return dict(sorted(out.items()))


def run_row(doc: dict, where: str) -> dict:
    return {"seed": doc["seed"], "K": doc["K"], "dir": where, "baseline": doc["baseline"], "final": doc["final"],
            "gain_pp": doc["gain_pp"], "noise_band_pp": doc["noise_band_pp"], "climbed": climbed(doc),
            "rounds": doc["rounds"], "kept": sum(bool(x["kept"]) for x in doc["lessons"]),
            "excluded": None if doc["excluded"] is None else doc["excluded"]["rollouts"], "stop": doc["stop"]}


def replicate_doc(docs: Sequence[dict], dirs: Sequence[str]) -> dict:
    gains = [d["gain_pp"] for d in docs]
    first = docs[0]
    return {
        "n_runs": len(docs), "K": first["K"], "gate": first["gate"], "n_holdout": first["n_holdout"],
        "n_train": first["n_train"], "agent": first["agent"], "writer": first["writer"],
        "runs": [run_row(d, w) for d, w in zip(docs, dirs)],
        "gain_pp": _spread(gains), "baseline": _spread([d["baseline"] for d in docs]),
        "final": _spread([d["final"] for d in docs]),
        "climbed": sum(climbed(d) for d in docs), "keep_rate_by_mode": keep_rates(docs),
    }


def band_fit(ks: Sequence[int], bands: Sequence[float]) -> dict:
    """Least squares ``band = c / sqrt(K)``: c and the largest relative residual."""
    c = sum(b / math.sqrt(k) for k, b in zip(ks, bands)) / sum(1 / k for k in ks)
    resid = [abs(b - c / math.sqrt(k)) / b for k, b in zip(ks, bands) if b]
    return {"c_pp": round(c, 6), "max_rel_residual": round(max(resid), 6) if resid else None,
            "fitted_pp": [round(c / math.sqrt(k), 4) for k in ks]}


def sweep_doc(by_k: dict[int, list[tuple[dict, str]]]) -> dict:
    ks = sorted(by_k)
    per_k = []
    for k in ks:
        docs = [d for d, _ in by_k[k]]
        per_k.append({"K": k, "runs": [run_row(d, w) for d, w in by_k[k]],
                      "baseline": _spread([d["baseline"] for d in docs]), "final": _spread([d["final"] for d in docs]),
                      "gain_pp": _spread([d["gain_pp"] for d in docs]),
                      "band_pp": statistics.fmean(d["noise_band_pp"] for d in docs),
                      "climbed": sum(climbed(d) for d in docs)})
    all_docs = [d for k in ks for d, _ in by_k[k]]
    first = all_docs[0]
    return {"K": ks, "n_runs_per_K": len(by_k[ks[0]]), "gate": first["gate"], "n_holdout": first["n_holdout"],
            "agent": first["agent"], "writer": first["writer"], "per_K": per_k,
            "band_fit": band_fit(ks, [p["band_pp"] for p in per_k]) | {"formula": "band_pp = c_pp / sqrt(K)"},
            "keep_rate_by_mode": keep_rates(all_docs)}


def replicate_png(docs: Sequence[dict], names: Sequence[str] | None = None, title: str | None = None) -> bytes:
    """The runs' accepted levels overlaid, labelled by seed (or by ``names``)."""
    from matplotlib import colormaps

    fig = figure(7.5, 4.2)
    ax = fig.add_subplot()
    cmap = colormaps["tab10"]
    for i, d in enumerate(docs):
        name = names[i] if names is not None else f"seed {d['seed']}"
        draw_curve(ax, d, label=f"{name}: {d['gain_pp']:+.1f} pp" if d["gain_pp"] is not None else name,
                   details=False, colour=cmap(i % 10))
    ax.set_xlabel("round")
    ax.set_ylabel("accepted holdout pass rate (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.set_title(title or f"{len(docs)} replicate runs (K={docs[0]['K']}, band {docs[0]['noise_band_pp']:.1f} pp)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def sweep_png(doc: dict) -> bytes:
    import numpy as np

    fig = figure(10, 4)
    a, b = fig.subplots(1, 2)
    ks = doc["K"]
    for p in doc["per_K"]:
        finals = [100 * r["final"] for r in p["runs"] if r["final"] is not None]
        a.scatter([p["K"]] * len(finals), finals, color="#1f77b4", alpha=0.4, s=18)
    means = [None if p["final"]["mean"] is None else 100 * p["final"]["mean"] for p in doc["per_K"]]
    a.plot(ks, [m if m is not None else np.nan for m in means], "o-", color="#1f77b4", label="final (mean)")
    base = [None if p["baseline"]["mean"] is None else 100 * p["baseline"]["mean"] for p in doc["per_K"]]
    a.plot(ks, [m if m is not None else np.nan for m in base], "s--", color="#7f7f7f", label="baseline (mean)")
    a.set_xlabel("K (rollouts per task)")
    a.set_ylabel("holdout pass rate (%)")
    a.set_ylim(0, 100)
    a.set_xticks(ks)
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    a.set_title("final vs K (points: runs)", fontsize=10)
    b.plot(ks, [p["band_pp"] for p in doc["per_K"]], "o", color="#d62728", label="noise band")
    grid = np.linspace(min(ks), max(ks), 100)
    c = doc["band_fit"]["c_pp"]
    b.plot(grid, c / np.sqrt(grid), "-", color="#555555", label=f"{c:.1f} / sqrt(K)")
    b.set_xlabel("K (rollouts per task)")
    b.set_ylabel("band (pp)")
    b.set_xticks(ks)
    b.grid(alpha=0.3)
    b.legend(fontsize=8)
    b.set_title("band vs K", fontsize=10)
    return png(fig)


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
