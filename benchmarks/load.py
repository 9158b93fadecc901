"""Load and faults, measured: many rollouts at once through ``vf-eval``
while the endpoint, the grader and the solutions misbehave.

Runs ``vf-eval glyph-mbpp`` (``--rollouts`` rollouts, ``--per-example`` per
task, ``-c --concurrency``) against glyph's reference-policy server wrapped
in a fault injector. Each task gets one behaviour, from a seeded hash of its
id (shares in ``FAULT_SHARES``):

* ``mix``: glyph's ``mix`` policy (oracle, recover, revise or hack);
* ``fault-500``: every model call answered HTTP 500 (the program retries,
  then gives up: the rollout must end errored, with the cause);
* ``fault-hang``: no answer until the benchmark ends; the harness's
  ``model_timeout`` (``--env.agent.harness.model-timeout``, set from
  ``--model-timeout``, 10 s) must end the rollout, errored;
* ``fork_bomb``, ``stdout_flood``, ``memory_bomb``: the agent patches in
  the red-team attack of that name (``glyph.redteam``), runs python_test,
  and answers FINAL: graded in the sandbox, it must score 0;
* ``learn_verdicts``: the agent patches in a solution that computes nothing
  and would learn its verdicts across gradings (``testkit.redteam.channels.
  SEQUENTIAL``), runs python_test twice, and answers FINAL: it must score 0.

Each behaviour speaks the profile of the conversation it answers
(``glyph.policies.policies.profile_of``: the study's, vf-eval's default, or
glyph's).

Partway through (once the endpoint has answered ``--kill-after`` x
``--rollouts`` requests) one sandbox server of this vf-eval (a process whose
command line holds ``glyph/sandbox/runtime/server.py``, a descendant of the
vf-eval process) is killed with SIGKILL.

Then every rollout is read back from vf-eval's output (``glyph.demo.
read_rollouts``) and checked:

* ``lost``: rollouts expected but absent, or present with neither a reward
  nor an error/reason (plus one per missing rollout if vf-eval failed);
* ``leaked``: after vf-eval exits (and a grace period), processes still
  alive that were seen in vf-eval's process tree during the run or carry
  this run's marker in their environment; entries left in the private
  ``TMPDIR`` given to vf-eval, new ``/tmp/glyph-runs*`` / ``glyph-root*`` /
  ``/tmp/run-*`` entries, new ``glyph-*`` cgroups (the per-run memory cap),
  new verifiers subprocess-runtime workdirs
  (``~/.cache/verifiers/runtimes/subprocess``); new lines of
  ``/proc/self/mountinfo`` naming glyph;
* memory: the RSS of vf-eval, of the sandbox servers (their own processes)
  and of vf-eval's whole process tree, sampled every 0.5 s (max reported).

Prints a table per behaviour (scored 1, scored 0, errored, lost, and as
expected: oracle, recover and revise rewarded 1; hack and the hostile
solutions scored 0; endpoint faults errored, never scored), the reasons of
the rollouts errored or scored 0, the sandbox servers seen (the killed one
restarted counts twice), wall time, max RSS, and last
``lost=<n> leaked=<n>``. Not a test: it takes minutes at the defaults.

    uv run python benchmarks/load.py [--rollouts 256] [--concurrency 64] [--mbpp-path PATH]

The sandbox mode is vf-eval's default (``auto``; ``GLYPH_SANDBOX_MODE`` in
the environment is passed on); the table shows the mode the rollouts record.

New processes that match glyph's command-line patterns, were re-parented
to init and were never seen in this run's tree are listed (not counted): an
orphan of this run that escaped between two samples, or another user's.
New ``/tmp/glyph-runs*`` / ``/tmp/run-*`` entries are counted even if another
glyph user on the machine made them: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from glyph.agent.profiles.base import Call
from glyph.data import mbpp
from glyph.data.sft import Step
from glyph.demo import read_rollouts, vf_eval_command
from glyph.policies.policies import Planner, UnknownTask, dialect, function_name, profile_of
from glyph.policies.server import PolicyServer
from glyph.redteam import attack
from testkit.redteam import channels

FAULT_SHARES = (("fault-500", 0.08), ("fault-hang", 0.08), ("fork_bomb", 0.06), ("stdout_flood", 0.06),
                ("memory_bomb", 0.06), ("learn_verdicts", 0.06))  # the rest: mix
HOSTILE = ("fork_bomb", "stdout_flood", "memory_bomb", "learn_verdicts")
SANDBOX_SERVER = "glyph/sandbox/runtime/server.py"
PATTERNS = (SANDBOX_SERVER, "glyph/sandbox/runtime", "glyph-runs", "/.glyph/", "program.py", "program.bundle")
MARKER = "GLYPH_LOAD_BENCH"
PAGE = os.sysconf("SC_PAGE_SIZE")


def behaviour(seed: int, task_id: int) -> str:
    """The seeded behaviour of a task (``FAULT_SHARES``, else ``mix``)."""
    u = int(hashlib.sha256(f"load:{seed}:{task_id}".encode()).hexdigest()[:12], 16) / 16 ** 12
    for kind, share in FAULT_SHARES:
        if u < share:
            return kind
        u -= share
    return "mix"


class FaultServer(PolicyServer):
    """glyph's ``PolicyServer`` with a handler in front: a task's model calls
    are answered by its ``behaviour``; ``mix`` tasks go to glyph's own
    handler unchanged (the body is read once and handed back to it)."""

    def __init__(self, tasks, seed: int = 0) -> None:
        super().__init__(tasks, policy="mix", seed=seed)
        self.seed = seed
        self.closing = threading.Event()
        self.answered: collections.Counter = collections.Counter()
        self.count_lock = threading.Lock()
        base = self.httpd.RequestHandlerClass
        server = self

        class Handler(base):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if 0 < length <= 64 << 20 else b""
                kind = "mix"
                try:
                    messages = json.loads(raw)["messages"]
                    task = server.planner.task_of(messages, profile_of(messages)[0])
                    kind = behaviour(server.seed, task.task_id)
                except (ValueError, KeyError, TypeError, UnknownTask):
                    messages = task = None
                with server.count_lock:
                    server.answered[kind] += 1
                if kind == "fault-500":
                    server.requests += 1
                    return self.send_json(500, {"error": {"message": "injected failure"}})
                if kind == "fault-hang":
                    server.requests += 1
                    server.closing.wait(3600)
                    self.close_connection = True
                    return None
                if kind in HOSTILE:
                    server.requests += 1
                    return self.send_json(200, server.completion(server.hostile_reply(kind, task, messages)))
                rfile, self.rfile = self.rfile, io.BytesIO(raw)
                try:
                    return super().do_POST()
                finally:
                    self.rfile = rfile

        self.httpd.RequestHandlerClass = Handler

    def hostile_reply(self, kind: str, task, messages: list[dict]) -> str:
        """The turn of a hostile behaviour, in the conversation's profile: patch in the attack, run
        python_test (``learn_verdicts``: twice, the source that would learn its verdicts across gradings,
        ``testkit.redteam.channels.SEQUENTIAL``), then FINAL."""
        profile, arm = profile_of(messages)
        script, _ = dialect(profile, task)
        agent = profile.agent

        def args(tool: str, find: str | None = None, replace: str | None = None) -> dict:
            return agent.args(tool, script.solution, script.project, find, replace)

        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if kind == "learn_verdicts":
            source = channels.source(channels.SEQUENTIAL, f"load-{task.task_id}", function_name(task))
        else:
            source = attack(kind).source.replace("remove_first_last", function_name(task))
        keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
        steps = [Step(Call("1", "apply_patch", args("apply_patch", agent.placeholder, source))),
                 Step(Call("2", "python_test", args("python_test")), **keep)]
        if kind == "learn_verdicts":  # the same source again (Arm B predicts a test after a patch only)
            steps += [Step(Call("3", "apply_patch", args("apply_patch", source, source))),
                      Step(Call("4", "python_test", args("python_test")), **keep)]
        steps.append(Step(None))
        return steps[min(turn, len(steps) - 1)].text(agent)

    def completion(self, content: str) -> dict:
        return {"id": f"glyph-load-{self.requests}", "object": "chat.completion", "created": int(time.time()),
                "model": "mix", "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": len(content) // 4,
                          "total_tokens": len(content) // 4}}

    def close(self) -> None:
        self.closing.set()
        super().close()


# ---- processes, files, mounts -------------------------------------------------------------------

def processes() -> dict[int, dict]:
    """Every process: pid -> ppid, start time, cmdline, rss (bytes)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(d)] = {"ppid": int(fields[1]), "start": int(fields[19]), "cmd": cmd,
                       "rss": int(fields[21]) * PAGE}
    return out


