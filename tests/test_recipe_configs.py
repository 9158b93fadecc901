"""The recipe in ``configs/``, checked without PRIME-RL: the files are what
``glyph.recipe`` generates (so each is whole and the sections they share are
one source), every TOML parses, the two profiles differ only by their
documented switches, each variant (arm, alpha = 0 control, costly follow-up,
seed override) only in what its name says, and ``configs/versions.toml`` is
the one record of the pins (``glyph.pins`` reads it for glyph.predict.pin,
glyph.data.mbpp and the pinned test stack).

tests/pin/test_recipe_configs.py runs every file alone through PRIME-RL's
own parser at the pin; tests/test_reproduction.py runs REPRODUCTION.md's CPU
steps.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pinstack
import pytest

from glyph import pins, recipe
from glyph.data import mbpp
from glyph.predict import pin

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
PROFILES = ("study", "glyph")
ARMS = ("a", "b")
TOMLS = sorted(CONFIGS.glob("**/*.toml"))


def load(rel: str) -> dict:
    return tomllib.loads((CONFIGS / f"{rel}.toml").read_text())


def leaves(tree, prefix: str = "") -> dict[str, object]:
    """Every leaf by dotted path; arrays of tables by index."""
    out = {}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], dict)):
            out |= leaves(value, path + ".")
        else:
            out[path] = value
    return out


def diff(a: dict, b: dict) -> dict[str, tuple]:
    la, lb = leaves(a), leaves(b)
    return {k: (la.get(k), lb.get(k)) for k in la.keys() | lb.keys() if la.get(k) != lb.get(k)}


def test_the_committed_files_are_the_generated_ones_and_nothing_else():
    assert recipe.stale(REPO) == [], "run `uv run python -m glyph.recipe`"
    on_disk = {str(p.relative_to(REPO)) for p in TOMLS}
    assert on_disk == set(recipe.files()) | {"configs/versions.toml"}
    assert recipe.main(["--check"]) == 0


def test_the_check_catches_an_edited_file(tmp_path):
    for rel, text in recipe.files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert recipe.stale(tmp_path) == []
    edited = tmp_path / "configs/study/arm_b.toml"
    edited.write_text(edited.read_text().replace("alpha = 0.1", "alpha = 0.2"))
    (tmp_path / "configs/glyph/seed_43.toml").unlink()
    assert recipe.stale(tmp_path) == ["configs/study/arm_b.toml", "configs/glyph/seed_43.toml"]


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_config_parses_and_names_no_machine_path_or_dropped_key(path):
    tree = tomllib.loads(path.read_text())
    for key, value in leaves(tree).items():
        assert not (isinstance(value, str) and value.startswith(("/", "~"))), (key, value)
    keys = {part for key in leaves(tree) for part in key.split(".")}
    # Keys of the study's PRIME-RL v0.7.0 configs that 559b447 no longer has; [wandb] is [monitors.wandb].
    assert "wandb" not in tree and not keys & {"post_batch_filters", "weights_only", "eos_token", "pack_function"}
    # No curriculum: the advantage_range gate drops whole groups, PREDICT's CE included.
    assert not keys & {"curriculum", "gates"}


def test_every_config_is_named_in_reproduction_md():
    named = set(re.findall(r"configs/([\w/.-]+\.toml)", (REPO / "REPRODUCTION.md").read_text()))
    have = {str(p.relative_to(CONFIGS)) for p in TOMLS}
    assert named == have, f"named but missing: {named - have}; never named: {have - named}"


def test_versions_toml_is_what_glyph_and_the_pinned_stack_use():
    v = load("versions")
    assert pins.versions_file() == CONFIGS / "versions.toml"
    assert (pin.PRIME_RL_COMMIT, pin.PRIME_RL_TAG) == (v["prime_rl"]["commit"], v["prime_rl"]["tag"])
    assert (pin.VERIFIERS_COMMIT, pin.VERIFIERS_VERSION) == (v["verifiers"]["commit"], v["verifiers"]["version"])
    assert v["prime_rl"] == {
        "repository": "https://github.com/PrimeIntellect-ai/prime-rl",
        "commit": "559b44772e471d1538537b8805cc77f3824a5e64",
        "tag": "v0.8.1.dev67",
    }
    assert v["verifiers"]["commit"] == "a60a606ecc4d309247edf9ff92c3eabca362781f"
    assert v["renderers"]["version"] == "0.1.12"
    assert (v["mbpp"]["repository"], v["mbpp"]["revision"]) == (mbpp.OFFICIAL_REPO, mbpp.OFFICIAL_REVISION)
    assert v["mbpp"]["sha256"] == dict(mbpp.OFFICIAL_FILES.values())
    assert pinstack.PIN_VERIFIERS_VERSION == v["verifiers"]["version"]
    assert pinstack.PRIME_RL_TARBALL == f"prime-rl-{v['prime_rl']['commit'][:7]}.tar.gz"
    # One model everywhere.
    for profile in PROFILES:
        for arm in ARMS:
            assert load(f"{profile}/sft_arm_{arm}")["model"]["name"] == v["model"]["name"]
    assert load("glyph/eval_test_arm_a")["client"]["renderer_model_name"] == v["model"]["name"]
    assert load("study/eval_token_client")["client"]["renderer_model_name"] == v["model"]["name"]


def sources(tree: dict) -> list[tuple[str, dict]]:
    found = []
    for where, group in (
        ("orchestrator.train", tree.get("orchestrator", {}).get("train", {})),
        ("orchestrator.eval", tree.get("orchestrator", {}).get("eval", {})),
        ("eval", tree.get("eval", {})),
    ):
        found += [(where, s) for s in group.get("source", [])]
    if "env" in tree:
        found.append(("env", {"env": tree["env"]}))
    return found


@pytest.mark.parametrize("profile", PROFILES)
def test_every_environment_is_glyph_mbpp_in_the_files_profile_and_arm(profile):
    files = [n for n in recipe.profile_files(recipe.PROFILES[profile]) if n not in recipe.OVERRIDES]
    assert len(files) == 13
    for name in files:
        tree = load(f"{profile}/{name}")
        arm = re.search(r"arm_([ab])", name).group(1)
        found = sources(tree)
        assert found, name
        for where, source in found:
            env = source["env"]
            assert env["taskset"]["id"] == "glyph-mbpp" and env["taskset"]["arm"] == arm, (name, where)
            assert env["taskset"]["profile"] == env["agent"]["harness"]["profile"] == profile, (name, where)
            assert "seed" not in env["taskset"], "the split seed stays glyph-mbpp's default (42) in every run"
            # The study's draw on the RL split only: an eval reads its split once, as listed.
            assert env["taskset"].get("order") == ("study" if env["taskset"]["split"] == "rl" else None)
            assert ("serve" in source) == where.startswith("orchestrator"), (name, where)
            harness = env["agent"]["harness"]
            assert (harness["max_tool_calls"], harness["tool_timeout"]) == (8, 30.0)
            assert ("test_cost" in harness) == name.endswith("_costly"), (name, harness)
            assert env["agent"]["runtime"] == {"type": "subprocess"}
        splits = [s["env"]["taskset"]["split"] for _, s in found]
        if name.startswith("arm_"):
            assert splits == ["rl", "validation"]
        elif name.startswith("sft_"):
            assert splits == ["validation"]
        else:
            assert splits == [name.split("_")[1]]


def test_the_profiles_differ_only_by_their_switches():
    """glyph = the study + these switches, each an ablation of its own (REPRODUCTION.md)."""
    for arm in ARMS:
        d = diff(load(f"study/arm_{arm}"), load(f"glyph/arm_{arm}"))
        d = {k: v for k, v in d.items() if not k.endswith(".profile")}
        switches = {"run.name", "model.name", "orchestrator.renderer.name", "orchestrator.renderer.import_path",
                    "orchestrator.renderer.enable_thinking",
                    "orchestrator.eval.sampling.extra_body.chat_template_kwargs.enable_thinking"}
        if arm == "b":
            switches |= {f"orchestrator.algo.{k}" for k in ("label_span", "ce_in_uniform_groups", "ce_rule")}
        assert set(d) == switches, d
        d = diff(load(f"study/sft_arm_{arm}"), load(f"glyph/sft_arm_{arm}"))
        d = {k: v for k, v in d.items() if not k.endswith(".profile")}
        assert set(d) == {"run.name", "data.name", "data.batch_size", "renderer.name", "renderer.import_path",
                          "renderer.enable_thinking", "scheduler.type", "scheduler.warmup_steps",
                          "scheduler.decay_steps", "scheduler.min_lr",
                          "eval.sampling.extra_body.chat_template_kwargs.enable_thinking"}, d
        # The eval files: the study's chat-completions client with its cap, glyph's token client.
        d = diff(load(f"study/eval_test_arm_{arm}"), load(f"glyph/eval_test_arm_{arm}"))
        d = {k: v for k, v in d.items() if not k.endswith(".profile")}
        assert set(d) == {"env.agent.max_total_tokens", "client.type", "client.renderer_model_name",
                          "client.renderer.name", "client.renderer.enable_thinking"}, d
    study, glyph = load("study/arm_b")["orchestrator"]["algo"], load("glyph/arm_b")["orchestrator"]["algo"]
    switches = ("label_span", "ce_in_uniform_groups", "ce_rule")
    assert tuple(study[k] for k in switches) == ("study", False, "study")
    assert tuple(glyph[k] for k in switches) == ("decision", True, "in_place")


def test_the_study_profile_takes_the_studys_renderer_and_sft_schedule():
    study_renderer = {"name": "custom", "import_path": "glyph.render_study.StudyRenderer"}
    qwen3 = {"name": "qwen3", "enable_thinking": False}
    for profile, renderer in (("study", study_renderer), ("glyph", qwen3)):
        for arm in ARMS:
            assert load(f"{profile}/arm_{arm}")["orchestrator"]["renderer"] == renderer
            assert load(f"{profile}/sft_arm_{arm}")["renderer"] == renderer
    for arm in ARMS:
        assert load(f"glyph/eval_test_arm_{arm}")["client"]["renderer"] == qwen3
        assert load(f"study/eval_test_arm_{arm}")["client"] == {"type": "eval"}  # the study's evaluate.sh
    assert load("study/eval_token_client")["client"]["renderer"] == study_renderer
    for arm in ARMS:
        s = load(f"study/sft_arm_{arm}")
        # The study's configs/arm_{a,b}_sft.toml: linear, 2 warmup steps, decay to 0 over the other 58.
        assert s["scheduler"] == {"type": "linear", "warmup_steps": 2, "decay_steps": 58, "min_lr": 0.0}
        assert s["scheduler"]["warmup_steps"] + s["scheduler"]["decay_steps"] == s["max_steps"] == 60
        assert s["data"]["name"] == f"artifacts/study/sft/arm_{arm}"
        g = load(f"glyph/sft_arm_{arm}")
        assert g["scheduler"] == {"type": "constant"} and g["data"]["batch_size"] == 32
    assert (load("study/sft_arm_a")["data"]["batch_size"], load("study/sft_arm_b")["data"]["batch_size"]) == (15, 18)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_arms_share_everything_but_model_run_algorithm_and_sources(profile):
    a, b = load(f"{profile}/arm_a"), load(f"{profile}/arm_b")
    d = diff(a, b)
    assert {k.split(".")[0] for k in d} == {"run", "model", "orchestrator"}
    assert {k for k in d if k.startswith("orchestrator")} == (
        {f"orchestrator.algo.{k}" for k in ("type", "alpha", "max_aux_tokens", "label_span",
                                            "ce_in_uniform_groups", "ce_rule")}
        | {f"orchestrator.{w}.source.0.{k}" for w in ("train", "eval") for k in ("name", "env.taskset.arm")}
    )
    assert a["orchestrator"]["algo"] == {"type": "glyph_grpo", "exclude_truncated": True, "max_rollout_tokens": 4096}
    assert (b["orchestrator"]["algo"]["type"], b["orchestrator"]["algo"]["alpha"]) == ("predict", 0.1)
    assert b["orchestrator"]["algo"]["max_aux_tokens"] == b["seq_len"] == 4096
    assert a["model"] == {"name": f"outputs/{profile}-sft-arm-a/hf"}
    assert load(f"{profile}/sft_arm_a")["run"]["name"] == f"{profile}-sft-arm-a"
    sa, sb = load(f"{profile}/sft_arm_a"), load(f"{profile}/sft_arm_b")
    assert {k for k in diff(sa, sb)} <= {"run.name", "data.name", "data.batch_size", "eval.source.0.name",
                                         "eval.source.0.env.taskset.arm"}


@pytest.mark.parametrize("profile", PROFILES)
def test_the_alpha0_control_turns_off_ce_only(profile):
    d = diff(load(f"{profile}/arm_b"), load(f"{profile}/arm_b_alpha0"))
    assert d == {"run.name": (f"{profile}-arm-b-seed42", f"{profile}-arm-b-alpha0-seed42"),
                 "orchestrator.algo.alpha": (0.1, 0.0)}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ARMS)
def test_the_echo_cells_add_echos_observation_ce_only(profile, arm):
    """arm_{a,b}_echo = arm_{a,b} with ECHO's algorithm twin and its role table: nothing else moves."""
    role = recipe.PROFILES[profile].observation_role
    d = diff(load(f"{profile}/arm_{arm}"), load(f"{profile}/arm_{arm}_echo"))
    assert d.pop("run.name") == (f"{profile}-arm-{arm}-seed42", f"{profile}-arm-{arm}-echo-seed42")
    pair = ("glyph_grpo", "glyph_echo") if arm == "a" else ("predict", "predict_echo")
    expected = {"orchestrator.algo.type": pair,
                f"orchestrator.algo.roles.{role}.alpha": (None, recipe.ECHO_ALPHA)}
    if arm == "b":
        expected["orchestrator.algo.ce_balance"] = (None, "separate")
    assert d == expected
    assert recipe.ECHO_ALPHA == load(f"{profile}/arm_b")["orchestrator"]["algo"]["alpha"] == 0.1
    # The study's observations are tool messages, glyph's user messages (each profile's Episode.observation;
    # tests/pin/test_echo.py checks the roles on real rollouts).
    assert role == {"study": "tool", "glyph": "user"}[profile]


