"""The report's pictures are readable (issue 22, friction 9): every text at
least 9 pt, read from the matplotlib text objects themselves; every text
inside its figure once drawn (nothing cut at an edge); labels whole; a class
the agent never predicted drawn as such, not as a 0% bar. And the sweep's
band fit: fitted to the measured A/A bands, never the formula to itself."""

from __future__ import annotations

import math

import pytest
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from test_report_known import study  # noqa: F401  (the fixture: four runs whose every figure is known)

from glyph.report import report
from glyph.report.plots import FONT, figure_objects


def _texts(fig) -> list[Text]:
    """The texts the figure draws: visible, not empty, and no tick label of a tick outside its
    axis's view (matplotlib keeps those objects but does not draw them)."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not lo - 1e-9 <= loc <= hi + 1e-9:
                    hidden |= {id(tick.label1), id(tick.label2)}
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


@pytest.fixture()
def figs(study):  # noqa: F811
    doc = report(study)
    return doc, figure_objects(doc)


def test_every_text_is_at_least_9_pt_and_inside_its_figure(figs):
    _, items = figs
    assert FONT >= 9 and len(items) == 5
    for title, fig in items:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        width, height = fig.bbox.width, fig.bbox.height
        texts = _texts(fig)
        assert texts, title
        for t in texts:
            assert t.get_fontsize() >= 9, (title, t.get_text(), t.get_fontsize())
            box = t.get_window_extent(renderer)
            assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, (
                title, t.get_text(), box)
        drawn = {id(t) for t in texts}
        # an axis's level tick labels clear of each other (a slanted one's box is not its ink)
        for ax in fig.axes:
            for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
                boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels
                         if id(t) in drawn and t.get_rotation() == 0]
                for i, (a, box) in enumerate(boxes):
                    for b, other in boxes[i + 1:]:
                        assert not box.overlaps(other), (title, a, b)


def test_labels_are_whole(figs):
    doc, items = figs
    by_title = dict(items)
    calibration = next(f for t, f in by_title.items() if t.startswith("Calibration"))
    shown = {t.get_text().replace("\n", "") for t in _texts(calibration)}
    labels = doc["cells"][-1]["confusion"]["labels"]  # arm B's cell has the confusion
    assert "ASSERTION_FAILURE" in shown and "ASSERT" not in shown  # the point's label, not cut
    assert {label.replace("_", "") for label in labels} <= {s.replace("_", "") for s in shown}
    passes = next(f for t, f in by_title.items() if t.startswith("pass@1"))
    ticks = [t.get_text() for t in passes.axes[0].get_xticklabels()]
    for c, tick in zip(doc["cells"], ticks, strict=True):
        assert tick.replace("\n", "").endswith(str(c["ckpt"]))


def test_a_class_never_predicted_is_drawn_as_such(figs):
    doc, items = figs
    [conf] = [c["confusion"] for c in doc["cells"] if c["confusion"]]
    never = [k["label"] for k in conf["classes"] if not k["precision"]["n"]]
    assert never  # SYNTAX_ERROR, TIMEOUT, OTHER: predicted by no one
    calibration = next(f for t, f in items if t.startswith("Calibration"))
    right = calibration.axes[1]
    words = [t for t in right.texts if t.get_text() == "never predicted"]
    assert len(words) == len(never)
    hatched = [p for p in right.patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == len(never) and all(p.get_height() == 100 for p in hatched)
    solid = [p for p in right.patches if isinstance(p, Rectangle) and not p.get_hatch()]
    assert len(solid) == len(conf["classes"]) - len(never)  # a 0% precision is a real, predicted class's
    [legend] = calibration.legends  # one legend for both panels, under them
    assert "never predicted (no precision)" in [t.get_text() for t in legend.get_texts()]


def test_no_legend_covers_data_the_heatmap_has_a_colour_scale_and_the_calibration_intervals(figs):
    """Every legend of every report figure lies clear of every plotting area; the confusion heatmap
    has a colour bar (0-100% of the row); each calibration point has its 95% Wilson interval on both
    axes, the values the report computed."""
    from matplotlib.container import ErrorbarContainer

    doc, items = figs
    for title, fig in items:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        plots = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            for ax in plots:
                assert not box.overlaps(ax.get_window_extent(renderer)), (title, ax.get_title())
    heat = next(f for t, f in items if t.startswith("Prediction confusion"))
    [bar] = [ax for ax in heat.axes if ax.get_label() == "<colorbar>"]
    assert bar.get_ylim() == (0.0, 100.0) and "share of the verified outcome's row" in bar.get_ylabel()
    calibration = next(f for t, f in items if t.startswith("Calibration"))
    [conf] = [c["confusion"] for c in doc["cells"] if c["confusion"]]
    seen = [k for k in conf["classes"] if k["predicted"] or k["verified"]]
    [points] = [c for c in calibration.axes[0].containers if isinstance(c, ErrorbarContainer)]
    xs, ys = points.lines[0].get_data()
    assert list(xs) == pytest.approx([100 * k["base_rate"]["value"] for k in seen])
    assert list(ys) == pytest.approx([100 * k["prediction_share"]["value"] for k in seen])
    assert points.has_xerr and points.has_yerr
    segments = [seg for lines in points.lines[2] for seg in lines.get_segments()]
    spans = sorted((round(min(p[0] for p in seg), 6), round(max(p[0] for p in seg), 6)) for seg in segments
                   if seg[0][1] == seg[1][1])  # the horizontal bars: the base rate's interval
    assert spans == sorted((round(100 * k["base_rate"]["ci"][0], 6), round(100 * k["base_rate"]["ci"][1], 6))
                           for k in seen)


# ---------------------------------------------------------------- the sweep's band fit


def _run(K: int, aa: float | None) -> dict:
    n = 40
    formula = 100 * 1.96 * math.sqrt(0.25 / (n * K))
    return {"seed": 0, "K": K, "baseline": 0.2, "final": 0.4, "gain_pp": 20.0, "noise_band_pp": formula,
            "rounds": 1, "lessons": [], "excluded": {"rollouts": 0}, "stop": "max rounds", "gate": "aa",
            "n_holdout": n, "agent": {"kind": "reference"}, "writer": {"kind": "reference"},
            "bands": {"formula_pp": formula, "two_rate_pp": math.sqrt(2) * formula, "aa_pp": aa,
                      "gated_by": "aa" if aa is not None else "formula"},
            "curve": [{"round": 0, "accepted": 0.2, "lo": 0.1, "hi": 0.3, "n": n * K}]}


def test_the_sweep_fits_the_measured_aa_bands_and_says_when_there_are_none():
    from glyph.flywheel.aggregate import fit_text, sweep_doc, sweep_png

    measured = {4: 14.0, 8: 10.5, 16: 6.5}  # not c/sqrt(K) exactly: the fit has residuals to show
    sw = sweep_doc({k: [(_run(k, aa), f"K{k}/run-0")] for k, aa in measured.items()})
    fit = sw["band_fit"]
    c = sum(b / math.sqrt(k) for k, b in measured.items()) / sum(1 / k for k in measured)
    assert fit["fitted_to"] == "aa_pp" and fit["K"] == [4, 8, 16]
    assert fit["c_pp"] == pytest.approx(c, rel=1e-6)
    assert fit["max_rel_residual"] > 0.01  # measured bands are not the formula: a fit that can fail
    assert fit["two_rate_c_pp"] == pytest.approx(100 * 1.96 * math.sqrt(0.5 / 40), rel=1e-6)
    assert "measured A/A band" in fit_text(fit)
    assert sweep_png(sw)[:4] == b"\x89PNG"

    none = sweep_doc({k: [(_run(k, None), f"K{k}/run-0")] for k in (4, 8, 16)})
    assert none["band_fit"]["fitted_to"] is None and none["band_fit"]["c_pp"] is None
    assert "no band fitted" in fit_text(none["band_fit"]) and "by construction" in none["band_fit"]["why"]
    one = sweep_doc({4: [(_run(4, 12.0), "K4/run-0")], 8: [(_run(8, None), "K8/run-0")]})
    assert one["band_fit"]["fitted_to"] is None  # one K measured: nothing to fit a curve through
    assert sweep_png(none)[:4] == b"\x89PNG"


def test_the_flywheels_pictures_are_9_pt_or_more(monkeypatch):
    """The learning curve, the overlaid runs, the sweep and the A/A histogram: each figure caught
    where it is turned into PNG bytes, and its texts read."""
    from test_report_tables import flywheel_run

    from glyph.flywheel import aggregate, noise, outputs

    caught = []

    def keep(fig):
        caught.append(fig)
        return b"\x89PNG"

    for module in (outputs, aggregate, noise):
        monkeypatch.setattr(module, "png", keep)
    outputs.curve_png(flywheel_run(lessons=2))
    aggregate.replicate_png([flywheel_run(), dict(flywheel_run(), seed=1)])
    sw = aggregate.sweep_doc({k: [(flywheel_run(k, aa), f"K{k}/run-0")] for k, aa in ((4, 14.0), (8, 10.5))})
    aggregate.sweep_png(sw)
    noise.aa_png(flywheel_run(aa=10.5))
    assert len(caught) == 4
    for fig in caught:
        fig.canvas.draw()
        for t in _texts(fig):
            assert t.get_fontsize() >= 9, t.get_text()
    for fig in (caught[0], caught[3]):  # the learning curve's and the A/A histogram's legends: under the axes
        [legend] = fig.legends
        renderer = fig.canvas.get_renderer()
        assert not legend.get_window_extent(renderer).overlaps(fig.axes[0].get_window_extent(renderer))
    fit = [t.get_text() for t in caught[2].axes[1].get_legend().get_texts()]
    assert any(s.startswith("fit to A/A") for s in fit) and "measured A/A band" in fit
