"""The study's training run as PRIME-RL at glyph's pin (559b447, patched)
runs ``configs/study/``: the dynamics of the study's PRIME-RL ``d334ea5``,
resolved by the pin's own config classes and exercised through its own
orchestrator code, in the pinned stack (tests/test_pin.py).

* Task order: the sequence of RL tasks the study's ``TrainSource`` drew
  (``d334ea5`` ``src/prime_rl/orchestrator/train_source.py``), computed here
  by ``StudyTrainSource``, written from reading that file, and mapped to task
  ids through the study's published file order (``facts.json``), is what the
  pin's ``TrainSource`` and ``StandardSampler`` draw from glyph-mbpp under
  the study's config: the first 400 (100 steps x 4 prompts), both arms.
  ``order = "listed"`` (the switch) is the pin's cycle in the split's order.
* Concurrency: the pin's ``ConcurrencyController`` on the resolved config
  holds 64 in flight whatever the engines report (d334ea5: a fixed
  ``max_inflight_rollouts`` = ``batch_size``).
* Every study RL file resolves to the study's off-policy limit, env-server
  pool, inference memory share, stop token and task order, in ``RLConfig``
  and in the per-process configs ``rl --dry-run`` writes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
from pathlib import Path

import pytest

pytest.importorskip("prime_rl.configs.rl", reason="PRIME-RL (patched) must be on PYTHONPATH")

from prime_rl.configs.orchestrator import OrchestratorConfig
from prime_rl.configs.rl import RLConfig
from prime_rl.configs.sft import SFTConfig
from prime_rl.orchestrator import envs as prime_envs
from prime_rl.orchestrator.concurrency import ConcurrencyController, EngineLoadSample
from prime_rl.orchestrator.train_source import TrainSource
from prime_rl.utils.config import cli

REPO = Path(__file__).resolve().parents[2]
STEPS, PROMPTS_A_STEP = 100, 4
STUDY_RL_FILES = ("arm_a", "arm_b", "arm_b_alpha0", "arm_a_from_study_sft", "arm_b_from_study_sft")
IM_END = 151645


class StudyTrainSource:
    """PRIME-RL d334ea5's ``TrainSource``, as that file reads: one ``random.Random(seed)``; each env's
    rows ``{"task_idx": i, "env_name": name}`` for ``i`` in ``range(num_tasks)``, shuffled once in env
    order; ``next_example`` picks an env with ``rng.choices(names, weights=ratios, k=1)``, then takes
    the env's next row, reshuffling its rows with the same generator when the cursor is past the end.
    (Per-rollout envs cost one permit, so the permit check never refuses a pick there.) The seed is
    42: d334ea5's orchestrator builds it as ``TrainSource(self.train_envs, seed=42)``."""

    def __init__(self, num_tasks: dict[str, int], ratios: dict[str, float] | None = None, seed: int = 42):
        self.rng = random.Random(seed)
        self.rows: dict[str, list[dict]] = {}
        self.cursor: dict[str, int] = {}
        for name, n in num_tasks.items():
            rows = [{"task_idx": i, "env_name": name} for i in range(n)]
            self.rng.shuffle(rows)
            self.rows[name], self.cursor[name] = rows, 0
        self.names = list(num_tasks)
        self.weights = [float((ratios or {}).get(name, 1.0)) for name in self.names]

    def next_example(self) -> dict:
        name = self.rng.choices(self.names, weights=self.weights, k=1)[0]
        rows = self.rows[name]
        if self.cursor[name] >= len(rows):
            self.rng.shuffle(rows)
            self.cursor[name] = 0
        example = rows[self.cursor[name]]
        self.cursor[name] += 1
        return example


@pytest.fixture(scope="module")
def facts() -> dict:
    path = Path(os.environ.get("GLYPH_STUDY_FACTS") or REPO.parent / "shared" / "study" / "facts.json")
    if not path.is_file():
        pytest.skip(f"the study's facts are not at {path} (set GLYPH_STUDY_FACTS)")
    return json.loads(path.read_text())


def rl(name: str, tmp_path: Path, *extra: str) -> RLConfig:
    return cli(RLConfig, args=["@", str(REPO / "configs" / "study" / f"{name}.toml"), "--output-dir",
                               str(tmp_path), *extra])


