"""Trusted finalize, job by job (``glyph.envs.mbpp.finalize``): the typed parse of
the untrusted trace, then each check, the hidden grading, the metrics and
the reason, on a tiny task graded by glyph's real sandbox."""

import copy
import dataclasses
import functools
import json

import msgspec
import pytest

from glyph.agent.program import REPLY_CAP
from glyph.profiles import get as profile
from glyph.agent.profiles.base import Call
from glyph.agent.profiles.glyph import PLACEHOLDER, call_line
from glyph.agent.trace import Trace, VerifiedCandidate, sha256
from glyph.envs.mbpp.finalize import verify
from glyph.envs.mbpp.finalize.end import Account, ModelReplies, check_end, replies_account, service_account
from glyph.envs.mbpp.finalize.metrics import compute_metrics, reason
from glyph.envs.mbpp.finalize.regrade import REGRADES, Regrader, TaskTests, grade_hidden
from glyph.envs.mbpp.finalize.tamper import (Logged, MalformedTrace, check_final_source, check_log, known_sources,
                                             logged_entries, parse_trace, verify_candidates, verify_tests)
from glyph.outcomes import Outcome
from glyph.record import encode
from glyph.sandbox import Limits

LIMITS = Limits(cpu_s=5, wall_s=10)
GLYPH = profile("glyph")
TESTS = TaskTests("", ("assert f(1) == 2",), ("assert f(2) == 3",))
PLUS = TaskTests("", ("assert f(1) == 2",), ("assert f(2) == 3",), ("assert f(3) == 4",))
GOOD = "def f(x): return x + 1\n"
WRONG = "def f(x): return x\n"  # fails the visible test
VISIBLE_ONLY = "def f(x): return 2\n"  # passes the visible test, fails the hidden one
BASE_ONLY = "def f(x): return x + 1 if x < 3 else 0\n"  # passes base, fails plus
PASS, FAIL = Outcome.PASS.value, Outcome.ASSERTION_FAILURE.value


def episode(*steps: tuple, end: str | None = "final") -> tuple[dict, list[dict]]:
    """The trace and service log an honest program leaves: each step
    ``(source, outcome)`` patches solution.py, then tests it; a step
    ``(source, outcome, (sampled, decision))`` predicts first (Arm B), and a
    REVISE shadow-tests it instead of a visible test. The trace's messages
    hold the model replies that play it (``records``)."""
    arm = "b" if any(pred for _, _, *pred in steps) else "a"
    trace = {"arm": arm, "candidates": [], "tests": [], "calls": [], "end": end,
             "error": None if end in ("final", None) else "it failed", "final": end == "final",
             "budget_left": 3, "turns": 5, "messages": [{"role": "system", "content": "s"}]}
    log, n, replies, current, pending = [], 0, [], PLACEHOLDER, ""
    for source, outcome, *pred in steps:
        n += 1
        cand = {"index": len(trace["candidates"]), "call": str(n), "source": source, "sha256": sha256(source)}
        trace["candidates"].append(cand)
        trace["calls"].append({"id": str(n), "tool": "apply_patch", "status": "ok"})
        replies.append(pending + call_line(Call(str(n), "apply_patch",
                                      {"path": "solution.py", "find": current, "replace": source})))
        current, pending = source, ""
        sampled, decision = pred[0] if pred else (outcome, "KEEP")
        if arm == "b":
            pending = f"<PREDICTION>{sampled}</PREDICTION>\n<DECISION>{decision}</DECISION>\n"
        if pred:
            cand.update(sampled_label=sampled, decision=decision, prediction_turn=f"PREDICT: {sampled}",
                        prediction_call=str(n + 1), context=[{"role": "user", "content": f"RESULT {n}"}])
            if decision == "REVISE":
                cand.update(verified_label=outcome, shadow=True)
                log.append({"request": f"{n}:shadow:{sha256(source)}", "sha256": sha256(source),
                            "outcome": outcome, "shadow": True})
                continue
        n += 1
        trace["tests"].append({"call": str(n), "sha256": sha256(source), "outcome": outcome})
        cand.setdefault("verified_label", outcome)
        cand.setdefault("shadow", False)
        trace["calls"].append({"id": str(n), "tool": "python_test", "status": outcome})
        replies.append(pending + call_line(Call(str(n), "python_test")))
        pending = ""
        log.append({"request": f"{n}:visible:{sha256(source)}", "sha256": sha256(source),
                    "outcome": outcome, "shadow": False})
    if end == "final":
        replies.append("FINAL: done")
    trace["messages"] += [{"role": "assistant", "content": r} for r in replies]
    trace["turns"] = len(replies)
    return json.loads(json.dumps(trace)), log


