"""PREDICT's CE rule (``glyph.predict.annotate.CeRule``) on Arm B rollouts in the study's format,
laid out with the study renderer as the pin lays them out (``testkit.ce_rules``): under
``"study"`` one CE-only sample per recorded prediction target, built as the study's
``_auxiliary_sample`` builds it (its ``src/glyph/prime_rl.py`` at ``9eefac7``), whatever the
sampled label was; under ``"in_place"`` glyph's in-place CE and grafts. The two rules' loss and
gradient through the pin's ``compute_loss``: tests/pin/test_loss.py."""

from __future__ import annotations

import pytest

from glyph.agent.trace import Candidate, PredictionTarget, StudyTrace, sha256
from glyph.predict.annotate import annotate
from glyph.profiles.study import StudyProfile
from glyph.render import load_tokenizer, renderer
from testkit import ce_rules as C

ALPHA = 0.1


@pytest.fixture(scope="module")
def fmt():
    """The Qwen3 tokenizer and the study's renderer over it (what the study profile's configs set)."""
    tokenizer = load_tokenizer()
    return tokenizer, renderer(tokenizer, "study")


def aux_nodes(nodes, original):
    return nodes[original:]


@pytest.mark.parametrize("kinds", [["right", "wrong", "invalid"], ["wrong", "right", "missing"], ["right"]])
def test_the_study_rule_builds_one_ce_only_sample_per_target_as_the_study_did(fmt, kinds):
    tok, study_renderer = fmt
    ro = C.rollout(study_renderer, kinds)
    nodes, out = C.annotated(tok, study_renderer, ro, "study", alpha=ALPHA)
    original = len(ro.nodes)
    assert len(ro.targets) == len(kinds)
    assert (out.aux_samples, out.aux_unlabelled, out.aux_context_differs) == (
        len(kinds), sum(k in ("invalid", "missing") for k in kinds), 0)
    assert (out.in_place, out.grafted, out.labels_trained) == (0, 0, len(kinds))
    assert all("ce" not in (n.loss_weights or {}) for n in nodes[:original]), "no CE on the policy's tokens"
    for node, target in zip(aux_nodes(nodes, original), ro.targets, strict=True):
        # The study's sample: render_ids(context, add_generation_prompt=True), then the tag text
        # encoded alone; nothing sampled; CE alpha on the tokens overlapping the label's characters.
        prefix = list(study_renderer.render_ids(target.context, add_generation_prompt=True))
        tag = f"<PREDICTION>{target.verified_label}</PREDICTION>"
        assert node.parent is None and not node.sampled and not any(node.mask)
        assert node.token_ids == prefix + list(tok.encode(tag, add_special_tokens=False))
        ce = node.loss_weights["ce"]
        assert set(ce[:len(prefix)]) == {0.0} and set(ce) == {0.0, ALPHA}
        trained = tok.decode([t for t, w in zip(node.token_ids, ce) if w])
        assert target.verified_label in trained and trained in tag
        assert not trained.startswith("<PRED") and not trained.endswith("</")


def test_the_in_place_rule_trains_no_invalid_or_missing_label(fmt):
    tok, study_renderer = fmt
    for kinds in (["right", "wrong", "invalid"], ["wrong", "right", "missing"]):
        ro = C.rollout(study_renderer, kinds)
        _, out = C.annotated(tok, study_renderer, ro, "in_place", alpha=ALPHA)
        assert (out.in_place, out.grafted, out.aux_samples) == (1, 1, 0)
        assert out.labels_trained == 2, "the third target (no outcome class or no label) gets no CE"


def test_a_context_the_policy_tokenized_otherwise_is_counted(fmt):
    """The re-rendered context is what the study trained on; where the policy's own tokens before the
    prediction differ (here its first turn sampled in another tokenization), the sample still trains
    and the difference is counted."""
    tok, study_renderer = fmt
    kinds = ["right", "wrong"]
    plain = C.rollout(study_renderer, kinds)
    first = next(i for i, (role, _) in enumerate(plain.turns) if role == "assistant")
    node = next(n for n in plain.nodes if n.sampled)
    sampled = [t for t, m in zip(node.token_ids, node.mask) if m]
    ro = C.rollout(study_renderer, kinds, sampled_ids={first: C.split_first(tok, sampled)})
    _, out = C.annotated(tok, study_renderer, ro, "study", alpha=ALPHA)
    assert (out.aux_samples, out.aux_context_differs) == (2, 2)


def test_a_sample_over_max_tokens_is_dropped_and_counted(fmt):
    tok, study_renderer = fmt
    ro = C.rollout(study_renderer, ["right", "wrong"])
    nodes, out = C.annotated(tok, study_renderer, ro, "study", alpha=ALPHA, max_tokens=50)
    assert (out.aux_samples, out.aux_too_long, len(nodes)) == (0, 2, len(ro.nodes))


def test_alpha_zero_builds_no_sample(fmt):
    tok, study_renderer = fmt
    ro = C.rollout(study_renderer, ["right", "invalid"])
    nodes, out = C.annotated(tok, study_renderer, ro, "study", alpha=0.0)
    assert (out.aux_samples, out.ce_off, len(nodes)) == (0, 2, len(ro.nodes))


def test_an_unknown_rule_or_a_missing_renderer_is_an_error(fmt):
    tok, study_renderer = fmt
    from glyph.predict.annotate import TokenBytes

    ro = C.rollout(study_renderer, ["right"])

    def enc(text):
        return list(tok.encode(text, add_special_tokens=False))

    with pytest.raises(ValueError, match="unknown CE rule"):
        annotate(list(ro.nodes), ro.targets, TokenBytes(tok), enc, alpha=ALPHA, ce_rule="graft")
    with pytest.raises(ValueError, match="needs render"):
        annotate(list(ro.nodes), ro.targets, TokenBytes(tok), enc, alpha=ALPHA, ce_rule="study")


class Regrader:
    """A regrader whose trusted verdict per source is fixed."""

    def __init__(self, verdicts: dict[str, str]):
        self.verdicts = verdicts

    def agrees(self, source: str, claimed: object) -> bool:
        return self.verdicts[source] == claimed

    def visible(self, source: str) -> str:
        return self.verdicts[source]


def test_finalize_records_every_target_of_a_recorded_candidate_with_its_trusted_label():
    sources = ["def f(xs):\n    return sum(xs)\n", "def f(xs):\n    return 0\n"]
    cands = [Candidate(index=i, source=s, sha256=sha256(s)) for i, s in enumerate(sources)]
    targets = [
        PredictionTarget(candidate_sha256=sha256(sources[0]), verified_label="PASS", sampled_label=None),
        PredictionTarget(candidate_sha256=sha256(sources[1]), verified_label="PASS", sampled_label="PASS"),
        PredictionTarget(candidate_sha256="0" * 64, verified_label="PASS", sampled_label="Pass"),
    ]
    trace = StudyTrace(candidates=cands, prediction_targets=targets)
    regrader = Regrader({sources[0]: "PASS", sources[1]: "ASSERTION_FAILURE"})
    found = StudyProfile().verified_targets(trace, regrader)
    assert [(t.candidate_sha256, t.verified_label, t.sampled_label) for t in found] == [
        (sha256(sources[0]), "PASS", None), (sha256(sources[1]), "ASSERTION_FAILURE", "PASS")]
    assert len(StudyProfile().check_trace(trace, regrader)) == 2, "the re-grade and the unknown candidate"
