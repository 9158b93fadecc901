"""glyph.text: text that model code controls, made encodable (and printable)."""

import asyncio
import json
import types

import pytest

from glyph.agent.trace import sha256
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


# ---------------------------------------------------------------- records verifiers can save


class FakeRuntime:
    """Holds the files a rollout left; answers run_program as a program that exited 0."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    async def write(self, path: str, data: bytes) -> None:
        self.files[path] = data

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    async def run_program(self, argv, env):
        from verifiers.v1 import ProgramResult
        return ProgramResult(exit_code=0, stdout="", stderr="")


def _saved(tmp_path, trace):
    """``trace`` saved and read back by verifiers' own trace store, as vf-eval does."""
    from verifiers.v1.episode import EnvInfo, Episode
    from verifiers.v1.trace import Trace
    from verifiers.v1.utils.trace_store import read_episodes, write_episode
    write_episode(tmp_path, Episode(env=EnvInfo(id="glyph"), task=trace.task, traces=[trace], ok=True))
    (episode,) = read_episodes(tmp_path, Trace)
    return episode.traces[0].info


def _vf_trace(data):
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    return Trace(task=TraceTask(type="Task", data=data), agent=AgentInfo(config=AgentConfig()))


def test_a_glyph_mbpp_record_of_surrogate_text_saves_as_a_verifiers_trace(tmp_path):
    """finalize (the taskset's, on verifiers' own Trace) of a rollout whose
    trace and final solution are full of lone surrogates: the record
    verifiers saves shows them escaped. The candidate's source is hashed as
    it was recorded (it matches: not tampered) and is not in the record."""
    from glyph.agent import program
    from glyph.agent.profiles.glyph import SOLUTION_FILE
    from glyph.envs.mbpp.taskset import GlyphData, GlyphTask
    from glyph.record import mbpp_record

    source = RAISES + "# \udcff\n"  # byte 0xff in solution.py, read back with surrogateescape
    context = [{"role": "user", "content": "RESULT 1 read_file ok\n\udcff"}]
    trace_json = {"candidates": [{"index": 0, "call": "1", "source": source, "sha256": sha256(source),
                                  "sampled_label": "PASS\ud800", "decision": "KEEP", "context": context,
                                  "prediction_turn": "<PREDICTION>PASS</PREDICTION> \ud800",
                                  "prediction_call": "2"}],
                  "tests": [], "calls": [], "end": "protocol_error", "error": "no call \ud800", "final": False}
    runtime = FakeRuntime({program.TRACE: json.dumps(trace_json).encode(),
                           SOLUTION_FILE: source.encode("utf-8", "surrogateescape")})
    data = GlyphData(name="t", arm="b", visible_tests=DEMO_TESTS.splitlines()[:1],
                     hidden_tests=DEMO_TESTS.splitlines())
    trace = _vf_trace(data)
    from glyph.record import HarnessRecord, store_harness
    store_harness(trace.info, HarnessRecord(limits={"cpu_s": 2.0, "wall_s": 4.0}))
    asyncio.run(GlyphTask(data).finalize(trace, runtime))

    rec = mbpp_record(_saved(tmp_path, trace))
    assert rec.reason == "ended by protocol_error: no call \\ud800" and not rec.tamper
    assert rec.final_outcome == "RUNTIME_ERROR" and rec.final_detail == "ValueError: bad \\udcff \\ud800 end"
    (cand,) = rec.candidates
    assert cand.sha256 == sha256(source) and cand.verified_label == "RUNTIME_ERROR"
    assert cand.sampled_label == "PASS\\ud800" and cand.prediction_turn.endswith(" \\ud800")
    assert cand.context == [{"role": "user", "content": "RESULT 1 read_file ok\n\\udcff"}]