def test_the_costly_variant_changes_test_cost_and_revise_feedback_only():
    assert leaves(load("glyph/eval_costly")) == {
        "env.agent.harness.test_cost": 4,
        "env.agent.harness.revise_feedback": "outcome",
    }
    for arm in ARMS:
        d = diff(load(f"glyph/arm_{arm}"), load(f"glyph/arm_{arm}_costly"))
        assert d.pop("run.name") == (f"glyph-arm-{arm}-seed42", f"glyph-arm-{arm}-costly-seed42")
        assert d == {f"orchestrator.{w}.source.0.env.agent.harness.{k}": (None, v)
                     for w in ("train", "eval") for k, v in recipe.COSTLY.items()}
    # The study's protocol has no test cost (the harness ignores it there): no costly study files.
    assert not list((CONFIGS / "study").glob("*costly*"))


@pytest.mark.parametrize("profile", PROFILES)
def test_seed_43_and_the_study_numbers(profile):
    assert leaves(load(f"{profile}/seed_43")) == {"inference.vllm.seed": 43}
    rl = load(f"{profile}/arm_a")
    assert (rl["max_steps"], rl["seq_len"], rl["inference"]["vllm"]["seed"]) == (100, 4096, 42)
    o = rl["orchestrator"]
    assert (o["batch_size"], o["group_size"], o["train"]["filter_zero_advantages"]) == (64, 16, True)
    assert o["train"]["sampling"] == {"temperature": 0.8, "max_completion_tokens": 512,
                                      "extra_body": {"stop_token_ids": [151645], "top_k": 20}}
    assert rl["trainer"]["optim"]["lr"] == 1e-6 and rl["trainer"]["loss"]["kl_tau"] == 0.0
    assert rl["deployment"] == {"type": "single_node", "num_train_gpus": 1, "num_infer_gpus": 1}
    sft = load(f"{profile}/sft_arm_a")
    assert sft["max_steps"] == sft["eval"]["interval"] == 60
    assert {k: sft["data"][k] for k in ("type", "seq_len", "micro_batch_size", "seed")} == {
        "type": "sft", "seq_len": 1280, "micro_batch_size": 1, "seed": 42}
    assert sft["data"]["loss_mask"] == {"system": False, "user": False, "assistant": True, "tool": False}
    assert sft["optim"] == {"type": "adamw", "lr": 2e-5, "weight_decay": 0.01}
    body = {"stop_token_ids": [151645]} | ({} if profile == "study" else
                                           {"chat_template_kwargs": {"enable_thinking": False}})
    greedy = {"temperature": 0.0, "max_completion_tokens": 512, "extra_body": body}
    assert o["eval"]["sampling"] == sft["eval"]["sampling"] == greedy
    ev = load(f"{profile}/eval_test_arm_a")
    assert ev["sampling"] == {"temperature": 0.0, "max_tokens": 512} and ev["push"] is False


