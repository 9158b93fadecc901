"""A solution session run as the PREDICT study's one file (``worker``'s header
flags ``as_main``, ``numbers`` and ``printed``: ``glyph.semantics.STUDY``).

The study ran solution and tests as one ``__main__`` file and read the
outcome from its exit and stderr (its ``src/glyph/program.py``,
``run_hidden_tests``); a run under these flags behaves as that file did and
reports what the study read:

* ``as_main``: the solution is module ``__main__`` (also ``solution``), so its
  ``if __name__ == "__main__":`` block runs when it loads, with ``sys.argv``
  the file's name alone, ``sys.__stdout__`` the captured stdout (UTF-8 with
  ``surrogateescape``, as under the study's ``LANG=C.UTF-8``) and stdin at its end (``/dev/null``). After
  the last probe (or, in a referee's session, at ``exit``) it ends as the file
  did after its last test: it prints the header's ``marker`` line where the
  study's file printed its own (noting whether stdout so far ends a line or is
  all whitespace, so that the marker is then a line of its own), joins the
  solution's threads and runs its ``atexit`` functions (``finish``), notes
  whether anything but whitespace was printed after, and says ``end`` with
  both facts before exiting 0 (the grader reads the captured stdout itself
  where it is whole, these facts where it is not).
* ``printed``: strings (the study's classifier's) whose presence in stderr
  this run reports: with each failure, those in stderr so far plus the text
  the interpreter would have printed for it (``printed``: a traceback; a
  compile error without one; a ``SystemExit``'s message); with each answer
  and at ``end``, those in stderr so far.
* ``numbers``: ``Fraction`` and ``Decimal`` results cross as such (``wire``).

All of it is untrusted, like everything a solution session says: the trusted
side takes a PASS only from its own ``==`` (or the referee's), and these facts
can only turn one into a failure, or choose which failure class a failing run
shows, as the study's own run could by printing.

Stdlib only: a sibling of ``worker``, imported by the sandbox server.
"""

from __future__ import annotations

