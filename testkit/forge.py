"""A forgery of the end of an episode, as a model could write it, for the
tests that check finalize catches it (``tests/test_env.py``,
``tests/test_faults.py``): the record of the model's replies, not the trace,
decides whether an episode ended with FINAL (``glyph.envs.mbpp.finalize``)."""

from __future__ import annotations


def forging_solution(code: str, pidfile: str, done: str) -> str:
    """``code``, preceded by what a model could write to forge a FINAL: graded
    bare beside the agent program (python_test in a container where no
    isolating sandbox starts), it leaves a daemon that rewrites the trace
    after the program has exited: ``end`` final, every test claim as a
    trusted re-grade gives it. Inert anywhere else (finalize's sandbox).

    A plain double fork does not outlive python_test: the bare sandbox
    server is the runs' subreaper and sweeps what they leave. So the first
    grading replaces the server's file (the shipped copy, writable in the
    runtime) with one that starts the daemon before serving, and kills the
    server (that run is OTHER); the grader restarts it from that file for
    the next python_test, and the daemon it forks first (before the server
    code makes it a subreaper) is re-parented outside every sweep.
    ``pidfile``, ``done``: where the daemon says who it is and that it wrote
    (for the test's clean-up and its wait)."""
    daemon = f"""
import os, sys
_program, _cwd = os.getppid(), os.getcwd()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import json, time
        fd = os.open(os.devnull, os.O_RDWR)
        for i in range(3):
            os.dup2(fd, i)
        os.closerange(3, 65536)
        with open({pidfile!r}, "w") as f:
            f.write(str(os.getpid()))
        while True:
            try:
                with open(f"/proc/{{_program}}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.01)
        trace = os.path.join(_cwd, ".glyph", "trace.json")
        with open(trace) as f:
            t = json.load(f)
        t.update(end="final", final=True, error=None)
        for claim in t["tests"]:
            claim["outcome"] = "PASS"
        for cand in t["candidates"]:
            cand["verified_label"] = "PASS"
        with open(trace + ".tmp", "w") as f:
            json.dump(t, f)
        os.replace(trace + ".tmp", trace)
        open({done!r}, "w").close()
        os._exit(0)
    os._exit(0)
os.wait()
"""
    attack = f"""
def _forge():
    import os, signal
    pid, server, program = os.getppid(), None, None
    while pid > 1 and program is None:
        with open(f"/proc/{{pid}}/cmdline", "rb") as f:
            argv = f.read().split(b"\\0")
        hit = [a.decode() for a in argv if a.endswith(b"/sandbox/runtime/server.py")]
        if server is not None:
            program = pid  # the grader that started the server runs in the agent program's process
        elif hit:
            server = (pid, hit[0])
        with open(f"/proc/{{pid}}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    if server is None or program is None:
        return  # not graded beside the agent program
    with open(server[1]) as f:
        original = f.read()
    if "_forge_final" in original:
        return  # the daemon is out: the restarted server started it
    with open(server[1], "w") as f:
        f.write("_forge_final = 1\\n" + {daemon!r} + "exec(compile(" + repr(original) + ", __file__, 'exec'))\\n")
    os.kill(server[0], signal.SIGKILL)


try:
    _forge()
except Exception:
    pass
"""
    return attack + "\n" + code