def has_marker(pid: int, token: str) -> bool:
    try:
        return f"{MARKER}={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def tree(procs: dict[int, dict], root: int) -> set[int]:
    children = collections.defaultdict(list)
    for pid, p in procs.items():
        children[p["ppid"]].append(pid)
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in seen:
            seen.add(pid)
            todo += children[pid]
    return seen


def tmp_entries() -> set[str]:
    """The sandbox's host-side directories: runs (``glyph-runs*``, ``run-*``)
    and ``confined`` mode's copied roots (``glyph-root*``)."""
    return {str(p) for pat in ("glyph-runs*", "glyph-root*", "run-*") for p in Path("/tmp").glob(pat)}


def cgroup_dirs(top: str = "/sys/fs/cgroup", depth: int = 6) -> set[str]:
    """The sandbox's cgroups (``glyph-<pid>-<hex>``, one per server, with a
    ``run-<n>`` child per run) anywhere in the first ``depth`` levels below
    ``top``."""
    found = set()
    for here, dirs, _ in os.walk(top):
        if here.count(os.sep) - top.count(os.sep) >= depth:
            dirs[:] = []
        found |= {os.path.join(here, d) for d in dirs if d.startswith("glyph-")}
        dirs[:] = [d for d in dirs if not d.startswith("glyph-")]
    return found


