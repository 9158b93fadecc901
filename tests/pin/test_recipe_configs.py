"""The study's recipe (``configs/``) validated by PRIME-RL itself at the pin
(559b447, glyph's patches applied), in the pinned stack (tests/test_pin.py).

Each composition goes through ``prime_rl.utils.config.cli`` into ``RLConfig`` /
``SFTConfig`` exactly as ``uv run rl|sft @ ...`` parses it, and the resolved
values are the study's numbers. The launchers' own ``--dry-run`` then writes
the per-process configs, and each re-validates against the class its process
parses it with. The SFT data that ``glyph data prepare`` writes goes through
PRIME-RL's own SFT dataset code with the Qwen3 renderer (thinking off): every
trace fits ``data.seq_len`` untruncated, and the packing gives the samples per
step that REPRODUCTION.md reports.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

pytest.importorskip("prime_rl.configs.rl", reason="PRIME-RL (patched) must be on PYTHONPATH")

import verifiers.v1 as vf  # noqa: E402
from prime_rl.configs.env_server import EnvServerConfig  # noqa: E402
from prime_rl.configs.evals import EvalsConfig  # noqa: E402
from prime_rl.configs.inference import InferenceConfig  # noqa: E402
from prime_rl.configs.orchestrator import OrchestratorConfig  # noqa: E402
from prime_rl.configs.rl import RLConfig  # noqa: E402
from prime_rl.configs.sft import SFTConfig  # noqa: E402
from prime_rl.configs.trainer import TrainerConfig  # noqa: E402
from prime_rl.utils.config import cli  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
VERSIONS = tomllib.loads((CONFIGS / "versions.toml").read_text())
SPLIT_SIZES = {"sft": 212, "rl": 212, "validation": 40, "test": 500}


def args(*names: str) -> list[str]:
    return [token for name in names for token in ("@", str(CONFIGS / f"{name}.toml"))]


def test_the_pinned_stack_runs_the_pinned_versions():
    assert importlib.metadata.version("verifiers") == VERSIONS["verifiers"]["version"]
    assert importlib.metadata.version("renderers") == VERSIONS["renderers"]["version"]


def check_glyph_source(source, arm: str, split: str, costly: bool) -> None:
    env = source.env
    assert (env.taskset.id, env.taskset.arm, env.taskset.split, env.taskset.seed) == (
        "glyph-mbpp",
        arm,
        split,
        42,
    )
    harness = env.agent.harness
    assert (harness.id, harness.max_tool_calls, harness.tool_timeout) == ("glyph-mbpp", 8, 30.0)
    assert (harness.test_cost, harness.revise_feedback) == ((4, "outcome") if costly else (1, "none"))
    assert env.agent.runtime.type == "subprocess"
    assert len(list(vf.load_taskset(env.taskset))) == SPLIT_SIZES[split]


RL_RUNS = [
    ("a", 42, False),
    ("b", 42, False),
    ("a", 43, False),
    ("b", 43, False),
    ("a", 42, True),
    ("b", 42, True),
]


def rl_config(arm: str, seed: int, costly: bool, tmp_path: Path, *extra: str) -> RLConfig:
    names = ["rl", f"arm_{arm}" + ("_costly" if costly else "")] + (["seed_43"] if seed == 43 else [])
    return cli(
        RLConfig,
        args=[*args(*names), "--output-dir", str(tmp_path), "--run.name", f"arm-{arm}-seed{seed}", *extra],
    )


@pytest.mark.parametrize("arm,seed,costly", RL_RUNS)
def test_rl_resolves_to_the_study_settings(arm, seed, costly, tmp_path, mbpp_path):
    c = rl_config(arm, seed, costly, tmp_path)
    t, o, i = c.trainer, c.orchestrator, c.inference
    assert t.max_steps == o.max_steps == 100
    assert t.model.seq_len == o.seq_len == 4096
    assert t.model.name == o.model.name == i.vllm.model == f"outputs/sft-arm-{arm}/hf"
    assert t.model.lora is None  # full-parameter
    assert (t.optim.type, t.optim.lr) == ("adamw", 1e-6)
    assert (t.loss.type, t.loss.kl_tau) == ("default", 0.0)  # no KL term at all
    assert (o.batch_size, o.group_size) == (64, 16)
    assert (o.renderer.name, o.renderer.enable_thinking) == ("qwen3", False)
    assert o.train.filter_zero_advantages is True
    [train] = o.train.source
    assert train.group_size == 16 and train.curriculum is None
    assert train.sampling.to_sampling_args() == {
        "temperature": 0.8,
        "top_p": 1.0,
        "logprobs": True,
        "max_completion_tokens": 512,
        "extra_body": {"top_k": 20, "min_p": 0.0, "return_token_ids": True},
    }
    assert train.algo.length_penalty is None
    assert (train.algo.exclude_truncated, train.algo.max_rollout_tokens) == (True, o.seq_len)
    if arm == "a":
        assert train.algo.type == "glyph_grpo"
    else:
        assert (train.algo.type, train.algo.alpha, train.algo.max_aux_tokens) == ("predict", 0.1, o.seq_len)
    check_glyph_source(train, arm, "rl", costly)
    [val] = o.eval.source
    assert (val.interval, val.num_examples, val.group_size) == (25, -1, 1)
    assert val.sampling.to_sampling_args() == {
        "temperature": 0.0,
        "max_completion_tokens": 512,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    }
    check_glyph_source(val, arm, "validation", costly)
    assert i.vllm.seed == seed
    assert (i.vllm.tool_call_parser, i.vllm.reasoning_parser) == (None, None)
    assert t.weight_broadcast.type == o.weight_broadcast.type == i.weight_broadcast.type == "filesystem"
    assert t.ckpt.interval == o.ckpt.interval == 25
    assert (c.deployment.type, c.deployment.num_train_gpus, c.deployment.num_infer_gpus) == (
        "single_node",
        1,
        1,
    )


@pytest.mark.parametrize("arm", ["a", "b"])
def test_rl_dry_run_writes_configs_each_process_accepts(arm, tmp_path, monkeypatch):
    from prime_rl.entrypoints.rl import rl

    monkeypatch.setenv("PRL_RUN_ID", "recipe-test")
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    rl(rl_config(arm, 42, False, tmp_path, "--dry-run"))
    configs = tmp_path / f"arm-{arm}-seed42" / "configs"
    trainer = cli(TrainerConfig, args=["@", str(configs / "trainer.json")])
    orch = cli(OrchestratorConfig, args=["@", str(configs / "orchestrator.json")])
    inference = cli(InferenceConfig, args=["@", str(configs / "inference.json")])
    assert (trainer.max_steps, trainer.model.seq_len, trainer.optim.lr, trainer.loss.kl_tau) == (
        100,
        4096,
        1e-6,
        0.0,
    )
    assert (orch.batch_size, orch.group_size, orch.seq_len, orch.algo.type) == (
        64,
        16,
        4096,
        "glyph_grpo" if arm == "a" else "predict",
    )
    assert (inference.vllm.model, inference.vllm.seed) == (f"outputs/sft-arm-{arm}/hf", 42)
    for split, name in (("train", f"glyph-mbpp-{arm}"), ("eval", f"glyph-mbpp-{arm}-validation")):
        server = cli(EnvServerConfig, args=["@", str(configs / "envs" / split / f"{name}.json")])
        assert (server.env.taskset.arm, server.env.agent.harness.tool_timeout) == (arm, 30.0)


def sft_config(arm: str, tmp_path: Path, *extra: str) -> SFTConfig:
    return cli(SFTConfig, args=[*args("sft", f"sft_arm_{arm}"), "--output-dir", str(tmp_path), *extra])


@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_resolves_to_the_study_settings(arm, tmp_path, mbpp_path):
    c = sft_config(arm, tmp_path)
    assert c.max_steps == 60 and c.run.name == f"sft-arm-{arm}"
    assert c.model.name == VERSIONS["model"]["name"] and c.model.lora is None
    assert (c.renderer.name, c.renderer.enable_thinking) == ("qwen3", False)
    d = c.data
    assert (d.type, d.name, d.batch_size, d.micro_batch_size, d.seq_len, d.shuffle, d.seed) == (
        "sft",
        f"artifacts/sft/arm_{arm}",
        32,
        1,
        1280,
        True,
        42,
    )
    assert d.loss_mask.model_dump() == {"system": False, "user": False, "assistant": True, "tool": False}
    assert (c.optim.type, c.optim.lr, c.optim.weight_decay) == ("adamw", 2e-5, 0.01)
    assert c.scheduler.type == "constant"
    assert c.weight_broadcast.type == c.inference.weight_broadcast.type == "filesystem"
    assert c.inference.vllm.model == c.model.name
    [val] = c.eval.source
    assert (val.interval, val.num_examples, val.group_size) == (60, -1, 1)
    assert val.sampling.to_sampling_args()["temperature"] == 0.0
    check_glyph_source(val, arm, "validation", costly=False)
    assert (c.deployment.num_train_gpus, c.deployment.num_infer_gpus) == (1, 1)


@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_dry_run_writes_configs_each_process_accepts(arm, tmp_path, monkeypatch):
    from prime_rl.entrypoints.sft import sft

    monkeypatch.setenv("PRL_RUN_ID", "recipe-test")
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    sft(sft_config(arm, tmp_path, "--dry-run"))
    configs = tmp_path / f"sft-arm-{arm}" / "configs"
    assert cli(SFTConfig, args=["@", str(configs / "sft.json")]).data.name == f"artifacts/sft/arm_{arm}"
    evals = cli(EvalsConfig, args=["@", str(configs / "evals.json")])
    assert evals.model == VERSIONS["model"]["name"] and evals.eval.source[0].env.taskset.arm == arm
    assert (
        cli(InferenceConfig, args=["@", str(configs / "inference.json")]).vllm.model
        == VERSIONS["model"]["name"]
    )


@pytest.fixture(scope="module")
def sft_data():
    """``prime_rl.trainer.sft.data``, which the SFT trainer builds its data from. Its
    DataLoader class (torchdata's ``StatefulDataLoader``) is not used here and the pinned
    test stack does not install torchdata, so a stand-in takes its place while it is
    imported, if it is missing."""
    names = ("torchdata", "torchdata.stateful_dataloader", "prime_rl.trainer.sft.data")
    saved = {name: sys.modules.get(name) for name in names}
    if importlib.util.find_spec("torchdata") is None:
        stand_in = types.ModuleType("torchdata.stateful_dataloader")
        stand_in.StatefulDataLoader = object
        sys.modules["torchdata"] = types.ModuleType("torchdata")
        sys.modules["torchdata.stateful_dataloader"] = stand_in
    import prime_rl.trainer.sft.data as data

    yield data
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, mbpp_path) -> Path:
    out = tmp_path_factory.mktemp("artifacts")
    glyph = Path(sys.executable).parent / "glyph"
    proc = subprocess.run(
        [str(glyph), "data", "prepare", "--no-plus", "--out", str(out)], capture_output=True, text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_traces_fit_and_train_on_assistant_turns_only(arm, artifacts, sft_data, tmp_path):
    from renderers.base import create_renderer, load_tokenizer

    from glyph.render import offline_tokenizer_dir

    c = sft_config(arm, tmp_path, "--data.name", str(artifacts / "sft" / f"arm_{arm}"))
    tok = load_tokenizer(str(offline_tokenizer_dir()))  # the Qwen3 vocabulary, offline
    renderer = create_renderer(tok, c.renderer)
    raw = sft_data.load_sft_dataset(c.data)  # what the trainer loads: the folder's train.jsonl
    assert len(raw) == SPLIT_SIZES["sft"]

    def dataset():
        return sft_data.SFTDataset(
            raw,
            renderer,
            shuffle=c.data.shuffle,
            seed=c.data.seed,
            seq_len=c.data.seq_len,
            loss_mask_config=c.data.loss_mask,
        )

    ds = dataset()
    for row in raw:
        sample = ds._process(row)
        assert sample is not None and len(sample["input_ids"]) <= c.data.seq_len, row["task_id"]
        trained = tok.decode([t for t, m in zip(sample["target_ids"], sample["loss_mask"]) if m])
        assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        others = [m["content"] for m in row["messages"] if m["role"] != "assistant"]
        assert all(text in trained for text in assistant), row["task_id"]
        assert not any(text in trained for text in others if len(text) > 40), row["task_id"]
    # PRIME-RL packs samples into rows of seq_len tokens; a step is batch_size rows.
    rows = list(
        itertools.islice(
            sft_data.CatDataset(dataset(), c.data.seq_len * c.data.micro_batch_size),
            c.data.batch_size * c.max_steps,
        )
    )
    samples = sum(len(row["seq_lens"]) for row in rows)
    print(
        f"arm {arm}: {samples} samples in {c.max_steps} steps ({samples / c.max_steps:.1f} a step, "
        f"{samples / len(raw):.2f} epochs)"
    )
    assert c.data.batch_size * c.max_steps <= samples < 2 * c.data.batch_size * c.max_steps
