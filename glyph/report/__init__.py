"""``glyph report``: the study's tables and plots from eval runs, with their
uncertainty.

``load`` reads run directories into one record per rollout (and refuses
unlabelled mixes); ``analysis`` turns them into the report document (its
docstring is the JSON schema); ``tables`` formats it for the terminal and
Markdown, ``plots`` draws it, ``html`` puts both in one self-contained page.
``stats`` holds the estimators and intervals.
"""

from __future__ import annotations

import json
from pathlib import Path

from glyph.report.analysis import Options, build
from glyph.report.load import MixedRuns, load, parse_label

__all__ = ["MixedRuns", "Options", "build", "load", "parse_label", "report", "write"]


def report(roots: list[Path], labels: list[dict] | None = None, options: Options | None = None) -> dict:
    """The report document for the runs under ``roots``."""
    runs, rollouts, notes = load(roots, labels)
    return build(runs, rollouts, options or Options(), notes)


def write(doc: dict, out: Path) -> dict[str, Path]:
    """report.json, report.md and report.html (figures embedded) in ``out``."""
    from glyph.report import html, plots, tables

    out.mkdir(parents=True, exist_ok=True)
    tabs = tables.tables(doc)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(doc, indent=1) + "\n")
    paths["markdown"].write_text(tables.markdown(doc, tabs))
    paths["html"].write_text(html.page(doc, tabs, plots.figures(doc)))
    return paths
