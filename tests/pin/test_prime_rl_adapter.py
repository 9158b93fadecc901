"""PREDICT inside the real PRIME-RL at the pin (patched), on Arm B episodes
that glyph-mbpp really produced: the pin's ``eval`` CLI with verifiers' train
client (the renderer token path PRIME-RL uses: Qwen3 renderer, thinking off,
``/inference/v1/generate``) against the reference policies, so every node
carries the policy's token ids, sampled mask and logprobs, in the real Qwen3
vocabulary.

The path under test is PRIME-RL's own: the registry resolves
``type = "predict"``, ``build_algorithm`` builds ``PredictAlgorithm``, and the
episodes go through ``TrainSink`` (``score_episode`` -> ``score_group`` ->
``trace_to_samples`` -> the zero-advantage filter) into ``compute_loss``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pydantic
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("prime_rl.orchestrator.train_sink", reason="PRIME-RL (patched) must be on PYTHONPATH")

import verifiers.v1 as vf  # noqa: E402
from prime_rl.configs.algorithm import AlgoConfig  # noqa: E402
from prime_rl.configs.trainer import DefaultLossConfig  # noqa: E402
from prime_rl.orchestrator.algo import build_algorithm  # noqa: E402
from prime_rl.orchestrator.train_sink import TrainSink  # noqa: E402
from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn  # noqa: E402

from glyph.predict.annotate import TokenBytes  # noqa: E402
from glyph.predict.annotate import label_spans as annotate_spans  # noqa: E402
from glyph.predict.prime_rl import PredictAlgorithm  # noqa: E402
from glyph.predict.prime_rl_config import PredictAlgoConfig  # noqa: E402
from testkit import reference_loss as ref  # noqa: E402

ALPHA = 0.1
TASKS = 2  # the first tasks of the test split (mbpp_11, mbpp_12): each has a failing mutation
POLICIES = ("recover", "revise", "hack")
_ALGO = pydantic.TypeAdapter(AlgoConfig)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokdir, mbpp_path) -> dict[str, list[str]]:
    """Per policy, the Arm B episodes (JSON lines) of one token-path eval run under the default
    (study) profile ($GLYPH_EVAL_CACHE: reuse the runs under that folder, for debugging)."""
    return _eval_runs(tmp_path_factory, tokdir, mbpp_path, "study")


@pytest.fixture(scope="module")
def glyph_runs(tmp_path_factory, tokdir, mbpp_path) -> dict[str, list[str]]:
    """The same runs under the glyph profile (its grammar: free text around the protocol lines)."""
    return _eval_runs(tmp_path_factory, tokdir, mbpp_path, "glyph")


def _eval_runs(tmp_path_factory, tokdir, mbpp_path, profile: str) -> dict[str, list[str]]:
    from glyph.data import mbpp
    from glyph.demo import profile_args
    from glyph.policies.server import PolicyServer
    from glyph.vfcompat import eval_command

    cache = os.environ.get("GLYPH_EVAL_CACHE")
    cache = cache and str(Path(cache) / profile)
    if cache and all(any((Path(cache) / p).glob("**/traces.jsonl")) for p in POLICIES):
        return {
            p: [
                line
                for path in sorted((Path(cache) / p).glob("**/traces.jsonl"))
                for line in path.read_text().splitlines()
            ]
            for p in POLICIES
        }
    tasks = {t.id: t for t in mbpp.load_source(mbpp_path).tasks}
    out = tmp_path_factory.mktemp(f"evals-{profile}")
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", HF_HUB_OFFLINE="1")
    with PolicyServer(tasks, tokenizer=str(tokdir)) as server:
        procs = {}
        for policy in POLICIES:
            cmd = eval_command(
                "glyph-mbpp",
                "-m",
                policy,
                "--client.base-url",
                server.base_url,
                "--client.type",
                "train",
                "--client.renderer-model-name",
                str(tokdir),
                "--client.renderer.name",
                "qwen3",
                "--client.renderer.enable-thinking",
                "false",
                "--no-push",
                "--no-rich",
                "-n",
                str(TASKS),
                "-o",
                str(out / policy),
                "--env.taskset.arm",
                "b",
                "--env.taskset.data-path",
                mbpp_path,
                "--env.agent.harness.tool-timeout",
                "3",
                *profile_args(profile),
            )
            procs[policy] = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        runs = {}
        for policy, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-3000:]
            lines = [
                line
                for path in sorted((out / policy).glob("**/traces.jsonl"))
                for line in path.read_text().splitlines()
            ]
            assert len(lines) == TASKS, (policy, stdout[-2000:])
            runs[policy] = lines
    return runs


def episodes(runs, policy: str, group: str) -> dict[str, vf.WireEpisode]:
    """Fresh typed episodes of one run, by task, stamped as a train run's (env, group, work)."""
    out = {}
    for line in runs[policy]:
        ep = vf.WireEpisode.model_validate_json(line)
        assert ep.ok and all(t.ok for t in ep.traces), [e.message for t in ep.traces for e in t.errors]
        task = ep.task.data.name
        out[task] = ep.model_copy(
            update={
                "env": vf.EnvInfo(id="glyph-mbpp", name="glyph-mbpp"),
                "group": vf.GroupInfo(id=f"{task}:{group}"),
                "run": vf.TrainRunInfo(
                    id="test", work=vf.TrainWorkInfo(step=0, policy=vf.PolicySpan(start=0, end=0))
                ),
            }
        )
    return out