def own_cgroups() -> set[str]:
    """The cgroup of this process's own sandbox server (the reference
    policies grade their mutations in it), alive until this process exits:
    not vf-eval's to clean up."""
    from glyph.sandbox import get_sandbox
    info = getattr(get_sandbox(), "info", None)
    return {info.cgroup} if info is not None and info.cgroup else set()


def runtime_dirs() -> set[str]:
    from verifiers.v1.utils.paths import CACHE_DIR
    d = CACHE_DIR / "runtimes" / "subprocess"
    return {str(p) for p in d.iterdir()} if d.is_dir() else set()


def glyph_mounts() -> list[str]:
    return [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if "glyph" in ln]


class Monitor(threading.Thread):
    """Samples vf-eval's process tree every 0.5 s: max RSS of vf-eval, of the
    sandbox servers and of the whole tree; every (pid, start) ever seen in it;
    and kills one sandbox server once ``kill_when()`` is true."""

    def __init__(self, pid: int, kill_when) -> None:
        super().__init__(daemon=True)
        self.pid, self.kill_when = pid, kill_when
        self.stop = threading.Event()
        self.seen: dict[tuple[int, int], str] = {}
        self.max_rss = {"vf-eval": 0, "sandbox servers": 0, "whole tree": 0}
        self.max_procs = 0
        self.servers: dict[tuple[int, int], int] = {}  # sandbox servers (pid, start) seen -> owner pid
        self.killed: str | None = None
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            procs = processes()
            mine = tree(procs, self.pid)
            for pid in mine:
                self.seen[(pid, procs[pid]["start"])] = procs[pid]["cmd"]
            servers = [pid for pid in mine if SANDBOX_SERVER in procs[pid]["cmd"]
                       and "unshare" not in procs[pid]["cmd"].split(" ", 1)[0]]
            tops = [pid for pid in servers if procs[pid]["ppid"] not in servers]  # not a server's worker
            for pid in tops:  # the owner: the process that started it (above its unshare wrapper)
                owner = procs[pid]["ppid"]
                if SANDBOX_SERVER in procs.get(owner, {}).get("cmd", ""):
                    owner = procs[owner]["ppid"]
                self.servers[(pid, procs[pid]["start"])] = owner
            rss = {"vf-eval": procs.get(self.pid, {}).get("rss", 0),
                   "sandbox servers": sum(procs[p]["rss"] for p in servers),
                   "whole tree": sum(procs[p]["rss"] for p in mine)}
            for k, v in rss.items():
                self.max_rss[k] = max(self.max_rss[k], v)
            self.max_procs = max(self.max_procs, len(mine))
            if self.killed is None and tops and self.kill_when():
                victim = min(tops)
                try:
                    os.kill(victim, signal.SIGKILL)
                    self.killed = f"pid {victim}, {time.monotonic() - self.t0:.0f} s into the run"
                except ProcessLookupError:
                    pass


def under_other(procs: dict[int, dict], pid: int, ours: set[int]) -> bool:
    """Whether ``pid`` descends from a process not in this run's tree
    (``ours``): another user's, or this benchmark's own (the sandbox its
    reference policy grades mutations in, closed at exit); not an orphan of
    this run re-parented to init (one re-parented to another subreaper is
    missed)."""
    while pid in procs and procs[pid]["ppid"] != 1:
        pid = procs[pid]["ppid"]
        if pid not in ours:
            return True
    return False


