"""One self-contained HTML page: the tables, the notes and every figure
embedded as a base64 PNG, with inline CSS. It loads nothing from anywhere,
so it can be mailed or archived as one file."""

from __future__ import annotations

import base64
from html import escape

from glyph.report.tables import Table

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 12.5px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.caption { color: #555; font-size: 12px; max-width: 900px; }
figure { margin: 1.5em 0; } figcaption { font-weight: 600; margin-bottom: .3em; }
img { max-width: 100%; }
.bad { color: #b00; font-weight: 600; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=n' if i >= t.numeric > 0 else ''}>{escape(v)}</td>" for i, v in enumerate(row)
        )
        + "</tr>"
        for row in t.rows
    )
    table = (
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if t.rows else "<p>(none)</p>"
    )
    caption = f"<p class=caption>{escape(t.caption)}</p>" if t.caption else ""
    return f"<h2 id='{escape(t.key)}'>{escape(t.title)}</h2>{table}{caption}"


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
    figs = "".join(
        f"<figure><figcaption>{escape(title)}</figcaption><img alt='{escape(title)}' "
        f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></figure>"
        for title, png in figures
    )
    notes = (
        "<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in doc["notes"]) + "</ul>"
        if doc["notes"]
        else ""
    )
    body = "".join(_table(t) for t in tabs)
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>glyph report</title>"
        f"<style>{CSS}</style></head><body><h1>glyph report</h1>{summary}{body}<h2>Figures</h2>{figs}{notes}"
        f"<p class=caption>schema {escape(doc['schema'])}</p></body></html>\n"
    )