def records(raw: dict) -> dict:
    """``verify``'s trusted records of how ``raw``'s episode ended, as an honest
    run of it leaves them: the program's report to the service and the model
    replies (its messages, as ``episode`` wrote them; the tests of the records
    themselves build theirs by hand)."""
    replies = tuple(m["content"] for m in raw["messages"] if m["role"] == "assistant")
    return {"service_end": {"end": raw["end"], "turns": len(replies)},
            "replies": ModelReplies(replies, raw["arm"], 8, 1)}


# ---------------------------------------------------------------- the typed parse


def test_a_well_formed_trace_round_trips():
    raw, _ = episode((WRONG, FAIL, (PASS, "KEEP")), (WRONG + "#\n", FAIL, (FAIL, "REVISE")), (GOOD, PASS))
    t = parse_trace(raw)
    assert isinstance(t, Trace) and len(t.candidates) == 3 and len(t.tests) == 2 and len(t.calls) == 5
    assert (t.end, t.final, t.error) == ("final", True, None)
    back = msgspec.to_builtins(t)
    for key in ("candidates", "tests", "calls"):  # every value the program wrote, as written
        kept = [{k: v for k, v in got.items() if k in want} for got, want in zip(back[key], raw[key])]
        assert kept == raw[key]
    assert parse_trace(back) == t
    assert t.candidates[1].shadow and t.candidates[1].verified_label == FAIL


def test_absent_lists_and_labels_take_their_defaults():
    t = parse_trace({})
    assert (t.candidates, t.tests, t.calls, t.end, t.final) == ([], [], [], None, False)
    c = parse_trace({"candidates": [{"index": 0, "source": GOOD, "sha256": sha256(GOOD)}]}).candidates[0]
    assert c.verified_label is None and c.shadow is False and c.sampled_label is None


def _break(path: str, value: object = "<drop>") -> dict:
    raw, _ = episode((WRONG, FAIL, (PASS, "KEEP")), (GOOD, PASS))
    *parents, last = path.split(".")
    node = raw
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value == "<drop>":
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return raw


MALFORMED = [  # (what is broken, the value, what the reason must name)
    ("candidates", {"0": 1}, "$.candidates"),
    ("tests", 5, "$.tests"),  # raised UnboundLocalError before the typed parse: an errored rollout, not a 0
    ("calls", "many", "$.calls"),
    ("candidates.0.source", "<drop>", "missing required field `source`"),
    ("candidates.0.sha256", 7, "$.candidates[0].sha256"),
    ("candidates.0.index", True, "$.candidates[0].index"),
    ("candidates.0.verified_label", 5, "$.candidates[0].verified_label"),
    ("candidates.0.shadow", "yes", "$.candidates[0].shadow"),
    ("candidates.0.context", "the messages", "$.candidates[0].context"),
    ("candidates.0.context", [{"role": "user", "content": 5}], "$.candidates[0].context[0]"),
    ("tests.0.outcome", "<drop>", "missing required field `outcome`"),
    ("tests.0", "PASS", "$.tests[0]"),
    ("calls.1", 3, "$.calls[1]"),
    ("final", 1, "$.final"),
    ("end", ["final"], "$.end"),
    ("error", {"why": 1}, "$.error"),
]


