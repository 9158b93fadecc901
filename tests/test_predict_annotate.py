"""PREDICT's annotation (glyph.predict.annotate) on graphs laid out as the
PRIME-RL pin's verifiers lays them out, with the real Qwen3 vocabulary. The
same code runs on real eval traces inside PRIME-RL in tests/pin/."""

from __future__ import annotations

import dataclasses
import json
import re

import msgspec
import pytest

from glyph.outcomes import Outcome
from glyph.predict.annotate import (
    PredictionNotFound,
    TokenBytes,
    annotate,
    find_node,
    graft_tokens,
    label_token_span,
    locate,
)
from glyph.record import VerifiedCandidate
from testkit.graph_layout import layout

ALPHA = 0.1


@pytest.fixture(scope="module")
def tok():
    from glyph.render import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def tb(tok):
    return TokenBytes(tok)


def enc(tok):
    return lambda text: tok.encode(text, add_special_tokens=False)


def conversation(label: str, decision: str = "KEEP", spacing: str = "") -> list[tuple[str, str]]:
    call = 'CALL {"id": "3", "tool": "python_test", "args": {}}'
    return [
        ("system", "You fix a Python function."),
        ("user", "Write f. Your code must pass these tests."),
        ("assistant", 'Let me look.\nCALL {"id": "1", "tool": "read_file", "args": {"path": "solution.py"}}'),
        ("user", "RESULT 1 read_file ok\n# TODO\nbudget: 7 tool calls left"),
        (
            "assistant",
            'CALL {"id": "2", "tool": "apply_patch", "args": {"path": "solution.py", "find": "x", '
            '"replace": "y"}}',
        ),
        ("user", "RESULT 2 apply_patch ok\nbudget: 6 tool calls left"),
        (
            "assistant",
            f"Looks right.\n<PREDICTION>{spacing}{label}{spacing}</PREDICTION>\n"
            f"<DECISION>{decision}</DECISION>\n{call}",
        ),
        ("user", "RESULT 3 python_test PASS\nbudget: 5 tool calls left"),
        ("assistant", "FINAL: done."),
    ]


def candidate(turns, sampled: str, verified: str, at: int = 6) -> VerifiedCandidate:
    """As finalize records it (``info["glyph"]``) and the adapter decodes it."""
    return msgspec.convert({
        "index": 0,
        "sha256": "0" * 64,
        "sampled_label": sampled,
        "verified_label": verified,
        "decision": "KEEP",
        "context": [{"role": r, "content": c} for r, c in turns[:at]],
        "prediction_turn": turns[at][1],
    }, VerifiedCandidate)


def span_bytes(tb, node, start, end) -> bytes:
    return b"".join(tb(t) for t in node.token_ids[start:end])


@pytest.mark.parametrize("label", [o.value for o in Outcome])
def test_the_span_starts_at_the_token_holding_the_tags_gt(tok, tb, label):
    turns = conversation(label)
    nodes = layout(tok, turns)
    loc = locate(nodes, find_node(nodes, candidate(turns, label, label).context, turns[6][1]), tb, label)
    data = span_bytes(tb, nodes[6], loc.start, loc.end)
    assert data.startswith(b">") and data.rstrip(b"<>/").endswith(label.encode()[-1:])
    assert label.encode() in data
    before = span_bytes(tb, nodes[6], loc.first_sampled, loc.start)
    assert before.endswith(b"<PREDICTION"), before  # nothing of the label before the span


def test_qwen3_bpe_hazard_the_gt_token_is_the_first_label_decision(tok, tb):
    """`>P`/`>R` merge the tag's `>` with the label; ASSERTION_FAILURE keeps a lone `>`:
    the span must start at that token in every case (re-encoding `PASS` alone would miss `>P`)."""
    firsts = {}
    for label in ("PASS", "RUNTIME_ERROR", "ASSERTION_FAILURE"):
        turns = conversation(label)
        nodes = layout(tok, turns)
        loc = locate(nodes, 6, tb, label)
        firsts[label] = tb(nodes[6].token_ids[loc.start])
    assert firsts == {"PASS": b">P", "RUNTIME_ERROR": b">R", "ASSERTION_FAILURE": b">"}


