"""How a grading reads a solution's run: what a passing solution is and how a
failure gets its class (``Semantics``; a profile names its own,
``glyph.profiles``). ``GLYPH``, glyph's own (``glyph.grading``'s docstring):
an outcome from structured facts (exception class, exit status, limits hit),
never from text the solution printed. ``STUDY``, the PREDICT study's
classifier (its ``src/glyph/program.py``, ``run_hidden_tests``), which ran
solution and tests as one ``__main__`` file and read the outcome from the exit
status and stderr, reproduced here without trusting either for a PASS:

* the solution runs as ``__main__`` in the sandbox, so its
  ``if __name__ == "__main__":`` block runs before the checks, as in the
  study's file (one that exits, fails a self-check or calls ``input()`` on an
  empty stdin fails the same way), and the run ends as that file did after
  its last test (``sandbox/runtime/onefile.py``: ``end``). A PASS needs every
  check passed by this process's own ``==`` (or the referee's) *and* that end:
  exit status 0 within the wall limit and a random marker (the grader's, told
  to the run, which prints it where the study's file did) the last line of
  stdout, read by the study's rule from the stdout the sandbox captured (past
  its cap, as the run reports). The marker and the run's report of its end can
  only turn a PASS into a failure;
* ``Fraction`` and ``Decimal`` results cross the wire as themselves and are
  compared here with the stdlib's own ``==`` (the study compared the real
  objects; ``wire``), and an answer over the cap is a wrong answer (a value
  equal to the expected one encodes within a few times its size, and the cap
  is eight times the largest);
* a failure's class is the study's text rule (``STUDY_RULES``, first match):
  applied to what the study's process would have printed to stderr, as far as
  the run reports it (which rule strings its stderr and the failure's
  traceback hold), and to text this side holds (the check's source, which the
  traceback shows; the captured stderr where the run ended without saying).
  A timeout is TIMEOUT first. The report is the run's own, untrusted as the
  exception classes glyph's semantics read: a run can choose which failure it
  shows (as the study's could, by printing), never a PASS.

The grading itself is the same: verdict-blind, every probe asked at once, the
answers judged after the run is gone, the same caps and pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from glyph.outcomes import Outcome, outcome_of_exception
from glyph.sandbox import Run, RunStatus
from glyph.sandbox.runtime import wire

DETAIL_CAP = 300

STUDY_RULES = ((Outcome.SYNTAX_ERROR, ("SyntaxError", "IndentationError")),
               (Outcome.ASSERTION_FAILURE, ("AssertionError",)),
               (Outcome.RUNTIME_ERROR, ("Traceback (most recent call last)",)))
"""The study's classifier of a failed run (PREDICT ``src/glyph/program.py``, ``_failed_outcome``): the
first class one of whose strings occurs in the run's stderr, else OTHER (after a timeout: TIMEOUT)."""


@dataclass(frozen=True)
class Semantics:
    """How a grading reads a solution's run (this module's docstring): ``GLYPH`` or ``STUDY``.

    ``as_main``: the solution runs as ``__main__`` and the run ends as a one-file script does
    (a PASS needs that end too). ``numbers``: ``Fraction`` and ``Decimal`` results are compared
    as themselves. ``rules``: a failure's class by ``STUDY_RULES``-shaped text rules on what the
    run would have printed (empty: by its exception's builtin class, ``outcome_of_exception``)."""

    name: str
    as_main: bool = False
    numbers: bool = False
    rules: tuple[tuple[Outcome, tuple[str, ...]], ...] = ()

    @property
    def needles(self) -> tuple[str, ...]:
        return tuple(n for _, texts in self.rules for n in texts)

    def header(self) -> dict:
        """What a solution session is told (``sandbox/runtime/onefile.py``)."""
        return {k: v for k, v in (("as_main", self.as_main), ("numbers", self.numbers),
                                  ("printed", list(self.needles))) if v}

    def classify(self, found: object, texts: tuple[str, ...] | list[str] = ()) -> Outcome:
        """The class of a failure by ``rules``: ``found``, the rule strings the run reported
        (anything else in it is ignored), and ``texts``, what this side holds of the printed text."""
        said = {n for n in found if type(n) is str} if type(found) is list else set()
        for outcome, strings in self.rules:
            if any(n in said or any(n in t for t in texts) for n in strings):
                return outcome
        return Outcome.OTHER


