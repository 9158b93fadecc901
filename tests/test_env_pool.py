"""glyph-mbpp under verifiers' env-server pool (``verifiers.v1.serve.serve_env``
with a static pool of 2 workers: what PRIME-RL's ``env-server`` entry point
runs for each source, ``[orchestrator.train.source.serve.pool]``), against
the reference policy server. The client owns the taskset and sends each
task's data, as PRIME-RL's orchestrator does; the rollouts spread over both
worker processes, each with its own sandbox server and test service, and
every one is scored as its policy deserves, its final grade taken from its
worker's test service (``info.glyph.final_grade``)."""

import asyncio
import os
import signal
import subprocess
import sys
import time

from glyph.policies.policies import Planner
from glyph.policies.server import PolicyServer
from glyph.record import harness_record, mbpp_record

N = 4  # concurrent rollouts: the broker sends each to the least busy worker, so both get some

SERVE = """
import sys
from verifiers.v1 import StaticPoolConfig, pool_serve_kwargs
from verifiers.v1.serve import env_config_data, serve_env
from verifiers.v1.utils.loaders import resolve_env_config

class Say:  # serve_env reports the bound address here (it takes a queue)
    def put(self, address):
        print(address, flush=True)

env = {"taskset": {"id": "glyph-mbpp", "profile": "glyph", "arm": "b", "split": "test",
                   "data_path": sys.argv[1], "plus_path": sys.argv[2]},
       "agent": {"harness": {"id": "glyph-mbpp", "profile": "glyph", "tool_timeout": 5},
                 "runtime": {"type": "subprocess"}}}
serve_env(**pool_serve_kwargs(StaticPoolConfig(num_workers=2)), address="tcp://127.0.0.1:0",
          address_queue=Say(), config_data=env_config_data(resolve_env_config(env)))
"""


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            children.setdefault(int(data[data.rfind(b")") + 2:].split()[1]), []).append(int(name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int], wait_s: float) -> dict[int, str]:
    """The command line of each of ``pids`` still running (not a zombie) after up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = {}
        for p in pids:
            try:
                with open(f"/proc/{p}/stat", "rb") as f:
                    stat = f.read()
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            except OSError:
                continue
            if stat[stat.rfind(b")") + 2:].split()[0] != b"Z":
                alive[p] = cmd
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


async def _run_all(address: str, tasks: list, base_url: str) -> list:
    import verifiers.v1 as vf
    from verifiers.v1.serve import EnvClient

    client = EnvClient(address=address)
    try:
        await client.wait_for_server_startup(timeout=60)
        return await asyncio.gather(*(
            client.run(client=vf.EvalClientConfig(base_url=base_url), model="mix", sampling=vf.SamplingConfig(),
                       task_data=t.data.model_dump(mode="json"))
            for t in tasks))
    finally:
        await client.close()


def test_rollouts_spread_over_a_two_worker_env_server_pool(tmp_path, mbpp_tasks, mbpp_path):
    no_plus = str(tmp_path / "no-plus")  # no plus tests: the reward grades what python_test graded
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config
    cfg = resolve_env_config({"taskset": {"id": "glyph-mbpp", "profile": "glyph", "arm": "b", "split": "test",
                                          "data_path": mbpp_path, "plus_path": no_plus}})
    taskset = load_taskset(cfg.taskset)
    tasks = [t for _, t in zip(range(N), taskset)]
    planner = Planner(mbpp_tasks)
    env = dict(os.environ, PRIME_RUNS_MODE="disabled")
    with PolicyServer(mbpp_tasks) as policies:
        broker = subprocess.Popen([sys.executable, "-c", SERVE, mbpp_path, no_plus], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            address = broker.stdout.readline().strip()
            assert address.startswith("tcp://127.0.0.1:"), broker.stderr.read()[-3000:] if broker.poll() else address
            episodes = asyncio.run(asyncio.wait_for(_run_all(address, tasks, policies.base_url), 240))
            pool = _descendants(broker.pid)  # its workers, their sandbox servers and agent programs
        finally:
            broker.send_signal(signal.SIGTERM)  # the pool's teardown: its workers, their sandbox servers
            try:
                broker.wait(timeout=60)
            finally:
                if broker.poll() is None:
                    os.killpg(broker.pid, signal.SIGKILL)
                    broker.wait()
    pids = set()
    for task, ep in zip(tasks, episodes):
        assert ep.ok and len(ep.traces) == 1, ep
        [trace] = ep.traces
        rec = mbpp_record(trace.info)
        policy = planner.resolve("mix", mbpp_tasks[task.data.name])
        assert rec is not None and rec.reward == (0.0 if policy == "hack" else 1.0), (task.data.name, policy, rec)
        if policy != "hack":
            assert rec.final_grade == "reused" and rec.metrics.final_grade_reused == 1.0, rec
        pids.add(harness_record(trace.info).env_pid)
    assert len(pids) == 2 and pids <= pool, (pids, pool)  # two worker processes, both the broker's
    assert broker.returncode == 0, broker.stderr.read()[-3000:]
    assert not _alive(pool, 30), _alive(pool, 0)  # the pool's teardown leaves nothing running
