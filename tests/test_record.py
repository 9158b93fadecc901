"""The typed records (``glyph.record``): what finalize and the harness write
is what every reader decodes, old records still decode (a stored rollout of
glyph's earlier format among them), and one rule says what a rollout was."""

import json
from pathlib import Path

import msgspec
import pytest

from glyph import record
from glyph.agent.trace import VerifiedCandidate
from glyph.record import ERRORED, OK, TAMPERED, TIMED_OUT, HarnessRecord, MbppRecord, Metrics, ProtocolRecord

FORMAT_0 = Path(__file__).parent / "data" / "rollouts_format0"
"""Three ``glyph demo`` eval runs (mix policy, 3 tasks; the study profile's arms A and B, glyph's arm B) that
glyph wrote before the harness record and the typed metrics (commit 340a5f2): ten ``glyph_*`` info keys."""

CANDIDATE = VerifiedCandidate(index=0, sha256="ab" * 32, verified_label="PASS", sampled_label="PASS",
                              decision="KEEP", context=[{"role": "user", "content": "RESULT 1"}],
                              prediction_turn="t", prediction_call="2")


def test_a_record_round_trips_through_json_as_verifiers_stores_it():
    rec = MbppRecord(reward=1.0, reason="passed", candidates=[CANDIDATE], metrics=Metrics(passed=1.0),
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
    assert rec.version == 0 and rec.metrics == Metrics() and rec.end is None and not rec.timed_out


def test_a_version_0_record_says_its_end_and_timeout_in_its_reason_only():
    timed = record.mbpp_record({"glyph": {"reason": record.TIMED_OUT_REASON + "ended by tester_error: down"}})
    assert (timed.version, timed.timed_out, timed.end) == (0, True, "tester_error")
    plain = record.mbpp_record({"glyph": {"reason": "ended by protocol_error: not valid JSON"}})
    assert (plain.timed_out, plain.end) == (False, None)  # only the infrastructure ends decide a status
    new = record.mbpp_record({"glyph": record.encode(MbppRecord(reason="ended by tester_error: down"))})
    assert (new.version, new.end) == (record.RECORD_VERSION, None)  # a current record is read as written


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
    (MbppRecord(reward=0.0, metrics=Metrics(tampered=1.0)), True, 0.0, True, TAMPERED),  # tampering wins
    (MbppRecord(reward=0.0, timed_out=True, reason=record.TIMED_OUT_REASON + "x"), True, 0.0, False, TIMED_OUT),
    (MbppRecord(reward=0.0, reason=record.TIMED_OUT_REASON + "x"), True, 0.0, False, OK),  # the field decides
    (MbppRecord(reward=0.0), True, 0.0, True, TIMED_OUT),
    (MbppRecord(reward=0.0, end="endpoint_error", reason="ended by endpoint_error: down"), True, 0.0, False, ERRORED),
    (MbppRecord(reward=0.0, end="protocol_error"), True, 0.0, False, OK),
    (MbppRecord(reward=0.0, metrics=Metrics(no_trace=1.0)), True, 0.0, False, ERRORED),
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
    assert record.mbpp_record(info).timed_out


def test_metrics_are_flat_for_verifiers_with_plus_passed_only_where_graded():
    assert "plus_passed" not in Metrics().flat() and Metrics(plus_passed=0.0).flat()["plus_passed"] == 0.0
    assert set(Metrics().flat()) == set(msgspec.structs.asdict(Metrics())) - {"plus_passed"}


def test_the_harness_record_is_one_typed_key_and_the_old_keys_still_decode():
    rec = HarnessRecord(limits={"cpu_s": 2.0, "wall_s": 4.0}, env_pid=7,
                        protocol=ProtocolRecord(arm="b", max_tool_calls=8, test_cost=1, profile="study",
                                                project="data/blueprints/mbpp_11", switches={"feedback": "study"}))
    info = {}
    record.store_harness(info, rec)
    assert list(info) == [record.HARNESS_KEY] and record.harness_record(json.loads(json.dumps(info))) == rec
    old = {"glyph_limits": {"cpu_s": 2.0, "wall_s": 4.0}, "glyph_env_pid": 7,
           "glyph_protocol": {"arm": "a", "max_tool_calls": 8, "test_cost": 1},
           "glyph_service_log": [], "glyph_service_end": {"end": "final", "turns": 3},
           "glyph_interception": {"calls": 3, "stop_condition": None}, "glyph_program": {"exit_code": 0}}
    back = record.harness_record(old)
    assert back.version == 0 and back.protocol.profile == "glyph"  # before profiles: glyph's
    assert (back.service_end.end, back.interception.calls, back.program) == ("final", 3, {"exit_code": 0})
    assert record.harness_record({"glyph": {}}) is None and record.harness_record(None) is None
    with pytest.raises(record.RecordError, match="protocol"):
        record.harness_record({"glyph_protocol": {"arm": 5}})


def _format_0_traces():
    for path in sorted(FORMAT_0.glob("*/traces.jsonl")):
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            for trace in episode["traces"]:
                yield path.parent.name, episode, trace


def test_a_stored_rollout_of_the_earlier_format_decodes():
    """Every trace of the stored runs: its ten ``glyph_*`` keys are a version 0 harness record naming the
    profile the run's folder says; its record decodes with typed metrics equal to the flat ones verifiers
    recorded, and what it was (the reward, and ``status``) is what that glyph said."""
    seen = set()
    for run, episode, trace in _format_0_traces():
        info = trace["info"]
        assert sorted(k for k in info if k.startswith("glyph_")) == sorted(
            k for k in record._OLD_HARNESS_KEYS if k in info) and record.HARNESS_KEY not in info
        harness = record.harness_record(info)
        assert harness.version == 0 and harness.protocol.profile == run.split("-")[1]
        assert harness.protocol.arm == run[4] and harness.service_end.end in ("final", "protocol_error")
        rec = record.mbpp_record(info)
        assert rec.version == 0 and rec.metrics.flat() == {k: v for k, v in trace["metrics"].items()
                                                            if k in Metrics.__struct_fields__}
        reward = trace["rewards"]["passed"]["score"]
        assert rec.reward == reward and record.status(rec, ok=trace["ok"], reward=reward, timed_out=False) == OK
        seen.add((run, episode["task"]["data"]["name"], reward))
    assert len(seen) == 9 and {r for *_, r in seen} == {0.0, 1.0}