def test_correct_prediction_trains_ce_in_place_and_no_rl_on_the_label(tok, tb):
    turns = conversation("PASS")
    nodes = layout(tok, turns)
    n = len(nodes)
    out = annotate(nodes, [candidate(turns, "PASS", "PASS")], tb, enc(tok), alpha=ALPHA)
    assert (out.labels, out.in_place, out.grafted, out.unlocated) == (1, 1, 0, 0)
    assert len(nodes) == n
    loc = locate(nodes, 6, tb, "PASS")
    node = nodes[6]
    ce, rl = node.loss_weights["ce"], node.loss_weights["rl"]
    assert [i for i, w in enumerate(ce) if w] == list(range(loc.start, loc.end))
    assert all(w == ALPHA for w in ce[loc.start : loc.end])
    for i, (m, w) in enumerate(zip(node.mask, rl)):
        assert w == (0.0 if (not m or loc.start <= i < loc.end) else 1.0)
    for other in (2, 4, 8):  # every other sampled node: rl 1.0 on every sampled token, no ce
        assert nodes[other].loss_weights == {"rl": [1.0 if m else 0.0 for m in nodes[other].mask]}
    for prompt in (0, 1, 3, 5, 7):
        assert nodes[prompt].loss_weights is None


@pytest.mark.parametrize(
    "sampled,verified",
    [
        ("PASS", "RUNTIME_ERROR"),
        ("PASS", "ASSERTION_FAILURE"),
        ("ASSERTION_FAILURE", "PASS"),
        ("RUNTIME_ERROR", "SYNTAX_ERROR"),
    ],
)
def test_wrong_prediction_grafts_a_ce_only_node_at_the_same_prefix(tok, tb, sampled, verified):
    turns = conversation(sampled)
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, sampled, verified)], tb, enc(tok), alpha=ALPHA)
    assert (out.in_place, out.grafted) == (0, 1) and len(nodes) == 10
    g, node = nodes[-1], nodes[6]
    loc = locate(nodes, 6, tb, sampled)
    assert g.parent == node.parent and not any(g.mask)
    assert g.token_ids[: loc.start] == node.token_ids[: loc.start]  # the policy's own tokens up to the span
    path = [t for i in range(6) for t in nodes[i].token_ids] + g.token_ids
    text = tok.decode(path, skip_special_tokens=False)
    assert text.endswith(f"<PREDICTION>{verified}</PREDICTION>")
    assert text.startswith(
        tok.decode([t for i in range(6) for t in nodes[i].token_ids], skip_special_tokens=False)
    )
    ce = g.loss_weights["ce"]
    on = [i for i, w in enumerate(ce) if w]
    assert on == list(range(on[0], on[-1] + 1)) and all(ce[i] == ALPHA for i in on)
    held = b"".join(tb(g.token_ids[i]) for i in on)
    assert held.startswith(b">") and verified.encode() in held and b"</" not in held.replace(b"</P", b"")
    # canonical: the continuation is how the tokenizer encodes the corrected turn
    corrected = tok.decode(g.token_ids[loc.first_sampled :], skip_special_tokens=False)
    assert g.token_ids[loc.first_sampled :] == tok.encode(corrected, add_special_tokens=False)
    # the sampled node keeps rl 0 on its label and gets no ce
    assert "ce" not in node.loss_weights and not any(node.loss_weights["rl"][loc.start : loc.end])
    assert g.message["content"] == corrected


def test_a_non_canonical_sampled_tokenization_still_grafts_canonically(tok, tb):
    """The policy may sample `>` `P` `A` `S` `S` one byte-level token at a time."""
    turns = conversation("PASS")
    text = turns[6][1]
    head, tail = text.split("<PREDICTION>")
    odd = (
        enc(tok)(head + "<PREDICTION")
        + [tok.convert_tokens_to_ids(c) for c in ">PASS"]
        + enc(tok)(tail.removeprefix("PASS"))
    )
    odd.append(tok.convert_tokens_to_ids("<|im_end|>"))
    nodes = layout(tok, turns, {6: odd})
    loc = locate(nodes, 6, tb, "PASS")
    assert loc.end - loc.start == 5
    keep, cont, (a, b) = graft_tokens(loc, "RUNTIME_ERROR", tb, enc(tok))
    assert keep == loc.start
    assert cont == enc(tok)(">RUNTIME_ERROR</PREDICTION>")
    assert b"".join(tb(t) for t in cont[a:b]).startswith(b">R")


