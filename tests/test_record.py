"""The typed rollout record (``glyph.record``): what finalize writes is what
every reader decodes, old records still decode, and one rule says what a
rollout was."""

import json

import msgspec
import pytest

from glyph import record
from glyph.record import ERRORED, OK, TAMPERED, TIMED_OUT, MbppRecord, VerifiedCandidate

CANDIDATE = VerifiedCandidate(index=0, sha256="ab" * 32, verified_label="PASS", sampled_label="PASS",
                              decision="KEEP", context=[{"role": "user", "content": "RESULT 1"}],
                              prediction_turn="t", prediction_call="2")


def test_a_record_round_trips_through_json_as_verifiers_stores_it():
    rec = MbppRecord(reward=1.0, reason="passed", candidates=[CANDIDATE], metrics={"passed": 1.0},
                     final_outcome="PASS", sandbox={"mode": "bare"})
    info = {}
    record.store(info, rec)
    back = record.mbpp_record(json.loads(json.dumps(info)))
    assert back == rec and back.candidates == [CANDIDATE]


def test_a_record_written_before_the_type_still_decodes():
    """A record of an earlier glyph: a dict with some keys, candidates as dicts; the rest defaults."""
    old = {"reward": 0.0, "reason": "no visible test passed", "tamper": [],
           "candidates": [msgspec.to_builtins(CANDIDATE)], "metrics": {"tampered": 0.0}}
    rec = record.mbpp_record({"glyph": old})
    assert rec.candidates == [CANDIDATE] and rec.reward_suite == "base" and rec.sandbox is None


def test_no_record_and_a_wrong_record():
    assert record.mbpp_record({}) is None and record.mbpp_record(None) is None
    with pytest.raises(record.RecordError, match="candidates"):
        record.mbpp_record({"glyph": {"candidates": "many"}})


def test_a_fault_record_is_unscored_and_names_a_known_fault():
    rec = record.fault_record("tester_error", "tester_error: the test service answered HTTP 500")
    assert rec.reward is None and record.reward_of({"glyph": record.encode(rec)}, MbppRecord) == 0.0
    assert record.status(rec, ok=False, reward=None, timed_out=False) == ERRORED
    with pytest.raises(ValueError, match="fault"):
        record.fault_record("bad_luck", "x")


@pytest.mark.parametrize("rec,ok,reward,timed_out,want", [
    (MbppRecord(reward=1.0, reason="passed"), True, 1.0, False, OK),
    (MbppRecord(reward=0.0, reason="no visible test passed"), True, 0.0, False, OK),
    (MbppRecord(reward=0.0, tamper=["test 3: recorded PASS, re-grade OTHER"]), True, 0.0, False, TAMPERED),
    (MbppRecord(reward=0.0, metrics={"tampered": 1.0}), True, 0.0, True, TAMPERED),  # tampering wins
    (MbppRecord(reward=0.0, reason=record.TIMED_OUT_REASON + "x"), True, 0.0, False, TIMED_OUT),
    (MbppRecord(reward=0.0), True, 0.0, True, TIMED_OUT),
    (MbppRecord(reward=0.0, reason="ended by endpoint_error: down"), True, 0.0, False, ERRORED),
    (MbppRecord(reward=0.0, metrics={"no_trace": 1.0}), True, 0.0, False, ERRORED),
    (MbppRecord(reward=1.0), False, 1.0, False, ERRORED),
    (MbppRecord(reward=1.0), True, None, False, ERRORED),
    (None, True, 1.0, False, ERRORED),
])
def test_status_is_one_rule(rec, ok, reward, timed_out, want):
    assert record.status(rec, ok=ok, reward=reward, timed_out=timed_out) == want
    assert record.passed(rec, ok=ok, reward=reward, timed_out=timed_out) == (want == OK and reward == 1.0)


def test_store_says_first_that_a_deadline_ended_it():
    info = {}
    record.store(info, MbppRecord(reason="no visible test passed"), timed_out=True)
    assert info["glyph"]["reason"] == record.TIMED_OUT_REASON + "no visible test passed"