def sandbox_modes(out: Path) -> collections.Counter:
    """The sandbox mode each scored rollout records (``info.glyph.sandbox.mode``)."""
    from glyph.record import mbpp_record
    from glyph.report.load import find_runs, iter_episodes
    modes: collections.Counter = collections.Counter()
    for run in find_runs(out) if out.is_dir() else []:
        for _, episode in iter_episodes(run.traces):
            for t in episode["traces"]:
                rec = mbpp_record(t.get("info"))
                mode = (rec.sandbox or {}).get("mode") if rec is not None else None
                if mode:
                    modes[mode] += 1
    return modes


def alive(pid: int, start: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[19]) == start and fields[0] != "Z"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--per-example", type=int, default=2, help="rollouts per task (vf-eval -r)")
    ap.add_argument("--arm", choices=("a", "b"), default="b")
    ap.add_argument("--model-timeout", type=float, default=10.0, help="the harness's model_timeout (s)")
    ap.add_argument("--kill-after", type=float, default=1.0,
                    help="kill a sandbox server once the endpoint answered this x --rollouts requests")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds left for cleanup after vf-eval exits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mbpp-path")
    ap.add_argument("--keep", action="store_true", help="keep vf-eval's output (printed where)")
    args = ap.parse_args()
    if args.rollouts % args.per_example:
        ap.error(f"--rollouts {args.rollouts} is not a multiple of --per-example {args.per_example}")
    data_path = args.mbpp_path or os.environ.get(mbpp.ENV_VAR)
    tasks = {t.id: t for t in mbpp.load_source(data_path).tasks}
    console = Console()
    token = secrets.token_hex(8)
    work = Path(tempfile.mkdtemp(prefix="glyph-load-"))
    private_tmp = work / "tmp"
    private_tmp.mkdir()
    out = work / "out"

    before_procs = processes()
    before_tmp, before_rt, before_mounts = tmp_entries(), runtime_dirs(), glyph_mounts()
    before_cgroups = cgroup_dirs()
    with FaultServer(tasks, seed=args.seed) as server:
        # The reference policy finds recover/revise's mutation on first use (gradings in this process's
        # sandbox): done here, outside the run, or a first reply could outlast the model timeout.
        t_warm = time.perf_counter()
        used = mbpp.make_splits([t.task_id for t in tasks.values()])["test"][:args.rollouts // args.per_example]
        for task_id in used:
            task = tasks[f"mbpp_{task_id}"]
            if behaviour(args.seed, task_id) == "mix" and server.planner.resolve("mix", task) in ("recover", "revise"):
                server.planner.mutant(task)
        console.print(f"policy warm-up (mutations found): {time.perf_counter() - t_warm:.1f} s")
        cmd = vf_eval_command(server.base_url, "mix", args.arm, args.rollouts // args.per_example, out, data_path,
                              ["-r", str(args.per_example), "-c", str(args.concurrency),
                               "--env.agent.harness.model-timeout", str(args.model_timeout)])
        env = dict(os.environ, PRIME_RUNS_MODE="disabled", TMPDIR=str(private_tmp), **{MARKER: token})
        console.print(f"vf-eval: {args.rollouts} rollouts ({args.rollouts // args.per_example} tasks x "
                      f"{args.per_example}), concurrency {args.concurrency}, arm {args.arm}; endpoint "
                      f"{server.base_url}")
        t0 = time.perf_counter()
        log = (work / "vf-eval.log").open("w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        monitor = Monitor(proc.pid, lambda: server.requests >= args.kill_after * args.rollouts)
        monitor.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        monitor.stop.set()
        monitor.join()
        log.close()
    answered = dict(server.answered)

    # ---- leaks: wait out the grace period for cleanup, then look
    deadline = time.monotonic() + args.grace
    while True:
        left_procs = {k: v for k, v in monitor.seen.items() if alive(*k) and k[0] != os.getpid()}
        now = processes()
        new = {pid: p for pid, p in now.items()
               if pid not in before_procs or before_procs[pid]["start"] != p["start"]}
        left_procs.update({(pid, p["start"]): p["cmd"] for pid, p in new.items()
                           if pid != os.getpid() and has_marker(pid, token)})
        left_files = sorted({str(p) for p in private_tmp.rglob("*")} | (tmp_entries() - before_tmp)
                            | (runtime_dirs() - before_rt) | (cgroup_dirs() - before_cgroups - own_cgroups()))
        left_mounts = [m for m in glyph_mounts() if m not in before_mounts]
        if not (left_procs or left_files or left_mounts) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    unattributed = [f"{pid} {p['cmd'][:100]}" for pid, p in new.items()
                    if (pid, p["start"]) not in left_procs and any(s in p["cmd"] for s in PATTERNS)
                    and not under_other(now, pid, {k[0] for k in monitor.seen})]

    # ---- results
    rows = read_rollouts(out)
    planner = Planner(tasks, args.seed)
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: collections.Counter = collections.Counter()
    lost = max(0, args.rollouts - len(rows))
    for r in rows:
        task = tasks[r["task"]]
        kind = behaviour(args.seed, task.task_id)
        label = f"mix/{planner.resolve('mix', task)}" if kind == "mix" else kind
        c = by_kind[label]
        c["rollouts"] += 1
        if r["reward"] is not None:
            c[f"scored {r['reward']:g}"] += 1
            expected = 1.0 if label in ("mix/oracle", "mix/recover", "mix/revise") else 0.0
            c["as expected"] += r["reward"] == expected and kind not in ("fault-500", "fault-hang")
            if r["reward"] == 0.0 or not r["ok"]:
                reasons[(label, "scored 0: " + (r["reason"] or "?")[:70])] += 1
        elif r["reason"] or r["errors"]:
            c["errored"] += 1
            c["as expected"] += kind in ("fault-500", "fault-hang")
            reasons[(label, "errored: " + (r["reason"] or r["errors"][0]["message"])[:70])] += 1
        else:
            lost += 1
            c["lost"] += 1

    table = Table(title=f"vf-eval glyph-mbpp under load and faults ({args.rollouts} rollouts, "
                        f"concurrency {args.concurrency})")
    cols = ("rollouts", "scored 1", "scored 0", "errored", "lost", "as expected")
    table.add_column("behaviour")
    for col in cols:
        table.add_column(col, justify="right")
    for label in sorted(by_kind):
        table.add_row(label, *(str(by_kind[label][c]) for c in cols))
    table.add_row("all", *(str(sum(c[k] for c in by_kind.values())) for k in cols), style="bold")
    console.print(table)

    why = Table(title="why rollouts were errored or scored 0")
    for col in ("behaviour", "reason", "n"):
        why.add_column(col, justify="right" if col == "n" else "left")
    for (label, reason), n in sorted(reasons.items()):
        why.add_row(label, reason, str(n))
    console.print(why)

    facts = Table(title="run")
    facts.add_column("fact")
    facts.add_column("value", justify="right")
    facts.add_row("vf-eval exit code", str(rc))
    facts.add_row("wall time (s)", f"{wall:.1f}")
    facts.add_row("rollouts/s", f"{len(rows) / wall:.2f}")
    facts.add_row("endpoint requests by behaviour", ", ".join(f"{k} {v}" for k, v in sorted(answered.items())))
    facts.add_row("sandbox mode recorded (rollouts)",
                  ", ".join(f"{k} {v}" for k, v in sandbox_modes(out).items()) or "none recorded")
    facts.add_row("sandbox server killed", monitor.killed or "none (no server seen, or too few requests)")
    facts.add_row("sandbox servers seen (started)", f"{len(monitor.servers)}, under "
                  f"{len(set(monitor.servers.values()))} parent process(es)")
    facts.add_row("rollouts against expectation", str(sum(c["rollouts"] - c["as expected"] - c["lost"]
                                                          for c in by_kind.values())))
    for k, v in monitor.max_rss.items():
        facts.add_row(f"max RSS, {k} (MiB)", f"{v / 2 ** 20:.0f}")
    facts.add_row("max processes in vf-eval's tree", str(monitor.max_procs))
    facts.add_row("processes left", str(len(left_procs)))
    facts.add_row("files left", str(len(left_files)))
    facts.add_row("mounts left", str(len(left_mounts)))
    console.print(facts)
    for (pid, _), c in sorted(left_procs.items()):
        console.print(f"[red]left process[/] {pid}: {c[:160]}", highlight=False)
    for f in left_files[:20]:
        console.print(f"[red]left file[/] {f}", highlight=False)
    for m in left_mounts:
        console.print(f"[red]left mount[/] {m}", highlight=False)
    if unattributed:
        console.print(f"[yellow]{len(unattributed)} new glyph-like orphan process(es) never seen in this run's "
                      f"tree (not counted)[/], e.g. {unattributed[0]}", highlight=False)
    if rc != 0:
        console.print(f"[red]vf-eval exited {rc}[/]; its log's tail:\n"
                      + (work / "vf-eval.log").read_text(errors="replace")[-3000:], highlight=False)
    leaked = len(left_procs) + len(left_files) + len(left_mounts)
    if args.keep:
        console.print(f"kept: {work}", highlight=False)
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    print(f"lost={lost} leaked={leaked}")


if __name__ == "__main__":
    main()
