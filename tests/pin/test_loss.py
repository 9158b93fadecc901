"""PREDICT's token objective (``testkit.reference_loss``) on a tiny random Qwen3
with the real Qwen3 vocabulary: gradients reach only the weighted tokens, the
grafted CE-only sample equals CE in place, CE on verified labels teaches a
predictable outcome, and the loss and gradients equal PRIME-RL's own
``compute_loss`` at the pin."""

import random
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from glyph.render import load_tokenizer, render_ids  # noqa: E402
from testkit.pin_loss import QWEN3_VOCAB, prime_rl_compute_loss, prime_rl_logprobs, tiny_qwen3  # noqa: E402
from testkit.reference_loss import Sample, predict_loss, prune_zero_advantages, token_counts, token_logprobs  # noqa: E402

ALPHA = 0.5


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3()


def completion_tokens(tok, text: str, label: str) -> tuple[list[int], list[int]]:
    """The completion's ids and the indices of the label's tokens in its
    ``<PREDICTION>``: from the token holding the tag's ``>`` to the label's last
    character. Byte-level BPE merges that ``>`` with some labels (``>P ASS``)
    and not others (``> TIME OUT``), so the first token that tells the labels
    apart is the one holding the ``>``; a span without it would leave the
    choice between ``>P`` and ``>`` out of every TIMEOUT target."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    start = text.index(f"<PREDICTION>{label}</PREDICTION>") + len("<PREDICTION")
    end = start + 1 + len(label)
    span = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if a < end and b > start]
    assert span == list(range(span[0], span[-1] + 1))
    return list(enc["input_ids"]), span


def prompt_ids(tok, messages) -> list[int]:
    """The rollout's prompt as PRIME-RL renders it (Qwen3 renderer, thinking off)."""
    return render_ids(messages, tok, add_generation_prompt=True, profile="glyph")


AGENT_PROMPT = [
    {"role": "user", "content": "Write a function to find the shared elements of two lists."},
    {"role": "assistant",
     "content": 'CALL {"id": "1", "tool": "apply_patch", "args": {"path": "solution.py", "find": "# TODO", '
                '"replace": "def similar_elements(a, b):\\n    return tuple(set(a) & set(b))"}}'},
    {"role": "user", "content": "RESULT 1 apply_patch ok\npatched solution.py\nbudget: 7 tool calls left"},
]


def agent_turn(tok, sampled: str):
    """The agent's Arm B turn after a patch, as sampled tokens after its prompt:
    (token ids, sampled mask, absolute indices of the sampled label's tokens)."""
    completion = (f"The set intersection should match.\n<PREDICTION>{sampled}</PREDICTION>\n"
                  '<DECISION>KEEP</DECISION>\n'
                  'CALL {"id": "2", "tool": "python_test", "args": {}}<|im_end|>')
    prompt = prompt_ids(tok, AGENT_PROMPT)
    ids, span = completion_tokens(tok, completion, sampled)
    return prompt + ids, [False] * len(prompt) + [True] * len(ids), [len(prompt) + i for i in span]


def predict_samples(tok, model, sampled: str, verified: str, *, graft_always: bool = False,
                    temperature: float = 1.0, advantage: float = 0.7) -> list[Sample]:
    """PREDICT's samples for one agent turn: rl 0 on the sampled label and 1 on
    every other sampled token; ce alpha on the label in place when it is the
    verified one (unless ``graft_always``), else a CE-only sample at the same prefix."""
    ids, mask, span = agent_turn(tok, sampled)
    with torch.no_grad():
        probe = Sample(token_ids=ids, mask=[False] * len(ids), temperature=temperature)
        trainer = token_logprobs(model, [probe])[0]
    gen = torch.Generator().manual_seed(1)
    # Inference logprobs near the trainer's: a ratio != 1, so the KL term has a gradient too.
    inference = torch.where(torch.tensor(mask), trainer + 0.05 * torch.randn(len(ids), generator=gen), 0.0)
    rl = [1.0 if m else 0.0 for m in mask]
    for i in span:
        rl[i] = 0.0
    in_place = sampled == verified and not graft_always
    ce = [ALPHA if in_place and i in span else 0.0 for i in range(len(ids))]
    main = Sample(token_ids=ids, mask=mask, inference_logprobs=inference,
                  advantages=[advantage if m else 0.0 for m in mask], rl_weights=rl,
                  ce_weights=ce if in_place else None, temperature=temperature)
    if in_place:
        return [main]
    _, span_v = completion_tokens(tok, f"<PREDICTION>{verified}</PREDICTION>", verified)
    verified_ids = tok(f"<PREDICTION>{verified}</PREDICTION>", add_special_tokens=False)["input_ids"]
    # The label's first token may carry the tag's ">", so the graft starts where that token started.
    prefix = ids[:span[0]]
    label = verified_ids[span_v[0]:span_v[-1] + 1]
    return [main, Sample.ce_only(prefix, label, ALPHA, temperature=temperature)]