@pytest.mark.parametrize("path,value,named", MALFORMED, ids=[f"{p}={v!r}" for p, v, _ in MALFORMED])
def test_a_malformed_trace_is_a_tamper_reason_never_an_exception(path, value, named):
    raw = _break(path, value)
    with pytest.raises(MalformedTrace, match="^malformed trace: ") as exc:
        parse_trace(raw)
    assert named in str(exc.value)
    info = verify(raw, GOOD, TESTS, LIMITS)
    assert info.reward == 0.0 and info.metrics.tampered == 1.0 and info.metrics.no_trace == 0.0
    assert info.tamper == [str(exc.value)] and info.reason == "tampered: " + str(exc.value)
    assert info.candidates == [] and info.metrics.visible_test_calls == 0.0  # no claim of it is read
    assert info.final_outcome == PASS  # the final solution is still graded


def test_a_shadow_candidate_must_record_its_shadow_outcome():
    raw, log = episode((WRONG, FAIL, (FAIL, "REVISE")), (GOOD, PASS))
    del raw["candidates"][0]["verified_label"]
    with pytest.raises(MalformedTrace, match="candidate 0 is a shadow candidate with no verified_label"):
        parse_trace(raw)
    assert verify(raw, GOOD, TESTS, LIMITS, log).metrics.tampered == 1.0


def test_what_is_not_a_trace():
    none = verify(None, GOOD, TESTS, LIMITS)
    assert none.metrics.no_trace == 1.0 and none.metrics.tampered == 0.0
    assert none.reason == "the program left no trace" and none.final_outcome is None
    for junk in ("unparseable", [1, 2], 3):
        info = verify(junk, GOOD, TESTS, LIMITS)
        assert info.metrics.no_trace == 1.0 and info.metrics.tampered == 1.0
        assert info.tamper == ["malformed trace"] and info.reward == 0.0


# ---------------------------------------------------------------- the service log


def test_logged_entries_count_a_retried_request_once():
    _, log = episode((WRONG, FAIL), (GOOD, PASS))
    assert logged_entries(log) == [Logged(sha256(WRONG), FAIL, False), Logged(sha256(GOOD), PASS, False)]
    assert logged_entries([log[0], log[0], log[1]]) == logged_entries(log)
    assert len(logged_entries([log[0], dict(log[0], request="9:visible:x")])) == 2  # a second request counts
    with pytest.raises(KeyError):  # the log is trusted: a broken one is glyph's fault, never the model's
        logged_entries([{"request": "1", "sha256": "x"}])


def test_check_log():
    raw, log = episode((WRONG, FAIL, (FAIL, "REVISE")), (WRONG + "#\n", FAIL, (PASS, "KEEP")), (GOOD, PASS))
    t = parse_trace(raw)
    assert check_log(t, logged_entries(log)) == []
    shadow_last = [e for e in log if not e["shadow"]] + [e for e in log if e["shadow"]]
    assert check_log(t, logged_entries(shadow_last)) == []  # shadow tests are compared as a set
    differs = ["the trace's tests differ from what the test service graded"]
    assert check_log(t, logged_entries(log[:-1])) == differs  # a claimed test the service never graded
    assert check_log(t, logged_entries(log + [dict(log[-1], request="x")])) == differs  # one never claimed
    forged = copy.deepcopy(raw)
    forged["tests"][0]["outcome"] = PASS
    assert check_log(parse_trace(forged), logged_entries(log)) == differs
    forged = copy.deepcopy(raw)
    forged["candidates"][0]["verified_label"] = PASS  # the shadow claim
    assert check_log(parse_trace(forged), logged_entries(log)) == differs
    swapped = copy.deepcopy(raw)
    swapped["tests"].reverse()  # visible tests are compared in order
    assert check_log(parse_trace(swapped), logged_entries(log)) == differs


def test_check_log_a_tester_error_drops_the_answer_that_never_arrived():
    raw, log = episode((GOOD, PASS), end="tester_error")
    lost = dict(log[0], request="3:visible:x")
    assert check_log(parse_trace(raw), logged_entries(log + [lost])) == []
    assert check_log(parse_trace(dict(raw, end="final")), logged_entries(log + [lost])) != []


