"""ECHO in glyph's four cells, inside the real PRIME-RL at the pin (patched), on
episodes glyph-mbpp really produced under both profiles and both arms.

The episodes come from the pin's ``eval`` CLI with verifiers' train client on
each profile's own renderer (the study's: ``glyph.render_study.StudyRenderer``;
glyph's: Qwen3, thinking off), the token path PRIME-RL's RL uses, against the
reference policies (``glyph.policies``). The algorithms are built by PRIME-RL
from the recipe's own ``arm_{a,b}_echo.toml`` (``build_algorithm`` on the
config ``RLConfig`` resolves), so the observation weights are written by
PRIME-RL's ``EchoAlgorithm._weight_observations``; the batches are what
``TrainSink`` ships and the loss is ``compute_loss``'s.

What is checked (issue 37):

* the ECHO files resolve to their arm's run with only the algorithm changed;
* ECHO's CE lands on exactly the observation bodies of each profile (its
  ``Profile.observation_role`` messages after the first reply, the renderer's
  ``is_content`` tokens): no scaffold, no prompt, no sampled token, nothing of
  the shadow tests REVISE hides;
* ``arm_b_echo`` carries PREDICT's label weights and ECHO's observation
  weights, no token twice and none dropped, each term at its own per-token
  mean (``ce_balance = "separate"``), and PRIME-RL's loss equals the reference.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("prime_rl.orchestrator.train_sink", reason="PRIME-RL (patched) must be on PYTHONPATH")

import pydantic  # noqa: E402
import verifiers.v1 as vf  # noqa: E402
from prime_rl.configs.algorithm import AlgoConfig  # noqa: E402
from prime_rl.configs.rl import RLConfig  # noqa: E402
from prime_rl.orchestrator.algo import build_algorithm  # noqa: E402
from prime_rl.orchestrator.algo.echo import EchoAlgorithm  # noqa: E402
from prime_rl.utils.config import cli  # noqa: E402
from test_prime_rl_adapter import _Pool, episodes, loss_equals_reference, train_batch  # noqa: E402

from glyph import recipe  # noqa: E402
from glyph.predict.echo import GlyphEchoAlgorithm, PredictEchoAlgorithm  # noqa: E402
from glyph.predict.echo_config import GlyphEchoAlgoConfig, PredictEchoAlgoConfig  # noqa: E402
from glyph.record import harness_record  # noqa: E402
from glyph.render import RENDERERS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS = 2  # mbpp_11, mbpp_12: each has a failing mutation
PROFILES = ("study", "glyph")
ARM_POLICIES = {"a": ("recover", "hack"), "b": ("recover", "hack", "revise")}
_ALGO = pydantic.TypeAdapter(AlgoConfig)


def renderer_args(profile: str) -> list[str]:
    """The eval CLI's client renderer for ``profile``: the one its RL configs name (``glyph.render``)."""
    r = RENDERERS[profile]
    if r["name"] == "custom":
        return ["--client.renderer.name", "custom", "--client.renderer.import-path", r["import_path"]]
    thinking = str(r["enable_thinking"]).lower()
    return ["--client.renderer.name", r["name"], "--client.renderer.enable-thinking", thinking]


