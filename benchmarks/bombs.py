"""Wire bombs: what each costs the grader before and after wire's bounds.

For each ``wire_*`` attack of ``glyph.redteam`` (and ``trailing_messages``, a
right answer followed by 15 MB of messages, which passes) two measurements a
side, each in a fresh process (peak RSS is a high-water mark) under an
address-space limit (``--memory``, GiB) and a timeout (``--timeout``, s):

``decode``
    what the trusted side does with the bomb's one message: ``wire.loads`` of
    the line the sandbox writes, then ``wire.decode``. The line is built here
    (the attack's source runs against a stand-in ``wire`` module, whose
    ``encode`` it patches as it patches the sandbox's) and read from a file.
``grade``
    a real ``grade()`` of the attack with the limits of
    ``tests/test_redteam.py``, by the grader and sandbox of that side, after
    one honest grading.

BEFORE is the glyph package at ``--before`` (a git ref, exported with ``git
archive``; default: the parent of the first commit that defined
``wire.MAX_NODES``, so that the script still compares after a merge); AFTER
is this checkout. The attack sources are this checkout's on both sides.
Prints one table: seconds, peak RSS over the process's own before the
measured step (MiB), and what came of it: the decode's WireError, the
grade's outcome and detail, ``timeout`` (with the high-water RSS when it was
killed) or ``MemoryError``.

    uv run python benchmarks/bombs.py [--before REF] [--timeout S] [--memory GIB] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from rich.console import Console
from rich.table import Table

from glyph.redteam import ATTACKS, DEMO_SOLUTION

REPO = Path(__file__).resolve().parent.parent
WIRE = "glyph/sandbox/runtime/wire.py"
TRAILING = DEMO_SOLUTION + """
import sys
wire = sys.modules["wire"]
dumps, line = wire.dumps, b'{"ev":"x","v":[' + b"[]," * 260_000 + b'[]]}\\n'
wire.dumps = lambda msg: dumps(msg) + line * 20 if msg.get("id") == 2 else dumps(msg)
"""

CHILD = r'''
import json, os, resource, sys, time
root, mode, path, referee, limit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.path.insert(0, root)
import glyph
assert os.path.realpath(glyph.__file__).startswith(os.path.realpath(root)), glyph.__file__

def rss():  # this process's high-water RSS since its exec: ru_maxrss keeps the parent's, from before it
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))

if mode == "decode":
    from glyph.sandbox.runtime import wire
    line = open(path, "rb").read().rstrip(b"\n")  # as the client splits it
    print(json.dumps({"base_kb": rss()}), flush=True)
    t0 = time.perf_counter()
    try:
        wire.decode(wire.loads(line)["value"], allow_handles=True)
        result = "decoded"
    except wire.WireError as exc:
        result = f"WireError: {exc}"
else:
    from glyph.grading import grade
    from glyph.redteam import DEMO_TESTS, REFEREE_TESTS
    from glyph.sandbox import Limits, Sandbox
    sb = Sandbox(pool=0)
    sb.protections()
    grade("def remove_first_last(s, ch): return s", "", DEMO_TESTS, sandbox=sb)
    print(json.dumps({"base_kb": rss()}), flush=True)
    t0 = time.perf_counter()
    g = grade(open(path).read(), "", REFEREE_TESTS if referee else DEMO_TESTS,
              limits=Limits(cpu_s=2, wall_s=4), sandbox=sb)
    result = f"{g.outcome.value}: {g.detail}"
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_kb": rss(), "result": result}), flush=True)
'''


def bomb_line(source: str) -> bytes:
    """The message the sandbox writes for a ``wire_*`` attack's checked call (``wire.dumps``)."""
    stand_in = types.ModuleType("wire")
    stand_in.encode = lambda value, *a, **k: None
    saved = sys.modules.get("wire")
    sys.modules["wire"] = stand_in
    try:
        ns: dict = {}
        exec(source, ns)  # a wire_* attack only patches the module it finds as sys.modules["wire"]
        tree = stand_in.encode(ns["remove_first_last"]("hello", "l"))
    finally:
        if saved is None:
            del sys.modules["wire"]
        else:
            sys.modules["wire"] = saved
    return json.dumps({"ev": "ret", "id": 0, "value": tree}, separators=(",", ":")).encode() + b"\n"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def default_before(symbol: str = "MAX_NODES", path: str = WIRE) -> str:
    """The commit before the first that added ``symbol`` to ``path``: the code from before that change."""
    first = git("log", "--reverse", "--format=%H", "-S", symbol, "--", path).split()
    if not first:
        sys.exit(f"no commit defines {symbol} in {path}: pass --before")
    return first[0] + "^"