def test_whitespace_inside_the_tags_is_outside_the_label_span(tok, tb):
    turns = conversation("TIMEOUT", spacing=" ")
    nodes = layout(tok, turns)
    loc = locate(nodes, 6, tb, "TIMEOUT")
    held = span_bytes(tb, nodes[6], loc.start, loc.end)
    assert held.startswith(b">") and held.strip().endswith(b"TIMEOUT")


def test_predictions_that_cannot_be_located_are_counted_and_the_rest_trained(tok, tb):
    turns = conversation("PASS")
    nodes = layout(tok, turns)
    good = candidate(turns, "PASS", "PASS")
    wrong_context = dataclasses.replace(good, context=good.context[:-1])
    wrong_label = dataclasses.replace(good, sampled_label="TIMEOUT")
    no_verified = dataclasses.replace(good, verified_label=None)
    out = annotate(nodes, [wrong_context, wrong_label, no_verified, good], tb, enc(tok), alpha=ALPHA)
    assert (out.labels, out.unlocated, out.in_place) == (4, 3, 1)
    assert "context" in out.errors[0] and "TIMEOUT" in out.errors[1] and "verified" in out.errors[2]
    with pytest.raises(PredictionNotFound):
        find_node(nodes, good.context, "some other turn")
    assert out.metrics()["predict_unlocated"] == 3.0


def test_a_graft_longer_than_max_tokens_is_dropped_not_truncated(tok, tb):
    turns = conversation("PASS")
    nodes = layout(tok, turns)
    before = sum(len(n.token_ids) for n in nodes[:6])
    loc = locate(nodes, 6, tb, "PASS")
    keep, cont, _ = graft_tokens(loc, "ASSERTION_FAILURE", tb, enc(tok))
    length = before + keep + len(cont)
    out = annotate(
        nodes,
        [candidate(turns, "PASS", "ASSERTION_FAILURE")],
        tb,
        enc(tok),
        alpha=ALPHA,
        max_tokens=length - 1,
    )
    assert (out.grafted, out.graft_too_long, len(nodes)) == (0, 1, 9)
    assert not any(nodes[6].loss_weights["rl"][loc.start : loc.end])  # still held out of RL
    nodes = layout(tok, turns)
    out = annotate(
        nodes, [candidate(turns, "PASS", "ASSERTION_FAILURE")], tb, enc(tok), alpha=ALPHA, max_tokens=length
    )
    assert (out.grafted, out.graft_too_long, out.graft_tokens) == (1, 0, length)


def test_an_in_place_label_past_max_tokens_is_counted(tok, tb):
    turns = conversation("PASS")
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, "PASS", "PASS")], tb, enc(tok), alpha=ALPHA, max_tokens=50)
    assert out.in_place == 1 and out.past_limit == 1


def test_alpha_must_not_be_negative(tok, tb):
    with pytest.raises(ValueError):
        annotate([], [], tb, enc(tok), alpha=-0.1)


@pytest.mark.parametrize("sampled,verified", [("PASS", "PASS"), ("PASS", "ASSERTION_FAILURE")])
def test_alpha_zero_trains_no_ce_and_keeps_labels_out_of_rl(tok, tb, sampled, verified):
    turns = conversation(sampled)
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, sampled, verified)], tb, enc(tok), alpha=0.0)
    assert len(nodes) == 9  # no graft
    assert (out.ce_off, out.in_place, out.grafted, out.labels_trained, out.ce_tokens) == (1, 0, 0, 0, 0)
    assert all("ce" not in (n.loss_weights or {}) for n in nodes)
    loc = locate(nodes, 6, tb, sampled)
    rl = nodes[6].loss_weights["rl"]
    assert not any(rl[loc.start : loc.end]) and sum(rl) == sum(nodes[6].mask) - (loc.end - loc.start)