def logit_grads(model, samples, **kwargs):
    """Loss, parts and d loss / d logits per sample (row j predicts token j + 1)."""
    captured = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        captured.append(output)

    handle = model.get_output_embeddings().register_forward_hook(keep)
    try:
        # One forward per sample: one captured logits tensor per sample.
        lps = [token_logprobs(model, [s])[0] for s in samples]
        loss, parts = predict_loss(lps, samples, **kwargs)
        model.zero_grad()
        loss.backward()
    finally:
        handle.remove()
    return loss, parts, [c.grad[0] for c in captured], [c.detach()[0] for c in captured]


def param_grads(model):
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_grads_close(a: dict, b: dict) -> None:
    """Equal up to float32 rounding: within 1e-6 of each tensor's largest entry."""
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        scale = a[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6 * scale, msg=name)


# a. ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sampled, verified", [("PASS", "PASS"), ("PASS", "RUNTIME_ERROR")])
def test_gradients_reach_only_weighted_tokens(tok, model, sampled, verified):
    temperature = 0.8
    samples = predict_samples(tok, model, sampled, verified, temperature=temperature)
    loss, parts, grads, logits = logit_grads(model, samples)
    assert torch.isfinite(loss)
    n_rl, n_ce = token_counts(samples)
    assert (parts.rl_tokens, parts.ce_tokens) == (n_rl, n_ce) and n_rl > 20 and n_ce >= 2
    _, _, span = agent_turn(tok, sampled)
    for sample, grad, z in zip(samples, grads, logits):
        weighted = sample.rl_tokens | sample.ce_tokens
        for i in range(1, len(sample)):
            row = grad[i - 1]
            if not weighted[i]:
                assert torch.count_nonzero(row) == 0, f"token {i} carries no weight but gets a gradient"
            else:
                assert row.abs().sum() > 0, f"weighted token {i} gets no gradient"
        if sample.ce_weights is not None:
            # CE tokens (rl 0): exactly alpha / N_ce * d(-log softmax(z / T)[token]) / dz, no rl share.
            for i in sample.ce_tokens.nonzero().squeeze(1).tolist():
                expected = torch.softmax(z[i - 1] / temperature, -1)
                expected[sample.token_ids[i]] -= 1.0
                expected *= ALPHA / (temperature * n_ce)
                torch.testing.assert_close(grad[i - 1], expected, rtol=1e-4, atol=1e-9)
    main = samples[0]
    assert not main.rl_tokens[span].any()
    if sampled != verified:
        # The wrong sampled label is in no component: its logits rows get nothing at all.
        assert main.ce_weights is None
        for i in span:
            assert torch.count_nonzero(grads[0][i - 1]) == 0
        graft = samples[1]
        assert torch.equal(graft.token_ids[:span[0]], main.token_ids[:span[0]])
        assert not graft.mask.any() and graft.ce_tokens.sum() == len(graft) - span[0]


# b. ---------------------------------------------------------------------------------------------

def test_in_place_ce_equals_grafted_ce_only_sample(tok, model):
    in_place = predict_samples(tok, model, "PASS", "PASS")
    grafted = predict_samples(tok, model, "PASS", "PASS", graft_always=True)
    assert len(in_place) == 1 and len(grafted) == 2
    assert grafted[0].ce_weights is None
    assert torch.equal(grafted[1].token_ids, in_place[0].token_ids[:len(grafted[1])])

    results = []
    for samples in (in_place, grafted):
        loss, parts, _, _ = logit_grads(model, samples)
        results.append((loss.detach(), parts, param_grads(model)))
    (loss_a, parts_a, grads_a), (loss_b, parts_b, grads_b) = results
    assert (parts_a.rl_tokens, parts_a.ce_tokens) == (parts_b.rl_tokens, parts_b.ce_tokens)
    assert parts_a.ce > 0 and parts_a.rl != 0
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-6, atol=0)
    torch.testing.assert_close(parts_a.ce, parts_b.ce, rtol=1e-6, atol=0)
    assert_grads_close(grads_a, grads_b)
    # The same CE on the wrong label is a different objective: the check can tell them apart.
    wrong = predict_samples(tok, model, "PASS", "TIMEOUT")
    assert not torch.allclose(predict_loss(token_logprobs(model, wrong), wrong)[1].ce, parts_a.ce)