@pytest.mark.parametrize("profile", PROFILES)
def test_the_training_dynamics_are_the_studys(profile):
    """The study's PRIME-RL d334ea5 run: 64 rollouts in flight (its batch_size; REPRODUCTION.md), its
    off-policy limit, its env-server pool (16 workers x 4) and inference memory share (0.85), <|im_end|>
    as the stop token, its task draw on the RL split. The same in both profiles: glyph departs from none."""
    for name in ("arm_a", "arm_b", "arm_b_alpha0"):
        rl = load(f"{profile}/{name}")
        o = rl["orchestrator"]
        assert o["concurrency"] == {"min_inflight": 64, "max_inflight": 64} and o["max_off_policy_steps"] == 8
        assert rl["inference"]["vllm"]["gpu_memory_utilization"] == 0.85
        for where in ("train", "eval"):
            [source] = o[where]["source"]
            assert source["serve"] == {"pool": {"type": "elastic", "max_workers": 16, "multiplex": 4}}
        assert o["train"]["source"][0]["env"]["taskset"]["order"] == "study"
        assert o["eval"]["sampling"]["extra_body"]["stop_token_ids"] == [151645]
        assert rl["trainer"]["model"] == {"attn": "flash_attention_2"}  # d334ea5's default kernel
    for arm in ARMS:
        assert load(f"{profile}/sft_arm_{arm}")["model"]["attn"] == "flash_attention_2"