GLYPH = Semantics("glyph")
STUDY = Semantics("study", as_main=True, numbers=True, rules=STUDY_RULES)
SEMANTICS = {s.name: s for s in (GLYPH, STUDY)}
"""The semantics by name (a tester spec names one: ``glyph.agent.program.LocalGrader``)."""


def assert_text(source: str) -> str:
    """What the study's file printed for ``assert`` ``source`` failing: its traceback through that line."""
    return f"Traceback (most recent call last):\n{source}\nAssertionError\n"


def status_outcome(status: RunStatus, protocol_error: str | None, sem: Semantics = GLYPH,
                    stderr: bytes = b"") -> tuple[Outcome, str]:
    """Why a run ended without answering (or, under ``as_main``, without ending as one file): from
    its exit status; under ``rules`` a timeout first, as the study's classifier read it, and an exit
    by the rules on the stderr this side captured (the study read its stderr)."""
    memory = (Outcome.RUNTIME_ERROR, "MemoryError: the run's processes together went over its memory cap "
                                     "(Limits.run_memory_bytes); the kernel killed the run")
    if status.memory_exceeded and not (sem.rules and status.timed_out):
        return memory  # as a process over its address-space limit is (MemoryError): RUNTIME_ERROR
    if status.timed_out:
        how = "wall-clock" if status.wall_timeout else "CPU-time"
        return Outcome.TIMEOUT, f"{how} limit reached ({status.wall_s:.2f}s wall, {status.cpu_s:.2f}s CPU)"
    if protocol_error:
        return Outcome.OTHER, protocol_error
    if status.server_died:
        return Outcome.OTHER, "the sandbox server died during the run (it has been restarted)"
    if status.signal is not None:
        why = f"the process was killed by signal {status.signal}"
    else:
        why = f"the process exited (status {status.exit}) before {'its end' if sem.as_main else 'answering'}"
    if sem.rules:
        return sem.classify((), [stderr.decode("utf-8", "replace")]), why
    return Outcome.OTHER, why


def failure_outcome(info: dict, sem: Semantics, source: str | None = None, compiling: bool = False,
                    also: list[str] | tuple = ()) -> Outcome:
    """The class of a failure the run reported (``info``: the worker's ``exception_info``): by its
    builtin class, or under ``rules`` by what it says was printed (and ``also``), with ``source`` (the
    check the traceback went through, where it printed one)."""
    if not sem.rules:
        return outcome_of_exception(str(info.get("base")), compiling=compiling)
    texts = [source] if source is not None and info.get("traceback") is True else []
    printed = info.get("printed") if type(info.get("printed")) is list else []
    return sem.classify([*printed, *also], texts)


def ended_err(line: bytes | None, stderr: bytes, sem: Semantics, cap: int) -> list[str]:
    """Under ``rules``, the rule strings in a referee's solution session's stderr: as its ``end`` says
    (``line``, at most ``cap`` bytes read), else as far as this side captured it (``stderr``). The
    whole run's stderr, where the study's process had printed only up to the failing check (the
    referee runs every check): honest code that prints a rule string after a failure is the
    difference."""
    if not sem.rules:
        return []
    said = _end(line, cap)
    if said is not None and type(said.get("err")) is list:
        return [n for n in said["err"] if type(n) is str]
    text = stderr.decode("utf-8", "replace")
    return [n for n in sem.needles if n in text]


def _last_line(stdout: bytes) -> str | None:
    """The study's reading of its stdout (``text=True``: UTF-8, universal newlines; then
    ``strip().splitlines()[-1:]``): its last line, "" when empty; None where it is not UTF-8 (the
    study's tool failed there)."""
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").strip().splitlines()
    return lines[-1] if lines else ""


def _end(line: bytes | None, cap: int) -> dict | None:
    """The session's ``end`` message, where ``line`` is one."""
    if line is None or len(line) > cap:
        return None
    try:
        said = wire.loads(line)
    except wire.WireError:
        return None
    return said if said.get("ev") == "end" else None