@pytest.fixture(scope="module")
def cells(tmp_path_factory, tokdir, mbpp_path) -> dict[tuple[str, str], dict[str, list[str]]]:
    """Per (profile, arm), per policy, the episodes (JSON lines) of one token-path eval run on the
    profile's renderer ($GLYPH_EVAL_CACHE: reuse the runs under <cache>/<profile>-<arm>/<policy>)."""
    from glyph.data import mbpp
    from glyph.demo import profile_args
    from glyph.policies.server import PolicyServer
    from glyph.vfcompat import eval_command

    cache = os.environ.get("GLYPH_EVAL_CACHE")
    runs = [(p, arm, pol) for p in PROFILES for arm, policies in ARM_POLICIES.items() for pol in policies]

    def read(folder: Path) -> list[str]:
        paths = sorted(folder.glob("**/traces.jsonl"))
        return [line for path in paths for line in path.read_text().splitlines()]

    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    if cache and all(any((Path(cache) / f"{p}-{a}" / pol).glob("**/traces.jsonl")) for p, a, pol in runs):
        for p, a, pol in runs:
            out.setdefault((p, a), {})[pol] = read(Path(cache) / f"{p}-{a}" / pol)
        return out
    tasks = {t.id: t for t in mbpp.load_source(mbpp_path).tasks}
    base = tmp_path_factory.mktemp("echo-evals")
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", HF_HUB_OFFLINE="1")
    with PolicyServer(tasks, tokenizer=str(tokdir)) as server:
        procs = {}
        for p, a, pol in runs:
            cmd = eval_command(
                "glyph-mbpp", "-m", pol, "--client.base-url", server.base_url, "--client.type", "train",
                "--client.renderer-model-name", str(tokdir), *renderer_args(p), "--no-push", "--no-rich",
                "-n", str(TASKS), "-o", str(base / f"{p}-{a}" / pol), "--env.taskset.arm", a,
                "--env.taskset.data-path", mbpp_path, "--env.agent.harness.tool-timeout", "3",
                *profile_args(p),
            )
            procs[p, a, pol] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True, env=env)
        for (p, a, pol), proc in procs.items():
            stdout, stderr = proc.communicate(timeout=900)
            assert proc.returncode == 0, stderr[-3000:]
            lines = read(base / f"{p}-{a}" / pol)
            assert len(lines) == TASKS, (p, a, pol, stdout[-2000:])
            out.setdefault((p, a), {})[pol] = lines
    return out


def rl_config(profile: str, name: str, tmp_path: Path) -> RLConfig:
    path = REPO / "configs" / profile / f"{name}.toml"
    return cli(RLConfig, args=["@", str(path), "--output-dir", str(tmp_path)])


def recipe_algorithm(profile: str, arm: str, tokdir: Path, tmp_path: Path, **override):
    """The algorithm PRIME-RL builds from ``configs/<profile>/arm_<arm>_echo.toml`` (its train source's)."""
    [source] = rl_config(profile, f"arm_{arm}_echo", tmp_path).orchestrator.train.source
    config = _ALGO.validate_python(source.algo.model_dump() | override) if override else source.algo
    algo = build_algorithm(config, _Pool(str(tokdir)))
    asyncio.run(algo.setup())
    return algo


def scored(algo, groups: list[list[vf.Episode]]) -> None:
    for group in groups:
        for ep in group:
            asyncio.run(algo.finalize_episode(ep))
        asyncio.run(algo.finalize_group(group))


def groups_of(runs: dict[str, list[str]], arm: str, tag: str) -> list[list[vf.Episode]]:
    """One group per task holding every policy's rollout of it (mixed rewards: hack fails)."""
    by_policy = {pol: episodes(runs, pol, tag) for pol in ARM_POLICIES[arm]}
    return [[by_policy[pol][t] for pol in ARM_POLICIES[arm]] for t in sorted(by_policy["recover"])]


def ce_of(node) -> list[float]:
    return list((node.loss_weights or {}).get("ce") or [0.0] * len(node.token_ids))


# ---------------------------------------------------------------- the configs