def test_default_graft_node_builds_a_sibling_of_the_same_model_type():
    pydantic = pytest.importorskip("pydantic")
    from glyph.predict.annotate import default_graft_node

    class Msg(pydantic.BaseModel):
        role: str = "assistant"
        content: str | None = None

    class MNode(pydantic.BaseModel):
        parent: int | None = None
        message: Msg
        sampled: bool = False
        token_ids: list[int] = []
        mask: list[bool] = []
        is_content: list[bool] = []
        logprobs: list[float] = []
        loss_weights: dict[str, list[float]] | None = None

    s = MNode(
        parent=3,
        message=Msg(content="x"),
        sampled=True,
        token_ids=[1, 2],
        mask=[False, True],
        logprobs=[-1.0],
    )
    g = default_graft_node(s, [1, 5, 6], "y", [0.0, 0.0, 0.1])
    assert isinstance(g, MNode) and g.parent == 3 and g.message.content == "y" and s.message.content == "x"
    assert g.mask == [False] * 3 and g.loss_weights == {"ce": [0.0, 0.0, 0.1]} and not g.sampled


def test_a_sampled_label_without_a_verified_record_is_still_held_out_of_rl(tok, tb):
    """A rollout that lost its record (or a turn the protocol rejected) still sampled label
    tokens: they never earn RL credit, and nothing trains them with CE."""
    turns = conversation("PASS")
    nodes = layout(tok, turns)
    out = annotate(nodes, [], tb, enc(tok), alpha=ALPHA)
    loc = locate(nodes, 6, tb)
    assert (out.labels, out.unverified, out.in_place, out.grafted) == (0, 1, 0, 0)
    assert not any(nodes[6].loss_weights["rl"][loc.start : loc.end]) and "ce" not in nodes[6].loss_weights
    assert sum(nodes[6].loss_weights["rl"]) == sum(nodes[6].mask) - (loc.end - loc.start)


# ---------------------------------------------------------------- labels the protocol rejects, cut, quoted


def sampled_turn(tok, text: str, *, closed: bool = True) -> list:
    """A graph whose prediction turn the policy sampled as ``text`` (no ``<|im_end|>``
    when a token limit cut it: ``closed=False``)."""
    turns = conversation("PASS")
    turns[6] = ("assistant", text)
    ids = enc(tok)(text) + ([tok.convert_tokens_to_ids("<|im_end|>")] if closed else [])
    return layout(tok, turns[:7], {6: ids})


def held(tb, node) -> list[bytes]:
    """The runs of sampled tokens with rl 0, as bytes."""
    rl, runs, prev = node.loss_weights["rl"], [], None
    for i, (m, w) in enumerate(zip(node.mask, rl)):
        if m and w == 0.0:
            if prev == i - 1:
                runs[-1] += tb(node.token_ids[i])
            else:
                runs.append(tb(node.token_ids[i]))
            prev = i
    return runs


@pytest.mark.parametrize(
    "text,held_bytes",
    [
        ("<PREDICTION>Pass</PREDICTION>\n<DECISION>KEEP</DECISION>\nCALL {}", b">Pass"),
        ("<PREDICTION>pass</PREDICTION>\n<DECISION>KEEP</DECISION>\nCALL {}", b">pass"),
        ("<PREDICTION>MAYBE</PREDICTION>\n<DECISION>KEEP</DECISION>\nCALL {}", b">MAYBE"),
        ("<prediction>PASS</prediction>\n<DECISION>KEEP</DECISION>\nCALL {}", b">PASS"),
        ("<PREDICTION>two words</PREDICTION>\nCALL {}", b">two words"),
        ("<PREDICTION>PASS\n<DECISION>KEEP</DECISION>\nCALL {}", b">PASS"),
        ("<PREDICTION></PREDICTION>\nCALL {}", b"></"),  # Qwen3 merges the empty label's ">" with "</"
    ],
)
def test_a_label_the_protocol_rejects_is_held_out_of_rl_and_counted(tok, tb, text, held_bytes):
    nodes = sampled_turn(tok, text)
    out = annotate(nodes, [], tb, enc(tok), alpha=ALPHA)
    assert (out.invalid, out.truncated, out.unverified, out.labels_trained) == (1, 0, 0, 0)
    assert out.metrics()["predict_invalid"] == 1.0
    assert held(tb, nodes[6]) == [held_bytes]
    rl = nodes[6].loss_weights["rl"]
    assert out.rl_held_tokens == sum(1 for m, w in zip(nodes[6].mask, rl) if m and not w)
    assert "ce" not in nodes[6].loss_weights