def one_file_end(line: bytes | None, status: RunStatus, run: Run, sem: Semantics, cap: int,
                 marker: str, complete: bool) -> tuple[Outcome, str]:
    """Under ``as_main``, where every check passed: PASS only where the run then ended as the study's
    file did (its ``end``, then exit status 0 within the wall limit; ``cap``: the longest line read)
    with ``marker`` the last line of its stdout, read by the study's rule from the stdout captured
    where that is ``complete`` (under the output cap, and UTF-8), else as the run says; else the class
    the study read from a file that passed its asserts but not that."""
    said = _end(line, cap)
    if said is None or status.timed_out or status.memory_exceeded or status.exit != 0 \
            or status.signal is not None:
        return status_outcome(status, run.protocol_error, sem, run.stderr)
    last = _last_line(run.stdout) if complete else None
    if (said.get("stdout") is not True) if last is None else (last != marker):
        why = ("every check passed, but the study's marker would not be the last line of stdout (the "
               "solution printed text after its last line break, or printed at exit)")
        return sem.classify(said.get("err"), [run.stderr.decode("utf-8", "replace")]), why
    return Outcome.PASS, ""


def safe_repr(value: Any, cap: int = DETAIL_CAP) -> str:
    try:
        text = repr(value)
    except ValueError:  # ints beyond the int-to-str digit limit
        text = f"<int of {value.bit_length()} bits>" if type(value) is int else "<unrepresentable>"
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more chars]"


def exc_text(info: dict) -> str:
    return f"{info.get('type', '?')}: {info.get('msg', '')}"[:DETAIL_CAP]


def judge(line: bytes, i: int, spec, expected: Any, sem: Semantics, cap: int,
          explain: bool = True) -> tuple[Outcome, str]:
    """The outcome of check ``i`` (``spec``: its ``glyph.grading.ProbeCheck``, ``expected`` its value)
    from the line that answered it, at most ``cap`` bytes read. ``explain``:
    the got/expected of a wrong answer (the first failing check's; a later
    one's outcome is enough, and a repr of each would cost the grader)."""
    if len(line) > cap:
        return Outcome.OTHER, (f"{spec.probe}: an answer of {len(line)} bytes, over the answer cap "
                               f"({cap})")
    try:
        resp = wire.loads(line)
    except wire.WireError as exc:
        return Outcome.OTHER, f"malformed result: {exc}"
    if resp.get("ev") != "ret" or resp.get("id") != i:
        return Outcome.OTHER, "the run answered out of turn"
    wrong = Outcome.ASSERTION_FAILURE if not sem.rules else \
        sem.classify(resp.get("err"), [assert_text(spec.source)])
    if type(resp.get("exc")) is dict:
        return failure_outcome(resp["exc"], sem, spec.source), exc_text(resp["exc"])
    if "notplain" in resp:
        return wrong, f"{spec.probe} returned a value that is not plain data ({str(resp['notplain'])[:200]})"
    if "overcap" in resp:
        detail = f"{spec.probe}: an answer of {resp['overcap']!s:.20} bytes, over the answer cap ({cap})"
        return (wrong, detail) if sem.rules else (Outcome.OTHER, detail)  # too long to equal any expected
    try:
        got = wire.decode(resp.get("value"), numbers=sem.numbers)
    except wire.WireError as exc:
        return Outcome.OTHER, f"malformed result: {exc}"
    try:
        equal = got == expected
    except Exception as exc:  # only a Decimal raises here (a signalling NaN); the study's assert did too
        shown = f"Traceback (most recent call last):\n{spec.source}\n{type(exc).__name__}: {safe_repr(exc)}\n"
        return sem.classify(resp.get("err"), [shown]), f"{spec.probe}: comparing raised {type(exc).__name__}"
    if equal:
        return Outcome.PASS, ""
    if not explain:
        return wrong, f"{spec.probe}: a wrong answer"
    return wrong, f"{spec.probe}: got {safe_repr(got)}, expected {safe_repr(expected)}"