class _Pool:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name


@pytest.fixture(scope="module")
def algorithm(tokdir) -> PredictAlgorithm:
    config = _ALGO.validate_python({"type": "predict", "alpha": ALPHA, "max_aux_tokens": 4096})
    algo = build_algorithm(config, _Pool(str(tokdir)))
    asyncio.run(algo.setup())
    return algo


def train_batch(algorithm, groups: list[list[vf.WireEpisode]], group_size: int):
    """The batch PRIME-RL's TrainSink ships for these groups (filter_zero_advantages on)."""
    env = SimpleNamespace(
        config=SimpleNamespace(group_size=group_size), algorithm=algorithm, sampling_args={"temperature": 1.0}
    )
    config = SimpleNamespace(
        train=SimpleNamespace(filter_zero_advantages=True), max_off_policy_steps=8, seq_len=4096
    )
    sink = TrainSink(
        config,
        tokenizer=None,
        train_envs=SimpleNamespace(get=lambda name: env),
        mm_token_type_ids_mapping=None,
        progress=SimpleNamespace(step=0),
        batch_size=sum(len(ep.traces) for g in groups for ep in g),
        token_batch_size=None,
    )
    batch = None
    for group in groups:
        for ep in group:
            batch = asyncio.run(sink.add(ep)) or batch
    assert batch is not None
    return batch


def label_spans(tb: TokenBytes, token_ids: list[int], where: list[bool]) -> list[tuple[int, int, str]]:
    """Each <PREDICTION> label in the tokens at ``where`` positions (contiguous runs): (first, end, label)."""
    runs_: list[list[int]] = []
    for i, w in enumerate(where):
        if w and runs_ and runs_[-1][1] == i:
            runs_[-1][1] = i + 1
        elif w:
            runs_.append([i, i + 1])
    return [(a + s.start, a + s.end, s.label) for a, b in runs_ for s in annotate_spans(token_ids[a:b], tb)]


def test_the_registry_resolves_predict_and_lists_it_among_known_types():
    config = _ALGO.validate_python({"type": "predict", "max_aux_tokens": 2048})
    assert isinstance(config, PredictAlgoConfig) and config.alpha == 0.1
    with pytest.raises(pydantic.ValidationError, match="'predict'"):
        _ALGO.validate_python({"type": "no-such-algorithm"})
    with pytest.raises(pydantic.ValidationError, match="alpha"):
        _ALGO.validate_python({"type": "predict", "alpha": -0.1, "max_aux_tokens": 2048})
    control = _ALGO.validate_python({"type": "predict", "alpha": 0.0, "max_aux_tokens": 2048})
    assert control.alpha == 0.0 and control.label_span == "decision" and control.ce_in_uniform_groups
    study = _ALGO.validate_python(
        {"type": "predict", "max_aux_tokens": 2048, "label_span": "study", "ce_in_uniform_groups": False}
    )
    assert (study.label_span, study.ce_in_uniform_groups) == ("study", False)
    with pytest.raises(pydantic.ValidationError, match="label_span"):
        _ALGO.validate_python({"type": "predict", "max_aux_tokens": 2048, "label_span": "nearest"})
    with pytest.raises(pydantic.ValidationError, match="max_aux_tokens"):
        _ALGO.validate_python({"type": "predict"})
    assert _ALGO.validate_python({"type": "grpo"}).type == "grpo"  # built-ins untouched