# ---------------------------------------------------------------- candidates and visible tests


def test_verify_candidates_honest():
    raw, _ = episode((WRONG, FAIL, (PASS, "KEEP")), (GOOD, PASS, (PASS, "KEEP")))
    del raw["candidates"][1]["verified_label"]  # a candidate never tested: graded here
    rg = Regrader(TESTS, LIMITS)
    got, tamper = verify_candidates(parse_trace(raw), rg)
    assert tamper == [] and [c.verified_label for c in got] == [FAIL, PASS] and rg.gradings == 2
    assert got[0] == VerifiedCandidate(index=0, sha256=sha256(WRONG), verified_label=FAIL, sampled_label=PASS,
                              decision="KEEP", shadow=False,
                              context=[{"role": "user", "content": "RESULT 1"}],
                              prediction_turn="PREDICT: PASS", prediction_call="2")


def test_verify_candidates_forgeries():
    raw, _ = episode((WRONG, FAIL), (GOOD, PASS))
    raw["candidates"][0]["verified_label"] = PASS  # an outcome no grading gives
    raw["candidates"][1]["source"] = VISIBLE_ONLY  # a swapped source under the old hash
    rg = Regrader(TESTS, LIMITS)
    got, tamper = verify_candidates(parse_trace(raw), rg)
    assert tamper == [f"candidate 0: recorded {PASS}, re-grade {FAIL}",
                      "candidate 1: source does not match its hash"]
    assert [(c.index, c.verified_label) for c in got] == [(0, FAIL)]  # the trusted outcome; the swap dropped
    assert rg.gradings == 1 + REGRADES and rg.disagreements == 0  # regraded before it is called a forgery


def test_a_claim_the_log_gives_is_trusted_without_grading():
    raw, log = episode((WRONG, FAIL, (FAIL, "REVISE")), (GOOD, PASS))
    rg = Regrader(TESTS, LIMITS)
    rg.seed(logged_entries(log))
    got, tamper = verify_candidates(parse_trace(raw), rg)
    assert tamper == [] and [c.verified_label for c in got] == [FAIL, PASS] and rg.gradings == 0
    raw["candidates"][0]["verified_label"] = PASS  # not what the log says: no grading overrules the log
    got, tamper = verify_candidates(parse_trace(raw), rg)
    assert tamper == [f"candidate 0: recorded {PASS}, re-grade {FAIL}"] and rg.gradings == 0


def test_verify_tests():
    raw, _ = episode((WRONG, FAIL), (GOOD, PASS))
    raw["tests"].insert(0, {"call": "0", "sha256": sha256(PLACEHOLDER), "outcome": "RUNTIME_ERROR"})
    t = parse_trace(raw)
    assert set(known_sources(t, PLACEHOLDER)) == {sha256(PLACEHOLDER), sha256(WRONG), sha256(GOOD)}
    rg = Regrader(TESTS, LIMITS)
    placeholder = rg.visible(PLACEHOLDER)
    raw["tests"][0]["outcome"] = placeholder
    visible, tamper = verify_tests(parse_trace(raw), rg, PLACEHOLDER)
    assert tamper == [] and visible == [placeholder, FAIL, PASS]
    raw["tests"][1]["outcome"] = PASS  # the failing test claimed as a pass
    raw["tests"].append({"call": "9", "sha256": sha256(VISIBLE_ONLY), "outcome": PASS})  # never a candidate
    visible, tamper = verify_tests(parse_trace(raw), rg, PLACEHOLDER)
    assert visible == [placeholder, FAIL, PASS]  # the trusted outcomes; the unknown source has none
    assert tamper == [f"test 2: recorded {PASS}, re-grade {FAIL}",
                      "test 9: tested source is no recorded candidate"]


