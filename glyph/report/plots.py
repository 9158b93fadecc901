"""The report's figures as PNG bytes, drawn from the report document alone
with matplotlib's Agg canvas (no pyplot, no display, no global backend
switch, so importing this never changes a user's matplotlib session).

pass@1 by arm and seed with intervals; the REVISE split; the confusion
heatmap; calibration of the predictions (prediction share against base rate,
and per-class precision); tool-call distributions by decision. Per-cell
figures cover the first :data:`MAX_CELLS` cells that have the data; the
tables cover all.
"""

from __future__ import annotations

import io

from glyph.report.tables import arm_text, cell_name, show

MAX_CELLS = 8
ARM_COLOURS = {"a": "#1f77b4", "b": "#d62728", None: "#7f7f7f"}
FONT = 9
"""The smallest text in a figure, in points: tick labels, counts, legends, annotations."""
NEVER = "#bbbbbb"
"""A class the agent never predicted: a hatched grey bar, labelled so (its precision is undefined, not 0%)."""


def figure(width: float, height: float):
    """A constrained-layout Agg figure (no pyplot state): every plot glyph draws starts here."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def wrapped(label: str, width: int = 18) -> str:
    """``label`` on lines of at most ``width`` characters (at underscores and spaces where it can), every
    character kept: a tick label is never cut."""
    import textwrap

    if len(label) <= width:
        return label
    lines = textwrap.wrap(label.replace("_", "_ "), width, break_on_hyphens=False)  # a break after "_" too
    return "\n".join(lines).replace("_ ", "_")


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _err(p: dict) -> tuple[float, float, float]:
    v = p["value"] or 0.0
    lo, hi = p["ci"] or (v, v)
    return 100 * v, max(0.0, 100 * (v - lo)), max(0.0, 100 * (hi - v))  # rounding can put v a hair outside


def figures(doc: dict) -> list[tuple[str, bytes]]:
    """(title, PNG) for every figure the document has data for."""
    return [(title, png(fig)) for title, fig in figure_objects(doc)]


def figure_objects(doc: dict) -> list[tuple[str, object]]:
    """(title, matplotlib Figure) for every figure the document has data for."""

    def first(cells: list[dict]) -> tuple[list[dict], str]:
        more = (
            f" (the first {MAX_CELLS} of {len(cells)} cells; the tables have all)"
            if len(cells) > MAX_CELLS
            else ""
        )
        return cells[:MAX_CELLS], more

    out = [("pass@1 by arm, seed and checkpoint (95% Wilson)", _pass(doc))]
    split, more = first([c for c in doc["cells"] if c["revise_split"]])
    if split:
        out.append(
            (
                "Arm B: pass@1 of trajectories that never / ever chose REVISE (95% Wilson)" + more,
                _split(split),
            )
        )
    confused, more = first([c for c in doc["cells"] if c["confusion"]])
    if confused:
        out.append(("Prediction confusion (row-normalised; numbers are counts)" + more, _heatmaps(confused)))
        out.append(("Calibration of the predictions" + more, _calibration(confused)))
    cells, more = first(doc["cells"])
    out.append(("Tool calls per trajectory, by decision" + more, _tool_calls(cells)))
    return out


def _pass(doc: dict):
    cells = doc["cells"]
    fig = figure(max(5.0, 0.7 * len(cells) + 2), 3.6)
    ax = fig.add_subplot()
    for x, c in enumerate(cells):
        v, lo, hi = _err(c["pass_at_1"])
        ax.errorbar(
            [x], [v], yerr=[[lo], [hi]], fmt="o", capsize=4, color=ARM_COLOURS.get(c["arm"], "#7f7f7f")
        )
        if c["plus"]:
            v, lo, hi = _err(c["plus"]["pass_at_1"])
            ax.errorbar(
                [x + 0.2],
                [v],
                yerr=[[lo], [hi]],
                fmt="s",
                mfc="none",
                capsize=3,
                color=ARM_COLOURS.get(c["arm"], "#7f7f7f"),
            )
    ax.set_xticks(
        range(len(cells)),
        [f"{arm_text(c)}\nseed {show(c['seed'])}\n{wrapped(show(c['ckpt']))}" for c in cells],
        fontsize=FONT,
    )
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_ylabel("pass@1 (%)" + (" ; hollow: plus" if any(c["plus"] for c in cells) else ""))
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    return fig


def _split(cells: list[dict]):
    fig = figure(max(5.0, 1.1 * len(cells) + 2), 3.6)
    ax = fig.add_subplot()
    for x, c in enumerate(cells):
        for dx, name, colour in ((-0.18, "never", "#2ca02c"), (0.18, "revised", "#ff7f0e")):
            g = c["revise_split"][name]
            v, lo, hi = _err(g["pass_at_1"])
            ax.bar(
                x + dx,
                v,
                width=0.34,
                color=colour,
                label=("never REVISE" if name == "never" else "chose REVISE") if x == 0 else None,
            )
            if g["n"]:
                ax.errorbar([x + dx], [v], yerr=[[lo], [hi]], fmt="none", ecolor="black", capsize=3)
            ax.text(x + dx, 2, f"n={g['n']}", ha="center", fontsize=FONT)
    ax.set_xticks(range(len(cells)), ["\n".join(map(wrapped, cell_name(c).split(" · "))) for c in cells],
                  fontsize=FONT)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_ylabel("pass@1 (%)")
    ax.set_ylim(0, 100)
    legend_below(fig)
    return fig


def legend_below(fig, ncols: int = 2) -> None:
    """The figure's legend under its axes (constrained layout makes room): it covers no data."""
    fig.legend(fontsize=FONT, loc="outside lower center", ncols=ncols)


