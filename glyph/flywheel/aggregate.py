"""Reports over several flywheel runs: ``replicate`` (the same configuration,
seeds seed..seed+R-1) and ``sweep`` (a run per K, and per seed).

Each is computed from the runs' ``run.json`` documents alone, so it can be
recomputed from a directory of finished runs. ``climbed`` means the final
holdout rate clears the baseline by more than the run's noise band. The
band-vs-K fit is least squares of ``band = c / sqrt(K)`` (``c =
sum(b/sqrt(K)) / sum(1/K)``) over the measured A/A bands (``glyph flywheel
aa``, or a run with ``--gate aa``: ``run.json``'s ``bands.aa_pp``), beside
the c the two-rate formula predicts. The formula band is ``c / sqrt(K)`` by
construction, so it is never fitted: a sweep with no A/A band at two K says
so and fits nothing.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Sequence

from glyph.flywheel.outputs import draw_curve
from glyph.report.plots import FONT, figure, legend_below, legend_under, png


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


CURVE_FIELDS = ("round", "accepted", "lo", "hi", "n")


def curve_arrays(doc: dict) -> dict:
    """A run's learning curve as parallel arrays: per round the accepted level,
    its per-round interval (``lo``, ``hi``; ``None`` where the run has none) and
    the scored count ``n``, with what the interval is (``interval``)."""
    return {f: [c.get(f) for c in doc["curve"]] for f in CURVE_FIELDS} | {"interval": doc.get("curve_interval")}


def run_row(doc: dict, where: str) -> dict:
    b = doc.get("bands") or {}
    return {"seed": doc["seed"], "K": doc["K"], "dir": where, "baseline": doc["baseline"], "final": doc["final"],
            "gain_pp": doc["gain_pp"], "noise_band_pp": doc["noise_band_pp"], "climbed": climbed(doc),
            "rounds": doc["rounds"], "kept": sum(bool(x["kept"]) for x in doc["lessons"]),
            "excluded": None if doc["excluded"] is None else doc["excluded"]["rollouts"], "stop": doc["stop"],
            "bands": {k: b.get(k) for k in ("formula_pp", "two_rate_pp", "aa_pp", "gated_by")},
            "curve": curve_arrays(doc)}


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


NO_AA_FIT = ("no band fitted: no measured A/A band at two or more K (run the sweep with --gate aa, or glyph "
             "flywheel aa per K); the formula band is c/sqrt(K) by construction, so fitting it would test "
             "nothing")


def _mean_band(docs: Sequence[dict], key: str) -> float | None:
    """The mean of ``docs``' band ``key`` (``bands[key]``, pp); None unless every one recorded it."""
    bands = [(d.get("bands") or {}).get(key) for d in docs]
    return None if not bands or None in bands else statistics.fmean(bands)


def aa_band_fit(per_k: Sequence[dict]) -> dict:
    """``aa_pp = c / sqrt(K)`` fitted to the measured A/A bands (``per_K``'s ``aa_pp``), with the c
    the two-rate formula predicts (``two_rate_c_pp``: its band times sqrt(K), the mean over those K);
    ``fitted_to`` None and ``why`` where fewer than two K have a measured band."""
    measured = [p for p in per_k if p.get("aa_pp") is not None]
    if len(measured) < 2:
        return {"fitted_to": None, "why": NO_AA_FIT, "K": [p["K"] for p in measured], "c_pp": None,
                "max_rel_residual": None, "fitted_pp": [], "two_rate_c_pp": None}
    ks = [p["K"] for p in measured]
    predicted = [p["two_rate_pp"] * math.sqrt(p["K"]) for p in measured if p.get("two_rate_pp") is not None]
    return band_fit(ks, [p["aa_pp"] for p in measured]) | {
        "fitted_to": "aa_pp", "formula": "aa_pp = c_pp / sqrt(K)", "K": ks,
        "two_rate_c_pp": round(statistics.fmean(predicted), 6) if predicted else None}


