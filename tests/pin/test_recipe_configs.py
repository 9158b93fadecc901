"""The recipe (``configs/study/``, ``configs/glyph/``) validated by PRIME-RL
itself at the pin (559b447, glyph's patches applied), in the pinned stack
(tests/test_pin.py).

Every file goes *alone* through ``prime_rl.utils.config.cli`` into the class
its launcher parses it with (``RLConfig``, ``SFTConfig``, verifiers'
``EvalConfig``), exactly as ``glyph train rl|sft @ FILE`` (PRIME-RL's ``rl``
/ ``sft``) and ``eval @ FILE`` do: a run file validates and resolves to the
study's numbers, an override (``seed_43.toml``, ``eval_costly.toml``) refuses
(``eval_token_client.toml`` names no environment), so no file resolves to
PRIME-RL's defaults.
The launchers' own ``--dry-run`` then writes the per-process configs, and
each re-validates against the class its process parses it with. The SFT data
``glyph data prepare`` writes for each profile goes through PRIME-RL's own
SFT dataset code: every trace fits ``data.seq_len`` untruncated, and the
packing gives the samples per step that the configs and REPRODUCTION.md state.

The study profile's renderer is glyph's own ``glyph.render_study.StudyRenderer``,
which ``CustomRendererConfig`` imports at validation time, and the SFT counts
are the study's traces as that renderer tokenizes them.
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

import verifiers.v1 as vf
from prime_rl.configs.env_server import EnvServerConfig
from prime_rl.configs.evals import EvalsConfig
from prime_rl.configs.inference import InferenceConfig
from prime_rl.configs.orchestrator import OrchestratorConfig
from prime_rl.configs.rl import RLConfig
from prime_rl.configs.sft import SFTConfig
from prime_rl.configs.trainer import TrainerConfig
from prime_rl.utils.config import cli
from verifiers.v1.configs.cli.eval import EvalConfig

import glyph.render
from glyph import recipe

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
VERSIONS = tomllib.loads((CONFIGS / "versions.toml").read_text())
SPLIT_SIZES = {"sft": 212, "rl": 212, "validation": 40, "test": 500}
PROFILES = ("study", "glyph")
FILES = [(p.name, name) for p in recipe.PROFILES.values() for name in recipe.profile_files(p)]


def test_the_study_configs_name_glyphs_study_renderer():
    """The study configs' renderer is glyph's class itself, found by the path glyph.render states."""
    from renderers.custom import custom_renderer_config, load_custom_renderer

    from glyph.render_study import IMPORT_PATH, StudyRenderer, StudyRendererConfig

    assert recipe.STUDY.renderer == glyph.render.RENDERERS["study"]
    assert recipe.STUDY.renderer["import_path"] == IMPORT_PATH == f"{StudyRenderer.__module__}.StudyRenderer"
    assert load_custom_renderer(IMPORT_PATH) is StudyRenderer
    c = sft_config("study", "a", Path("unused"))
    assert type(custom_renderer_config(c.renderer)) is StudyRendererConfig


def path(profile: str, name: str) -> str:
    return str(CONFIGS / profile / f"{name}.toml")


def parser(name: str):
    return SFTConfig if name.startswith("sft") else EvalConfig if name.startswith("eval") else RLConfig


def test_the_pinned_stack_runs_the_pinned_versions():
    assert importlib.metadata.version("verifiers") == VERSIONS["verifiers"]["version"]
    assert importlib.metadata.version("renderers") == VERSIONS["renderers"]["version"]


@pytest.mark.parametrize("profile,name", FILES, ids=lambda x: x)
def test_each_file_alone_is_a_run_or_refuses(profile, name, tmp_path):
    args = ["@", path(profile, name)] + ([] if name.startswith("eval") else ["--output-dir", str(tmp_path)])
    if name == "eval_token_client":  # an override that validates alone, but names no environment
        assert cli(parser(name), args=args).env.taskset.id == ""
        return
    if name in recipe.OVERRIDES:
        with pytest.raises(Exception, match="(?i)validat"):
            cli(parser(name), args=args)
        return
    c = cli(parser(name), args=args)
    if name.startswith("sft"):
        # Not PRIME-RL's defaults (Qwen/Qwen3-0.6B, seq_len 128, no max_steps): the study's.
        assert (c.model.name, c.data.seq_len, c.max_steps) == (VERSIONS["model"]["name"], 1280, 60)
        assert c.data.name == f"artifacts/{profile}/sft/arm_{name[-1]}"
    elif name.startswith("eval"):
        assert (c.env.taskset.id, c.env.taskset.profile, c.env.agent.harness.profile) == (
            "glyph-mbpp", profile, profile)
    else:
        assert (c.trainer.max_steps, c.orchestrator.seq_len) == (100, 4096)
        assert c.trainer.model.name == (f"JayZenith/SFT_ARM_{name[4].upper()}" if "from_study_sft" in name
                                        else f"outputs/{profile}-sft-arm-{name[4]}/hf")


def renderer_of(c) -> tuple:
    return (c.name, getattr(c, "import_path", None), getattr(c, "enable_thinking", None))


RENDERER = {"study": ("custom", "glyph.render_study.StudyRenderer", None), "glyph": ("qwen3", None, False)}


def check_glyph_source(source, profile: str, arm: str, split: str, costly: bool) -> None:
    env = source.env
    assert (env.taskset.id, env.taskset.profile, env.taskset.arm, env.taskset.split, env.taskset.seed) == (
        "glyph-mbpp", profile, arm, split, 42)
    harness = env.agent.harness
    assert (harness.id, harness.profile, harness.max_tool_calls, harness.tool_timeout) == (
        "glyph-mbpp", profile, 8, 30.0)
    assert (harness.test_cost, harness.revise_feedback) == ((4, "outcome") if costly else (1, "none"))
    assert env.agent.runtime.type == "subprocess"
    taskset = vf.load_taskset(env.taskset)
    if split == "rl":  # the study's draw: endless, and each of the split's tasks once a pass
        assert env.taskset.order == "study" and type(taskset).INFINITE
        first_pass = {t.data.task_id for t in itertools.islice(taskset, SPLIT_SIZES[split])}
        assert len(first_pass) == SPLIT_SIZES[split]
    else:
        assert len(list(taskset)) == SPLIT_SIZES[split]


RL_RUNS = [(p, arm, seed, "") for p in PROFILES for arm in "ab" for seed in (42, 43)]
RL_RUNS += [(p, "b", 42, "alpha0") for p in PROFILES] + [("glyph", arm, 42, "costly") for arm in "ab"]
RL_RUNS += [("study", arm, 42, "from_study_sft") for arm in "ab"]


def rl_config(profile: str, arm: str, seed: int, variant: str, tmp_path: Path, *extra: str) -> RLConfig:
    name = "arm_b_alpha0" if variant == "alpha0" else f"arm_{arm}" + (f"_{variant}" if variant in (
        "costly", "from_study_sft") else "")
    args = ["@", path(profile, name)] + (["@", path(profile, "seed_43"), "--run.name",
                                          f"{profile}-arm-{arm}-seed43"] if seed == 43 else [])
    return cli(RLConfig, args=[*args, "--output-dir", str(tmp_path), *extra])


@pytest.mark.parametrize("profile,arm,seed,variant", RL_RUNS)
def test_rl_resolves_to_the_study_settings(profile, arm, seed, variant, tmp_path, mbpp_path):
    c = rl_config(profile, arm, seed, variant, tmp_path)
    t, o, i = c.trainer, c.orchestrator, c.inference
    assert t.max_steps == o.max_steps == 100
    assert t.model.seq_len == o.seq_len == 4096
    start = f"outputs/{profile}-sft-arm-{arm}/hf"
    if variant == "from_study_sft":
        start = f"JayZenith/SFT_ARM_{arm.upper()}"
    assert t.model.name == o.model.name == i.vllm.model == start
    assert t.model.lora is None  # full-parameter
    assert (t.optim.type, t.optim.lr, t.optim.weight_decay) == ("adamw", 1e-6, 0.01)
    assert (t.loss.type, t.loss.kl_tau) == ("default", 0.0)  # no KL term at all
    assert (o.batch_size, o.group_size) == (64, 16)
    # The study's PRIME-RL d334ea5: 64 in flight (fixed), 8 steps off-policy at most
    # (tests/pin/test_study_training.py).
    assert (o.concurrency.min_inflight, o.concurrency.max_inflight, o.max_off_policy_steps) == (64, 64, 8)
    assert renderer_of(o.renderer) == RENDERER[profile]
    assert o.train.filter_zero_advantages is True
    [train] = o.train.source
    assert train.group_size == 16 and train.curriculum is None
    assert train.sampling.to_sampling_args() == {
        "temperature": 0.8,
        "top_p": 1.0,
        "logprobs": True,
        "max_completion_tokens": 512,
        "extra_body": {"stop_token_ids": [151645], "top_k": 20, "min_p": 0.0, "return_token_ids": True},
    }
    algo = train.algo
    assert algo.length_penalty is None
    assert (algo.exclude_truncated, algo.max_rollout_tokens) == (True, o.seq_len)
    if arm == "a":
        assert algo.type == "glyph_grpo"
    else:
        assert (algo.type, algo.alpha, algo.max_aux_tokens) == ("predict", 0.0 if variant == "alpha0" else 0.1,
                                                               o.seq_len)
        assert (algo.label_span, algo.ce_in_uniform_groups, algo.ce_rule) == (
            ("study", False, "study") if profile == "study" else ("decision", True, "in_place"))
    check_glyph_source(train, profile, arm, "rl", variant == "costly")
    [val] = o.eval.source
    assert (val.interval, val.num_examples, val.group_size) == (25, -1, 1)
    assert val.sampling.to_sampling_args() == {
        "temperature": 0.0,
        "max_completion_tokens": 512,
        "extra_body": {"stop_token_ids": [151645]} | (
            {} if profile == "study" else {"chat_template_kwargs": {"enable_thinking": False}}),
    }
    check_glyph_source(val, profile, arm, "validation", variant == "costly")
    for source in (train, val):
        assert (source.serve.pool.type, source.serve.pool.max_workers, source.serve.pool.multiplex) == (
            "elastic", 16, 4)
    assert i.vllm.seed == seed and i.vllm.gpu_memory_utilization == 0.85
    assert (i.vllm.tool_call_parser, i.vllm.reasoning_parser) == (None, None)
    assert t.weight_broadcast.type == o.weight_broadcast.type == i.weight_broadcast.type == "filesystem"
    assert t.ckpt.interval == o.ckpt.interval == 25
    assert (c.deployment.type, c.deployment.num_train_gpus, c.deployment.num_infer_gpus) == ("single_node", 1, 1)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_rl_dry_run_writes_configs_each_process_accepts(profile, arm, tmp_path, monkeypatch):
    from prime_rl.entrypoints.rl import rl

    monkeypatch.setenv("PRL_RUN_ID", "recipe-test")
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    rl(rl_config(profile, arm, 42, "", tmp_path, "--dry-run"))
    configs = tmp_path / f"{profile}-arm-{arm}-seed42" / "configs"
    trainer = cli(TrainerConfig, args=["@", str(configs / "trainer.json")])
    orch = cli(OrchestratorConfig, args=["@", str(configs / "orchestrator.json")])
    inference = cli(InferenceConfig, args=["@", str(configs / "inference.json")])
    assert (trainer.max_steps, trainer.model.seq_len, trainer.optim.lr, trainer.loss.kl_tau) == (100, 4096, 1e-6, 0.0)
    assert (orch.batch_size, orch.group_size, orch.seq_len, orch.algo.type) == (
        64, 16, 4096, "glyph_grpo" if arm == "a" else "predict")
    assert renderer_of(orch.renderer) == RENDERER[profile]
    assert (inference.vllm.model, inference.vllm.seed) == (f"outputs/{profile}-sft-arm-{arm}/hf", 42)
    for split, name in (("train", f"glyph-mbpp-{arm}"), ("eval", f"glyph-mbpp-{arm}-validation")):
        server = cli(EnvServerConfig, args=["@", str(configs / "envs" / split / f"{name}.json")])
        assert (server.env.taskset.arm, server.env.taskset.profile, server.env.agent.harness.tool_timeout) == (
            arm, profile, 30.0)


def sft_config(profile: str, arm: str, tmp_path: Path, *extra: str) -> SFTConfig:
    return cli(SFTConfig, args=["@", path(profile, f"sft_arm_{arm}"), "--output-dir", str(tmp_path), *extra])


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_resolves_to_the_profiles_settings(profile, arm, tmp_path, mbpp_path):
    c = sft_config(profile, arm, tmp_path)
    assert c.max_steps == 60 and c.run.name == f"{profile}-sft-arm-{arm}"
    assert c.model.name == VERSIONS["model"]["name"] and c.model.lora is None
    assert renderer_of(c.renderer) == RENDERER[profile]
    d = c.data
    rows = {"study": {"a": 15, "b": 18}, "glyph": {"a": 32, "b": 32}}[profile][arm]
    assert (d.type, d.name, d.batch_size, d.micro_batch_size, d.seq_len, d.shuffle, d.seed) == (
        "sft", f"artifacts/{profile}/sft/arm_{arm}", rows, 1, 1280, True, 42)
    assert d.loss_mask.model_dump() == {"system": False, "user": False, "assistant": True, "tool": False}
    assert (c.optim.type, c.optim.lr, c.optim.weight_decay) == ("adamw", 2e-5, 0.01)
    if profile == "study":  # the study's: linear, 2 warmup steps, decay to 0 over the other 58
        s = c.scheduler
        assert (s.type, s.warmup_steps, s.decay_steps, s.min_lr) == ("linear", 2, 58, 0.0)
    else:
        assert c.scheduler.type == "constant"
    assert c.weight_broadcast.type == c.inference.weight_broadcast.type == "filesystem"
    assert c.inference.vllm.model == c.model.name
    [val] = c.eval.source
    assert (val.interval, val.num_examples, val.group_size) == (60, -1, 1)
    assert val.sampling.to_sampling_args()["temperature"] == 0.0
    check_glyph_source(val, profile, arm, "validation", costly=False)
    assert (c.deployment.num_train_gpus, c.deployment.num_infer_gpus) == (1, 1)


def test_the_study_schedule_is_prime_rls_linear_one(monkeypatch):
    """PRIME-RL's own scheduler on the study's config: warm up over 2 steps, then down to 0.
    ``prime_rl.trainer.optim`` imports GPU-only optimizers (dion) that the pinned test stack
    lacks; the scheduler needs only its ``OffloadOptimizer`` name, so a stand-in module takes
    its place while the scheduler is imported, if dion is missing."""
    torch = pytest.importorskip("torch")
    if importlib.util.find_spec("dion") is None:
        stand_in = types.ModuleType("prime_rl.trainer.optim")
        stand_in.OffloadOptimizer, stand_in.OptimizerLike = type("OffloadOptimizer", (), {}), object
        monkeypatch.setitem(sys.modules, "prime_rl.trainer.optim", stand_in)
        monkeypatch.delitem(sys.modules, "prime_rl.trainer.scheduler", raising=False)
    from prime_rl.trainer.scheduler import setup_scheduler

    c = sft_config("study", "a", Path("unused"))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=c.optim.lr)
    sched = setup_scheduler(opt, c.scheduler, c.max_steps, c.optim.lr)
    lrs = []
    for _ in range(c.max_steps + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert max(lrs) == pytest.approx(2e-5) and lrs.index(max(lrs)) == 2
    # PRIME-RL's linear decay reaches min_lr on the last step (59, counting from 0) and stays there.
    assert lrs[0] < lrs[1] < lrs[2] and all(a > b for a, b in itertools.pairwise(lrs[2:60]))
    assert lrs[59] == lrs[60] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_dry_run_writes_configs_each_process_accepts(profile, arm, tmp_path, monkeypatch):
    from prime_rl.entrypoints.sft import sft

    monkeypatch.setenv("PRL_RUN_ID", "recipe-test")
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    sft(sft_config(profile, arm, tmp_path, "--dry-run"))
    configs = tmp_path / f"{profile}-sft-arm-{arm}" / "configs"
    assert cli(SFTConfig, args=["@", str(configs / "sft.json")]).data.name == f"artifacts/{profile}/sft/arm_{arm}"
    evals = cli(EvalsConfig, args=["@", str(configs / "evals.json")])
    assert evals.model == VERSIONS["model"]["name"] and evals.eval.source[0].env.taskset.arm == arm
    assert (
        cli(InferenceConfig, args=["@", str(configs / "inference.json")]).vllm.model
        == VERSIONS["model"]["name"]
    )


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_eval_files_resolve_greedy_on_the_profiles_renderer(profile, arm):
    for split in ("validation", "test"):
        c = cli(EvalConfig, args=["@", path(profile, f"eval_{split}_arm_{arm}")])
        assert (c.env.taskset.arm, c.env.taskset.split) == (arm, split)
        if profile == "study":  # the study's scripts/evaluate.sh: chat completions, a 4096-token cap
            assert c.client.type == "eval" and c.env.agent.max_total_tokens == 4096
            # The token path, as an option.
            c = cli(EvalConfig, args=["@", path(profile, f"eval_{split}_arm_{arm}"),
                                      "@", path(profile, "eval_token_client")])
            assert c.env.agent.max_total_tokens == 4096
        else:
            assert c.env.agent.max_total_tokens is None
        assert c.client.type == "train" and renderer_of(c.client.renderer) == RENDERER[profile]
        assert c.client.renderer_model_name == VERSIONS["model"]["name"]
        assert (c.sampling.temperature, c.sampling.max_tokens) == (0.0, 512)
    if profile == "glyph":
        c = cli(EvalConfig, args=["@", path(profile, f"eval_test_arm_{arm}"), "@", path(profile, "eval_costly")])
        assert (c.env.agent.harness.test_cost, c.env.agent.harness.revise_feedback) == (4, "outcome")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, mbpp_path) -> dict[str, Path]:
    """``glyph data prepare`` of each profile, as REPRODUCTION.md runs it (without plus tests)."""
    out = tmp_path_factory.mktemp("artifacts")
    glyph = Path(sys.executable).parent / "glyph"
    for profile in PROFILES:
        proc = subprocess.run(
            [str(glyph), "data", "prepare", "--profile", profile, "--out", str(out / profile),
             *(["--no-plus"] if profile == "glyph" else [])],
            check=False, capture_output=True, text=True, timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {p: out / p for p in PROFILES}


# Samples in the 60 steps under PRIME-RL's cat packing: what the configs' comments and
# REPRODUCTION.md state. The study trained 32 a step, 1920 (stack packing, one sample a row).
STUDY_SAMPLES_A_STEP = 32  # the study's configs/arm_{a,b}_sft.toml [data]: batch_size 32, stack-packed, one a row
SAMPLES = {("study", "a"): 1980, ("study", "b"): 1946, ("glyph", "a"): 2662, ("glyph", "b"): 2003}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_sft_traces_fit_and_train_on_assistant_turns_only(profile, arm, artifacts, sft_data, tmp_path):
    from renderers.base import create_renderer, load_tokenizer

    from glyph.render import offline_tokenizer_dir

    c = sft_config(profile, arm, tmp_path, "--data.name", str(artifacts[profile] / "sft" / f"arm_{arm}"))
    tok = load_tokenizer(str(offline_tokenizer_dir()))  # the Qwen3 vocabulary, offline
    renderer = create_renderer(tok, c.renderer)  # the profile's own: glyph's StudyRenderer for the study
    assert type(renderer).__name__ == ("StudyRenderer" if profile == "study" else "Qwen3Renderer")
    raw = sft_data.load_sft_dataset(c.data)  # what the trainer loads: the folder's train.jsonl
    assert len(raw) == SPLIT_SIZES["sft"]

    def dataset():
        return sft_data.SFTDataset(raw, renderer, shuffle=c.data.shuffle, seed=c.data.seed,
                                   seq_len=c.data.seq_len, loss_mask_config=c.data.loss_mask)

    ds = dataset()
    for row in raw:
        sample = ds._process(row)
        assert sample is not None and len(sample["input_ids"]) <= c.data.seq_len
        trained = tok.decode([t for t, m in zip(sample["target_ids"], sample["loss_mask"]) if m])
        assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        others = [m["content"] for m in row["messages"] if m["role"] != "assistant"]
        assert all(text in trained for text in assistant)
        assert not any(text in trained for text in others if len(text) > 40)

    def samples_in_the_run(batch_size: int) -> int:
        """PRIME-RL packs samples into rows of seq_len tokens; a step is batch_size rows."""
        rows = itertools.islice(sft_data.CatDataset(dataset(), c.data.seq_len * c.data.micro_batch_size),
                                batch_size * c.max_steps)
        return sum(len(row["seq_lens"]) for row in rows)

    samples = samples_in_the_run(c.data.batch_size)
    print(f"{profile} arm {arm}: {samples} samples in {c.max_steps} steps ({samples / c.max_steps:.1f} a step, "
          f"{samples / len(raw):.2f} epochs)")
    assert samples == SAMPLES[profile, arm]
    if profile == "study":  # the rows a step that come closest to the study's 32 samples a step
        study = STUDY_SAMPLES_A_STEP * c.max_steps
        for other in (c.data.batch_size - 1, c.data.batch_size + 1):
            assert abs(samples_in_the_run(other) - study) > abs(samples - study), other
