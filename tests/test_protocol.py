import random
import re

import pytest

from glyph.agent.profiles.base import Call, ProtocolError
from glyph.agent.profiles.base import LABEL, tagged, tagged_line
from glyph.agent.profiles.glyph import (DEFAULT_BUDGET, apply_patch, budget_left, messages, parse_turn,
    result_message, system_prompt, user_prompt)

READ = 'CALL {"id": "1", "tool": "read_file", "args": {"path": "solution.py"}}'
TEST = 'CALL {"id": "2", "tool": "python_test", "args": {}}'
PATCH = 'CALL {"id": "3", "tool": "apply_patch", "args": {"path": "solution.py", "find": "a", "replace": "b"}}'


def test_a_call_and_a_final():
    turn = parse_turn("I'll read it.\n" + READ)
    assert turn.call == Call("1", "read_file", {"path": "solution.py"}) and not turn.final
    assert parse_turn("FINAL: done").final


@pytest.mark.parametrize("text,why", [
    ("no action", "exactly one action line"),
    (READ + "\n" + TEST, "exactly one action line"),
    (READ + "\nFINAL: x", "exactly one action line"),
    ('CALL {"id": "1", "tool": "read_file", "args": {"path": "solution.py"}', "not valid JSON"),
    ('CALL {"id": "1",\n "tool": "python_test", "args": {}}', "on one line"),
    ('CALL {"id": "1", "tool": "read_file", "args": {"path": }}', "not valid JSON"),
    ('CALL {"id": "", "tool": "read_file", "args": {"path": "x"}}', "non-empty string id"),
    ('CALL {"id": "1", "tool": "rm", "args": {}}', "unknown tool"),
    ('CALL {"id": "1", "tool": "python_test", "args": {"x": "1"}}', "takes no arguments"),
    ("<PREDICTION>PASS</PREDICTION>\n" + READ, "only right after"),
])
def test_protocol_errors_say_why(text, why):
    with pytest.raises(ProtocolError, match=why):
        parse_turn(text)


def test_duplicate_ids_are_refused():
    with pytest.raises(ProtocolError, match="already used"):
        parse_turn(READ, seen_ids=frozenset({"1"}))


def test_arm_b_prediction_turn():
    turn = parse_turn("<PREDICTION>PASS</PREDICTION>\n<DECISION>KEEP</DECISION>\n" + TEST, expect_prediction=True)
    assert (turn.prediction, turn.decision, turn.call.tool) == ("PASS", "KEEP", "python_test")
    turn = parse_turn("<PREDICTION>RUNTIME_ERROR</PREDICTION><DECISION>REVISE</DECISION>\n" + PATCH,
                      expect_prediction=True)
    assert turn.decision == "REVISE" and turn.call.tool == "apply_patch"


@pytest.mark.parametrize("text,why", [
    (TEST, "one <PREDICTION>"),
    ("<PREDICTION>MAYBE</PREDICTION><DECISION>KEEP</DECISION>\n" + TEST, "must be one of"),
    ("<PREDICTION>PASS</PREDICTION><DECISION>RUN</DECISION>\n" + TEST, "KEEP or REVISE"),
    ("<PREDICTION>PASS</PREDICTION><DECISION>KEEP</DECISION>\n" + PATCH, "KEEP is followed by python_test"),
    ("<PREDICTION>PASS</PREDICTION><DECISION>REVISE</DECISION>\n" + TEST, "KEEP is followed by python_test"),
    ("<DECISION>KEEP</DECISION><PREDICTION>PASS</PREDICTION>\n" + TEST, "order"),
    ("FINAL: done", "must predict"),
])
def test_arm_b_errors(text, why):
    with pytest.raises(ProtocolError, match=why):
        parse_turn(text, expect_prediction=True)


def test_apply_patch_needs_exactly_one_occurrence():
    assert apply_patch("a b", "a", "c") == "c b"
    for content in ("b", "a a"):
        with pytest.raises(ValueError, match="exactly once"):
            apply_patch(content, "a", "c")


def test_a_result_message_says_the_status_and_the_budget_left():
    msg = result_message(Call("7", "python_test"), "ASSERTION_FAILURE", budget_left=3)
    assert msg == "RESULT 7 python_test ASSERTION_FAILURE\nbudget: 3 tool calls left"
    assert budget_left(msg) == 3


def test_prompts_differ_by_arm_only_in_the_prediction_part():
    a, b = system_prompt("a"), system_prompt("b")
    assert b.startswith(a) and "<PREDICTION>" in b and "<PREDICTION>" not in a


def test_messages_name_the_budget_they_are_given():
    for budget in (1, DEFAULT_BUDGET, 13):
        system, user = messages("b", "Write f.", ["assert f() == 1"], budget)
        assert system == {"role": "system", "content": system_prompt("b", budget)}
        assert f"budget of {budget} tool calls" in system["content"]
        assert user == {"role": "user", "content": user_prompt("Write f.", ["assert f() == 1"])}
    assert messages("a", "Write f.", ["assert f() == 1"]) == messages("a", "Write f.", ["assert f() == 1"],
                                                                     DEFAULT_BUDGET)


# ---------------------------------------------------------------- the one label scanner


_OLD_PREDICTION = re.compile(r"<PREDICTION>\s*([A-Z_]+)\s*</PREDICTION>")
_OLD_DECISION = re.compile(r"<DECISION>\s*([A-Z]+)\s*</DECISION>")
_PIECES = ["<PREDICTION>", "</PREDICTION>", "<prediction>", "</Prediction>", "<DECISION>", "</DECISION>", "PASS",
           "REVISE", "KEEP", "RUNTIME_ERROR", "pass", "X Y", " ", "\n", "\t", "<", ">", "<think>", "</think>",
           "CALL ", "{}", "é", "\udcff"]


def test_the_scanner_reads_labels_as_the_grammars_regexes_did():
    """``tagged`` (the one scanner, ``glyph.agent.profiles.base``) gives the labels the grammars' own
    regexes gave before it replaced them (glyph's parse_turn, the study's episode: a tag, whitespace, the
    label, whitespace, the closing tag; a whole line for the study's shape rule), on 20,000 strings
    drawn from the pieces a turn is made of (seeded)."""
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        assert tagged(text, "PREDICTION") == _OLD_PREDICTION.findall(text), text
        assert tagged(text, "DECISION", re.compile("[A-Z]+")) == _OLD_DECISION.findall(text), text
        assert tagged(text, "DECISION") == re.findall(r"<DECISION>\s*([A-Z_]+)\s*</DECISION>", text), text
        line = text.strip()
        old = _OLD_PREDICTION.fullmatch(line)
        assert tagged_line(line, "PREDICTION") == (old.group(1) if old else None), line
    assert LABEL.pattern == "[A-Z_]+"