def test_an_rl_config_with_predict_validates(tmp_path, mbpp_path):
    from prime_rl.configs.rl import RLConfig
    from prime_rl.utils.config import cli

    toml = tmp_path / "rl.toml"
    toml.write_text(f"""
[model]
name = "Qwen/Qwen3-4B-Base"

[trainer]

[orchestrator.algo]
type = "predict"
alpha = 0.1
max_aux_tokens = 4096

[orchestrator.renderer]
name = "qwen3"
enable_thinking = false

[[orchestrator.train.source]]
name = "glyph-mbpp"

[orchestrator.train.source.env.taskset]
id = "glyph-mbpp"
arm = "b"
split = "rl"
data_path = "{mbpp_path}"

[orchestrator.train.source.env.agent.harness]
id = "glyph-mbpp"

[orchestrator.train.source.env.agent.runtime]
type = "subprocess"
""")
    config = cli(RLConfig, args=["@", str(toml)])
    assert isinstance(config.orchestrator.algo, PredictAlgoConfig)
    (source,) = config.orchestrator.train.source
    assert isinstance(source.algo, PredictAlgoConfig) and source.algo.max_aux_tokens == 4096  # inherited


def test_traces_carry_the_policys_tokens(runs, tok):
    for policy in POLICIES:
        for ep in episodes(runs, policy, "x").values():
            (trace,) = ep.traces
            sampled = [n for n in trace.nodes if n.sampled]
            assert sampled and all(len(n.logprobs) == sum(n.mask) > 0 for n in sampled)
            (branch,) = trace.branches
            text = tok.decode(branch.token_ids, skip_special_tokens=False)
            assert text.startswith("<|im_start|>system\n") and "<think>\n\n</think>\n\n" in text


@pytest.mark.parametrize("profile_runs", ["runs", "glyph_runs"])
def test_predict_through_prime_rls_train_sink(request, profile_runs, algorithm, tok):
    """On each profile's rollouts (the study's one-line turns, glyph's free text around them)."""
    runs = request.getfixturevalue(profile_runs)
    tb = TokenBytes(tok)
    recover, hack = (episodes(runs, p, "mixed") for p in ("recover", "hack"))
    tasks = sorted(recover)
    mixed = [[recover[t], hack[t]] for t in tasks]  # rewards 1 and 0: nonzero advantages
    batch = train_batch(algorithm, mixed, 2)
    by_trace: dict[str, list] = {}
    for ep in (ep for g in mixed for ep in g):
        (trace,) = ep.traces
        by_trace[trace.id] = trace
    assert {t.reward for t in by_trace.values()} == {0.0, 1.0}
    samples = batch.samples
    wrong = correct = 0
    for trace in by_trace.values():
        cands = [c for c in trace.info["glyph"]["candidates"] if c["sampled_label"]]
        wrong += sum(c["sampled_label"] != c["verified_label"] for c in cands)
        correct += sum(c["sampled_label"] == c["verified_label"] for c in cands)
        assert trace.metrics["predict_unlocated"] == 0.0
        assert trace.metrics["predict_labels"] == len(cands)
    assert wrong >= TASKS and correct >= TASKS  # recover: a wrong PASS, then a right PASS, per task
    main = [s for s in samples if any(s.mask)]
    ce_only = [s for s in samples if not any(s.mask)]
    assert len(main) == 2 * TASKS and len(ce_only) == wrong
    for s in main:
        spans = label_spans(tb, s.token_ids, s.mask)
        assert spans, "every Arm B rollout here predicts"
        rl = s.rl_weights
        held = {i for a, b, _ in spans for i in range(a, b)}
        for i, m in enumerate(s.mask):
            if m:  # label tokens: no RL; every other sampled token: RL weight 1 (nonzero advantages here)
                assert rl[i] == (0.0 if i in held else 1.0), (i, rl[i])
        ce = s.ce_weights or [0.0] * len(s.token_ids)
        on = {i for i, w in enumerate(ce) if w}
        assert all(ce[i] == ALPHA for i in on) and on <= held
    for s in ce_only:
        on = [i for i, w in enumerate(s.ce_weights) if w]
        text = tok.decode(s.token_ids, skip_special_tokens=False)
        held = b"".join(tb(s.token_ids[i]) for i in on)
        verified = held.lstrip(b">").decode()
        assert verified in ("ASSERTION_FAILURE", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "OTHER")
        assert text.endswith(f"<PREDICTION>{verified}</PREDICTION>")
        assert on == list(range(on[0], len(s.token_ids) - len(tok.encode("</PREDICTION>"))))
        assert s.rl_weights is None or not any(s.rl_weights)
        # the same prefix as the sample the policy produced, up to the label span
        twin = next(m for m in main if m.token_ids[: on[0]] == s.token_ids[: on[0]])
        span = next(a for a, _, label in label_spans(tb, twin.token_ids, twin.mask) if a == on[0])
        assert span == on[0]
    loss_equals_reference(samples)


