"""A flywheel run's outputs: ``run.json``, ``curve.png``, ``curve.html`` and the
printed summary, all drawn from the run document alone.

``run.json`` holds no timings or paths of this machine beyond the task file
as given, so the same run (or a resumed one) writes the same bytes. The
figure uses matplotlib's Agg canvas (no pyplot, no global backend switch);
the HTML page embeds it as base64 and loads nothing from anywhere.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from glyph.report.plots import figure, legend_below, png


def pct(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{nd}f}%"


def pp(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:+.{nd}f}"


def interval_label(doc: dict) -> str:
    """What the curve's per-round interval is, for a legend or caption."""
    iv = doc.get("curve_interval")
    if not iv:
        return "no per-round interval (the measurement's size is unknown)"
    if iv["method"] == "wilson":
        return f"{round(100 * iv['level'])}% Wilson interval"
    return "95% interval (recorded)" if iv["method"] == "recorded" else iv["method"]


def _step(xs: list, ys: list) -> tuple[list, list]:
    """A step line's points, the last level drawn on to the edge of its round."""
    return xs + [xs[-1] + 0.45], ys + [ys[-1]]


def _err(points: list[dict], value: str, lo: str, hi: str) -> tuple[list, list, list]:
    """(x, y, [below, above]) in pp for the points that have ``value`` and its interval."""
    pts = [c for c in points if c.get(value) is not None and c.get(lo) is not None and c.get(hi) is not None]
    ys = [100 * c[value] for c in pts]
    return ([c["round"] for c in pts], ys,
            [[max(0.0, y - 100 * c[lo]) for y, c in zip(ys, pts)], [max(0.0, 100 * c[hi] - y) for y, c in zip(ys, pts)]])


def draw_curve(ax, doc: dict, *, label: str | None = "accepted holdout rate", details: bool = True,
               colour: str = "#1f77b4") -> None:
    """The accepted level per round as a step line, with its per-round
    interval (``lo``/``hi``): error bars with ``details``, else a shaded band
    in the line's colour (for overlaying runs). With ``details``, each
    candidate as a point (filled: kept) with its own interval, and the noise
    band as a shaded region above the level it had to clear."""
    curve = doc["curve"]
    xs = [c["round"] for c in curve if c["accepted"] is not None]
    ys = [100 * c["accepted"] for c in curve if c["accepted"] is not None]
    if xs:
        ax.step(*_step(xs, ys), where="post", color=colour, lw=2, label=label)
    ix, iy, yerr = _err(curve, "accepted", "lo", "hi")
    if not details:
        if ix:
            lo, hi = [y - b for y, b in zip(iy, yerr[0])], [y + a for y, a in zip(iy, yerr[1])]
            ax.fill_between(*_step(ix, lo), _step(ix, hi)[1], step="post", color=colour, alpha=0.15, lw=0)
        return
    if ix:
        ax.errorbar(ix, iy, yerr=yerr, fmt="none", ecolor=colour, capsize=4, alpha=0.7,
                    label=f"accepted level, {interval_label(doc)}")
    tx, ty, terr = _err(curve, "accepted", "task_lo", "task_hi")
    if tx:
        bars = ax.errorbar([x - 0.12 for x in tx], ty, yerr=terr, fmt="none", ecolor=colour, capsize=2, lw=1,
                           alpha=0.9, label="accepted level, 95% over tasks (cluster bootstrap)")
        bars[-1][0].set_linestyle(":")
    first = True
    for c in curve[1:]:
        if c.get("band_pp") is None or c.get("level_before") is None:
            continue
        lo = 100 * c["level_before"]
        ax.fill_between([c["round"] - 0.4, c["round"] + 0.4], lo, lo + c["band_pp"], color="#999999",
                        alpha=0.3, lw=0, label="noise band above the level" if first else None)
        first = False
    zero = {les["round"] for les in doc.get("lessons", []) if les["kept"] and les.get("paired_includes_zero")}
    for kind, style in (("kept", {"color": "#2ca02c", "marker": "o", "label": "candidate, kept"}),
                        ("zero", {"color": "#ff7f0e", "marker": "D",
                                  "label": "candidate, kept; its paired CI includes 0"}),
                        ("rejected", {"color": "#d62728", "marker": "x", "label": "candidate, rejected"})):
        pts = [c for c in curve[1:] if c["candidate"] is not None and _kind(c, zero) == kind]
        if pts:
            ax.scatter([c["round"] + 0.12 for c in pts], [100 * c["candidate"] for c in pts], zorder=3, s=40,
                       **style)
            cx, cy, cerr = _err(pts, "candidate", "candidate_lo", "candidate_hi")
            if cx:
                ax.errorbar([x + 0.12 for x in cx], cy, yerr=cerr, fmt="none", ecolor=style["color"], capsize=3,
                            alpha=0.6, lw=1)