def test_weighted_only_logprobs_give_the_same_loss_and_gradients(tok, model):
    samples = predict_samples(tok, model, "PASS", "SYNTAX_ERROR", temperature=0.7)
    out = []
    for weighted_only in (False, True):
        model.zero_grad()
        lps = token_logprobs(model, samples, weighted_only=weighted_only)
        loss, _ = predict_loss(lps, samples)
        loss.backward()
        out.append((loss.detach(), param_grads(model), lps))
    (loss_full, grads_full, lps_full), (loss_w, grads_w, lps_w) = out
    torch.testing.assert_close(loss_full, loss_w, rtol=1e-6, atol=0)
    assert_grads_close(grads_full, grads_w)
    for s, full, w in zip(samples, lps_full, lps_w):
        weighted = s.rl_tokens | s.ce_tokens
        torch.testing.assert_close(full[weighted], w[weighted])
        assert not weighted.all() and not torch.allclose(full[~weighted][1:], w[~weighted][1:])


def test_micro_batches_with_step_scales_sum_to_the_step():
    gen = torch.Generator().manual_seed(3)
    samples, leaves = [], []
    for n in (7, 5, 9):
        leaves.append(torch.log_softmax(torch.randn(n, 6, generator=gen), -1)[:, 0].requires_grad_())
        samples.append(Sample(token_ids=list(range(n)), mask=[i > 1 for i in range(n)],
                              inference_logprobs=torch.randn(n, generator=gen).clamp(max=-0.1),
                              advantages=torch.randn(n, generator=gen),
                              rl_weights=[0.0 if i == 3 else 1.0 for i in range(n)] if n != 5 else None,
                              ce_weights=[0.3 if i >= n - 2 else 0.0 for i in range(n)] if n != 9 else None))
    whole, _ = predict_loss(leaves, samples)
    (g_whole,) = [torch.autograd.grad(whole, leaves)]
    n_rl, n_ce = token_counts(samples)
    first, _ = predict_loss(leaves[:2], samples[:2], rl_scale=n_rl, ce_scale=n_ce)
    second, _ = predict_loss(leaves[2:], samples[2:], rl_scale=n_rl, ce_scale=n_ce)
    torch.testing.assert_close(first + second, whole)
    g_split = torch.autograd.grad(first + second, leaves)
    for a, b in zip(g_whole, g_split):
        torch.testing.assert_close(a, b)
    # Per-micro-batch denominators (the trainer's bug it avoids) give another loss.
    alone = predict_loss(leaves[:2], samples[:2])[0] + predict_loss(leaves[2:], samples[2:])[0]
    assert not torch.allclose(alone, whole)


# c. ---------------------------------------------------------------------------------------------

# One single-token cue word per outcome, so the label is not readable off the context's length.
CUES = {"PASS": "green", "TIMEOUT": "stalls", "SYNTAX_ERROR": "typo"}
TRAIN_NAMES = ["merge_lists", "count_vowels", "find_max", "is_prime", "sum_digits", "reverse_words",
               "flatten", "gcd", "rotate", "unique_sorted", "median", "to_binary"]
HELD_OUT_NAMES = ["parse_date", "bubble_sort", "lcm", "word_count", "clamp"]


def outcome_context(name: str, number: int, label: str) -> list[dict]:
    return [{"role": "user", "content": f"Task {number}: fix {name}. Log of the candidate: {CUES[label]}."}]


def label_sample(tok, messages, label: str) -> Sample:
    """The CE-only sample the verified ``label`` gives at this context."""
    completion = f"<PREDICTION>{label}</PREDICTION>\n<DECISION>KEEP</DECISION>"
    ids, span = completion_tokens(tok, completion, label)
    return Sample.ce_only(prompt_ids(tok, messages) + ids[:span[0]], ids[span[0]:span[-1] + 1], ALPHA)


def label_accuracy(tok, model, contexts) -> float:
    """Held-out accuracy: the label whose tokens have the highest summed logprob."""
    labels = list(CUES)
    with torch.no_grad():
        samples = [label_sample(tok, msgs, lab) for msgs, _ in contexts for lab in labels]
        lps = token_logprobs(model, samples, weighted_only=True)
    scores = torch.stack([lp[s.ce_tokens].sum() for s, lp in zip(samples, lps)])
    scores = scores.view(len(contexts), len(labels))
    truth = torch.tensor([labels.index(answer) for _, answer in contexts])
    return (scores.argmax(1) == truth).float().mean().item()