def test_a_rejected_label_that_a_record_names_is_not_trained(tok, tb):
    text = "<PREDICTION>Pass</PREDICTION>\n<DECISION>KEEP</DECISION>\nCALL {}"
    nodes = sampled_turn(tok, text)
    turns = [(n.message["role"], n.message["content"]) for n in nodes]
    out = annotate(nodes, [candidate(turns, "Pass", "PASS")], tb, enc(tok), alpha=ALPHA)
    assert (out.unlocated, out.invalid, out.labels_trained, len(nodes)) == (1, 1, 0, 7)
    assert "not one the protocol accepts" in out.errors[0]


@pytest.mark.parametrize(
    "text,held_bytes",
    [
        ("Looks right.\n<PREDICTION>P", b">P"),
        ("<PREDICTION>ASSERTION_FAI", b">ASSERTION_FAI"),
        ("<PREDICTION>PASS</PRED", b">PASS"),
        ("<PREDICTION>", b">"),
        ("<PREDICTION>\n", b">\n"),
    ],
)
def test_a_label_cut_by_the_token_limit_is_held_out_of_rl_and_counted(tok, tb, text, held_bytes):
    """finish reason `length` with exclude_truncated off: the cut label must not earn RL credit."""
    nodes = sampled_turn(tok, text, closed=False)
    out = annotate(nodes, [], tb, enc(tok), alpha=ALPHA)
    assert (out.truncated, out.invalid) == (1, 0) and out.metrics()["predict_truncated"] == 1.0
    assert held(tb, nodes[6]) == [held_bytes]


def test_the_same_label_closed_by_im_end_mid_label_is_invalid_not_truncated(tok, tb):
    nodes = sampled_turn(tok, "<PREDICTION>PASS", closed=True)
    out = annotate(nodes, [], tb, enc(tok), alpha=ALPHA)
    assert (out.truncated, out.invalid) == (0, 1)


@pytest.mark.parametrize("sampled,verified", [("PASS", "PASS"), ("PASS", "TIMEOUT")])
def test_a_prediction_recorded_twice_is_a_named_error_and_trains_once(tok, tb, sampled, verified):
    turns = conversation(sampled)
    nodes = layout(tok, turns)
    cand = candidate(turns, sampled, verified)
    twice = dataclasses.replace(cand, index=1)
    out = annotate(nodes, [cand, twice], tb, enc(tok), alpha=ALPHA)
    assert (out.labels, out.duplicates, out.labels_trained, out.unlocated) == (2, 1, 1, 0)
    assert len(nodes) == 9 + (sampled != verified)  # one graft at most
    assert out.errors == [
        "DuplicateRecord: candidate 1: node 6's label is named by an earlier record; trained once"
    ]
    assert out.metrics()["predict_duplicates"] == 1.0
    ce = (nodes[-1] if sampled != verified else nodes[6]).loss_weights["ce"]
    assert sum(1 for w in ce if w) == out.ce_tokens and all(w in (0.0, ALPHA) for w in ce)


THINK_MENTION = "<think>\nMaybe <PREDICTION>PASS</PREDICTION>? Check the edge case first.\n</think>\n\n"