def test_a_uniform_reward_group_keeps_its_ce_and_drops_its_rl(runs, algorithm, tok):
    recover, revise = (episodes(runs, p, "uniform") for p in ("recover", "revise"))
    groups = [[recover[t], revise[t]] for t in sorted(recover)]  # both rewarded: zero advantages
    assert all(ep.traces[0].reward == 1.0 for g in groups for ep in g)
    batch = train_batch(algorithm, groups, 2)
    assert batch.samples, "CE must survive the zero-advantage filter"
    for s in batch.samples:
        if any(s.mask):  # the policy's sample: its RL weights all zeroed by the filter
            assert s.rl_weights is not None and not any(w and m for w, m in zip(s.rl_weights, s.mask))
        else:  # a CE-only sample carries no RL stream at all
            assert s.rl_weights is None
        assert s.ce_weights is not None and any(s.ce_weights)
    # revise predicts its mutants' real outcome (in place, e.g. ASSERTION_FAILURE) and recover's wrong PASS
    # becomes a CE-only sample: both kinds are here
    assert any(any(s.mask) for s in batch.samples) and any(not any(s.mask) for s in batch.samples)
    loss_equals_reference(batch.samples)


def build(tokdir, **fields) -> PredictAlgorithm:
    config = _ALGO.validate_python({"type": "predict", "alpha": ALPHA, "max_aux_tokens": 4096, **fields})
    algo = build_algorithm(config, _Pool(str(tokdir)))
    asyncio.run(algo.setup())
    return algo


def test_the_studys_uniform_group_rule_drops_the_groups_ce_with_its_rollouts(runs, tokdir):
    """ce_in_uniform_groups = false: as the study's stack (zero_advantage filter, enforce = true), a group
    whose rewards are all equal ships nothing, CE included; a mixed group keeps its CE."""
    algo = build(tokdir, ce_in_uniform_groups=False)
    recover, revise, hack = (episodes(runs, p, "study-uniform") for p in POLICIES)
    uniform = [[recover[t], revise[t]] for t in sorted(recover)]
    mixed = [[revise[t], hack[t]] for t in sorted(revise)]
    for group in uniform:
        for ep in group:
            asyncio.run(algo.finalize_episode(ep))
        before = [ep.traces[0].metrics["predict_labels_trained"] for ep in group]
        assert sum(before) > 0, "the uniform groups here carry CE before the group is scored"
        asyncio.run(algo.finalize_group(group))
        for ep, trained in zip(group, before):
            (trace,) = ep.traces
            assert trace.metrics["predict_ce_dropped"] == trained
            assert trace.metrics["predict_labels_trained"] == trace.metrics["predict_ce_tokens"] == 0.0
            assert all("ce" not in (n.loss_weights or {}) for n in trace.nodes)
            assert all(n.sampled or n.loss_weights is None for n in trace.nodes)  # grafts gone
    recover, revise = (episodes(runs, p, "study-uniform-sink") for p in ("recover", "revise"))
    batch = train_batch(algo, [[recover[t], revise[t]] for t in sorted(recover)], 2)
    assert batch.samples == []
    batch = train_batch(algo, mixed, 2)
    assert any(s.ce_weights and any(s.ce_weights) for s in batch.samples)
    assert all(ep.traces[0].metrics["predict_ce_dropped"] == 0.0 for g in mixed for ep in g)