def test_a_swapped_candidate_is_no_known_source():
    raw, _ = episode((WRONG, FAIL))
    raw["candidates"][0]["source"] = GOOD  # the hash stays WRONG's
    t = parse_trace(raw)
    assert sha256(WRONG) not in known_sources(t, PLACEHOLDER) and sha256(GOOD) not in known_sources(t, PLACEHOLDER)
    _, tamper = verify_tests(t, Regrader(TESTS, LIMITS), PLACEHOLDER)
    assert tamper == ["test 2: tested source is no recorded candidate"]


def test_check_final_source():
    t = parse_trace(episode((WRONG, FAIL), (GOOD, PASS))[0])
    assert check_final_source(t, GOOD, PLACEHOLDER) == [] and check_final_source(t, None, PLACEHOLDER) == []
    assert check_final_source(t, WRONG, PLACEHOLDER) == ["solution.py changed after the last recorded patch"]
    assert check_final_source(Trace(), PLACEHOLDER, PLACEHOLDER) == []
    assert check_final_source(Trace(), GOOD, PLACEHOLDER) == ["solution.py changed after the last recorded patch"]


# ---------------------------------------------------------------- how the episode ended


def _replies(*replies: str | None, arm: str = "a", budget: int = 8, **kw) -> ModelReplies:
    return ModelReplies(tuple(replies), arm, budget, 1, **kw)


PATCH = call_line(Call("1", "apply_patch", {"path": "solution.py", "find": PLACEHOLDER, "replace": GOOD}))
TEST = call_line(Call("2", "python_test"))
KEEP = f"<PREDICTION>{PASS}</PREDICTION>\n<DECISION>KEEP</DECISION>\n{TEST}"


def test_the_interception_record_is_replayed_with_the_protocol_state():
    assert replies_account(_replies(PATCH, TEST, "FINAL: done")) == Account(
        "the interception's record of the model replies", True, "ends with FINAL (reply 3)")
    assert replies_account(_replies(PATCH, KEEP, "FINAL: done", arm="b")).final
    # Arm B: a FINAL right after a successful patch is a protocol error; after a failed one it ends the episode
    got = replies_account(_replies(PATCH, "FINAL: done", arm="b"))
    assert not got.final and got.says == ("ends with protocol error (reply 2): after a successful apply_patch "
                                          "the turn must predict, decide and CALL")
    failed = call_line(Call("1", "apply_patch", {"path": "solution.py", "find": "nowhere", "replace": GOOD}))
    assert replies_account(_replies(failed, "FINAL: done", arm="b")).final
    assert replies_account(_replies(PATCH, "FINAL: done", arm="a")).final
    # the protocol state is replayed: a call id used twice, the budget
    got = replies_account(_replies(PATCH, PATCH.replace('"2"', '"1"'), "FINAL: done"))
    assert got.says == "ends the episode by protocol_error at reply 2 of 3, with 1 more after it"
    got = replies_account(_replies(PATCH, TEST, "FINAL: done", budget=1))
    assert got.says == "ends the episode by budget_exhausted at reply 2 of 3, with 1 more after it"
    got = replies_account(_replies(PATCH, TEST, 'CALL {"id": 3'))
    assert got.says == "ends with protocol error (reply 3): a CALL line must be `CALL {json}` on one line"
    assert replies_account(_replies(PATCH, TEST)).says == "ends with a python_test CALL (reply 2), " \
                                                          "which does not end the episode"
    assert replies_account(_replies("FINAL: done", "FINAL: done")).says == \
        "ends the episode by final at reply 1 of 2, with 1 more after it"
    assert replies_account(_replies()).says == "holds no reply"
    assert replies_account(_replies(PATCH, None)).says == "has reply 2 of 2 with no text"
    got = replies_account(_replies(PATCH, TEST, "FINAL: done", stopped="max_turns"))
    assert not got.final and got.says == "ends with verifiers stopping the rollout (max_turns)"
    # each reply is cut where the program cuts it
    assert not replies_account(_replies("x" * REPLY_CAP + "\nFINAL: done")).final
    assert replies_account(_replies("x" * (REPLY_CAP - 20) + "\nFINAL: done")).final