def test_ce_on_verified_labels_learns_a_predictable_outcome(tok):
    started = time.perf_counter()
    # The real tokenizer splits the labels unlike each other, the tag's ">" merged into one of them.
    spans = {lab: [tok.decode([t]) for t in s.token_ids[s.ce_tokens]]
             for lab in CUES for s in [label_sample(tok, outcome_context("f", 1, lab), lab)]}
    assert spans == {"PASS": [">P", "ASS"], "TIMEOUT": [">", "TIME", "OUT"],
                     "SYNTAX_ERROR": [">", "SY", "NTAX", "_ERROR"]}
    rng = random.Random(0)
    held_out = [(outcome_context(name, rng.randrange(1, 100), lab), lab)
                for name in HELD_OUT_NAMES for lab in CUES for _ in range(2)]
    model = tiny_qwen3(seed=1).train()
    before = label_accuracy(tok, model, held_out)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    curve = [(0, before)]
    steps, batch = 80, 12  # held-out accuracy reaches 1.0 by step 30-40 (seeds 1-3); twice that for margin
    for step in range(1, steps + 1):
        samples = []
        for _ in range(batch):
            lab = rng.choice(list(CUES))
            context = outcome_context(rng.choice(TRAIN_NAMES), rng.randrange(1, 100), lab)
            samples.append(label_sample(tok, context, lab))
        loss, parts = predict_loss(token_logprobs(model, samples, weighted_only=True), samples)
        assert parts.rl_tokens == 0 and parts.ce_tokens > 0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            curve.append((step, label_accuracy(tok, model, held_out)))
    after = curve[-1][1]
    elapsed = time.perf_counter() - started
    print(f"\nheld-out label accuracy by step (chance 1/3, {len(held_out)} contexts): "
          + ", ".join(f"{s}: {a:.2f}" for s, a in curve) + f"; {elapsed:.1f} s")
    assert before <= 0.5
    assert after >= 0.9


# d. ---------------------------------------------------------------------------------------------

def prime_rl_loss_module():
    return pytest.importorskip("prime_rl.trainer.rl.loss",
                               reason="PRIME-RL at the pin is not importable (put its src on PYTHONPATH)")


def loss_config_kwargs(config) -> dict:
    return {k: getattr(config, k) for k in ("dppo_mask_low", "dppo_mask_high", "adv_tau", "kl_tau")}


def test_token_logprobs_equal_prime_rl_trainer_logprobs(tok, model):
    samples = (predict_samples(tok, model, "PASS", "TIMEOUT", temperature=0.7)
               + predict_samples(tok, model, "SYNTAX_ERROR", "SYNTAX_ERROR"))
    with torch.no_grad():
        ours = token_logprobs(model, samples)
        theirs = [prime_rl_logprobs(model, s) for s in samples]
    for a, b in zip(ours, theirs):
        assert a[0] == b[0] == torch.log(torch.tensor(1.0 / QWEN3_VOCAB)).item()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)
    # The temperature is applied: the same tokens at T=1 give other logprobs.
    plain = Sample(token_ids=samples[0].token_ids, mask=[False] * len(samples[0]))
    with torch.no_grad():
        assert not torch.allclose(token_logprobs(model, [plain])[0][1:], ours[0][1:])


def test_predict_loss_equals_prime_rl_compute_loss_on_a_model(tok, model):
    """PREDICT's samples (label in place; wrong label + graft) beside a plain
    GRPO sample (no streams, negative advantage), at two temperatures."""
    prime_rl_loss_module()
    from prime_rl.configs.trainer import DefaultLossConfig

    samples = (predict_samples(tok, model, "PASS", "PASS", temperature=0.7)
               + predict_samples(tok, model, "PASS", "RUNTIME_ERROR")
               + [Sample(token_ids=s.token_ids, mask=s.mask, inference_logprobs=s.inference_logprobs,
                         advantages=-0.4 * s.mask.float())
                  for s in predict_samples(tok, model, "TIMEOUT", "TIMEOUT")])
    assert [s.rl_weights is None for s in samples] == [False, False, True, True]
    assert [s.ce_weights is None for s in samples] == [False, True, False, True]
    params = [p for p in model.parameters()]
    config = DefaultLossConfig()

    ours, parts = predict_loss(token_logprobs(model, samples), samples)
    ours_grads = torch.autograd.grad(ours, params)
    theirs_lp = [prime_rl_logprobs(model, s) for s in samples]
    for pack in (True, False):
        theirs, _ = prime_rl_compute_loss(theirs_lp, samples, config, pack=pack)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=0)
        theirs_grads = torch.autograd.grad(theirs, params, retain_graph=True)
        names = [n for n, _ in model.named_parameters()]
        assert_grads_close(dict(zip(names, ours_grads)), dict(zip(names, theirs_grads)))
    assert parts.rl != 0 and parts.ce > 0 and parts.ce_tokens >= 4