def test_the_study_span_rule_through_prime_rls_train_sink(runs, tokdir, tok):
    """label_span = "study": a lone '>' before the label keeps its RL weight and gets no CE; the shipped
    samples still equal the reference loss."""
    tb = TokenBytes(tok)
    algo = build(tokdir, label_span="study")
    recover, hack = (episodes(runs, p, "study-span") for p in ("recover", "hack"))
    samples = train_batch(algo, [[recover[t], hack[t]] for t in sorted(recover)], 2).samples
    revise, hack = (episodes(runs, p, "study-span-revise") for p in ("revise", "hack"))  # hack's ids again
    samples += train_batch(algo, [[revise[t], hack[t]] for t in sorted(revise)], 2).samples
    lone = 0
    for s in samples:
        ce = s.ce_weights or [0.0] * len(s.token_ids)
        for i, w in enumerate(ce):
            if w:
                assert tb(s.token_ids[i]) != b">"
        for a, _, _ in (label_spans(tb, s.token_ids, s.mask) if any(s.mask) else []):
            if tb(s.token_ids[a]) == b">":
                lone += 1
                assert s.rl_weights[a] == 1.0 and not ce[a]
        if not any(s.mask):  # a CE-only sample: the CE starts on the label's own first token
            on = [i for i, w in enumerate(ce) if w]
            assert tb(s.token_ids[on[0] - 1]) == b">" or tb(s.token_ids[on[0]]).startswith(b">")
    assert lone >= 1, "revise's runs sample a label written after a lone '>'"
    loss_equals_reference(samples)


def test_the_study_ce_rule_through_prime_rls_train_sink(runs, tokdir, tok):
    """ce_rule = "study" on the study profile's rollouts: one CE-only sample per prediction target
    finalize recorded (right or wrong), as the study's _auxiliary_sample built it (its
    src/glyph/prime_rl.py at 9eefac7): the target's context rendered by the study renderer with the
    generation prompt, then <PREDICTION>VERIFIED</PREDICTION> encoded alone; no CE on the policy's
    own samples; the shipped samples still equal the reference loss."""
    from glyph.record import mbpp_record
    from glyph.render import renderer

    study_renderer = renderer(tok, "study")
    algo = build(tokdir, ce_rule="study", label_span="study")
    recover, hack = (episodes(runs, p, "study-ce-rule") for p in ("recover", "hack"))
    groups = [[recover[t], hack[t]] for t in sorted(recover)]
    samples = train_batch(algo, groups, 2).samples
    expected = []
    for ep in (ep for g in groups for ep in g):
        (trace,) = ep.traces
        targets = mbpp_record(trace.info).prediction_targets
        assert trace.metrics["predict_aux_samples"] == len(targets)
        for t in targets:
            tag = f"<PREDICTION>{t.verified_label}</PREDICTION>"
            expected.append(list(study_renderer.render_ids(t.context, add_generation_prompt=True))
                            + list(tok.encode(tag, add_special_tokens=False)))
    assert len(expected) >= 2 * TASKS, "recover predicts twice a task (a wrong PASS, then a right one)"
    main = [s for s in samples if any(s.mask)]
    ce_only = [s for s in samples if not any(s.mask)]
    assert len(main) == 2 * TASKS and all(not s.ce_weights or not any(s.ce_weights) for s in main)
    assert sorted(s.token_ids for s in ce_only) == sorted(expected)
    for s in ce_only:
        on = [i for i, w in enumerate(s.ce_weights) if w]
        assert on and all(s.ce_weights[i] == ALPHA for i in on) and on[-1] < len(s.token_ids) - 1
        assert s.rl_weights is None or not any(s.rl_weights)
    loss_equals_reference(samples)


def test_alpha_zero_through_prime_rls_train_sink(runs, tokdir, tok):
    """The alpha-0 control: no CE at all, the sampled labels still out of RL credit."""
    tb = TokenBytes(tok)
    algo = build(tokdir, alpha=0.0)
    recover, hack = (episodes(runs, p, "alpha0") for p in ("recover", "hack"))
    batch = train_batch(algo, [[recover[t], hack[t]] for t in sorted(recover)], 2)
    assert batch.samples and all(any(s.mask) for s in batch.samples)  # no CE-only samples
    assert all(s.ce_weights is None or not any(s.ce_weights) for s in batch.samples)
    for s in batch.samples:
        spans = label_spans(tb, s.token_ids, s.mask)
        assert spans and all(not any(s.rl_weights[a:b]) for a, b, _ in spans)


def test_a_graft_past_max_aux_tokens_is_dropped_and_counted(runs, tokdir):
    config = _ALGO.validate_python({"type": "predict", "max_aux_tokens": 300})
    algo = build_algorithm(config, _Pool(str(tokdir)))
    asyncio.run(algo.setup())
    (ep,) = list(episodes(runs, "recover", "short").values())[:1]
    asyncio.run(algo.finalize_episode(ep))
    (trace,) = ep.traces
    assert trace.metrics["predict_graft_too_long"] >= 1 and trace.metrics["predict_grafted"] == 0
    assert not any(not n.sampled and n.loss_weights and "ce" in n.loss_weights for n in trace.nodes)


