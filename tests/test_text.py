"""glyph.text: text that model code controls, made encodable (and printable)."""

import json

import pytest

from glyph.agent.tools import sha256
from glyph.grading import grade
from glyph.redteam import DEMO_TESTS, REFEREE_TESTS
from glyph.text import encodable, encodable_data, printable, source_bytes

VALID = ["", "plain ascii", "héllo wörld", "emoji 😀 and astral \U0010ffff", "NUL \x00 ESC \x1b[2J tab\t\nnl",
         "a literal backslash-u: \\udcff", "rtl \u202e override"]


@pytest.mark.parametrize("text", VALID)
def test_valid_text_is_returned_unchanged(text):
    assert encodable(text) is text


@pytest.mark.parametrize("text,want", [
    ("\udcff", "\\udcff"),  # a lone low surrogate (what surrogateescape makes of byte 0xff)
    ("\ud800", "\\ud800"),  # a lone high surrogate (only a JSON or Python escape makes one)
    ("ValueError: bad \udcff \ud800 end", "ValueError: bad \\udcff \\ud800 end"),
    ("\ud83d\ude00", "\\ud83d\\ude00"),  # a surrogate pair as two code points is no emoji in a str
    ("😀\udfff😀", "😀\\udfff😀"),
])
def test_lone_surrogates_are_escaped_visibly(text, want):
    got = encodable(text)
    assert got == want
    assert got.encode("utf-8").decode("utf-8") == got
    assert encodable(got) == got  # stable: a second pass changes nothing


def test_escapes_read_the_same_whoever_wrote_them():
    """A backslash is not doubled: the model's own escape text and one made here look alike."""
    assert encodable("\\udcff") == encodable("\udcff") == "\\udcff"


def test_data_is_made_encodable_throughout():
    raw = {"reason": "x\ud800", "n": 3, "ok": True, "none": None, "f": 1.5,
           "list": ["\udcff", {"k\udc80": ("t\ud800", 1)}], "clean": "😀"}
    got = encodable_data(raw)
    assert got == {"reason": "x\\ud800", "n": 3, "ok": True, "none": None, "f": 1.5,
                   "list": ["\\udcff", {"k\\udc80": ("t\\ud800", 1)}], "clean": "😀"}
    json.dumps(got, ensure_ascii=False).encode("utf-8")  # would raise on a surrogate
    assert encodable_data(got) == got
    assert raw["reason"] == "x\ud800"  # the input is not changed


def test_printable_escapes_what_a_terminal_acts_on():
    assert printable("ok\n\tindented") == "ok\n\tindented"
    assert printable("\x1b[2J\x1b]0;title\x07 \x00 \r \x7f \x9b") == "\\x1b[2J\\x1b]0;title\\x07 \\x00 \\x0d \\x7f \\x9b"
    assert printable("rtl \u202e and \u2066 isolate") == "rtl \\u202e and \\u2066 isolate"
    assert printable("bad \ud800 😀 é") == "bad \\ud800 😀 é"
    assert printable(printable("\x1b\ud800")) == printable("\x1b\ud800")


@pytest.mark.parametrize("text", ["x = 1\n", "s = 'é😀'\n", "b = '\udcff'\n", "c = '\ud800'\n", "\udcff\ud800"])
def test_source_bytes_never_raise(text):
    data = source_bytes(text)
    if "\ud800" not in text:  # what surrogateescape encodes round-trips
        assert data.decode("utf-8", "surrogateescape") == text
    else:  # not valid UTF-8: Python will not compile it
        with pytest.raises(UnicodeDecodeError):
            data.decode("utf-8")


# ---------------------------------------------------------------- the grader's text


RAISES = 'def remove_first_last(s, ch):\n    raise ValueError("bad \\udcff \\ud800 end")\n'
RETURNS = 'def remove_first_last(s, ch):\n    return "\\ud800" + s\n'
AT_LOAD = 'raise KeyError("\\ud800 at load")\n'
ASSERT_MESSAGE = 'from solution import remove_first_last\ngot = remove_first_last("a", "a")\nassert got == "", got\n'


@pytest.mark.parametrize("source,tests,outcome,shown", [
    (RAISES, DEMO_TESTS, "RUNTIME_ERROR", "ValueError: bad \\udcff \\ud800 end"),
    (RETURNS, DEMO_TESTS, "ASSERTION_FAILURE", "got '\\ud800hello'"),
    (AT_LOAD, DEMO_TESTS, "RUNTIME_ERROR", "KeyError: '\\ud800 at load'"),
    (RAISES, REFEREE_TESTS, "RUNTIME_ERROR", "ValueError: bad \\udcff \\ud800 end (raised by the solution)"),
    (RETURNS, ASSERT_MESSAGE, "ASSERTION_FAILURE", "AssertionError: \\ud800a"),
    ('def remove_first_last(s, ch):\n    return "\\ud800"\nprint("\\ud800")\n', DEMO_TESTS,
     "ASSERTION_FAILURE", "got '\\ud800'"),
], ids=["fast-raise", "fast-got", "load", "referee-remote", "referee-assert-message", "printed"])
def test_every_grade_the_grader_returns_is_encodable(sandbox, source, tests, outcome, shown):
    g = grade(source, "", tests, sandbox=sandbox)
    assert g.outcome.value == outcome and shown in g.detail, g.detail
    json.dumps(g.to_json(), ensure_ascii=False).encode("utf-8")  # raised on the surrogate before


def test_a_solution_utf8_cannot_encode_is_a_syntax_error_not_a_crash(sandbox):
    """A lone high surrogate in the source (from a JSON escape in a model's reply):
    the grader and the tools' hash take it, and Python refuses to compile it."""
    source = 'def remove_first_last(s, ch):\n    return "\ud800"\n'
    assert len(sha256(source)) == 64
    g = grade(source, "", DEMO_TESTS, sandbox=sandbox)
    assert g.outcome.value == "SYNTAX_ERROR", g.detail