def test_the_service_record_is_the_programs_report():
    assert service_account({"end": "final", "turns": 3}) == Account(
        "the test service's record", True, "says the program reported final after 3 replies", "final")
    assert service_account(None) == Account("the test service's record", False,
                                            "has no report from the program of how the episode ended")
    with pytest.raises(KeyError):  # the record is trusted: a broken one is glyph's fault
        service_account({"turns": 3})


def test_check_end():
    final = parse_trace(episode((GOOD, PASS))[0])
    reported = service_account({"end": "final", "turns": 3})
    replayed = replies_account(_replies(PATCH, TEST, "FINAL: done"))
    assert check_end(final, [reported, replayed]) == (True, [])
    assert check_end(final, []) == (False, [])  # no trusted record: not FINAL, and nothing to call forged
    error = service_account({"end": "protocol_error", "turns": 3})
    assert check_end(final, [error, replayed]) == (False, [
        ("the trace says the episode ended with FINAL; the test service's record says the program reported "
         "protocol_error after 3 replies")])
    assert check_end(final, [reported, replies_account(_replies(PATCH, TEST, "CALL {"))]) == (False, [
        ("the trace says the episode ended with FINAL; the interception's record of the model replies ends with "
         "protocol error (reply 3): a CALL line must be `CALL {json}` on one line")])
    budget = dataclasses.replace(final, end="budget_exhausted", final=False)
    assert check_end(budget, [error]) == (False, [
        ("the trace says the episode ended by budget_exhausted; the test service's record says the program "
         "reported protocol_error after 3 replies")])
    assert check_end(budget, [replayed]) == (False, [])  # the replay names no end but FINAL to compare
    killed = dataclasses.replace(final, end=None, final=False)  # reported, then killed before the save
    assert check_end(killed, [reported]) == (False, [])
    assert check_end(final, [service_account(None)])[1] == [
        ("the trace says the episode ended with FINAL; the test service's record has no report from the program "
         "of how the episode ended")]


def test_verify_takes_final_from_the_trusted_records_only():
    raw, log = episode((WRONG, FAIL), (GOOD, PASS))
    honest = records(raw)
    assert verify(raw, GOOD, TESTS, LIMITS, log, **honest).reward == 1.0
    assert verify(raw, GOOD, TESTS, LIMITS, replies=honest["replies"]).reward == 1.0  # a container: no service
    alone = verify(raw, GOOD, TESTS, LIMITS)  # the trace alone: never FINAL
    assert alone.reward == 0.0 and alone.tamper == [] and "no trusted record" in alone.reason
    # the program reported a protocol error, or never reported: the trace's FINAL is a forgery
    for service_end in ({"end": "protocol_error", "turns": 4}, None):
        got = verify(raw, GOOD, TESTS, LIMITS, log, service_end=service_end, replies=honest["replies"])
        assert got.reward == 0.0 and got.metrics.tampered == 1.0
        assert got.reason.startswith("tampered: the trace says the episode ended with FINAL; the test service's "
                                     "record "), got.reason
    # the model's last recorded reply is a protocol error
    replies = ModelReplies(honest["replies"].replies[:-1] + ("CALL nope",), "a", 8, 1)
    got = verify(raw, GOOD, TESTS, LIMITS, replies=replies)
    assert got.reward == 0.0 and got.tamper == [
        ("the trace says the episode ended with FINAL; the interception's record of the model replies ends with "
         "protocol error (reply 5): a CALL line must be `CALL {json}` on one line")]
    # an honest protocol error: 0, nothing forged
    raw, log = episode((WRONG, FAIL), (GOOD, PASS), end="protocol_error")
    replies = ModelReplies(tuple(m["content"] for m in raw["messages"] if m["role"] == "assistant") + ("CALL x",),
                           "a", 8, 1)
    got = verify(raw, GOOD, TESTS, LIMITS, log, service_end={"end": "protocol_error", "turns": 5}, replies=replies)
    assert got.reward == 0.0 and got.tamper == [] and got.reason == "ended by protocol_error: it failed"