@pytest.mark.parametrize("overrides", [{}, {"dppo_mask_low": 0.1, "dppo_mask_high": 0.3, "adv_tau": 0.5,
                                            "kl_tau": 0.05}])
def test_predict_loss_equals_prime_rl_compute_loss_through_the_trust_region(overrides):
    """Logprobs far from the inference ones, so DPPO drops tokens both ways;
    fractional rl weights, ce weights, absent streams, a CE-only sample."""
    prime_rl_loss_module()
    from prime_rl.configs.trainer import DefaultLossConfig

    config = DefaultLossConfig(**overrides)
    gen = torch.Generator().manual_seed(7)
    leaves, samples = [], []
    for k, n in enumerate((12, 9, 14, 6)):
        z = torch.randn(n, generator=gen).mul(2).requires_grad_()
        leaves.append(z)
        p_trainer = torch.sigmoid(z.detach())
        shift = torch.tensor([0.35, -0.35, 0.02, -0.02])[torch.randint(0, 4, (n,), generator=gen)]
        inference = torch.log((p_trainer - shift).clamp(0.01, 0.99))
        mask = torch.rand(n, generator=gen) < 0.8
        mask[0] = False
        rl = torch.tensor([0.0, 0.5, 1.0, 2.0])[torch.randint(0, 4, (n,), generator=gen)]
        ce = torch.where(torch.rand(n, generator=gen) < 0.3, 0.25, 0.0)
        ce[0] = 0.0
        if k == 3:  # CE-only
            samples.append(Sample(token_ids=list(range(n)), mask=[False] * n,
                                  ce_weights=[0, 0, 0.25, 0.25, 1, 1]))
            continue
        samples.append(Sample(token_ids=list(range(n)), mask=mask, inference_logprobs=inference,
                              advantages=torch.randn(n, generator=gen), rl_weights=rl if k != 1 else None,
                              ce_weights=ce if k != 2 else None))
    logprobs = [torch.nn.functional.logsigmoid(z) for z in leaves]
    ours, parts = predict_loss(logprobs, samples, **loss_config_kwargs(config))
    ours_grads = torch.autograd.grad(ours, leaves, retain_graph=True)
    for pack in (True, False):
        theirs, metrics = prime_rl_compute_loss(logprobs, samples, config, pack=pack)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
        for a, b in zip(ours_grads, torch.autograd.grad(theirs, leaves, retain_graph=True)):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    assert metrics["is_masked_high"].sum() > 0 and metrics["is_masked_low"].sum() > 0
    assert parts.dppo_masked > 0
    assert parts.ce_tokens > 0 and parts.rl_tokens > parts.dppo_masked
    # Without the trust region the loss differs: the check would see a missing mask.
    loose = predict_loss(logprobs, samples, **{**loss_config_kwargs(config), "dppo_mask_low": 9.0,
                                               "dppo_mask_high": 9.0})[0]
    assert not torch.allclose(loose, ours)