def test_a_glyph_conventions_record_of_surrogate_text_saves_as_a_verifiers_trace(tmp_path):
    """The agent protocol: the harness reads the agent's (untrusted) end from its
    trace into ``info``, and finalize records the grade of a solution that raises."""
    from glyph.agent import program
    from glyph.agent.profiles.glyph import SOLUTION_FILE
    from glyph.envs.conventions.harness import ConventionsHarness, ConventionsHarnessConfig
    from glyph.envs.conventions.taskset import ConventionsData, ConventionsTask
    from glyph.record import conventions_record

    data = ConventionsData(name="t", protocol="agent", task_text="Write remove_first_last.",
                           hidden_test="from solution import remove_first_last\n" + DEMO_TESTS)
    runtime = FakeRuntime({program.TRACE: json.dumps({"end": "odd \ud800 end"}).encode()})
    trace = _vf_trace(data)
    harness = ConventionsHarness(ConventionsHarnessConfig(id="glyph-conventions"))
    res = asyncio.run(harness.launch(types.SimpleNamespace(model="m"), trace, runtime, "http://127.0.0.1:9/v1",
                                     "s", {}, data))
    assert res.exit_code == 0
    runtime.files[SOLUTION_FILE] = RAISES.encode()  # what the agent left
    asyncio.run(ConventionsTask(data).finalize(trace, runtime))

    info = _saved(tmp_path, trace)
    rec = conventions_record(info)
    assert info["glyph_agent_end"] == "odd \\ud800 end"
    assert rec.outcome == "RUNTIME_ERROR" and rec.detail.startswith("ValueError: bad \\udcff \\ud800 end")
    assert rec.reason.endswith("(the agent ended with odd \\ud800 end)")


def test_the_record_is_stored_encodable_whatever_put_it_there():
    """``record.store`` is the belt: any string of the record, from any writer."""
    from glyph import record
    info = {}
    record.store(info, record.fault_record("endpoint_error", "endpoint_error: \ud800"), timed_out=True)
    assert info["glyph"]["reason"] == record.TIMED_OUT_REASON + "endpoint_error: \\ud800"
    json.dumps(info, ensure_ascii=False).encode("utf-8")


# ---------------------------------------------------------------- the agent's tools


def _call(reply_json: str):
    from glyph.agent.profiles.glyph import parse_turn
    return parse_turn(f"CALL {reply_json}").call


def test_what_the_tools_answer_is_encodable_and_an_unwritable_patch_is_refused(tmp_path):
    """A model's CALL is JSON: its escapes can make lone surrogates. One that
    surrogateescape writes (a byte 0xff) is written, and read back escaped in
    the RESULT the program sends; one no file can hold is refused (the
    program used to crash on it: a program_error, an unscored rollout)."""
    from glyph.agent.profiles.glyph import PLACEHOLDER, SOLUTION_FILE, execute, result_message
    from glyph.agent.trace import Trace
    (tmp_path / SOLUTION_FILE).write_text(PLACEHOLDER)
    trace = Trace()
    find = json.dumps(PLACEHOLDER.splitlines()[0])

    def run(tool_args: tuple[str, str]):
        tool, args = tool_args
        call = _call(f'{{"id": "{len(trace.candidates) + 9}", "tool": "{tool}", "args": {args}}}')
        status, body = execute(call, None, trace, str(tmp_path))
        return status, body, result_message(call, status, body, 5)

    status, _, _ = run(("apply_patch", f'{{"path": "{SOLUTION_FILE}", "find": {find}, "replace": "# \\udcff"}}'))
    assert status == "ok" and b"# \xff" in (tmp_path / SOLUTION_FILE).read_bytes() and len(trace.candidates) == 1
    before = (tmp_path / SOLUTION_FILE).read_bytes()
    status, _, msg = run(("apply_patch", f'{{"path": "{SOLUTION_FILE}", "find": "# ", "replace": "\\ud800"}}'))
    assert status.startswith("error: ") and "lone surrogate" in msg
    assert (tmp_path / SOLUTION_FILE).read_bytes() == before and len(trace.candidates) == 1
    status, body, msg = run(("read_file", f'{{"path": "{SOLUTION_FILE}"}}'))
    assert "\udcff" in body and "# \\udcff" in msg and encodable(msg) is msg