def test_the_registry_resolves_both_echo_algorithms():
    a = _ALGO.validate_python({"type": "glyph_echo"})
    assert isinstance(a, GlyphEchoAlgoConfig) and a.roles.tool.alpha == 0.1 and a.roles.user is None
    predict_echo = {"type": "predict_echo", "max_aux_tokens": 4096}
    b = _ALGO.validate_python(predict_echo | {"roles": {"user": {"alpha": 0.1}}})
    assert isinstance(b, PredictEchoAlgoConfig) and b.ce_balance == "separate" and b.roles.tool is None
    with pytest.raises(pydantic.ValidationError, match="roles.assistant"):
        _ALGO.validate_python(predict_echo | {"roles": {"assistant": {"alpha": 0.1}}})
    with pytest.raises(pydantic.ValidationError, match="ce_balance"):
        _ALGO.validate_python(predict_echo | {"ce_balance": "mean"})


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_an_echo_cell_resolves_to_its_arm_with_echos_observation_ce_only(profile, arm, tmp_path):
    """``arm_<arm>_echo`` alone, as PRIME-RL resolves it: the arm's run (``arm_<arm>.toml``) in every field
    but the run name and the algorithm, whose fields are the arm's plus ECHO's role table."""
    plain, echo = rl_config(profile, f"arm_{arm}", tmp_path), rl_config(profile, f"arm_{arm}_echo", tmp_path)
    [source] = echo.orchestrator.train.source
    role = recipe.PROFILES[profile].observation_role
    assert source.algo.type == recipe.ECHO_ALGO[arm]
    assert source.algo.roles.model_dump() == {r: ({"alpha": recipe.ECHO_ALPHA} if r == role else None)
                                              for r in ("system", "user", "assistant", "tool")}
    theirs = plain.orchestrator.train.source[0].algo.model_dump()
    ours = source.algo.model_dump()
    added = {"type", "roles", "filter"} | ({"ce_balance"} if arm == "b" else set())
    kept = {k: v for k, v in theirs.items() if k != "type"}
    assert {k: v for k, v in ours.items() if k not in added} == kept
    assert set(ours) - set(theirs) == added - {"type"}

    def rest(c: RLConfig) -> dict:
        d = c.model_dump(mode="json")
        for part in ("orchestrator", "trainer", "inference"):
            if isinstance(d.get(part), dict):
                d[part] = {k: v for k, v in d[part].items() if k not in ("algo", "output_dir")}
        d["orchestrator"]["train"] = {k: v for k, v in d["orchestrator"]["train"].items() if k != "source"}
        return {k: v for k, v in d.items() if k not in ("run", "output_dir")}

    assert rest(plain) == rest(echo)
    assert [s.model_dump(exclude={"algo"}) for s in plain.orchestrator.train.source] == [
        s.model_dump(exclude={"algo"}) for s in echo.orchestrator.train.source]


# ---------------------------------------------------------------- the tokens


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_echo_ce_lands_on_exactly_the_observation_bodies(profile, arm, cells, tokdir, tok, tmp_path):
    algo = recipe_algorithm(profile, arm, tokdir, tmp_path)
    assert isinstance(algo, EchoAlgorithm) and isinstance(algo, (GlyphEchoAlgorithm, PredictEchoAlgorithm))
    role = recipe.PROFILES[profile].observation_role
    groups = groups_of(cells[profile, arm], arm, "placement")
    scored(algo, groups)
    traces = [ep.traces[0] for g in groups for ep in g]
    observations = shadows = 0
    for trace in traces:
        assert trace.metrics["glyph_excluded"] == 0.0
        first = next(i for i, n in enumerate(trace.nodes) if n.sampled)
        echo_tokens = 0
        for i, node in enumerate(trace.nodes):
            ce = ce_of(node)
            if node.sampled or i <= first:
                # the prompt and every sampled token: no ECHO weight (arm B's sampled labels carry PREDICT's)
                if i < first or (node.sampled and arm == "a"):
                    assert not any(ce), (profile, arm, i, node.message.role)
                continue
            if node.message.role != role:
                # PREDICT's grafted CE-only nodes (assistant, not sampled): PREDICT's weights only
                assert arm == "b" and node.message.role == "assistant" and node not in trace.branches[0].nodes
                continue
            # an observation: the renderer attributes its body, and ECHO weights exactly that
            assert len(node.is_content) == len(node.token_ids) and any(node.is_content)
            on = [j for j, w in enumerate(ce) if w]
            assert on == [j for j, c in enumerate(node.is_content) if c], (profile, arm, i)
            assert len({ce[j] for j in on}) == 1
            body = tok.decode([node.token_ids[j] for j in on], skip_special_tokens=False)
            content = node.message.content.rstrip() if profile == "study" else node.message.content
            # BPE: the body's last token may carry the scaffold's first character with it (the study's
            # closing line break), never more than that token.
            short = len(tok.decode([node.token_ids[j] for j in on[:-1]])) < len(content)
            assert body == content or (body.startswith(content) and short), (body, content)
            assert "<|im_start|>" not in body and "<|im_end|>" not in body
            observations += 1
            echo_tokens += len(on)
        assert trace.metrics["echo_ce_tokens"] == echo_tokens > 0
        # REVISE's shadow tests: graded, never shown, never trained on
        record = harness_record(trace.info)
        trained = "".join(tok.decode([t for t, w in zip(n.token_ids, ce_of(n)) if w])
                          for n in trace.nodes if not n.sampled and n.message.role == role)
        for entry in record.service_log or []:
            if entry["shadow"]:
                shadows += 1
                assert entry["detail"] and entry["detail"] not in trained
    assert observations >= 3 * len(traces)
    if arm == "b":
        assert shadows >= TASKS, "revise hides a failing test per task"


