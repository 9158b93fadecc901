"""A :class:`glyph.report.tables.Table` on a terminal, at whatever width the
terminal has: no cell wraps over two lines and no header is cut.

``rich`` fits a table that is too wide by wrapping cells and folding headers
into fragments (``basel…``, a path over ten lines). Here the table is laid out
for the width it is printed at (``options.max_width``, so 80 columns when the
output is piped, and whatever ``Console(width=...)`` says in a test):

1. it fits as it is: one table, every cell on one line;
2. a column that cannot sit on one line even beside the key columns alone
   (a long reason, a lesson's text) leaves the table for a list under it,
   each entry named by its row's keys;
3. the rest, if still too wide, is split into parts of whole columns, each
   part repeating the key columns (the table's ``keys`` leading columns, or
   a row number ``#`` when it has none or when they do not tell its rows
   apart), so a row reads across parts and no two rows of a part look alike;
4. a table whose key columns alone do not fit prints each row as
   ``column: value`` lines.

The title, the caption and the legend are paragraphs above and below, which
wrap as text does. Only layout is decided here; every string is the
table's.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table as RichTable
from rich.text import Text

from glyph.report.tables import Table

ROW_NUMBER = "#"


def _text(t: Table, cell: str) -> Text:
    return Text.from_markup(cell) if t.markup else Text(cell)


def _span(widths: list[int]) -> int:
    """A rich table's width for columns this wide: padding 1 each side, a rule between and at each edge."""
    return sum(widths) + 3 * len(widths) + 1


def _natural(t: Table, columns: list[str], rows: list[list[str]]) -> list[int]:
    return [max([cell_len(h)] + [_text(t, r[i]).cell_len for r in rows]) for i, h in enumerate(columns)]


class Fitted:
    """A table that lays itself out for the width it is rendered at (``console.print(Fitted(t))``)."""

    def __init__(self, table: Table):
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from layout(self.table, options.max_width)


def layout(t: Table, width: int) -> list:
    """The renderables that show ``t`` in ``width`` columns (module docstring)."""
    out: list = [Text(t.title, style="bold")]
    if not t.rows:
        out.append(Text("(none)"))
    else:
        out += _body(t, width)
    if t.caption:
        out.append(Text(t.caption, style="dim"))
    out += [Text(line, style="dim") for line in t.legend]
    out.append(Text(""))
    return out


def _body(t: Table, width: int) -> list:
    columns, rows = list(t.columns), [list(r) for r in t.rows]
    right = [t.right(i) for i in range(len(columns))]
    widths = _natural(t, columns, rows)
    if _span(widths) <= width:
        return [_rich(t, range(len(columns)), columns, rows, right)]
    keys = list(range(t.keys))
    if not keys or len({tuple(r[i] for i in keys) for r in rows}) < len(rows):
        # no keys, or keys that repeat: a row number leads them, so each part's rows read apart
        columns, rows = [ROW_NUMBER, *columns], [[str(i + 1), *r] for i, r in enumerate(rows)]
        right, widths = [True, *right], [max(1, len(str(len(rows)))), *widths]
        keys = [0, *(k + 1 for k in keys)]
    key_widths = [widths[i] for i in keys]
    if _span(key_widths) > width:
        return _records(t, columns, rows)
    rest = [i for i in range(len(columns)) if i not in keys]
    long = [i for i in rest if _span(key_widths + [widths[i]]) > width]
    short = [i for i in rest if i not in long]
    parts = _pack(short, widths, key_widths, width)
    # as few parts as at the full width, but as even as they can be made (no last part of one column)
    for narrower in range(max([_span(key_widths + [widths[i]]) for i in short] or [width]), width):
        even = _pack(short, widths, key_widths, narrower)
        if len(even) == len(parts):
            parts = even
            break
    out: list = [_rich(t, keys + part, columns, rows, right) for part in parts]
    if not parts:  # nothing but keys beside the long columns
        out.append(_rich(t, keys, columns, rows, right))
    for i in long:
        for r in rows:
            name = ", ".join(f"#{r[k]}" if columns[k] == ROW_NUMBER
                             else f"{columns[k]} {_text(t, r[k]).plain}" for k in keys)
            line = Text(f"{name} · {columns[i]}: ", style="bold")
            line.append_text(_text(t, r[i]))
            out.append(line)
    return out


def _pack(which: list[int], widths: list[int], key_widths: list[int], width: int) -> list[list[int]]:
    """``which`` (in order) into as few parts as fit ``width`` beside the key columns."""
    parts: list[list[int]] = []
    for i in which:
        if parts and _span(key_widths + [widths[j] for j in parts[-1]] + [widths[i]]) <= width:
            parts[-1].append(i)
        else:
            parts.append([i])
    return parts


def _rich(t: Table, which, columns: list[str], rows: list[list[str]], right: list[bool]) -> RichTable:
    which = list(which)
    rt = RichTable(show_edge=True, pad_edge=True)
    for i in which:
        rt.add_column(columns[i], justify="right" if right[i] else "left", no_wrap=True, overflow="fold")
    for n, r in enumerate(rows):
        style = t.styles[n] if n < len(t.styles) else None
        rt.add_row(*(_text(t, r[i]) for i in which), style=style)
    return rt


def _records(t: Table, columns: list[str], rows: list[list[str]]) -> list:
    """Each row as ``column: value`` lines, a blank line between rows."""
    out: list = []
    for r in rows:
        for c, v in zip(columns, r):
            line = Text(f"{c}: ", style="bold")
            line.append_text(_text(t, v))
            out.append(line)
        out.append(Text(""))
    return out


def render(t: Table) -> Fitted:
    """``t`` for ``console.print``."""
    return Fitted(t)