def loss_equals_reference(samples) -> None:
    """PRIME-RL's compute_loss on the shipped samples equals testkit.reference_loss, value and
    gradient w.r.t. the trainer logprobs (logprobs from a tiny random Qwen3 over the real
    vocabulary: the same for both)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=151936,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=4096,
        )
    )
    model.eval()
    refs = [
        ref.Sample(
            token_ids=s.token_ids,
            mask=s.mask,
            inference_logprobs=s.logprobs,
            advantages=s.advantages,
            rl_weights=s.rl_weights,
            ce_weights=s.ce_weights,
            temperature=s.temperatures[0],
        )
        for s in samples
    ]
    with torch.no_grad():
        logps = ref.token_logprobs(model, refs)
    ours = [lp.clone().requires_grad_(True) for lp in logps]
    theirs = [lp.clone().requires_grad_(True) for lp in logps]
    loss, _ = ref.predict_loss(ours, refs)
    n_rl = sum(int(r.rl_tokens.sum()) for r in refs)
    n_ce = sum(int(r.ce_tokens.sum()) for r in refs)

    def stream(name):
        values = [getattr(s, name) for s in samples]
        if all(v is None for v in values):
            return None
        fill = {"rl_weights": 1.0, "ce_weights": 0.0}[name]
        return [
            torch.tensor(v if v is not None else [fill] * len(s.token_ids), dtype=torch.float32)
            for v, s in zip(values, samples)
        ]

    prime, _ = compute_loss(
        trainer_logprobs=theirs,
        inference_logprobs=[torch.tensor(s.logprobs, dtype=torch.float32) for s in samples],
        ref_logprobs=None,
        advantages=[
            torch.tensor(s.advantages or [0.0] * len(s.token_ids), dtype=torch.float32) for s in samples
        ],
        loss_mask=[torch.tensor(s.mask, dtype=torch.bool) for s in samples],
        rl_weights=stream("rl_weights"),
        ce_weights=stream("ce_weights"),
        ref_kl_weights=None,
        rl_loss_fn=setup_rl_loss_fn(DefaultLossConfig()),
        rl_scale=max(n_rl, 1),
        ce_scale=max(n_ce, 1),
        ref_kl_scale=1,
    )
    assert n_ce > 0
    torch.testing.assert_close(loss, prime)
    loss.backward()
    prime.backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_truncated_rollouts_are_kept_out_of_training_and_of_the_baseline(runs, algorithm):
    recover, revise, hack = (episodes(runs, p, "cut") for p in POLICIES)
    task = sorted(recover)[0]
    cut = recover[task].traces[0]
    cut.stop_condition = "max_total_tokens"  # as verifiers records a rollout its token limit stopped
    assert cut.is_truncated and algorithm.excluded(cut)
    group = [recover[task], revise[task], hack[task]]
    batch = train_batch(algorithm, [group], 3)
    assert cut.metrics["glyph_excluded"] == 1.0
    assert (
        revise[task].traces[0].metrics["glyph_excluded"]
        == hack[task].traces[0].metrics["glyph_excluded"]
        == 0
    )
    cut_tokens = cut.branches[0].token_ids
    assert all(s.token_ids[: len(cut_tokens)] != cut_tokens for s in batch.samples)
    # the baseline is the kept rollouts' mean (1 and 0), not (1 + 1 + 0) / 3
    advantages = {a for s in batch.samples if any(s.mask) for a, m in zip(s.advantages, s.mask) if m}
    assert advantages == {0.5, -0.5}


def test_over_long_rollouts_are_kept_out(runs, tokdir):
    config = _ALGO.validate_python({"type": "glyph_grpo", "max_rollout_tokens": 100})
    algo = build_algorithm(config, _Pool(str(tokdir)))
    recover, hack = (episodes(runs, p, "long") for p in ("recover", "hack"))
    groups = [[recover[t], hack[t]] for t in sorted(recover)]
    batch = train_batch(algo, groups, 2)
    assert batch.samples == [] and all(
        ep.traces[0].metrics["glyph_excluded"] == 1.0 for g in groups for ep in g
    )