class _NoServer:
    """Stands in for the env server's client: ``Env.start`` only waits for it, then loads the taskset."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def wait_for_server_startup(self, timeout: float) -> None:
        return None


def pins_draws(config: RLConfig, monkeypatch, n: int) -> list[int]:
    """The task ids the pin's ``TrainSource`` hands out first: its own ``Env.start`` loads the taskset
    of the resolved train source (streaming it when the taskset class is infinite, else listing it),
    its own ``TrainSource`` and ``StandardSampler`` draw."""
    monkeypatch.setattr(prime_envs, "EnvClient", _NoServer)
    [source] = config.orchestrator.train.source
    env = prime_envs.Env(source, "tcp://127.0.0.1:1")
    asyncio.run(env.start())
    train = TrainSource([env])
    return [train.next_task(step=1 + i // PROMPTS_A_STEP).task.data.task_id for i in range(n)]


@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_pin_draws_the_studys_task_order(arm, tmp_path, monkeypatch, facts, mbpp_path):
    config = rl(f"arm_{arm}", tmp_path)
    study_file = facts["task_rows"][f"{arm}_train"]["task_ids"]  # its arm_X_train.jsonl, in file order
    oracle = StudyTrainSource({f"glyph-mbpp-{arm}": len(study_file)})
    study = [study_file[oracle.next_example()["task_idx"]] for _ in range(STEPS * PROMPTS_A_STEP)]
    got = pins_draws(config, monkeypatch, STEPS * PROMPTS_A_STEP)
    first = next((i for i, (a, b) in enumerate(zip(got, study)) if a != b), None)
    assert first is None, f"draw {first}: the pin gives mbpp_{got[first]}, the study drew mbpp_{study[first]}"
    # 400 draws over 212 tasks: one whole shuffle, then 188 of a second one, which is a new order.
    assert sorted(study[:212]) == sorted(study_file) and len(set(study[212:])) == 188
    assert study[212:] != study[:188]


def test_the_listed_switch_is_the_pins_cycle(tmp_path, monkeypatch, facts, mbpp_path):
    # The source list is replaced whole by an overlay (PRIME-RL's composition): the same source, listed.
    text = (REPO / "configs" / "study" / "arm_a.toml").read_text()
    start = text.index("[[orchestrator.train.source]]")
    source = text[start:text.index("[orchestrator.eval]")].replace('order = "study"', 'order = "listed"')
    (tmp_path / "listed.toml").write_text(source)
    config = rl("arm_a", tmp_path, "@", str(tmp_path / "listed.toml"))
    assert config.orchestrator.train.source[0].env.taskset.order == "listed"
    study_file = facts["task_rows"]["a_train"]["task_ids"]
    # The study's file order, cycled.
    assert pins_draws(config, monkeypatch, 2 * len(study_file)) == study_file * 2


def test_the_pins_concurrency_stays_at_the_studys_64(tmp_path):
    """Bounds equal: the controller's trims, cuts and growth all clamp to 64, so nothing is cancelled
    for load (d334ea5 had no controller: max_inflight_rollouts = batch_size = 64)."""
    o = rl("arm_b", tmp_path).orchestrator
    ctl = ConcurrencyController(o.concurrency, fallback_cost=o.seq_len)
    limits, overloads = [], []
    ctl.bind(set_limit=limits.append, get_inflight=lambda: 64, on_overload=overloads.append)
    assert ctl.max_inflight == 64

    def sample(usage: float, preempted: int = 0, waiting: int = 0) -> EngineLoadSample:
        return EngineLoadSample(engine_id="e0", role=None, kv_capacity_tokens=200_000, max_model_len=4096,
                                kv_usage=usage, running=64, waiting=waiting, waiting_capacity=waiting,
                                preemptions_delta=preempted)

    load = [sample(0.1)] * 3 + [sample(0.95, preempted=5)] + [sample(0.95, waiting=200)] * 8
    load += [sample(0.85)] * 8
    for s in load:
        ctl.observe([s])
        for _ in range(20):
            ctl.record_episode("glyph-mbpp-b", "train", tokens=3000, duration=10.0)
        assert ctl.max_inflight == 64
    assert set(limits) <= {64} and not overloads


def test_every_study_rl_file_resolves_to_the_studys_dynamics(tmp_path, mbpp_path):
    from glyph.render import load_tokenizer, renderer

    assert renderer(load_tokenizer(), "study").get_stop_token_ids() == [IM_END]  # what the rollouts stop at
    for name in STUDY_RL_FILES:
        o = rl(name, tmp_path).orchestrator
        c = o.concurrency
        assert (c.min_inflight, c.max_inflight, o.max_off_policy_steps) == (64, 64, 8), name
        for source in (*o.train.source, *o.eval.source):
            pool = source.serve.pool
            assert (pool.type, pool.max_workers, pool.multiplex) == ("elastic", 16, 4), name
        [train], [val] = o.train.source, o.eval.source
        assert train.env.taskset.order == "study" and val.env.taskset.order == "listed"
        assert train.sampling.to_sampling_args()["extra_body"]["stop_token_ids"] == [IM_END]
        assert val.sampling.to_sampling_args() == {"temperature": 0.0, "max_completion_tokens": 512,
                                                   "extra_body": {"stop_token_ids": [IM_END]}}
        c = rl(name, tmp_path)
        assert c.inference.vllm.gpu_memory_utilization == 0.85 and c.trainer.model.attn == "flash_attention_2"
    for arm in "ab":  # the study's SFT kernel too (PRIME-RL d334ea5's default)
        sft_file = REPO / "configs" / "study" / f"sft_arm_{arm}.toml"
        sft = cli(SFTConfig, args=["@", str(sft_file), "--output-dir", str(tmp_path)])
        assert sft.model.attn == "flash_attention_2"


def test_the_dry_run_hands_the_dynamics_to_each_process(tmp_path, monkeypatch):
    from prime_rl.configs.env_server import EnvServerConfig
    from prime_rl.configs.inference import InferenceConfig
    from prime_rl.entrypoints.rl import rl as launch

    monkeypatch.setenv("PRL_RUN_ID", "study-dynamics-test")
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    launch(rl("arm_b", tmp_path, "--dry-run"))
    configs = tmp_path / "study-arm-b-seed42" / "configs"
    orch = cli(OrchestratorConfig, args=["@", str(configs / "orchestrator.json")])
    c = orch.concurrency
    assert (c.min_inflight, c.max_inflight, orch.max_off_policy_steps) == (64, 64, 8)
    assert orch.train.source[0].env.taskset.order == "study"
    inference = cli(InferenceConfig, args=["@", str(configs / "inference.json")])
    assert inference.vllm.gpu_memory_utilization == 0.85
    server = cli(EnvServerConfig, args=["@", str(configs / "envs" / "train" / "glyph-mbpp-b.json")])
    assert server.env.taskset.order == "study"


def test_the_study_sft_checkpoints_start_the_rl_files_by_name(tmp_path):
    for arm in "ab":
        c = rl(f"arm_{arm}_from_study_sft", tmp_path)
        assert c.trainer.model.name == c.orchestrator.model.name == c.inference.vllm.model == \
            f"JayZenith/SFT_ARM_{arm.upper()}"
        assert c.orchestrator.train.source[0].env.taskset.profile == "study"


def test_the_study_draw_starts_again_where_a_resumed_run_stopped(tmp_path, monkeypatch, mbpp_path):
    """A resumed run's sampler skips as many tasks as its checkpoint counted (``StandardSampler``'s
    ``load_state_dict``): on the endless taskset it continues the study's sequence."""
    from prime_rl.orchestrator.curriculum.samplers import StandardSampler

    config = rl("arm_a", tmp_path)
    monkeypatch.setattr(prime_envs, "EnvClient", _NoServer)
    [source] = config.orchestrator.train.source

    def sampler() -> StandardSampler:
        env = prime_envs.Env(source, "tcp://127.0.0.1:1")
        asyncio.run(env.start())
        assert env.num_tasks is None  # streamed: the study's draw is endless
        return StandardSampler(env.tasks)

    whole = [t.data.task_id for t in itertools.islice(sampler(), 300)]
    resumed = sampler()
    resumed.load_state_dict({"cursor": 123})
    assert [t.data.task_id for t in itertools.islice(resumed, 177)] == whole[123:]