@pytest.mark.parametrize(
    "sampled,verified", [("ASSERTION_FAILURE", "ASSERTION_FAILURE"), ("TIMEOUT", "PASS")]
)
def test_a_tag_in_a_sampled_think_block_does_not_hide_the_prediction(tok, tb, sampled, verified):
    """The message content carries no think block (the renderer parses it out); the tokens do."""
    turns = conversation(sampled)
    ids = enc(tok)(THINK_MENTION + turns[6][1]) + [tok.convert_tokens_to_ids("<|im_end|>")]
    nodes = layout(tok, turns, {6: ids})
    out = annotate(nodes, [candidate(turns, sampled, verified)], tb, enc(tok), alpha=ALPHA)
    assert (out.unlocated, out.quoted, out.labels_trained) == (0, 1, 1), out.errors
    runs = held(tb, nodes[6])
    assert len(runs) == 2 and runs[0] == b">PASS" and sampled.encode() in runs[1]
    if sampled != verified:
        text = tok.decode(nodes[-1].token_ids, skip_special_tokens=False)
        assert text.endswith(f"<PREDICTION>{verified}</PREDICTION>") and "Maybe <PREDICTION>PASS" in text


def test_a_tag_in_a_tool_argument_does_not_hide_the_prediction(tok, tb):
    call = 'CALL {"id": "3", "tool": "apply_patch", "args": {"path": "solution.py", "find": "x", ' \
        '"replace": "# <PREDICTION>PASS</PREDICTION>"}}'
    turns = conversation("RUNTIME_ERROR", decision="REVISE")
    turns[6] = ("assistant", turns[6][1].rsplit("\n", 1)[0] + "\n" + call)
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, "RUNTIME_ERROR", "RUNTIME_ERROR")], tb, enc(tok), alpha=ALPHA)
    assert (out.unlocated, out.quoted, out.in_place) == (0, 1, 1), out.errors
    ce = nodes[6].loss_weights["ce"]
    trained = b"".join(tb(t) for t, w in zip(nodes[6].token_ids, ce) if w)
    assert trained == b">RUNTIME_ERROR"


# ---------------------------------------------------------------- the study profile's turn and span rule


def study_turn(label: str, decision: str = "KEEP", replace: str = "y") -> str:
    from glyph.agent import study as S

    if decision == S.KEEP:
        call = S.CALL_PREFIX + S.PYTHON_TEST + " " + json.dumps(
            {S.ID_KEY: "3", "project_path": "data/blueprints/mbpp_11"}, separators=S.JSON_SEPARATORS
        )
    else:
        call = S.CALL_PREFIX + S.APPLY_PATCH + " " + json.dumps(
            {S.ID_KEY: "3", "file_path": "solution.py", "find": "x", "replace": replace},
            separators=S.JSON_SEPARATORS,
        )
    return "\n".join(
        [S.PREDICTION_LINE.format(outcome=label), S.DECISION_LINE.format(decision=decision), call]
    )


def study_rule_tokens(tok, text: str) -> list[int]:
    """The study's own rule (its src/glyph/prime_rl.py, _mask_label_tokens): re-encode the text with
    offsets and take each token whose characters overlap the label's (written here from its
    description, on the fast tokenizer's offsets)."""
    m = re.search(r"<PREDICTION>\s*([A-Z_]+)\s*</PREDICTION>", text)
    a, b = m.span(1)
    enc_ = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return [t for t, (s, e) in zip(enc_["input_ids"], enc_["offset_mapping"]) if e > a and s < b]


@pytest.mark.parametrize("label", [o.value for o in Outcome])
@pytest.mark.parametrize("profile", ["glyph", "study"])
def test_the_study_rule_takes_the_tokens_the_studys_reencoding_takes(tok, tb, label, profile):
    text = study_turn(label) if profile == "study" else conversation(label)[6][1]
    ids = enc(tok)(text)
    a, b = label_token_span(ids, tb, "study")
    assert ids[a:b] == study_rule_tokens(tok, text)
    d_a, d_b = label_token_span(ids, tb, "decision")
    assert d_b == b and tb(ids[d_a]).startswith(b">")
    lone = tb(ids[d_a]) == b">"
    assert lone == (label not in ("PASS", "RUNTIME_ERROR"))  # Qwen3's BPE
    assert d_a == (a - 1 if lone else a)