def _kind(point: dict, zero: set[int]) -> str:
    """How a candidate is drawn: ``kept``, ``zero`` (kept, its paired interval includes 0) or ``rejected``."""
    if not point["kept"]:
        return "rejected"
    return "zero" if point["round"] in zero else "kept"


def curve_png(doc: dict) -> bytes:
    fig = figure(7.5, 5.2)
    ax = fig.add_subplot()
    draw_curve(ax, doc)
    ax.set_xlabel("round")
    ax.set_ylabel("holdout pass rate (%)")
    ax.set_title(f"Flywheel: {pct(doc['baseline'])} -> {pct(doc['final'])} "
                 f"(K={doc['K']}, {doc['n_holdout']} holdout tasks, band {doc['noise_band_pp']:.1f} pp, "
                 f"gate {doc['gate']})", fontsize=10)
    ax.set_xticks(range(len(doc["curve"])))
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    legend_below(fig)
    return png(fig)


def _bound(x: float | None, infinite: str) -> str:
    return infinite if x is None else f"{x:+.1f}"


KEPT_BUT_ZERO = "kept; paired CI includes 0"


def verdict(les: dict) -> str:
    """A lesson's verdict, marking a kept lesson whose paired interval includes 0."""
    if les.get("error"):
        return "writer failed: " + les["error"]
    if not les["kept"]:
        return "rejected"
    return KEPT_BUT_ZERO if les.get("paired_includes_zero") else "kept"


def lesson_rows(doc: dict) -> list[list[str]]:
    return [[str(les["round"]), les["mode"], les["text"], _num(les["cluster_size"]),
             pct(les.get("candidate")), pp(les["gain_pp"]), verdict(les)] for les in doc["lessons"]]


LESSON_COLUMNS = ["round", "mode / cluster", "lesson", "failures", "candidate", "gain (pp)", "verdict"]
GATE_COLUMNS = ["round", "gain (pp)", "formula", "two-rate", "paired [95% CI]", "A/A", "decided by", "gates"]
GATE_LABELS = {"formula": "formula", "two_rate": "two-rate", "paired": "paired", "aa": "A/A"}


def _word(keep: bool) -> str:
    return "keep" if keep else "reject"


def _gate_cell(name: str, d: dict | None, unavailable: str) -> str:
    """One gate's verdict: its band (or the paired interval) and keep/reject."""
    if d is None:
        return unavailable
    if name == "paired":
        if d.get("mean_pp") is None:
            return "-"
        return (f"{d['mean_pp']:+.1f} [{_bound(d['lo_pp'], '-inf')}, {_bound(d['hi_pp'], 'inf')}] "
                f"{_word(d['keep'])}")
    return f"{d['band_pp']:.1f} {_word(d['keep'])}"


def gate_rows(doc: dict) -> list[list[str]]:
    """Per round, every gate's decision side by side (``run.json``'s ``gates``), the one that decided,
    and whether they agree."""
    aa_missing = "not measured"
    paired_missing = "no per-task rates" if doc.get("imported") else "-"
    rows = []
    for les in doc["lessons"]:
        g = les.get("gates")
        if g is None:
            rows.append([str(les["round"]), pp(les["gain_pp"]), "-", "-", "-", "-",
                         GATE_LABELS.get(les.get("gated_by"), "-"),
                         "writer failed" if les.get("error") else "-"])
            continue
        notes = ["agree" if les.get("gates_agree") else "disagree"]
        if les.get("paired_includes_zero") and les["kept"]:
            notes.append("kept, paired CI includes 0")
        decided = f"{GATE_LABELS[les['gated_by']]}: {'kept' if les['kept'] else 'rejected'}"
        rows.append([str(les["round"]), pp(les["gain_pp"]), _gate_cell("formula", g["formula"], "-"),
                     _gate_cell("two_rate", g["two_rate"], "-"),
                     _gate_cell("paired", g["paired"], paired_missing), _gate_cell("aa", g["aa"], aa_missing),
                     decided, "; ".join(notes)])
    return rows


