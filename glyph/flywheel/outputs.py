"""A flywheel run's outputs: ``run.json``, ``curve.png``, ``curve.html`` and the
printed summary, all drawn from the run document alone.

``run.json`` holds no timings or paths of this machine beyond the task file
as given, so the same run (or a resumed one) writes the same bytes. The
figure uses matplotlib's Agg canvas (no pyplot, no global backend switch);
the HTML page embeds it as base64 and loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

from glyph.report.plots import figure, png


def pct(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{nd}f}%"


def pp(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:+.{nd}f}"


def draw_curve(ax, doc: dict, *, label: str | None = "accepted holdout rate", details: bool = True,
               colour: str = "#1f77b4") -> None:
    """The accepted level per round as a step line; with ``details``, each
    candidate as a point (filled: kept) and the band as a shaded region
    above the level it had to clear."""
    curve = doc["curve"]
    xs = [c["round"] for c in curve if c["accepted"] is not None]
    ys = [100 * c["accepted"] for c in curve if c["accepted"] is not None]
    if xs:  # the last level drawn on to the edge of its round
        ax.step(xs + [xs[-1] + 0.45], ys + [ys[-1]], where="post", color=colour, lw=2, label=label)
    if not details:
        return
    iv = [c for c in curve if c.get("lo") is not None and c.get("hi") is not None and c["accepted"] is not None]
    if iv:  # a per-round interval on the accepted level, where the document has one (an imported run)
        ax.errorbar([c["round"] for c in iv], [100 * c["accepted"] for c in iv],
                    yerr=[[100 * (c["accepted"] - c["lo"]) for c in iv], [100 * (c["hi"] - c["accepted"]) for c in iv]],
                    fmt="none", ecolor=colour, capsize=4, alpha=0.7, label="accepted level, 95% interval (recorded)")
    first = True
    for c in curve[1:]:
        if c.get("band_pp") is None or c.get("level_before") is None:
            continue
        lo = 100 * c["level_before"]
        ax.fill_between([c["round"] - 0.4, c["round"] + 0.4], lo, lo + c["band_pp"], color="#999999",
                        alpha=0.3, lw=0, label="noise band above the level" if first else None)
        first = False
    for kept, style in ((True, dict(color="#2ca02c", marker="o", label="candidate, kept")),
                        (False, dict(color="#d62728", marker="x", label="candidate, rejected"))):
        pts = [(c["round"], 100 * c["candidate"]) for c in curve[1:]
               if c["candidate"] is not None and bool(c["kept"]) is kept]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], zorder=3, s=40, **style)


def curve_png(doc: dict) -> bytes:
    fig = figure(7.5, 4.2)
    ax = fig.add_subplot()
    draw_curve(ax, doc)
    ax.set_xlabel("round")
    ax.set_ylabel("holdout pass rate (%)")
    ax.set_title(f"Flywheel: {pct(doc['baseline'])} -> {pct(doc['final'])} "
                 f"(K={doc['K']}, {doc['n_holdout']} holdout tasks, band {doc['noise_band_pp']:.1f} pp, "
                 f"gate {doc['gate']})", fontsize=10)
    ax.set_xticks(range(0, len(doc["curve"])))
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def _css() -> str:
    from glyph.report.html import CSS
    return CSS


def _bound(x: float | None, infinite: str) -> str:
    return infinite if x is None else f"{x:+.1f}"


def lesson_rows(doc: dict) -> list[list[str]]:
    rows = []
    for les in doc["lessons"]:
        p = les.get("paired")
        paired = "-" if not p or p["mean_pp"] is None else (
            f"{p['mean_pp']:+.1f} [{_bound(p['lo_pp'], '-inf')}, {_bound(p['hi_pp'], 'inf')}]")
        verdict = "kept" if les["kept"] else ("writer failed: " + les["error"] if les.get("error") else "rejected")
        rows.append([str(les["round"]), les["mode"], les["text"], str(les["cluster_size"]),
                     pct(les.get("candidate")), pp(les["gain_pp"]),
                     "-" if les["band_pp"] is None else f"{les['band_pp']:.1f}", paired, verdict])
    return rows


LESSON_COLUMNS = ["round", "mode / cluster", "lesson", "failures", "candidate", "gain (pp)", "band (pp)",
                  "paired mean [95% CI] (pp)", "verdict"]


def html_page(title: str, intro: str, figures: list[tuple[str, bytes]], columns: list[str],
              rows: list[list[str]], caption: str = "") -> str:
    figs = "".join(f"<figure><figcaption>{escape(name)}</figcaption>"
                   f"<img alt='{escape(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
                   "</figure>" for name, png in figures)
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if rows else "<p>(none)</p>"
    cap = f"<p class=caption>{escape(caption)}</p>" if caption else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_css()}</style></head><body><h1>{escape(title)}</h1><p>{intro}</p>{figs}"
            f"<h2>Lessons</h2>{table}{cap}</body></html>\n")


def _bands_text(doc: dict) -> str:
    b = doc.get("bands")
    if not b:
        return ""
    aa = "not measured" if b.get("aa_pp") is None else f"{b['aa_pp']:.2f} pp ({b['aa']['runs']} re-rolls)"
    return f" (two-rate {b['two_rate_pp']:.2f} pp, A/A {aa}; gated by {b['gated_by']})"


def imported_intro(doc: dict) -> str:
    imp = doc["imported"]
    checks = "; ".join(imp["checks"]) or "none"
    return escape(
        f"Imported from the original flywheel's {imp['file']} (sha256 {imp['sha256'][:12]}): holdout pass rate "
        f"{pct(doc['baseline'])} -> {pct(doc['final'])} ({pp(doc['gain_pp'])} pp) over {doc['rounds']} round(s). "
        f"K = {doc['K']}, {doc['n_holdout']} holdout and {doc['n_train']} train tasks; agent "
        f"{doc['agent']['kind']}, writer {doc['writer']['kind']}. Noise band recorded "
        f"{imp['reported']['noise_band_pp']} pp; formula {doc['noise_band_pp']:.2f} pp{_bands_text(doc)}. "
        f"Paired gate: {imp['paired']}. Unknown (not in the file): {', '.join(imp['unknown'])}. "
        f"Disagreements with what the file reports: {checks}.")


def run_intro(doc: dict) -> str:
    if doc.get("imported"):
        return imported_intro(doc)
    ex = doc["excluded"]
    return escape(
        f"Holdout pass rate {pct(doc['baseline'])} -> {pct(doc['final'])} ({pp(doc['gain_pp'])} pp) over "
        f"{doc['rounds']} round(s); stopped: {doc['stop']}. K = {doc['K']} rollouts per task, "
        f"{doc['n_holdout']} holdout and {doc['n_train']} train tasks; noise band "
        f"1.96*sqrt(0.25/(n*K)) = {doc['noise_band_pp']:.2f} pp{_bands_text(doc)}; gate: {doc['gate']}; "
        f"seed {doc['seed']}; "
        f"agent {doc['agent']['kind']}{' ' + doc['agent']['model'] if doc['agent']['model'] else ''}, "
        f"writer {doc['writer']['kind']}{' ' + doc['writer']['model'] if doc['writer']['model'] else ''}. "
        f"Excluded (model calls failed after retries, never scored): {ex['rollouts']} rollout(s), "
        f"{ex['tasks_dropped']} task comparison(s) dropped, {ex['writer_failures']} writer failure(s).")


def write_run(out: str | Path, doc: dict) -> dict[str, Path]:
    """``run.json``, ``curve.png`` and ``curve.html`` under ``out``."""
    out = Path(out)
    paths = {"json": out / "run.json", "png": out / "curve.png", "html": out / "curve.html"}
    paths["json"].write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    figures = []
    image = curve_png(doc)
    figures.append(("Learning curve: accepted level, candidates and the band", image))
    if (doc.get("bands") or {}).get("aa"):
        from glyph.flywheel.noise import aa_png
        paths["aa_png"] = out / "aa.png"
        paths["aa_png"].write_bytes(aa_png(doc))
        figures.append(("Noise floor: A/A pair differences and the three bands", paths["aa_png"].read_bytes()))
    paths["png"].write_bytes(image)
    paths["html"].write_text(html_page(
        "glyph flywheel import" if doc.get("imported") else "glyph flywheel run", run_intro(doc), figures,
        LESSON_COLUMNS, lesson_rows(doc),
        "gain: candidate rate minus the accepted level, over the tasks scored on both sides. band: "
        "1.96*sqrt(0.25/N) for the N scored candidate rollouts. paired: per-task difference, t interval "
        "over tasks."), encoding="utf-8")
    return paths


def summary_table(doc: dict):
    """The lessons as a terminal table (the lesson text last, cut to the width left)."""
    from rich.table import Table

    t = Table(title=f"flywheel: {pct(doc['baseline'])} -> {pct(doc['final'])} ({pp(doc['gain_pp'])} pp; "
                    f"band {doc['noise_band_pp']:.1f} pp, gate {doc['gate']}; stopped: {doc['stop']})")
    t.caption = "gain, band, lo (the paired 95% lower bound): percentage points; fails: failed train rollouts"
    for c in ("rd", "cluster", "fails", "cand", "gain", "band", "lo", "verdict"):
        t.add_column(c, no_wrap=True, min_width=min(len(c), 8),
                     justify="left" if c in ("cluster", "verdict") else "right")
    t.add_column("lesson", overflow="fold", ratio=1, min_width=20)
    for les, row in zip(doc["lessons"], lesson_rows(doc)):
        p = les.get("paired") or {}
        lo = "-" if p.get("mean_pp") is None else _bound(p.get("lo_pp"), "-inf")
        verdict = "kept" if les["kept"] else ("writer failed" if les.get("error") else "rejected")
        t.add_row(row[0], row[1], row[3], row[4], row[5], row[6], lo, verdict, row[2],
                  style="green" if les["kept"] else None)
    return t
