"""The study's recipe in ``configs/``, checked without PRIME-RL: every TOML
parses, the shared settings sit in the shared files and nowhere else, the arm
and split files say what their names say, and ``configs/versions.toml`` is the
one record of the pins (``glyph.pins`` reads it for glyph.predict.pin,
glyph.data.mbpp and the pinned test stack).

Composition is PRIME-RL's (``prime_rl.utils.config.cli`` = pydantic_config):
``@`` files deep-merge left to right and arrays of tables are replaced whole.
``compose`` below does the same, so these tests see what the launcher sees;
tests/pin/test_recipe_configs.py validates the same files against PRIME-RL's
own config classes at the pin.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pinstack
import pytest

from glyph import pins
from glyph.data import mbpp
from glyph.predict import pin

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
ARMS = ("a", "b")
HARNESS = {"id": "glyph-mbpp", "max_tool_calls": 8, "tool_timeout": 30.0}
COSTLY = {"test_cost": 4, "revise_feedback": "outcome"}


def load(name: str) -> dict:
    return tomllib.loads((CONFIGS / f"{name}.toml").read_text())


def merge(base: dict, over: dict) -> dict:
    """pydantic_config's ``_deep_merge``: tables merge key by key, anything else (arrays
    of tables included) is replaced whole."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def compose(*names: str) -> dict:
    out: dict = {}
    for name in names:
        out = merge(out, load(name))
    return out


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= leaves(value, path + ".")
        else:
            out[path] = value
    return out


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_config_parses(path):
    tomllib.loads(path.read_text())


def test_every_config_is_used_in_reproduction_md():
    tomls = {p.name for p in CONFIGS.glob("*.toml")}
    assert tomls >= {
        f"{n}.toml"
        for n in (
            "versions",
            "sft",
            "sft_arm_a",
            "sft_arm_b",
            "rl",
            "arm_a",
            "arm_b",
            "seed_43",
            "arm_a_costly",
            "arm_b_costly",
            "eval",
            "eval_validation_arm_a",
            "eval_validation_arm_b",
            "eval_test_arm_a",
            "eval_test_arm_b",
            "eval_costly",
            "eval_smoke",
        )
    }
    named = set(re.findall(r"configs/([\w.-]+\.toml)", (REPO / "REPRODUCTION.md").read_text()))
    assert named == tomls, (
        f"named in REPRODUCTION.md but missing: {named - tomls}; never named: {tomls - named}"
    )


def keys_and_values(tree) -> list[tuple[str, object]]:
    """Every (key, leaf value) in a TOML tree, arrays of tables included."""
    out = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        if isinstance(value, (dict, list)):
            out += [(str(key), value)] if isinstance(value, dict) else []
            out += keys_and_values(value)
        else:
            out.append((str(key), value))
    return out


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_no_machine_paths_no_dropped_keys_no_group_gates(path):
    tree = tomllib.loads(path.read_text())
    found = keys_and_values(tree)
    for key, value in found:
        assert not (isinstance(value, str) and value.startswith(("/", "~"))), (key, value)
    keys = {key for key, _ in found}
    # Keys of the study's PRIME-RL v0.7.0 configs that 559b447 no longer has (it rejects unknown keys;
    # this names them early). [wandb] is [monitors.wandb] now.
    assert "wandb" not in tree and not keys & {"post_batch_filters", "weights_only", "eos_token"}
    # No curriculum: the advantage_range gate drops whole groups, PREDICT's CE included.
    assert not keys & {"curriculum", "gates"}