def export(ref: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", ref, "glyph"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def high_water_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(root: Path, mode: str, path: Path, referee: bool, timeout: float, memory_gib: float) -> dict:
    """One fresh child: {"seconds", "peak_mib", "result"}."""
    limit = str(int(memory_gib * (1 << 30)))
    argv = [sys.executable, "-c", CHILD, str(root), mode, str(path), str(int(referee)), limit]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        hwm = None
    except subprocess.TimeoutExpired:
        hwm = high_water_kb(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its sandbox server
        out, err = proc.communicate()
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    base = lines[0]["base_kb"] if lines else 0
    if hwm is not None:
        return {"seconds": None, "peak_mib": max(hwm - base, 0) / 1024, "result": f"timeout ({timeout:g} s)"}
    if len(lines) < 2:
        last = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        why = f"MemoryError at {memory_gib:g} GiB" if "MemoryError" in err else last
        return {"seconds": None, "peak_mib": None, "result": why}
    return {"seconds": lines[1]["seconds"], "peak_mib": (lines[1]["peak_kb"] - base) / 1024,
            "result": lines[1]["result"]}


def cells(m: dict | None) -> list[str]:
    if m is None:
        return ["", "", "n/a"]
    secs = "-" if m["seconds"] is None else f"{m['seconds']:.2f}"
    peak = "-" if m["peak_mib"] is None else f"{m['peak_mib']:.0f}"
    if m["result"].startswith("timeout"):
        peak = f">= {peak}"
    return [secs, peak, m["result"].removesuffix(": ")[:100]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="git ref of the grader to compare with (default: before wire.MAX_NODES)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a measurement may take")
    ap.add_argument("--memory", type=float, default=4.0, help="address-space limit of a measurement, GiB")
    ap.add_argument("--only", action="append", help="measure only this bomb (repeatable)")
    ap.add_argument("--modes", default="decode,grade", help="comma-separated: decode, grade")
    args = ap.parse_args()
    before = args.before or default_before()
    bombs = [(a.name, a.source, a.referee) for a in ATTACKS if a.name.startswith("wire_")]
    bombs.append(("trailing_messages", TRAILING, False))
    bombs = [b for b in bombs if not args.only or b[0] in args.only]
    modes = args.modes.split(",")
    table = Table(title=f"wire bombs: before ({git('rev-parse', '--short', before).strip()}) and after (this "
                        f"checkout); timeout {args.timeout:g} s, address space {args.memory:g} GiB")
    for col in ("bomb", "path", "step", "before s", "before MiB", "before: result",
                "after s", "after MiB", "after: result"):
        table.add_column(col, justify="right" if col.endswith((" s", "MiB")) else "left", overflow="fold")
    with tempfile.TemporaryDirectory(prefix="glyph-bombs-") as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        export(before, old)
        for name, source, referee in bombs:
            files = {"grade": Path(tmp) / f"{name}.py"}
            files["grade"].write_text(source)
            if name.startswith("wire_"):  # one message: decode measures it alone
                files["decode"] = Path(tmp) / f"{name}.json"
                files["decode"].write_bytes(bomb_line(source))
            for mode in modes:
                row = []
                for side, root in (("before", old), ("after", REPO)):
                    m = measure(root, mode, files[mode], referee, args.timeout, args.memory) \
                        if mode in files else None
                    print(f"{name} {mode} {side}: {m}", file=sys.stderr)
                    row += cells(m)
                size = f"\n{files['decode'].stat().st_size / 2**20:.1f} MiB line" if "decode" in files else ""
                table.add_row(name, ("referee" if referee else "fast") + size, mode, *row)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
