"""The span rules of ``benchmarks/label_span.py`` on the real Qwen3 vocabulary:
which tokens of ``<PREDICTION>LABEL</PREDICTION>`` each rule calls the label.
No torch needed (the benchmark imports it only to train)."""

import importlib.util
from pathlib import Path

import pytest

from glyph.render import load_tokenizer

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "label_span.py"
_spec = importlib.util.spec_from_file_location("label_span_benchmark", _PATH)
label_span = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(label_span)

# What the benchmark's docstring documents: the study's rule leaves out the lone ">" that
# precedes four labels, the decision rule starts at the token holding the tag's ">".
STUDY = {
    "PASS": [">P", "ASS"],
    "RUNTIME_ERROR": [">R", "UN", "TIME", "_ERROR"],
    "ASSERTION_FAILURE": ["ASSERT", "ION", "_FAILURE"],
    "SYNTAX_ERROR": ["SY", "NTAX", "_ERROR"],
    "TIMEOUT": ["TIME", "OUT"],
    "OTHER": ["OTHER"],
}
DECISION = {lab: pieces if pieces[0].startswith(">") else [">"] + pieces for lab, pieces in STUDY.items()}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def encode(tok, text):
    return tok(text, add_special_tokens=False, return_offsets_mapping=True)


@pytest.mark.parametrize("rule,expected", [("study", STUDY), ("decision", DECISION)])
def test_documented_spans_for_the_six_labels(tok, rule, expected):
    assert set(expected) == set(label_span.LABELS)
    for lab, pieces in expected.items():
        ids = encode(tok, f"Checking.\n<PREDICTION>{lab}</PREDICTION>\n<DECISION>KEEP</DECISION>")["input_ids"]
        span = label_span.span_tokens(ids, tok, rule)
        assert span == list(range(span[0], span[-1] + 1)), (rule, lab)
        assert [tok.decode([ids[i]]) for i in span] == pieces, (rule, lab)


@pytest.mark.parametrize("prefix", ["", "Checking.\n", "Prüfung ✓ — 校验\n", "x>"])
def test_study_rule_matches_character_offsets_of_the_reencoded_text(tok, prefix):
    # The study's own computation: re-encode the text, keep tokens whose character offsets
    # overlap the label's characters (its src/glyph/prime_rl.py:67-68).
    for lab in label_span.LABELS:
        text = f"{prefix}<PREDICTION>{lab}</PREDICTION>"
        enc = encode(tok, text)
        start = text.index("<PREDICTION>") + len("<PREDICTION>")
        end = start + len(lab)
        want = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > start and a < end]
        assert label_span.span_tokens(enc["input_ids"], tok, "study") == want, (prefix, lab)
        decision = label_span.span_tokens(enc["input_ids"], tok, "decision")
        # The decision span holds the study's and differs from it at most by the lone ">" before it.
        assert decision[-1] == want[-1] and decision[0] in (want[0], want[0] - 1)


def test_span_tokens_refuses_what_it_cannot_read(tok):
    one = encode(tok, "<PREDICTION>PASS</PREDICTION>")["input_ids"]
    two = encode(tok, "<PREDICTION>PASS</PREDICTION> <PREDICTION>OTHER</PREDICTION>")["input_ids"]
    none = encode(tok, "no prediction here")["input_ids"]
    for ids in (two, none):
        with pytest.raises(ValueError):
            label_span.span_tokens(ids, tok, "study")
    with pytest.raises(ValueError, match="unknown span rule"):
        label_span.span_tokens(one, tok, "chars")