def gate_caption(doc: dict) -> str:
    """What the gates table holds, and which gate glyph recommends."""
    from glyph.flywheel.gate import WHY_RECOMMENDED

    n = sum(1 for les in doc["lessons"] if les.get("gates_agree") is False)
    zero = sum(1 for les in doc["lessons"] if les["kept"] and les.get("paired_includes_zero"))
    return (f"Every gate on every candidate, whatever gate decided: the band (pp) or the paired interval, "
            f"and keep or reject. The gates disagree on {n} round(s); {zero} kept lesson(s) have a paired "
            f"interval that includes 0. {WHY_RECOMMENDED}")


ASSUMPTION_COLUMNS = ["gate", "keeps a lesson when", "assumes", "this run"]


def assumption_rows(doc: dict) -> list[list[str]]:
    """Each gate's rule and what it assumes (``gate.ASSUMES``), and its part in this run."""
    from glyph.flywheel.gate import ASSUMES, DECISION_OF, RECOMMENDED

    gated = (doc.get("bands") or {}).get("gated_by") or DECISION_OF[doc["gate"]]
    measured = bool((doc.get("bands") or {}).get("aa"))
    rows = []
    for name, (rule, assumes) in ASSUMES.items():
        role = ("decided" if name == gated
                else "not measured" if name == "aa" and not measured else "reported")
        if name == DECISION_OF[RECOMMENDED]:
            role += "; glyph recommends it"
        rows.append([GATE_LABELS[name], rule, assumes, role])
    return rows


def interval(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"[{pct(lo)}, {pct(hi)}]"


CURVE_COLUMNS = ["round", "accepted level", "Wilson 95%", "over tasks 95%", "n", "candidate", "Wilson 95%",
                 "over tasks 95%", "n", "kept", "band (pp)"]


def _num(x) -> str:
    return "-" if x is None else str(x)


LESSON_CAPTION = ("gain: candidate rate minus the accepted level, over the tasks scored on both sides. "
                  "verdict: the deciding gate's; each gate's own is in the gates table.")


def curve_caption(doc: dict) -> str:
    iv = doc.get("curve_interval") or {}
    if iv.get("method") != "wilson":
        return (f"Per round: the accepted level and the candidate, each with its {interval_label(doc)}. "
                "band: the noise band the candidate's gain had to clear.")
    return ("Per round: the accepted level and the candidate, each over the n scored holdout rollouts it was "
            f"measured from, with two 95% intervals. Wilson: {iv['assumes']}, which understates the spread "
            "when a task's rollouts agree. Over tasks: a cluster bootstrap over tasks (2,000 resamples, "
            "each task drawn with all its rollouts): it counts that clustering, and assumes the tasks are "
            "draws from a population of tasks. band: the noise band the candidate's gain had to clear.")


def curve_rows(doc: dict) -> list[list[str]]:
    """The learning curve as table rows: each point's rate with its two intervals and count."""
    kept = {True: "kept", False: "rejected", None: "-"}
    return [[str(c["round"]), pct(c["accepted"]), interval(c.get("lo"), c.get("hi")),
             interval(c.get("task_lo"), c.get("task_hi")), _num(c.get("n")), pct(c["candidate"]),
             interval(c.get("candidate_lo"), c.get("candidate_hi")),
             interval(c.get("candidate_task_lo"), c.get("candidate_task_hi")), _num(c.get("candidate_n")),
             kept[c["kept"]], "-" if c.get("band_pp") is None else f"{c['band_pp']:.1f}"] for c in doc["curve"]]


def provenance(doc: dict) -> list[tuple[str, str]]:
    """Where a run's numbers come from (the page's foot line): the imported
    file, or the task file (its name and sha256), seed, agent and writer."""
    if doc.get("imported"):
        imp = doc["imported"]
        return [("imported from the original flywheel's", f"{imp['file']} (sha256 {imp['sha256'][:12]})")]
    tasks = Path(doc["tasks"]).name if doc.get("tasks") else "glyph's own conventions tasks"
    sha = f" (sha256 {doc['tasks_sha256'][:12]})" if doc.get("tasks_sha256") else ""
    return [("tasks", tasks + sha), ("seed", str(doc["seed"])), ("agent", doc["agent"]["kind"]),
            ("writer", doc["writer"]["kind"]), ("gate", doc["gate"])]


def html_page(title: str, intro: str, figures: list[tuple[str, bytes]],
              sections: list[tuple[str, list[str], list[list[str]], str]],
              foot: list[tuple[str, str]] = ()) -> str:
    """A flywheel page in the report's look (``glyph.report.page``): the intro
    (HTML), the figures, then each (title, columns, rows, caption) as a table."""
    from glyph.report import page

    body = f"<p>{intro}</p>{page.figures(figures)}" + "".join(
        page.section(name, columns, rows, 0, cap) for name, columns, rows, cap in sections)
    return page.document(title, body, page.provenance(foot) if foot else "")


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
        f"{ex['tasks_dropped']} task comparison(s) dropped, {ex['writer_failures']} writer failure(s). "
        f"{_disagreements(doc)}")