# ---------------------------------------------------------------- hidden suites, metrics, reason


def test_grade_hidden():
    rg = Regrader(TESTS, LIMITS)
    assert grade_hidden(rg, GOOD) == {"base": (PASS, ""), "plus": None}
    assert grade_hidden(rg, VISIBLE_ONLY)["base"][0] == FAIL
    assert grade_hidden(rg, None) == {"base": ("OTHER", "solution.py is missing"), "plus": None}
    plus = Regrader(PLUS, LIMITS)
    got = grade_hidden(plus, BASE_ONLY)
    assert got["base"] == (PASS, "") and got["plus"][0] == FAIL
    assert grade_hidden(plus, None)["plus"] == ("OTHER", "solution.py is missing")


def _v(label: str, sampled: str | None = None, decision: str | None = None) -> VerifiedCandidate:
    return VerifiedCandidate(index=0, sha256="x", verified_label=label, sampled_label=sampled, decision=decision,
                    shadow=decision == "REVISE", context=None, prediction_turn=None, prediction_call=None)


def test_compute_metrics():
    t = parse_trace(episode((WRONG, FAIL), (GOOD, PASS))[0])
    cands = [_v(FAIL, PASS, "KEEP"), _v(FAIL, FAIL, "REVISE"), _v(PASS, PASS, "REVISE"), _v(PASS)]
    passed = {"base": (PASS, ""), "plus": None}
    m = compute_metrics(GLYPH, t, cands, [FAIL, PASS], [], passed, TESTS, disagreements=2, final=True)
    assert m.plus_passed is None  # no plus_passed without plus tests
    assert m.passed == m.base_passed == m.recovered_after_executed_failure == 1.0
    assert (m.predictions, m.prediction_accuracy, m.revise_count) == (3.0, 2 / 3, 2.0)
    assert (m.bad_patch_rejection_rate, m.unnecessary_rejection_rate) == (0.5, 1.0)
    assert (m.first_patch_correct, m.had_executed_failure, m.grade_disagreements) == (0.0, 1.0, 2.0)
    assert (m.visible_test_calls, m.visible_tool_calls, m.tampered) == (2.0, 4.0, 0.0)
    # each condition of the reward on its own
    assert compute_metrics(GLYPH, t, cands, [FAIL, PASS], ["forged"], passed, TESTS, 0, final=True).passed == 0.0
    assert compute_metrics(GLYPH, t, cands, [FAIL], [], passed, TESTS, 0, final=True).passed == 0.0
    unfinished = dataclasses.replace(t, end="budget_exhausted", final=False)
    m = compute_metrics(GLYPH, unfinished, cands, [PASS], [], passed, TESTS, 0, final=False)
    assert m.passed == 0.0 and m.budget_exhausted == 1.0
    # FINAL is check_end's decision, never the trace's own claim
    assert compute_metrics(GLYPH, t, cands, [PASS], [], passed, TESTS, 0, final=False).passed == 0.0
    plus_failed = {"base": (PASS, ""), "plus": (FAIL, "")}
    m = compute_metrics(GLYPH, t, cands, [PASS], [], plus_failed, PLUS, 0, final=True)
    assert (m.passed, m.base_passed, m.plus_passed) == (1.0, 1.0, 0.0)
    as_reward = TaskTests(PLUS.setup, PLUS.visible, PLUS.hidden, PLUS.plus, "plus")
    m = compute_metrics(GLYPH, t, cands, [PASS], [], plus_failed, as_reward, 0, final=True)
    assert (m.passed, m.base_passed, m.plus_passed) == (0.0, 1.0, 0.0)


