"""glyph's one look for a self-contained HTML page: the inline CSS, the
header, the tables, how a figure is embedded (a base64 PNG) and the
provenance line at the foot. ``glyph report`` (:mod:`glyph.report.html`) and
the flywheel's pages (:mod:`glyph.flywheel.outputs`) both build on it, so
they look alike; a page loads nothing from anywhere, so it can be mailed or
archived as one file.

Every piece returns an HTML fragment with its text escaped here, except
``body`` and ``intro`` arguments, which are HTML already.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

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


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: int = 0) -> str:
    """A table of strings; columns from index ``numeric`` on (when it is > 0) are
    right-aligned numbers. No rows: ``(none)``."""
    if not rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i >= numeric > 0 else ''}>{escape(v)}</td>" for i, v in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def caption(text: str) -> str:
    """A caption paragraph (nothing for no text)."""
    return f"<p class=caption>{escape(text)}</p>" if text else ""


def section(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: int = 0,
            caption_text: str = "", key: str | None = None, legend: Sequence[str] = ()) -> str:
    """A headed table with its caption, then its legend (a line each); ``key`` names the heading's anchor."""
    anchor = f" id='{escape(key)}'" if key else ""
    lines = f"<p class=caption>{'<br>'.join(escape(line) for line in legend)}</p>" if legend else ""
    return f"<h2{anchor}>{escape(title)}</h2>{table(columns, rows, numeric)}{caption(caption_text)}{lines}"


def figures(items: Sequence[tuple[str, bytes]]) -> str:
    """Each (title, PNG bytes) as a captioned figure, the image embedded as base64."""
    return "".join(
        f"<figure><figcaption>{escape(title)}</figcaption><img alt='{escape(title)}' "
        f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></figure>"
        for title, png in items
    )


def provenance(items: Sequence[tuple[str, str]]) -> str:
    """The foot line naming where the page's numbers come from: ``name value``
    pairs, separated by semicolons."""
    return caption("; ".join(f"{name} {value}" for name, value in items))


def document(title: str, body: str, foot: str = "") -> str:
    """The whole page: the header (``title`` as <title> and <h1>), ``body``, then ``foot``."""
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>{body}{foot}</body></html>\n"
    )