def test_label_token_span_needs_exactly_one_valid_prediction(tok, tb):
    with pytest.raises(PredictionNotFound):
        label_token_span(enc(tok)("no prediction here"), tb)
    with pytest.raises(PredictionNotFound):
        label_token_span(enc(tok)("<PREDICTION>PASS</PREDICTION><PREDICTION>PASS</PREDICTION>"), tb)
    with pytest.raises(PredictionNotFound):
        label_token_span(enc(tok)("<PREDICTION>Pass</PREDICTION>"), tb)
    mention = study_turn("TIMEOUT", "REVISE", replace="<PREDICTION>PASS</PREDICTION>")
    ids = enc(tok)(mention)
    a, b = label_token_span(ids, tb, "study")
    assert b"".join(tb(t) for t in ids[a:b]) == b"TIMEOUT"
    with pytest.raises(ValueError, match="rule"):
        label_token_span(ids, tb, "nearest")  # type: ignore[arg-type]


def study_conversation(label: str) -> list[tuple[str, str]]:
    turns = conversation(label)
    turns[6] = ("assistant", study_turn(label))
    return turns


@pytest.mark.parametrize("label", ["ASSERTION_FAILURE", "SYNTAX_ERROR", "TIMEOUT", "OTHER"])
def test_under_the_study_rule_a_lone_gt_keeps_rl_credit_and_gets_no_ce(tok, tb, label):
    turns = study_conversation(label)
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, label, label)], tb, enc(tok), alpha=ALPHA, rule="study")
    node = nodes[6]
    loc = locate(nodes, 6, tb, label, rule="study")
    assert tb(node.token_ids[loc.start - 1]) == b">" and node.loss_weights["rl"][loc.start - 1] == 1.0
    assert b"".join(tb(t) for t in node.token_ids[loc.start : loc.end]) == label.encode()
    ce = node.loss_weights["ce"]
    assert [i for i, w in enumerate(ce) if w] == list(range(loc.start, loc.end))
    assert (out.labels_trained, out.ce_tokens) == (1, loc.end - loc.start)
    nodes = layout(tok, turns)
    decision = annotate(nodes, [candidate(turns, label, label)], tb, enc(tok), alpha=ALPHA)
    assert decision.ce_tokens == out.ce_tokens + 1 and nodes[6].loss_weights["rl"][loc.start - 1] == 0.0


@pytest.mark.parametrize(
    "sampled,verified", [("PASS", "ASSERTION_FAILURE"), ("TIMEOUT", "RUNTIME_ERROR"), ("OTHER", "PASS")]
)
def test_under_the_study_rule_a_graft_trains_the_studys_ce_tokens(tok, tb, sampled, verified):
    """The study's CE sample (its _auxiliary_sample) encodes <PREDICTION>ACTUAL</PREDICTION> and trains the
    tokens overlapping ACTUAL: the graft's CE tokens are those."""
    turns = study_conversation(sampled)
    nodes = layout(tok, turns)
    out = annotate(nodes, [candidate(turns, sampled, verified)], tb, enc(tok), alpha=ALPHA, rule="study")
    assert out.grafted == 1
    g = nodes[-1]
    trained = [t for t, w in zip(g.token_ids, g.loss_weights["ce"]) if w]
    assert trained == study_rule_tokens(tok, f"<PREDICTION>{verified}</PREDICTION>")
    assert out.ce_tokens == len(trained)
    # the sampled node: only the tokens overlapping the sampled label lost RL credit
    (run,) = held(tb, nodes[6])
    assert run.lstrip(b">") == sampled.encode()
    assert run.startswith(b">") == (sampled in ("PASS", "RUNTIME_ERROR"))


def test_the_study_profiles_turn_trains_in_place_and_grafts(tok, tb):
    for sampled, verified in [("PASS", "PASS"), ("PASS", "SYNTAX_ERROR")]:
        turns = study_conversation(sampled)
        nodes = layout(tok, turns)
        out = annotate(nodes, [candidate(turns, sampled, verified)], tb, enc(tok), alpha=ALPHA)
        assert (out.in_place, out.grafted, out.unlocated) == ((1, 0, 0) if sampled == verified else (0, 1, 0))
        if sampled != verified:
            text = tok.decode(nodes[-1].token_ids, skip_special_tokens=False)
            assert text.endswith(f"\n<PREDICTION>{verified}</PREDICTION>")