def sweep_doc(by_k: dict[int, list[tuple[dict, str]]]) -> dict:
    ks = sorted(by_k)
    per_k = []
    for k in ks:
        docs = [d for d, _ in by_k[k]]
        per_k.append({"K": k, "runs": [run_row(d, w) for d, w in by_k[k]],
                      "baseline": _spread([d["baseline"] for d in docs]), "final": _spread([d["final"] for d in docs]),
                      "gain_pp": _spread([d["gain_pp"] for d in docs]),
                      "band_pp": statistics.fmean(d["noise_band_pp"] for d in docs),
                      "two_rate_pp": _mean_band(docs, "two_rate_pp"),
                      "aa_pp": _mean_band(docs, "aa_pp"), "climbed": sum(climbed(d) for d in docs)})
    all_docs = [d for k in ks for d, _ in by_k[k]]
    first = all_docs[0]
    return {"K": ks, "n_runs_per_K": len(by_k[ks[0]]), "gate": first["gate"], "n_holdout": first["n_holdout"],
            "agent": first["agent"], "writer": first["writer"], "per_K": per_k,
            "band_fit": aa_band_fit(per_k), "keep_rate_by_mode": keep_rates(all_docs)}


def fit_text(fit: dict) -> str:
    """The band fit in a sentence: what was fitted to what, or why nothing was."""
    if fit["fitted_to"] is None:
        return fit["why"]
    predicted = ("" if fit["two_rate_c_pp"] is None
                 else f"; the two-rate formula predicts c = {fit['two_rate_c_pp']:.2f}")
    return (f"measured A/A band = {fit['c_pp']:.2f}/sqrt(K) pp over K = {', '.join(map(str, fit['K']))} "
            f"(largest "
            f"relative residual {_pp(fit['max_rel_residual'], '{:.3g}')}{predicted})")


