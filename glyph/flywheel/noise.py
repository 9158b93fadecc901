"""The noise floor, drawn and tabled: the formula band, the two-rate band and
the measured A/A band side by side (``glyph flywheel aa``; ``run.json``'s
``bands``).

Everything here reads a bands document (``Flywheel.bands``: ``formula_pp``,
``two_rate_pp``, ``aa_pp``, ``aa`` with the re-rolls' rates, ``gated_by``)
and nothing else, so an A/A measurement can be redrawn from its JSON.
"""

from __future__ import annotations

from glyph.report.plots import figure, legend_below, png

BAND_STYLE = {"formula_pp": ("formula 1.96*sqrt(0.25/(nK))", "#7f7f7f", "--"),
              "two_rate_pp": ("two-rate (sqrt(2) x formula)", "#1f77b4", "-."),
              "aa_pp": ("A/A: 95% quantile of |diff|", "#d62728", "-")}


def pair_differences_pp(rates: list[float]) -> list[float]:
    """``|rate_i - rate_j|`` in pp over every pair ``i < j`` (what ``gate.aa_band`` takes the quantile of)."""
    return [100 * abs(a - b) for i, a in enumerate(rates) for b in rates[i + 1:]]


def aa_png(doc: dict) -> bytes:
    """The A/A pair differences as a histogram, the three bands as vertical lines."""
    bands = doc["bands"]
    fig = figure(7.5, 5.0)
    ax = fig.add_subplot()
    diffs = pair_differences_pp(bands["aa"]["rates"]) if bands.get("aa") else []
    if diffs:
        ax.hist(diffs, bins=min(40, max(5, len(set(diffs)))), color="#bbbbbb", edgecolor="#888888",
                label=f"|rate_i - rate_j|, {len(diffs)} A/A pairs")
    for key, (label, colour, style) in BAND_STYLE.items():
        if bands.get(key) is not None:
            ax.axvline(bands[key], color=colour, ls=style, lw=2, label=f"{label}: {bands[key]:.1f} pp")
    ax.set_xlabel("holdout rate difference between two no-lesson re-rolls (pp)")
    ax.set_ylabel("pairs")
    runs = bands["aa"]["runs"] if bands.get("aa") else 0
    ax.set_title(f"Noise floor: {runs} A/A re-rolls (K={doc['K']}, {doc['n_holdout']} holdout tasks; "
                 f"gate: {bands['gated_by']})", fontsize=10)
    ax.grid(alpha=0.3)
    legend_below(fig)
    return png(fig)


def aa_table(doc: dict):
    """The three bands as a terminal table, with what each assumes (``glyph.report.terminal``: laid
    out for the terminal's width)."""
    from glyph.report.tables import Table
    from glyph.report.terminal import render

    b = doc["bands"]
    aa = b.get("aa") or {}
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    rows = [["formula", fmt(b["formula_pp"]),
             "one rate's half-width; independent Bernoulli rollouts, p = 0.5"],
            ["two-rate", fmt(b["two_rate_pp"]), "a difference of two such rates (sqrt(2) x formula)"],
            ["A/A", fmt(b["aa_pp"]), "measured: 95% quantile of |diff| between no-lesson re-rolls"]]
    if aa:
        rows.append(["A/A, normal", fmt(aa.get("normal_two_rate_pp")), "1.96*sqrt(2)*sd(re-roll rates)"])
    return render(Table("aa", f"noise floor: K={doc['K']}, {doc['n_holdout']} holdout tasks, "
                        f"{aa.get('runs', 0)} A/A re-rolls ({aa.get('pairs', 0)} pairs)",
                        ["band", "pp", "assumes"], rows,
                        caption=f"gated by: {b['gated_by']}", keys=1, right_columns=(1,)))
