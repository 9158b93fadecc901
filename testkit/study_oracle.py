"""The PREDICT study's classifier of a candidate, re-implemented from reading its
``src/glyph/program.py`` (``run_hidden_tests`` and ``_failed_outcome``): a **test
oracle only**, never a grader. It runs the solution the study's way, trusting
what the solution prints, so a forgery passes it; ``tests/test_study_verdicts.py``
runs it beside glyph's grader on honest code only, to show that the study
profile's grader gives the class the study gave.

What the study did, as this module does it:

* One file: the solution right-stripped, a blank line, the test code (setup then
  the asserts) right-stripped, a blank line, and two lines that write a random
  marker line to ``sys.__stdout__``. It runs as ``__main__`` (the solution's
  ``if __name__ == "__main__":`` block runs before the tests) in a fresh
  interpreter (``-B``) in an empty temporary folder, with a minimal environment
  (``PATH``, ``LANG=C.UTF-8``, ``HOME``, ``PYTHONDONTWRITEBYTECODE``), stdout
  and stderr captured as UTF-8 text with universal newlines, and stdin empty
  (the study's program inherited supervisord's ``/dev/null``: ``input()`` meets
  EOF).
* PASS: exit status 0 and the last line of the stripped stdout is the marker.
* Else the class is read from stderr: a timeout is TIMEOUT; ``SyntaxError`` or
  ``IndentationError`` anywhere in it, SYNTAX_ERROR; else ``AssertionError``,
  ASSERTION_FAILURE; else ``Traceback (most recent call last)``,
  RUNTIME_ERROR; else OTHER.
* Output that is not UTF-8 made the study's tool fail with no class at all:
  here ``UNDECODABLE``, so that a difference shows.

What is not the study's: the interpreter is this one (``sys.executable``, or
``python``); the run gets resource limits the study did not set (address space
``AS_BYTES``, file size, no core files; the wall clock is the study's own
limit, given as ``timeout``), so a runaway candidate cannot take this machine;
and its whole process group is killed after it ends, so nothing it started
is left behind.
"""

from __future__ import annotations

import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

UNDECODABLE = "UNDECODABLE"
AS_BYTES = 4 << 30
FSIZE_BYTES = 64 << 20
RULES = (("SYNTAX_ERROR", ("SyntaxError", "IndentationError")), ("ASSERTION_FAILURE", ("AssertionError",)),
         ("RUNTIME_ERROR", ("Traceback (most recent call last)",)))
"""The study's stderr rules, in its order (its ``_failed_outcome``)."""


def classify_stderr(stderr: str) -> str:
    """The class the study read from a failed run's stderr (no timeout)."""
    for outcome, texts in RULES:
        if any(t in stderr for t in texts):
            return outcome
    return "OTHER"


def _limits() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (AS_BYTES, AS_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _text(data: bytes) -> str:
    """``subprocess``'s text mode: strict UTF-8, then ``\\r\\n`` and ``\\r`` as ``\\n``."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def study_outcome(source: str, test_code: str, timeout: float, python: str | None = None) -> str:
    """The outcome class the study's classifier gives ``source`` under ``test_code``."""
    marker = f"GLYPH_ORACLE_{secrets.token_hex(16)}"
    program = (source.rstrip() + "\n\n" + test_code.rstrip() + "\n\n" + "import sys as _oracle_sys\n"
               + f"_oracle_sys.__stdout__.write({marker!r} + '\\n')\n")
    with tempfile.TemporaryDirectory(prefix="glyph-oracle-") as root:
        path = Path(root) / "check.py"
        path.write_text(program, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": root,
               "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen([python or sys.executable, "-B", str(path)], cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=_limits)
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its whole group, also after a normal exit
            except ProcessLookupError:
                pass
        if timed_out:
            proc.communicate()
            return "TIMEOUT"
    try:
        stdout, stderr = _text(out), _text(err)
    except UnicodeDecodeError:
        return UNDECODABLE
    if proc.returncode == 0 and stdout.strip().splitlines()[-1:] == [marker]:
        return "PASS"
    return classify_stderr(stderr)