def _disagreements(doc: dict) -> str:
    """One sentence on the rounds where the gates disagree, naming the kept lessons the paired interval
    does not support."""
    split = [les for les in doc["lessons"] if les.get("gates_agree") is False]
    zero = [les for les in doc["lessons"] if les["kept"] and les.get("paired_includes_zero")]
    if not split:
        return "Every gate agreed on every candidate (the gates table below)."
    rounds = ", ".join(str(les["round"]) for les in split)
    text = f"The gates disagree on round(s) {rounds} (the gates table below)"
    if zero:
        text += (f"; kept although the paired interval includes 0: round(s) "
                 f"{', '.join(str(les['round']) for les in zero)}")
    return text + "."


def write_run(out: str | Path, doc: dict) -> dict[str, Path]:
    """``run.json``, ``curve.png`` and ``curve.html`` under ``out``."""
    out = Path(out)
    paths = {"json": out / "run.json", "png": out / "curve.png", "html": out / "curve.html"}
    paths["json"].write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    figures = []
    image = curve_png(doc)
    title = f"Learning curve: accepted level and candidates with their {interval_label(doc)}, and the noise band"
    if (doc.get("curve_interval") or {}).get("clustered"):
        title = ("Learning curve: accepted level and candidates with their 95% Wilson interval (solid) and "
                 "the accepted level's 95% interval over tasks (dotted), and the noise band")
    figures.append((title, image))
    if (doc.get("bands") or {}).get("aa"):
        from glyph.flywheel.noise import aa_png
        paths["aa_png"] = out / "aa.png"
        paths["aa_png"].write_bytes(aa_png(doc))
        figures.append(("Noise floor: A/A pair differences and the three bands", paths["aa_png"].read_bytes()))
    paths["png"].write_bytes(image)
    paths["html"].write_text(html_page(
        "glyph flywheel import" if doc.get("imported") else "glyph flywheel run", run_intro(doc), figures,
        [("Lessons", LESSON_COLUMNS, lesson_rows(doc), LESSON_CAPTION),
         ("Gate decisions", GATE_COLUMNS, gate_rows(doc), gate_caption(doc)),
         ("What each gate assumes", ASSUMPTION_COLUMNS, assumption_rows(doc), ""),
         ("Learning curve", CURVE_COLUMNS, curve_rows(doc), curve_caption(doc))],
        provenance(doc)), encoding="utf-8")
    return paths


def _kept_styles(doc: dict) -> list[str | None]:
    """Green for a kept lesson, yellow for one kept although its paired interval includes 0."""
    return ["yellow" if les["kept"] and les.get("paired_includes_zero") else "green" if les["kept"] else None
            for les in doc["lessons"]]


def summary_table(doc: dict):
    """The lessons as a terminal table (the HTML page's columns), laid out for the terminal's width
    (``glyph.report.terminal``: a lesson too long for a line is listed whole under the table)."""
    from glyph.report.tables import Table
    from glyph.report.terminal import render

    return render(Table("lessons", f"flywheel: {pct(doc['baseline'])} -> {pct(doc['final'])} "
                        f"({pp(doc['gain_pp'])} pp; band {doc['noise_band_pp']:.1f} pp, gate {doc['gate']}; "
                        f"stopped: {doc['stop']})", LESSON_COLUMNS, lesson_rows(doc), caption=LESSON_CAPTION,
                        keys=1, right_columns=(0, 3, 4, 5), styles=_kept_styles(doc)))


def gates_table(doc: dict):
    """Every gate's decision on every candidate, side by side, as a terminal table (the page's)."""
    from glyph.report.tables import Table
    from glyph.report.terminal import render

    return render(Table("gates", "every gate on every candidate", GATE_COLUMNS, gate_rows(doc),
                        caption=gate_caption(doc), keys=1, right_columns=(0, 1), styles=_kept_styles(doc)))