def replicate_png(docs: Sequence[dict], names: Sequence[str] | None = None, title: str | None = None) -> bytes:
    """The runs' accepted levels overlaid, each with its per-round interval
    shaded in its colour, labelled by seed (or by ``names``)."""
    from matplotlib import colormaps

    fig = figure(7.5, 4.2)
    ax = fig.add_subplot()
    cmap = colormaps["tab10"]
    for i, d in enumerate(docs):
        name = names[i] if names is not None else f"seed {d['seed']}"
        draw_curve(ax, d, label=f"{name}: {d['gain_pp']:+.1f} pp" if d["gain_pp"] is not None else name,
                   details=False, colour=cmap(i % 10))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("accepted holdout pass rate (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    band = "" if docs[0]["noise_band_pp"] is None else f", band {docs[0]['noise_band_pp']:.1f} pp"
    ax.set_title((title or f"{len(docs)} replicate runs (K={docs[0]['K']}{band})")
                 + "; shaded: each level's 95% interval", fontsize=10)
    legend_below(fig)
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
    legend_under(a)
    a.set_title("final vs K (points: runs)", fontsize=10)
    b.plot(ks, [p["band_pp"] for p in doc["per_K"]], "s--", color="#7f7f7f", mfc="none",
           label="formula band (c/sqrt(K) by construction)")
    fit = doc["band_fit"]
    measured = [p for p in doc["per_K"] if p.get("aa_pp") is not None]
    if measured:
        b.plot([p["K"] for p in measured], [p["aa_pp"] for p in measured], "o", color="#d62728",
               label="measured A/A band")
    if fit["fitted_to"] is not None:
        grid = np.linspace(min(fit["K"]), max(fit["K"]), 100)
        b.plot(grid, fit["c_pp"] / np.sqrt(grid), "-", color="#d62728", alpha=0.6,
               label=f"fit to A/A: {fit['c_pp']:.1f} / sqrt(K)")
    else:
        b.text(0.5, 0.96, "no A/A band measured: nothing fitted", transform=b.transAxes, ha="center",
               va="top", fontsize=FONT, color="#555555")
    b.set_xlabel("K (rollouts per task)")
    b.set_ylabel("band (pp)")
    b.set_xticks(ks)
    b.grid(alpha=0.3)
    legend_under(b)
    b.set_title("band vs K", fontsize=10)
    return png(fig)


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- pages


def _pp(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


RUN_COLUMNS = ["run", "K", "seed", "baseline [95%]", "final [95%]", "gain (pp)", "formula band (pp)",
               "two-rate (pp)", "A/A (pp)", "gated by", "climbed", "kept", "rounds", "excluded"]
BANDS_CAPTION = ("baseline and final: the holdout rate with its per-round interval (the run's curve_interval: "
                 "95% Wilson over the scored rollouts; an imported run's as recorded). formula band: "
                 "1.96*sqrt(0.25/(n*K)), the band a gain had to clear under gate band; two-rate: sqrt(2) x "
                 "formula, the half-width of a difference of two rates; A/A: the measured noise floor (95% "
                 "quantile of |diff| between no-lesson re-rolls, gate aa only). climbed: final > baseline + "
                 "formula band.")


def run_rows(rows: Sequence[dict], names: Sequence[str] | None = None) -> list[list[str]]:
    """``run_row`` dicts as table rows: rates with their intervals, every band."""
    from glyph.flywheel.outputs import interval, pct

    out = []
    for i, r in enumerate(rows):
        c, b = r["curve"], r["bands"]
        yes = {True: "yes", False: "no", None: "-"}
        out.append([names[i] if names else r["dir"], _pp(r["K"], "{}"), _pp(r["seed"], "{}"),
                    f"{pct(r['baseline'])} {interval(c['lo'][0], c['hi'][0])}",
                    f"{pct(r['final'])} {interval(c['lo'][-1], c['hi'][-1])}", _pp(r["gain_pp"], "{:+.1f}"),
                    _pp(b["formula_pp"], "{:.2f}"), _pp(b["two_rate_pp"], "{:.2f}"), _pp(b["aa_pp"], "{:.2f}"),
                    b["gated_by"] or "-", yes[r["climbed"]], str(r["kept"]), str(r["rounds"]),
                    _pp(r["excluded"], "{}")])
    return out


def runs_table(title: str, rows: Sequence[dict], caption: str = BANDS_CAPTION):
    """``run_row`` dicts as a terminal table (replicate's and sweep's, the pages' columns), laid out
    for the terminal's width (``glyph.report.terminal``: split, never wrapped or cut)."""
    from glyph.report.tables import Table
    from glyph.report.terminal import render

    return render(Table("runs", title, RUN_COLUMNS, run_rows(rows), caption=caption, keys=1,
                        right_columns=(1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13)))


def _spread_text(s: dict, rate: bool = True) -> str:
    from glyph.flywheel.outputs import pct

    if s["mean"] is None:
        return "-"
    f = pct if rate else (lambda x: f"{x:+.1f}")
    return f"{f(s['mean'])} ({f(s['min'])} to {f(s['max'])})"


def replicate_html(rep: dict, png_bytes: bytes, names: Sequence[str] | None = None, title: str | None = None) -> str:
    """replicate.html: the overlaid curves with their intervals, the runs' numbers and bands, the keep rates."""
    from html import escape

    from glyph.flywheel.outputs import html_page

    climbed_text = "unknown (a run's band is unknown)" if rep["climbed"] is None else f"{rep['climbed']}/{rep['n_runs']}"
    intro = escape(f"{rep['n_runs']} run(s), K = {rep['K']}, {rep['n_holdout']} holdout tasks, gate {rep['gate']}. "
                   f"Baseline {_spread_text(rep['baseline'])}; final {_spread_text(rep['final'])}; gain "
                   f"{_spread_text(rep['gain_pp'], rate=False)} pp (mean, min to max); climbed {climbed_text}.")
    keep = [[mode, str(k["tried"]), str(k["kept"]), f"{100 * k['rate']:.0f}%"]
            for mode, k in rep["keep_rate_by_mode"].items()]
    foot = [("source", f"{len(rep['runs'])} run.json document(s): " + ", ".join(r["dir"] for r in rep["runs"]))]
    if rep.get("imported"):
        imp = rep["imported"]
        foot = [("imported from the original flywheel's", f"{imp['file']} (sha256 {imp['sha256'][:12]})")]
    return html_page(title or "glyph flywheel replicate", intro,
                     [("Accepted holdout rate per round, each run's 95% interval shaded", png_bytes)],
                     [("Runs", RUN_COLUMNS, run_rows(rep["runs"], names), BANDS_CAPTION),
                      ("Keep rate by lesson mode", ["mode", "tried", "kept", "rate"], keep, "")], foot)


PER_K_CAPTION = ("formula band: the mean over the K's runs of 1.96*sqrt(0.25/(n*K)) (fewer scored rollouts "
                 "widen it); A/A: the mean measured A/A band (every run of the K measured it; - where not); "
                 "fitted: the least-squares c/sqrt(K) through the A/A bands (- where nothing was fitted).")


def sweep_html(sw: dict, sweep_image: bytes, curves_image: bytes) -> str:
    """sweep.html: final and band vs K, every run's curve with its interval, the numbers per K and per run."""
    from html import escape

    from glyph.flywheel.outputs import html_page

    fit = sw["band_fit"]
    intro = escape(f"K = {', '.join(map(str, sw['K']))}; {sw['n_runs_per_K']} run(s) per K; {sw['n_holdout']} "
                   f"holdout tasks; gate {sw['gate']}. Band fit: {fit_text(fit)}.")
    fitted = dict(zip(fit["K"], fit["fitted_pp"]))
    per_k = [[str(p["K"]), str(len(p["runs"])), _spread_text(p["baseline"]), _spread_text(p["final"]),
              _spread_text(p["gain_pp"], rate=False), f"{p['band_pp']:.2f}", _pp(p.get("aa_pp"), "{:.2f}"),
              _pp(fitted.get(p["K"]), "{:.2f}"), str(p["climbed"])]
             for p in sw["per_K"]]
    runs = [r for p in sw["per_K"] for r in p["runs"]]
    keep = [[mode, str(k["tried"]), str(k["kept"]), f"{100 * k['rate']:.0f}%"]
            for mode, k in sw["keep_rate_by_mode"].items()]
    return html_page("glyph flywheel sweep", intro,
                     [("Final vs K, and the noise bands vs K (the measured A/A band's c/sqrt(K) fit where "
                       "measured)", sweep_image),
                      ("Accepted holdout rate per round for every run, each run's 95% interval shaded", curves_image)],
                     [("Per K", ["K", "runs", "baseline (mean, min to max)", "final (mean, min to max)", "gain (pp)",
                                 "formula band (pp)", "A/A (pp)", "fitted c/sqrt(K) (pp)", "climbed"], per_k,
                       PER_K_CAPTION),
                      ("Runs", RUN_COLUMNS, run_rows(runs), BANDS_CAPTION),
                      ("Keep rate by lesson mode", ["mode", "tried", "kept", "rate"], keep, "")],
                     [("source", f"{len(runs)} run.json document(s) under K<k>/run-<i>")])


def sweep_curves_png(by_k: dict[int, list[tuple[dict, str]]]) -> bytes:
    """Every run of a sweep overlaid (labelled K and seed), each with its interval shaded."""
    docs = [d for k in sorted(by_k) for d, _ in by_k[k]]
    names = [f"K={d['K']}, seed {d['seed']}" for d in docs]
    return replicate_png(docs, names, title=f"{len(docs)} sweep runs over K = {', '.join(map(str, sorted(by_k)))}")