def test_the_default_profiles_runs_are_also_at_the_top_of_configs():
    """configs/{arm_a,arm_b,sft_arm_a,sft_arm_b}.toml: the study profile's runs, table for table."""
    assert recipe.DEFAULT_PROFILE == "study"
    for name in recipe.TOP_LEVEL:
        top, study = (CONFIGS / f"{name}.toml").read_text(), (CONFIGS / "study" / f"{name}.toml").read_text()
        assert tomllib.loads(top) == tomllib.loads(study), name
        kind = "sft" if name.startswith("sft") else "rl"
        assert f"#   glyph train {kind} @ configs/{name}.toml\n" in top


def test_the_study_rl_from_its_published_sft_checkpoints():
    for arm in ARMS:
        d = diff(load(f"study/arm_{arm}"), load(f"study/arm_{arm}_from_study_sft"))
        assert d == {"run.name": (f"study-arm-{arm}-seed42", f"study-arm-{arm}-from-study-sft-seed42"),
                     "model.name": (f"outputs/study-sft-arm-{arm}/hf", f"JayZenith/SFT_ARM_{arm.upper()}")}


def test_every_header_names_the_one_training_command():
    for rel, text in recipe.files().items():
        header = [line for line in text.splitlines() if line.startswith("#   ")]
        commands = [line for line in header if " train " in line or " rl " in line or " sft " in line]
        allowed = ("#   glyph train rl @ ", "#   glyph train sft @ ")
        assert all(line.startswith(allowed) for line in commands), (rel, commands)
        assert "uv run rl" not in text and "uv run sft" not in text, rel
        if "/eval" not in rel and "seed_43" not in rel:
            assert commands, rel