def test_versions_toml_is_what_glyph_and_the_pinned_stack_use():
    v = load("versions")
    assert pins.versions_file() == CONFIGS / "versions.toml"
    assert (pin.PRIME_RL_COMMIT, pin.PRIME_RL_TAG) == (v["prime_rl"]["commit"], v["prime_rl"]["tag"])
    assert (pin.VERIFIERS_COMMIT, pin.VERIFIERS_VERSION) == (
        v["verifiers"]["commit"],
        v["verifiers"]["version"],
    )
    assert v["prime_rl"] == {
        "repository": "https://github.com/PrimeIntellect-ai/prime-rl",
        "commit": "559b44772e471d1538537b8805cc77f3824a5e64",
        "tag": "v0.8.1.dev67",
    }
    assert v["verifiers"]["commit"] == "a60a606ecc4d309247edf9ff92c3eabca362781f"
    assert v["renderers"]["version"] == "0.1.12"
    # glyph.data.mbpp downloads what [mbpp] pins: each official split, one file each.
    assert (v["mbpp"]["repository"], v["mbpp"]["revision"]) == (mbpp.OFFICIAL_REPO, mbpp.OFFICIAL_REVISION)
    assert v["mbpp"]["sha256"] == dict(mbpp.OFFICIAL_FILES.values())
    assert sorted(mbpp.OFFICIAL_FILES) == ["test", "train", "validation"]
    assert all(name.startswith(v["mbpp"]["config"] + "/") for name in v["mbpp"]["sha256"])
    # The pinned test stack (tests/pinstack.py) builds exactly this verifiers and PRIME-RL.
    assert pinstack.PIN_VERIFIERS_VERSION == v["verifiers"]["version"]
    assert pinstack.VERIFIERS_WHEEL == f"verifiers-{v['verifiers']['version']}-py3-none-any.whl"
    assert pinstack.PRIME_RL_TARBALL == f"prime-rl-{v['prime_rl']['commit'][:7]}.tar.gz"
    # One model everywhere.
    assert load("sft")["model"]["name"] == v["model"]["name"] == load("eval")["client"]["renderer_model_name"]


def glyph_sources(tree: dict) -> list[tuple[str, dict]]:
    """Every glyph-mbpp source in a composed config, with where it is."""
    found = []
    for where, group in (
        ("orchestrator.train", tree.get("orchestrator", {}).get("train", {})),
        ("orchestrator.eval", tree.get("orchestrator", {}).get("eval", {})),
        ("eval", tree.get("eval", {})),
    ):
        found += [(where, s) for s in group.get("source", [])]
    return found


def test_sft_shares_everything_but_the_data_the_run_name_and_the_eval_source():
    shared = load("sft")
    assert shared["max_steps"] == 60 and shared["model"] == {"name": "Qwen/Qwen3-4B-Base"}
    assert shared["renderer"] == {"name": "qwen3", "enable_thinking": False}
    assert {k: shared["data"][k] for k in ("type", "batch_size", "seq_len", "micro_batch_size", "seed")} == {
        "type": "sft",
        "batch_size": 32,
        "seq_len": 1280,
        "micro_batch_size": 1,
        "seed": 42,
    }
    assert shared["data"]["loss_mask"] == {"system": False, "user": False, "assistant": True, "tool": False}
    assert shared["optim"] == {"type": "adamw", "lr": 2e-5, "weight_decay": 0.01}
    assert (
        shared["weight_broadcast"] == {"type": "filesystem"}
        and shared["eval"]["interval"] == shared["max_steps"]
    )
    for arm in ARMS:
        own = load(f"sft_arm_{arm}")
        assert set(leaves(own)) == {"run.name", "data.name", "eval.source"}
        assert own["run"]["name"] == f"sft-arm-{arm}" and own["data"]["name"] == f"artifacts/sft/arm_{arm}"
        [(_, source)] = glyph_sources(compose("sft", f"sft_arm_{arm}"))
        assert source["env"]["taskset"] == {"id": "glyph-mbpp", "arm": arm, "split": "validation"}