# ---------------------------------------------------------------- PREDICT and ECHO together


@pytest.mark.parametrize("profile", PROFILES)
def test_arm_b_echo_carries_predicts_and_echos_weights_each_once(profile, cells, tokdir, tmp_path):
    """The batch ``arm_b_echo`` ships = PREDICT's CE positions (``predict`` on the same episodes) plus ECHO's
    (``glyph_echo`` with the profile's role on them), disjoint, none dropped; each term's weights scaled to
    its own per-token mean (``ce_balance = "separate"``); ``compute_loss`` equals the reference."""
    runs = cells[profile, "b"]
    both = recipe_algorithm(profile, "b", tokdir, tmp_path)
    plain = rl_config(profile, "arm_b", tmp_path).orchestrator.train.source[0].algo
    predict = build_algorithm(plain, _Pool(str(tokdir)))
    asyncio.run(predict.setup())
    role = recipe.PROFILES[profile].observation_role
    echo_config = {"type": "glyph_echo", "roles": {role: {"alpha": recipe.ECHO_ALPHA}},
                   "max_rollout_tokens": plain.max_rollout_tokens}
    echo = build_algorithm(_ALGO.validate_python(echo_config), _Pool(str(tokdir)))
    size = len(ARM_POLICIES["b"])
    batches = {name: train_batch(algo, groups_of(runs, "b", f"together-{name}"), size).samples
               for name, algo in (("both", both), ("predict", predict), ("echo", echo))}
    ours, theirs_p, theirs_e = batches["both"], batches["predict"], batches["echo"]
    assert [s.token_ids for s in ours] == [s.token_ids for s in theirs_p], "the same samples, grafts included"
    n_label = n_echo = 0
    label_w, echo_w = set(), set()
    for s, p in zip(ours, theirs_p):
        e = next((x for x in theirs_e if x.token_ids == s.token_ids), None)
        on = {i for i, w in enumerate(s.ce_weights or []) if w}
        on_p = {i for i, w in enumerate(p.ce_weights or []) if w}
        on_e = {i for i, w in enumerate((e.ce_weights if e else None) or []) if w}
        assert not on_p & on_e, "a token weighted by both"
        assert on == on_p | on_e, "a token dropped or added"
        assert s.rl_weights == p.rl_weights and s.mask == p.mask  # ECHO leaves RL as PREDICT left it
        if e is not None:
            assert s.advantages == p.advantages == e.advantages
        label_w |= {s.ce_weights[i] for i in on_p}
        echo_w |= {s.ce_weights[i] for i in on_e}
        n_label += len(on_p)
        n_echo += len(on_e)
    assert n_label and n_echo
    # One group per task here, each rescaled on its own counts: each group's label tokens share one weight,
    # each group's observation tokens another, alpha * (N_g / N_label,g) and alpha * (N_g / N_echo,g).
    assert all(w > recipe.ECHO_ALPHA for w in label_w | echo_w)
    assert len(label_w) <= TASKS and len(echo_w) <= TASKS
    loss_equals_reference(ours)