def legend_under(ax, ncols: int = 1) -> None:
    """One panel's legend under that panel (constrained layout makes room): it covers none of its data."""
    ax.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=ncols, frameon=False)


def _grid(n: int, max_cols: int, width: float, height: float):
    """A figure of ``n`` panels, at most ``max_cols`` a row, each
    ``width`` x ``height`` inches; (figure, the panels' axes in order)."""
    cols = min(max_cols, n)
    rows = (n + cols - 1) // cols
    fig = figure(width * cols, height * rows)
    return fig, [fig.add_subplot(rows, cols, i + 1) for i in range(n)]


def _heatmaps(cells: list[dict]):
    import numpy as np

    fig, axes = _grid(len(cells), 2, 5.2, 4.4)
    image = None
    for c, ax in zip(cells, axes):
        conf = c["confusion"]
        m = np.array(conf["matrix"], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            norm = np.nan_to_num(m / m.sum(axis=1, keepdims=True))
        image = ax.imshow(100 * norm, cmap="Blues", vmin=0, vmax=100)
        short = [label.replace("_", "\n") for label in conf["labels"]]
        columns = conf.get("predicted_labels", conf["labels"])
        ax.set_xticks(range(len(columns)), columns, fontsize=FONT,
                      rotation=35, ha="right", rotation_mode="anchor")  # whole, and clear of each other
        ax.set_yticks(range(len(short)), short, fontsize=FONT)
        ax.set_xlabel("predicted", fontsize=FONT + 1)
        ax.set_ylabel("verified", fontsize=FONT + 1)
        ax.set_title(cell_name(c), fontsize=FONT + 1)
        for (r, k), n in np.ndenumerate(m):
            if n:
                ax.text(
                    k,
                    r,
                    str(int(n)),
                    ha="center",
                    va="center",
                    fontsize=FONT + 1,
                    color="white" if norm[r, k] > 0.6 else "black",
                )
    bar = fig.colorbar(image, ax=axes, shrink=0.8, pad=0.02)  # one scale: every panel is 0-100%
    bar.set_label("share of the verified outcome's row (%)", fontsize=FONT + 1)
    bar.ax.tick_params(labelsize=FONT)
    return fig


def _calibration(cells: list[dict]):
    fig = figure(11, 5.2)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    left.plot([0, 100], [0, 100], color="grey", lw=0.8, ls="--")
    labels = cells[0]["confusion"]["labels"]
    markers = "osD^v<>p"
    width = 0.8 / len(cells)
    never = False
    for i, c in enumerate(cells):
        classes = c["confusion"]["classes"]
        seen = [k for k in classes if k["predicted"] or k["verified"]]
        base = [_err(k["base_rate"]) for k in seen]
        share = [_err(k["prediction_share"]) for k in seen]
        xs, ys = [b[0] for b in base], [s[0] for s in share]
        left.errorbar(xs, ys, xerr=[[b[1] for b in base], [b[2] for b in base]],
                      yerr=[[s[1] for s in share], [s[2] for s in share]], fmt=markers[i % len(markers)],
                      color=f"C{i}", ms=5, capsize=2, lw=0.8, elinewidth=0.8, clip_on=False,
                      label=f"{cell_name(c)}: class share, 95% Wilson both ways")
        for x, y, k in zip(xs, ys, seen, strict=True):
            far = x > 55  # the label to the point's left near the right edge, so it stays in the axes
            left.annotate(
                k["label"],
                (x, y),
                fontsize=FONT,
                xytext=(-4 if far else 4, 4),
                textcoords="offset points",
                ha="right" if far else "left",
            )
        for j, k in enumerate(classes):
            p = k["precision"]
            at = j + (i - (len(cells) - 1) / 2) * width
            if p["n"]:
                v, lo, hi = _err(p)
                right.bar(at, v, width=width, color=f"C{i}")
                right.errorbar([at], [v], yerr=[[lo], [hi]], fmt="none", ecolor="black", capsize=2)
            else:  # never predicted: no precision to show, and not a 0%
                right.bar(at, 100, width=width, color="none", edgecolor=NEVER, hatch="//", lw=0.8,
                          label="never predicted (no precision)" if not never else None)
                never = True
                right.text(at, 50, "never predicted", rotation=90, ha="center", va="center", fontsize=FONT,
                           color="#555555")
    left.set_xlabel("base rate of the verified outcome (%)")
    left.set_ylabel("share of predictions (%)")
    left.set_xlim(-3, 103)
    left.set_ylim(-3, 103)
    left.tick_params(labelsize=FONT)
    left.set_title("prediction share vs base rate (diagonal: matched)", fontsize=FONT + 1)
    right.set_xticks(range(len(labels)), labels, fontsize=FONT, rotation=35, ha="right",
                     rotation_mode="anchor")
    right.tick_params(axis="y", labelsize=FONT)
    right.set_ylabel("precision (%), 95% Wilson; colour: the cell")
    right.set_ylim(0, 105)
    right.set_title("when the agent predicts a class, how often it is that class", fontsize=FONT + 1)
    legend_below(fig)  # the cells (their colour in both panels) and the hatch, under the panels
    return fig


def _tool_calls(cells: list[dict]):
    fig, axes = _grid(len(cells), 3, 4.2, 3.0)
    for c, ax in zip(cells, axes):
        tc = c["tool_calls"]
        groups = [
            (name, colour, label)
            for name, colour, label in (
                ("never", "#2ca02c", "never REVISE" if c["revise_split"] else "all"),
                ("revised", "#ff7f0e", "chose REVISE"),
            )
            if tc[name]["histogram"]
        ]
        for j, (name, colour, label) in enumerate(groups):
            hist = dict(tc[name]["histogram"])
            total = sum(hist.values())
            offset = (j - (len(groups) - 1) / 2) * 0.4
            ax.bar(
                [x + offset for x in hist],
                [100 * v / total for v in hist.values()],
                width=0.4,
                color=colour,
                label=f"{label} (n={total})",
            )
        ax.set_title(cell_name(c), fontsize=FONT + 1)
        ax.set_xlabel("visible tool calls", fontsize=FONT)
        ax.set_ylabel("% of trajectories", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if groups:  # under the panel: it covers no bar
            legend_under(ax, ncols=2)
        else:
            ax.set_yticks([])
            ax.set_xticks([])
            ax.text(0.5, 0.5, f"no complete trajectory\n({tc['incomplete']} incomplete)", ha="center",
                    va="center", fontsize=FONT, color="#555555", transform=ax.transAxes)
    return fig
