"""One self-contained HTML page: the tables, the notes and every figure
embedded as a base64 PNG, with inline CSS. It loads nothing from anywhere,
so it can be mailed or archived as one file. Its look (CSS, header,
tables, figures, the provenance line) is :mod:`glyph.report.page`'s, which
the flywheel's pages share."""

from __future__ import annotations

from html import escape

from glyph.report import page as pg
from glyph.report.page import CSS
from glyph.report.tables import Table

__all__ = ["CSS", "page"]


def _table(t: Table) -> str:
    return pg.section(t.title, t.columns, t.rows, t.numeric, t.caption, key=t.key, legend=t.legend)


def page(doc: dict, tabs: list[Table], figures: list[tuple[str, bytes]]) -> str:
    incidents = len(doc["incidents"])
    summary = (
        f"<p>{len(doc['runs'])} run(s), {sum(r['rollouts'] for r in doc['runs'])} rollouts, "
        f"{len(doc['cells'])} cell(s). Intervals: 95%, Wilson for proportions, a seeded percentile "
        f"bootstrap ({doc['intervals']['resamples']} resamples, seed {doc['intervals']['seed']}) otherwise. "
        + (
            f"<span class=bad>{incidents} incident(s): errored, timed-out or tampered rollouts, each "
            f"counted as a failure and listed below.</span>"
            if incidents
            else "No incidents."
        )
        + "</p>"
    )
    notes = (
        "<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in doc["notes"]) + "</ul>"
        if doc["notes"]
        else ""
    )
    body = "".join(_table(t) for t in tabs)
    return pg.document("glyph report", f"{summary}{body}<h2>Figures</h2>{pg.figures(figures)}{notes}",
                       pg.provenance([("schema", doc["schema"])]))