def test_separate_balance_gives_each_ce_term_its_own_mean(cells, tokdir, tmp_path):
    """On one group: the ``ce`` component PRIME-RL's ``compute_loss`` reports for the ``arm_b_echo`` batch
    equals alpha * mean label NLL + alpha * mean observation NLL (``shared``: their pooled mean)."""
    from prime_rl.configs.trainer import DefaultLossConfig
    from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn

    from testkit import reference_loss as ref

    runs = cells["glyph", "b"]
    model = tiny_model()
    for balance in ("separate", "shared"):
        algo = recipe_algorithm("glyph", "b", tokdir, tmp_path, ce_balance=balance)
        [group] = groups_of(runs, "b", f"balance-{balance}")[:1]
        samples = train_batch(algo, [group], len(ARM_POLICIES["b"])).samples
        # ECHO on the tool role, which glyph's protocol never uses: PREDICT's CE alone, its positions
        predict_only = recipe_algorithm("glyph", "b", tokdir, tmp_path, ce_balance=balance,
                                        roles={"tool": {"alpha": 0.1}})
        [group_p] = groups_of(runs, "b", f"balance-{balance}-p")[:1]
        label = [{i for i, w in enumerate(s.ce_weights or []) if w}
                 for s in train_batch(predict_only, [group_p], len(ARM_POLICIES["b"])).samples]
        refs = [ref.Sample(token_ids=s.token_ids, mask=s.mask, inference_logprobs=s.logprobs,
                           advantages=s.advantages, rl_weights=s.rl_weights, ce_weights=s.ce_weights,
                           temperature=s.temperatures[0]) for s in samples]
        with torch.no_grad():
            logps = ref.token_logprobs(model, refs)
        nll_label, nll_echo = [], []
        for s, lp, lab in zip(samples, logps, label):
            for i, w in enumerate(s.ce_weights or []):
                if w:
                    (nll_label if i in lab else nll_echo).append(-float(lp[i]))
        n_ce = len(nll_label) + len(nll_echo)
        ce, _ = compute_loss(  # RL weights all 0: the loss is the ce component alone
            trainer_logprobs=[lp.clone() for lp in logps],
            inference_logprobs=[torch.tensor(s.logprobs, dtype=torch.float32) for s in samples],
            ref_logprobs=None,
            advantages=[torch.tensor(s.advantages or [0.0] * len(s.token_ids)) for s in samples],
            loss_mask=[torch.tensor(s.mask, dtype=torch.bool) for s in samples],
            rl_weights=[torch.zeros(len(s.token_ids)) for s in samples],
            ce_weights=[torch.tensor(s.ce_weights or [0.0] * len(s.token_ids)) for s in samples],
            ref_kl_weights=None,
            rl_loss_fn=setup_rl_loss_fn(DefaultLossConfig()),
            rl_scale=1,
            ce_scale=n_ce,
            ref_kl_scale=1,
        )
        mean_l, mean_e = sum(nll_label) / len(nll_label), sum(nll_echo) / len(nll_echo)
        want = (recipe.ECHO_ALPHA * (mean_l + mean_e) if balance == "separate"
                else recipe.ECHO_ALPHA * (sum(nll_label) + sum(nll_echo)) / n_ce)
        assert float(ce) == pytest.approx(want, rel=1e-4), balance


def tiny_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         head_dim=16, max_position_embeddings=4096))
    return model.eval()
