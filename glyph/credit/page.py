"""A credit report's picture and page, drawn from its JSON document alone
(``Report.to_json``): the pass rate by step with its 95% Wilson interval and
the threshold line (a matplotlib PNG, ``glyph.report.plots``' Agg figure),
and one self-contained HTML page in glyph's one look (``glyph.report.page``)
with that PNG embedded and the per-step table."""

from __future__ import annotations

from html import escape


def credit_png(doc: dict) -> bytes:
    from glyph.report.plots import FONT, figure, png

    steps = doc["steps"]
    xs = [s["index"] for s in steps]
    rates = [100 * s["pass_rate"] for s in steps]
    lo = [max(0.0, 100 * (s["pass_rate"] - s["wilson_lo"])) for s in steps]
    hi = [max(0.0, 100 * (s["wilson_hi"] - s["pass_rate"])) for s in steps]
    v = doc["rate_verdict"]
    fig = figure(7.5, 4.2)
    ax = fig.add_subplot()
    ax.errorbar(xs, rates, yerr=[lo, hi], fmt="o-", capsize=4, color="#1f77b4",
                label=f"pass rate of {doc['forks']} fork(s) per snapshot (95% Wilson)")
    ax.axhline(100 * v["threshold"], color="#7f7f7f", ls=":", label=f"threshold {100 * v['threshold']:g}%")
    a, b = v["earliest_below_possible"], v["earliest_below_certain"]
    if a is not None:  # to the end when no step is certain
        ax.axvspan(a - 0.5, (xs[-1] if b is None else b) + 0.5, color="#d62728", alpha=0.08, lw=0,
                   label="earliest steps the intervals allow")
    if v["earliest_below"] is not None:
        k = v["earliest_below"]
        ax.axvline(k, color="#d62728", ls="--", label=f"earliest below: {'the start' if k == 0 else f'step {k}'}")
    ax.set_xlabel("snapshot k (the state after step k; 0: the start), continued by forks")
    ax.set_ylabel("pass rate (%)")
    ax.set_ylim(-5, 105)
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=FONT, loc="best")
    ax.set_title(f"credit: {doc['task']} (arm {doc['arm']}, budget {doc['budget']}), continuation "
                 f"{doc['continuation']}", fontsize=10)
    return png(fig)


COLUMNS = ["step", "action", "status", "left", "passes", "pass rate", "95% Wilson", "outcomes"]


def credit_html(doc: dict, image: bytes) -> str:
    """The credit page in glyph's one HTML look (:mod:`glyph.report.page`): the
    verdicts, the pass-rate picture and the per-step table (the verdict's step in red)."""
    from glyph.report import page

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    v = doc["rate_verdict"]
    rows = []
    for s in doc["steps"]:
        cells = [str(s["index"]), f"{s['tool']} {s['summary']}".strip(), s["status"], str(s["budget_left"]),
                 f"{s['passes']}/{s['forks']}", pct(s["pass_rate"]),
                 f"[{pct(s['wilson_lo'])}, {pct(s['wilson_hi'])}]",
                 ", ".join(f"{k} {n}" for k, n in s["outcomes"].items())]
        mark = " class=bad" if s["index"] == v["earliest_below"] else ""
        rows.append(f"<tr{mark}>" + "".join(
            f"<td{' class=n' if i in (0, 3, 4, 5, 6) else ''}>{escape(c)}</td>" for i, c in enumerate(cells))
            + "</tr>")
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    notes = "".join(f"<li>{escape(n)}</li>" for n in doc["notes"]) + \
        "".join(f"<li>divergence: {escape(d)}</li>" for d in doc["divergences"])
    summary = (f"{doc['source']}: arm {doc['arm']}, budget {doc['budget']}, test cost {doc['test_cost']}; "
               f"recorded: {doc['recorded']}. Continuation {doc['continuation']}, {doc['forks']} fork(s) per "
               f"snapshot" + ("" if doc["seed"] is None else f", seed {doc['seed']}") +
               f". Final state on the hidden tests: {doc['final_outcome']}.")
    body = (
        f"<p>{escape(summary)}</p><p><b>{escape(doc['rate_verdict_text'])}</b></p><p>{escape(doc['verdict'])}</p>"
        + page.figures([("pass rate by step (95% Wilson)", image)])
        + f"<h2>Steps</h2><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + page.caption("step 0 is the start; each row's forks continue from the state after that step with the "
                       "budget left there. Intervals: 95% Wilson, each snapshot's own (not simultaneous).")
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""))
    return page.document(f"credit: {doc['task']}", body)
