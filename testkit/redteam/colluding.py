"""Copies of one solution graded at once that pool what each learns of the
tests over abstract unix sockets (``COLLUDE``): each run's network
namespace of its own keeps them apart (``confined``: no ``socket()``), and,
whatever they share, a run never learns a verdict to pool
(``glyph.grading``). Stdlib only."""

from __future__ import annotations

# Three boolean checks, of the shape of MBPP task 3 (any constant answer fails one of them).
COLLUDE_TESTS = """\
assert is_odd(2) == False
assert is_odd(7) == True
assert is_odd(35) == True
"""

# Copies of one solution that computes nothing, graded at once, pooling what each learns: for each
# call the first copy to get there claims it (an abstract unix socket) and answers True; a copy
# that is asked again (or told to exit) was right and publishes the answer, a copy killed for a
# wrong one vanishes, and the copies that saw it probing publish the other answer (a prober waits
# until another copy is alive, up to 3 s, before it answers). Facts live as
# listening abstract sockets, held by every copy that knows them. Alone (a network namespace of its
# own), a copy is always the first: it answers True to everything and fails.
COLLUDE = r'''
import socket, time, errno
TOKEN = "@TOKEN@"
FUNCTION = "@FUNCTION@"
_held, _seen, _probing = [], set(), []

def _name(*parts):
    return ("\0glyph-collude-" + TOKEN + "/" + "/".join(map(str, parts))).encode()

def _hold(*parts):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(_name(*parts))
        s.listen(1024)
        _held.append(s)
        return True
    except OSError:
        s.close()
        return False

def _there(*parts):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(_name(*parts))
        return True
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        s.close()

def _known(key):
    for value in (True, False):
        if _there(key, value):
            _hold(key, value)  # hold it too: it outlives the copy that learned it
            return value
    return None

def _answered():
    if _probing:
        _hold(_probing.pop(), True)

import sys
_worker = sys.modules.get("worker") or sys.modules.get("glyph.sandbox.runtime.worker")
_recv = _worker.Channel.recv
def _hooked_recv(self):  # told to exit (not cut off: that is a kill): the last answer was right too
    req = _recv(self)
    if req.get("op") == "exit" and _probing:
        _answered()
        time.sleep(0.5)
    return req
_worker.Channel.recv = _hooked_recv

def answer(*args):
    _answered()  # asked again: the last answer was right
    key = repr(args)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        value = _known(key)
        if value is not None:
            return value
        if key in _seen:
            if not _there("probe", key):  # its prober is gone without publishing True
                value = _known(key)
                if value is None:
                    _hold(key, False)
                    return False
                return value
        elif _hold("probe", key):
            _probing.append(key)
            until = time.monotonic() + 3
            while time.monotonic() < until and sum(_there("copy", i) for i in range(64)) < 2:
                time.sleep(0.01)  # wait for another copy to arrive (alone, it waits in vain)
            time.sleep(0.3)  # and for the others to see it probing
            return True
        else:
            _seen.add(key)
        time.sleep(0.002)
    return True

for _i in range(64):  # count as a copy while alive
    if _hold("copy", _i):
        break
globals()[FUNCTION] = answer
'''


def colluding_copies(token: str, function: str = "is_odd") -> str:
    """The colluding solution above, for ``function``; ``token`` keeps
    separate trials from meeting."""
    return COLLUDE.replace("@TOKEN@", token).replace("@FUNCTION@", function)


def collude(sandbox, copies: int = 8, tests: str = COLLUDE_TESTS, function: str = "is_odd",
            wall_s: float = 30.0, source: str | None = None, grader=None) -> list[bool]:
    """Grade ``copies`` copies of ``source`` (default: the colluding
    solution above) at once; whether each passed. ``grader``: a function
    ``(sandbox, source, setup, tests, limits) -> passed`` (default: glyph's
    grader; ``verdicts.leaky_grade`` is the control)."""
    import secrets
    import threading

    from glyph.sandbox import Limits

    if grader is None:
        from glyph.grading import grade

        def grader(sandbox, source, setup, tests, limits):
            return grade(source, setup, tests, limits=limits, sandbox=sandbox).passed

    source = source or colluding_copies(secrets.token_hex(6), function)
    passed = [False] * copies
    start = threading.Barrier(copies)

    def one(i: int) -> None:
        start.wait()
        passed[i] = grader(sandbox, source, "", tests, Limits(cpu_s=10, wall_s=wall_s))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return passed
