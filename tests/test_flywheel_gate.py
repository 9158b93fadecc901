import math

import pytest

from glyph.flywheel import gate


def test_band_matches_hand_computation():
    # 1.96 * sqrt(0.25 / (30 * 4)) = 1.96 * 0.045644 = 0.089461
    assert gate.band(30, 4) == pytest.approx(1.96 * math.sqrt(0.25 / 120))
    assert round(100 * gate.band(30, 4), 2) == 8.95
    # the published sweep's bands (12.7, 8.9, 7.3, 6.3 pp) are this formula at n = 15 holdout tasks
    assert [round(100 * gate.band(15, k), 1) for k in (4, 8, 12, 16)] == [12.7, 8.9, 7.3, 6.3]
    assert gate.band_for(120) == gate.band(30, 4)
    assert gate.band_for(0) == math.inf


@pytest.mark.parametrize("df, q", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (29, 2.0452),
                                   (1000, 1.9623)])
def test_t_quantile_known_values(df, q):
    assert gate.t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)


def test_paired_on_a_constructed_example():
    without = {"t1": 0.0, "t2": 0.25, "t3": 0.5, "t4": 0.25, "only_here": 0.0}
    with_ = {"t1": 0.5, "t2": 0.5, "t3": 0.5, "t4": 0.5, "only_there": 1.0}
    p = gate.paired(with_, without)
    # diffs 0.5, 0.25, 0, 0.25: mean 0.25, sd sqrt(0.125 / 3), t(3) = 3.1824
    half = 3.182446 * math.sqrt(0.125 / 3) / 2
    assert p.n_tasks == 4
    assert p.mean == pytest.approx(0.25)
    assert (p.lo, p.hi) == (pytest.approx(0.25 - half, abs=1e-5), pytest.approx(0.25 + half, abs=1e-5))
    assert p.lo < 0 and not p.keep and not gate.decide("paired", p.mean, 0.1, p)
    assert gate.decide("band", p.mean, 0.1, p)  # the same comparison clears a 10 pp band

    consistent = gate.paired({t: 0.75 + 0.05 * (i % 2) for i, t in enumerate("abcdefgh")},
                             {t: 0.25 for t in "abcdefgh"})
    assert consistent.lo > 0.45 and consistent.keep
    assert consistent.to_json()["mean_pp"] == pytest.approx(52.5)


def test_paired_needs_two_tasks_and_band_is_strict():
    one = gate.paired({"a": 1.0}, {"a": 0.0})
    assert one.n_tasks == 1 and not one.keep and one.to_json()["lo_pp"] is None
    none = gate.paired({"a": 1.0}, {"b": 0.0})
    assert none.n_tasks == 0 and not none.keep
    assert not gate.decide("band", 0.05, 0.05, none)  # gain must exceed the band
    assert not gate.decide("band", math.nan, 0.05, none)
    with pytest.raises(ValueError, match="unknown gate"):
        gate.decide("bonferroni", 1.0, 0.0, none)


def test_every_gate_decides_the_same_candidate_side_by_side():
    """The constructed example above (+25 pp, paired [-3.0, +53.0]) against a 10 pp formula band and a
    20 pp A/A band: formula keeps, two-rate (14.1 pp) keeps, paired rejects, A/A keeps; they disagree,
    and the paired interval includes 0. Each verdict is the one ``decide`` gives for that gate."""
    p = gate.paired({"t1": 0.5, "t2": 0.5, "t3": 0.5, "t4": 0.5},
                    {"t1": 0.0, "t2": 0.25, "t3": 0.5, "t4": 0.25})
    aa = gate.aa_band([0.1, 0.3])  # |0.1 - 0.3| = 20 pp
    d = gate.decisions(0.25, 0.10, p, aa)
    assert d["formula"] == {"band_pp": 10.0, "keep": True}
    assert d["two_rate"] == {"band_pp": pytest.approx(100 * math.sqrt(2) * 0.10, abs=1e-4), "keep": True}
    assert d["paired"]["keep"] is False and d["paired"]["lo_pp"] < 0 < d["paired"]["hi_pp"]
    assert d["aa"] == {"band_pp": 20.0, "keep": True}
    for name, key in gate.DECISION_OF.items():
        assert d[key]["keep"] == gate.decide(name, 0.25, 0.10, p, aa)
    assert not gate.agree(d) and gate.includes_zero(d["paired"]) is True
    fields = gate.lesson_fields(d, "band")
    assert fields["gated_by"] == "formula" and fields["gates_agree"] is False
    assert fields["paired_includes_zero"]
    assert gate.verdicts(d) == {"formula": True, "two_rate": True, "paired": False, "aa": True}

    small = gate.decisions(0.12, 0.10, gate.paired({"a": 1.0, "b": 0.9}, {"a": 0.8, "b": 0.8}), None)
    assert small["two_rate"]["keep"] is False and small["formula"]["keep"] is True and small["aa"] is None
    assert gate.verdicts(small)["aa"] is None and not gate.agree(small)
    unanimous = gate.decisions(-0.05, 0.10, gate.paired({"a": 0.0, "b": 0.1}, {"a": 0.1, "b": 0.1}), None)
    assert gate.agree(unanimous) and gate.includes_zero(unanimous["paired"]) is True
    assert gate.includes_zero(gate.paired({"a": 1.0}, {"a": 0.0}).to_json()) is True  # one task: (-inf, inf)
    assert gate.includes_zero(None) is None


def test_the_default_gate_is_the_originals_and_the_recommended_one_is_named_with_why():
    from glyph.flywheel.options import RunOptions

    assert RunOptions().gate == gate.DEFAULT == "band" and gate.RECOMMENDED in gate.GATES
    help_text = RunOptions.model_fields["gate"].description
    assert "original flywheel's rule, the default" in help_text
    assert "aa: gain > the measured A/A band, which glyph recommends" in help_text
    assert "rl-loop.mjs" in gate.WHY_RECOMMENDED
    assert set(gate.ASSUMES) == set(gate.DECISION_OF.values()) | {"two_rate"}