def test_rl_shares_the_study_settings_and_the_arms_add_model_algorithm_and_sources():
    shared = load("rl")
    assert (shared["max_steps"], shared["seq_len"]) == (100, 4096)
    assert (shared["orchestrator"]["batch_size"], shared["orchestrator"]["group_size"]) == (64, 16)
    assert shared["orchestrator"]["train"]["sampling"] == {
        "temperature": 0.8,
        "max_completion_tokens": 512,
        "extra_body": {"top_k": 20},
    }
    assert shared["orchestrator"]["train"]["filter_zero_advantages"] is True
    assert shared["orchestrator"]["renderer"] == {"name": "qwen3", "enable_thinking": False}
    assert shared["trainer"]["optim"]["lr"] == 1e-6 and shared["trainer"]["loss"]["kl_tau"] == 0.0
    assert shared["orchestrator"]["eval"]["interval"] == 25
    assert shared["orchestrator"]["eval"]["sampling"]["temperature"] == 0.0
    assert shared["inference"]["vllm"]["seed"] == 42 and shared["weight_broadcast"] == {"type": "filesystem"}
    assert leaves(load("seed_43")) == {"inference.vllm.seed": 43}
    for arm in ARMS:
        own = load(f"arm_{arm}")
        assert set(own) == {"model", "orchestrator"} and set(own["orchestrator"]) == {"algo", "train", "eval"}
        assert own["model"] == {"name": f"outputs/sft-arm-{arm}/hf"}
        assert set(own["orchestrator"]["train"]) == set(own["orchestrator"]["eval"]) == {"source"}
        tree = compose("rl", f"arm_{arm}")
        assert [(w, s["env"]["taskset"]["split"]) for w, s in glyph_sources(tree)] == [
            ("orchestrator.train", "rl"),
            ("orchestrator.eval", "validation"),
        ]
    keep_out = {"exclude_truncated": True, "max_rollout_tokens": shared["seq_len"]}
    assert load("arm_a")["orchestrator"]["algo"] == {"type": "glyph_grpo", **keep_out}
    assert load("arm_b")["orchestrator"]["algo"] == {
        "type": "predict",
        "alpha": 0.1,
        "max_aux_tokens": shared["seq_len"],
        **keep_out,
    }


def test_every_glyph_source_is_the_study_environment_for_its_arm():
    composed = {f"sft_arm_{a}": compose("sft", f"sft_arm_{a}") for a in ARMS}
    composed |= {f"arm_{a}": compose("rl", f"arm_{a}") for a in ARMS}
    for name, tree in composed.items():
        arm = name[-1]
        for where, source in glyph_sources(tree):
            env = source["env"]
            assert env["taskset"]["id"] == "glyph-mbpp" and env["taskset"]["arm"] == arm, (name, where)
            assert "seed" not in env["taskset"], "the split seed stays glyph-mbpp's default (42) in every run"
            assert env["agent"] == {"harness": HARNESS, "runtime": {"type": "subprocess"}}, (name, where)
    for arm in ARMS:
        for split in ("validation", "test"):
            tree = compose("eval", f"eval_{split}_arm_{arm}")
            assert tree["env"]["taskset"] == {"id": "glyph-mbpp", "arm": arm, "split": split}
            assert tree["env"]["agent"] == {"harness": HARNESS, "runtime": {"type": "subprocess"}}
            assert leaves(load(f"eval_{split}_arm_{arm}")) == {
                "env.taskset.arm": arm,
                "env.taskset.split": split,
            }


def test_greedy_thinking_off_evaluation_everywhere():
    rl, sft, ev = load("rl")["orchestrator"]["eval"], load("sft")["eval"], load("eval")
    for group in (rl, sft):
        assert group["sampling"] == {
            "temperature": 0.0,
            "max_completion_tokens": 512,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
        }
        assert (group["num_examples"], group["group_size"]) == (-1, 1)
    assert ev["sampling"] == {"temperature": 0.0, "max_tokens": 512}
    assert ev["client"]["type"] == "train" and ev["client"]["renderer"] == {
        "name": "qwen3",
        "enable_thinking": False,
    }
    assert ev["push"] is False
    assert leaves(load("eval_smoke")) == {"model": "mix", "client.base_url": "http://127.0.0.1:8000/v1"}


def test_the_costly_variant_changes_test_cost_and_revise_feedback_only():
    assert leaves(load("eval_costly")) == {f"env.agent.harness.{k}": v for k, v in COSTLY.items()}
    for arm in ARMS:
        plain, costly = load(f"arm_{arm}"), load(f"arm_{arm}_costly")
        for kind in ("train", "eval"):
            [p], [c] = plain["orchestrator"][kind]["source"], costly["orchestrator"][kind]["source"]
            assert c["env"]["agent"]["harness"] == p["env"]["agent"]["harness"] | COSTLY
            c["env"]["agent"]["harness"] = p["env"]["agent"]["harness"]
        assert costly == plain, f"arm_{arm}_costly.toml differs from arm_{arm}.toml elsewhere too"


@pytest.mark.parametrize("name", ["rl", "sft"])
def test_one_trainer_gpu_one_inference_gpu(name):
    assert load(name)["deployment"] == {"type": "single_node", "num_train_gpus": 1, "num_infer_gpus": 1}