import atexit
import codecs
import io
import os
import sys
import traceback

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` ends a line at (the study's stdout was read with it, ``\r`` as ``\n``)."""
TEXT_CAP = 1 << 20


class Watched(io.RawIOBase):
    """fd 1 or 2 of a one-file run: every write goes to the fd; kept beside it is
    what the study's classifier read of the stream: which of ``needles`` it
    holds (stderr), whether everything written since ``mark`` is whitespace
    and whether the last character ends a line (stdout)."""

    def __init__(self, fd: int, needles=()) -> None:
        super().__init__()
        self.fd = fd
        self.needles = tuple(dict.fromkeys(str(n) for n in needles))
        self.keep = max((len(n.encode()) for n in self.needles), default=1) - 1
        self.tail = b""
        self.found: set[str] = set()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.blank = True
        self.ends_line = False

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        data = bytes(b)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        if self.needles:
            window = self.tail + data
            self.found.update(n for n in self.needles if n.encode() in window)
            self.tail = window[-self.keep:] if self.keep else b""
        text = self.decoder.decode(data)
        if text:
            self.blank = self.blank and text.isspace()
            self.ends_line = text[-1] in LINE_BREAKS
        return len(data)

    def mark(self) -> bool:
        """Where the study printed its marker: whether it would be a line of its own (what was
        written is all whitespace, or ends a line); ``blank`` now counts from here."""
        ok = self.blank or self.ends_line
        self.blank = True
        return ok


def _text(value) -> str:
    try:
        s = value if type(value) is str else str(value)
        s = s if type(s) is str else "<unprintable>"
    except BaseException:  # hostile __str__
        s = "<unprintable>"
    return s[:TEXT_CAP]


def printed(exc: BaseException, compiling: bool = False) -> str:
    """What the interpreter prints to stderr when ``exc`` ends a script: for a compile error its
    location and message, no traceback (3.12 reports null bytes in a script as a SyntaxError);
    for ``SystemExit`` its code when that is no int or None; else the traceback, the worker's
    own frame left out."""
    try:
        if compiling:
            if isinstance(exc, ValueError):
                return f"SyntaxError: {exc}\n"
            return "".join(traceback.format_exception_only(type(exc), exc))
        if isinstance(exc, SystemExit):
            code = exc.code
            return "" if code is None or isinstance(code, int) else _text(code) + "\n"
        tb = exc.__traceback__
        tb = tb.tb_next if tb is not None and tb.tb_next is not None else tb
        return "".join(traceback.format_exception(type(exc), exc, tb))
    except BaseException:  # a hostile exception's str or frames: a traceback was printed, with what it had
        return f"Traceback (most recent call last):\n{_text(exc)}\n"


def finish() -> None:
    """The interpreter's exit after a script's last line: the solution's threads joined (one that
    never ends keeps the run to its wall limit, as it kept the study's process), its ``atexit``
    functions run. Their failures are printed and the exit goes on, as the interpreter's does."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        pass


class Session:
    """What a solution session does differently under the header's flags (``as_main``, ``printed``;
    ``flush``: the worker's, which flushes the text streams)."""

    def __init__(self, header: dict, flush) -> None:
        self.as_main = header.get("mode") == "solution" and bool(header.get("as_main"))
        self.needles = tuple(header.get("printed") or ()) if header.get("mode") == "solution" else ()
        self.flush = flush
        self.marker = str(header.get("marker") or "")
        self.out: Watched | None = None
        self.err: Watched | None = None

    def streams(self) -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
        """Under ``as_main``: stdout and stderr watched, installed as ``sys``'s own and as its
        ``__stdout__``/``__stderr__`` (the study's marker went to ``sys.__stdout__``)."""
        self.out, self.err = Watched(1), Watched(2, self.needles)
        out = io.TextIOWrapper(self.out, encoding="utf-8", errors="surrogateescape")
        err = io.TextIOWrapper(self.err, encoding="utf-8", errors="backslashreplace")
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__ = out, err
        return out, err

    def load(self, mod) -> None:
        """Under ``as_main``: ``mod`` (the solution) is ``__main__``, ``sys.argv`` the file's name, and
        only the solution's own ``atexit`` functions run at its end (the server's are dropped)."""
        if self.as_main:
            atexit._clear()
            sys.modules["__main__"] = mod
            sys.argv = ["solution.py"]

    def found(self, exc: BaseException | None = None, compiling: bool = False) -> list[str]:
        """The ``needles`` in stderr so far and in what the interpreter would print for ``exc`` ending
        a script there; ``exc`` None: in stderr so far."""
        self.flush()
        out = set(self.err.found) if self.err is not None else set()
        if exc is not None:
            text = printed(exc, compiling)
            out.update(n for n in self.needles if n in text)
        return sorted(out)

    def failure(self, info: dict, exc: BaseException, compiling: bool = False) -> dict:
        """``info`` (the exception's facts) with what the study's file would have printed for it."""
        if self.needles:
            info["printed"] = self.found(exc, compiling)
            info["traceback"] = not compiling and not isinstance(exc, SystemExit)
        return info

    def said(self, msg: dict) -> dict:
        """``msg`` with the ``needles`` in stderr so far, where there are any."""
        if self.needles:
            found = self.found()
            if found:
                msg["err"] = found
        return msg

    def end(self) -> dict:
        """What the study's one file did after its last test, as the ``end`` message: its marker (a
        line of its own where stdout so far ends a line or is all whitespace), then the
        interpreter's exit (``finish``); the marker stayed the last line where nothing but
        whitespace came after it."""
        self.flush()
        marked = self.out.mark()
        if self.marker:  # the study's marker line, where its file wrote it (the grader reads it there)
            data = memoryview((self.marker + "\n").encode())
            while data:
                data = data[os.write(1, data):]
        finish()
        self.flush()
        return {"ev": "end", "stdout": marked and self.out.blank, "err": sorted(self.err.found)}