def test_reason():
    t = parse_trace(episode((GOOD, PASS))[0])
    why = functools.partial(reason, final=True)  # what check_end decides for this trace
    ok, hidden_fail = {"base": (PASS, ""), "plus": None}, {"base": (FAIL, "assert"), "plus": None}
    assert why(t, GOOD, [PASS], [], ok, TESTS) == "passed"
    assert why(t, None, [PASS], [], ok, TESTS) == "solution.py is missing"
    assert why(t, GOOD, [PASS], ["a", "b", "c", "d"], ok, TESTS) == "tampered: a; b; c"
    unfinished = "the program did not finish (killed, or the rollout timed out)"
    assert reason(Trace(), GOOD, [], [], ok, TESTS, final=False) == unfinished
    ended = dataclasses.replace(t, end="protocol_error", error="not valid JSON", final=False)
    assert reason(ended, GOOD, [PASS], [], ok, TESTS, final=False) == "ended by protocol_error: not valid JSON"
    assert why(t, GOOD, [FAIL], [], ok, TESTS) == "no visible test passed"
    hidden = f"the final solution gets {FAIL} on the hidden tests"
    assert why(t, GOOD, [PASS], [], hidden_fail, TESTS) == hidden
    as_reward = TaskTests(PLUS.setup, PLUS.visible, PLUS.hidden, PLUS.plus, "plus")
    got = why(t, GOOD, [PASS], [], {"base": (PASS, ""), "plus": (FAIL, "")}, as_reward)
    assert got == f"the final solution gets {FAIL} on the hidden tests (with the plus tests)"
    no_record = "the trace says the episode ended with FINAL, but no trusted record of its end was given"
    assert reason(t, GOOD, [PASS], [], ok, TESTS, final=False) == no_record


# ---------------------------------------------------------------- the entry, end to end


def test_verify_an_honest_recovery_with_and_without_the_log():
    raw, log = episode((WRONG, FAIL, (PASS, "KEEP")), (GOOD, PASS, (PASS, "KEEP")))
    for service_log, gradings in ((log, 0), (None, 2)):
        info = verify(copy.deepcopy(raw), GOOD, TESTS, LIMITS, service_log, {"exit": 0}, **records(raw))
        assert info.reward == 1.0 and info.reason == "passed" and info.tamper == []
        assert info.visible_gradings == gradings and info.program == {"exit": 0}
        assert (info.final_outcome, info.base_outcome, info.plus_outcome) == (PASS, PASS, None)
        m = info.metrics
        assert m.recovered_after_executed_failure == 1.0 and m.prediction_accuracy == 0.5
        assert msgspec.to_builtins(info.candidates[0]) == {
            "index": 0, "sha256": sha256(WRONG), "verified_label": FAIL, "sampled_label": PASS,
            "decision": "KEEP",
            "shadow": False, "context": [{"role": "user", "content": "RESULT 1"}],
            "prediction_turn": "PREDICT: PASS", "prediction_call": "2"}
        json.dumps(encode(info))  # info["glyph"] is stored as JSON


def test_verify_a_plus_task_and_a_visible_only_solution():
    raw, log = episode((BASE_ONLY, PASS))
    info = verify(raw, BASE_ONLY, PLUS, LIMITS, log, **records(raw))
    assert info.reward == 1.0 and (info.base_outcome, info.plus_outcome) == (PASS, FAIL)
    assert info.metrics.plus_passed == 0.0 and info.plus_detail is not None
    raw, log = episode((VISIBLE_ONLY, PASS))
    info = verify(raw, VISIBLE_ONLY, TESTS, LIMITS, log, **records(raw))
    assert info.reward == 0.0 and info.reason == f"the final solution gets {FAIL} on the hidden tests"


def test_verify_reports_every_forgery_in_one_trace():
    raw, log = episode((WRONG, FAIL), (GOOD, PASS))
    raw["tests"][0]["outcome"] = PASS
    info = verify(raw, GOOD + "\n", TESTS, LIMITS, log, **records(raw))
    assert info.tamper == ["the trace's tests differ from what the test service graded",
                              f"test 2: recorded {PASS}, re-grade {FAIL}",
                              "solution.py changed after the last recorded patch"]
    assert info.reward == 0.0 and info.metrics.tampered == 1.0