def test_prune_zero_advantages_matches_prime_rl_orchestrator():
    prime_rl_loss_module()
    from prime_rl.orchestrator.train_sink import _prune_zero_advantages
    from prime_rl.transports.rollouts import TrainingSample

    n = 6
    cases = [
        Sample(token_ids=range(n), mask=[0, 0, 1, 1, 1, 1], inference_logprobs=[-1.0] * n,
               advantages=[0, 0, 0.5, 0, 0.5, 0.5]),                                   # rl None, some zero
        Sample(token_ids=range(n), mask=[0, 0, 1, 1, 1, 1], inference_logprobs=[-1.0] * n,
               advantages=[0, 0, 0, 0, 0.3, 0.3], rl_weights=[0, 0, 1, 1, 0, 1]),     # rl stream
        Sample(token_ids=range(n), mask=[0, 0, 1, 1, 1, 1], inference_logprobs=[-1.0] * n,
               advantages=[0.0] * n),                                                  # nothing left: dropped
        Sample(token_ids=range(n), mask=[0, 0, 1, 1, 1, 1], inference_logprobs=[-1.0] * n,
               advantages=[0.0] * n, ce_weights=[0, 0, 0, 0, 0.5, 0.5]),               # ce keeps it
        Sample(token_ids=range(n), mask=[0, 0, 1, 1, 1, 1], inference_logprobs=[-1.0] * n,
               advantages=[0.2] * n),                                                  # unchanged
    ]
    outcomes = []
    for case in cases:
        theirs = TrainingSample(
            token_ids=case.token_ids.tolist(), mask=case.mask.tolist(),
            logprobs=case.inference_logprobs.tolist(),
            temperatures=[1.0] * n, env_name="glyph", advantages=case.advantages.tolist(),
            rl_weights=case.rl_weights.tolist() if case.rl_weights is not None else None,
            ce_weights=case.ce_weights.tolist() if case.ce_weights is not None else None)
        kept = _prune_zero_advantages(theirs)
        ours = prune_zero_advantages(case)
        assert (ours is not None) == kept
        if ours is not None:
            expected = theirs.rl_weights
            got = ours.rl_weights.tolist() if ours.rl_weights is not None else None
            assert got == expected
        outcomes.append(ours is None or ours is case)
    assert outcomes == [False, False, True, False, True]


# PREDICT's CE rules (glyph.predict.annotate.CeRule) through the pin: the study's auxiliary CE-only
# sample per prediction target against glyph's in-place CE and grafts, on Arm B rollouts laid out with
# the study renderer, through the pin's trace_to_samples and compute_loss (benchmarks/ce_rule.py
# prints the numbers on larger batches).

CE_RULE_BATCHES = {
    "valid": ([["right", "wrong"], ["wrong", "right"]], False),
    "invalid_missing": ([["wrong", "invalid"], ["right", "missing"]], False),
    "retokenized": ([["right", "wrong"]], True),
}


@pytest.fixture(scope="module")
def study_renderer(tok):
    from glyph.render import renderer

    return renderer(tok, "study")


@pytest.mark.parametrize("name", list(CE_RULE_BATCHES))
def test_the_study_ce_rule_against_in_place_through_compute_loss(tok, model, study_renderer, name):
    """Where every label is an outcome class and the policy's tokens are the renderer's own, the
    study's separate samples and glyph's in-place CE and grafts give the same loss and gradient
    (the same CE tokens on the same contexts; the auxiliary samples add no RL tokens, and
    compute_loss normalises CE by the step's CE tokens either way). An invalid or missing label
    trains under the study's rule only, and a context the policy tokenized otherwise trains on the
    re-rendering under the study's rule and on the policy's own tokens under glyph's: both move
    the loss or the gradient."""
    prime_rl_loss_module()
    from testkit import ce_rules as C

    kinds, retokenized = CE_RULE_BATCHES[name]
    rollouts = C.batch(tok, study_renderer, kinds, retokenized=retokenized)
    ours, ours_notes = C.rule_step(tok, study_renderer, model, rollouts, "in_place")
    study, study_notes = C.rule_step(tok, study_renderer, model, rollouts, "study")
    cos, rel = C.agreement(study, ours)
    targets = sum(len(ks) for ks in kinds)
    assert sum(n.aux_samples for n in study_notes) == targets
    assert study.samples == ours.samples - sum(n.grafted for n in ours_notes) + targets
    assert study.rl_tokens == ours.rl_tokens and study.rl == pytest.approx(ours.rl, rel=1e-6)
    assert study.ce > 0 and ours.ce > 0
    differs = sum(n.aux_context_differs for n in study_notes)
    if name == "valid":
        assert differs == 0 and study.ce_tokens == ours.ce_tokens
        assert study.loss == pytest.approx(ours.loss, rel=1e-6)
        assert cos > 1 - 1e-6 and rel < 1e-5
    elif name == "invalid_missing":
        unlabelled = sum(n.aux_unlabelled for n in study_notes)
        assert unlabelled == 2 and sum(n.labels_trained for n in ours_notes) == targets - unlabelled
        assert study.ce_tokens > ours.ce_tokens
        assert abs(study.loss - ours.loss) > 1e-4 and rel > 1e-2
    else:
        assert differs == targets and study.ce_tokens == ours.ce_tokens
        assert rel > 1e-3
