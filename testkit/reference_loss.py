"""PREDICT's token objective as PRIME-RL's trainer computes it, in plain PyTorch.

A reference to test against, not a second training path: PRIME-RL trains
PREDICT by executing the per-token weight streams the algorithm writes, and
this module reproduces what its trainer does with those streams at the pin
(commit ``559b447``), with nothing imported from PRIME-RL:

- ``token_logprobs``: a forward of a causal LM per sample, logits divided by
  the sample's temperature, ``log_softmax`` gathered at the next token, then
  shifted right so that index ``i`` holds ``log p(token_i | tokens_<i)`` and
  index 0 (no prediction) the constant ``log(1 / vocab_size)``
  (``src/prime_rl/trainer/rl/train.py:381`` labels, ``:441-442`` temperature,
  ``:452-454`` shift and pad; ``src/prime_rl/trainer/rl/loss.py:48-91``).
  The orchestrator stamps one temperature per sample
  (``src/prime_rl/orchestrator/train_sink.py:264``), so a ``Sample`` holds one.
- ``predict_loss``: ``compute_loss`` (``loss.py:285-403``) with the default
  rl loss. rl = ``default_loss_fn`` (``loss.py:109-161``: DPPO trust-region
  mask conditioned on the advantage's sign, importance-weighted policy
  gradient, ``kl_tau * log_ratio**2``) over ``mask & (rl_weights != 0)``,
  each token's loss times its rl weight; an absent rl stream is weight 1.0 on
  the mask (``loss.py:379-384``; ``trainer/batch.py:14`` fills a packed
  sample's absent stream the same way). ce = ``ce_loss_fn``
  (``loss.py:246-259``: ``-logprob * ce_weight``) over ``ce_weights != 0``;
  an absent ce stream is no ce. Total = ``rl_sum / N_rl + ce_sum / N_ce``
  (``loss.py:394``), each ``N`` the step's count of that component's tokens,
  at least 1 (``train.py:309-323``). Defaults are ``DefaultLossConfig``'s
  (``packages/prime-rl-configs/src/prime_rl/configs/trainer.py:494-507``).
- ``prune_zero_advantages``: the orchestrator's last edit before the trainer
  (``train_sink.py:36-61``): a sampled token whose advantage is exactly 0
  leaves the rl component (its KL term and its place in ``N_rl``), and a
  sample left with no weighted token is dropped.

PREDICT in these terms: on the agent's sample, rl weight 0 on the sampled
prediction-label tokens and 1 on every other sampled token; ce weight alpha on
the label tokens when the sampled label is the verified one; otherwise a
CE-only sample (``Sample.ce_only``: the same token prefix, then the verified
label's tokens, mask all False, ce alpha on the label). The label's tokens
must start at the token that holds the tag's ``>``: Qwen3's byte-level BPE
merges it into some labels (``>P ASS``, ``>R UN TIME _ERROR``) and not others
(``> TIME OUT``), so that token is where the labels first differ.

Not covered: the ref_kl component and reference logprobs (on-policy
distillation), the IPO and custom rl losses, the metrics ``compute_loss``
returns, and the trainer's machinery (sequence packing, context parallelism,
the fused chunked lm-head, FSDP gradient division, truncation to
``seq_len``). Logprobs are computed in the model's dtype, at least float32.
In a packed micro batch PRIME-RL's index 0 of every sample after the first
holds the previous sample's last logits scored on this sample's first token,
not the pad; no weight reaches index 0 (a sample starts with prompt), so the
loss is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


def _tensor(values, dtype: torch.dtype) -> Tensor:
    return torch.as_tensor(values, dtype=dtype).detach().clone()


@dataclass(frozen=True, eq=False)
class Sample:
    """One training sample as PRIME-RL's trainer receives it: full
    prompt-plus-completion streams of equal length. Lists or tensors go in;
    tensors are stored.

    ``inference_logprobs`` and ``advantages`` may be left ``None`` only by a
    sample with no rl token (they become zeros, as ``trainer/batch.py:356-365``
    does for advantages); a sample with rl tokens and no advantages is the
    producer's error there and here.
    """

    token_ids: Tensor
    mask: Tensor
    inference_logprobs: Tensor | None = None
    advantages: Tensor | None = None
    rl_weights: Tensor | None = None
    ce_weights: Tensor | None = None
    temperature: float = 1.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "token_ids", _tensor(self.token_ids, torch.long))
        if self.token_ids.dim() != 1:
            raise ValueError("token_ids must be one sequence")
        n = len(self.token_ids)
        set_(self, "mask", _tensor(self.mask, torch.bool))
        for name in ("inference_logprobs", "advantages", "rl_weights", "ce_weights"):
            if getattr(self, name) is not None:
                set_(self, name, _tensor(getattr(self, name), torch.float32))
        for name in ("mask", "inference_logprobs", "advantages", "rl_weights", "ce_weights"):
            value = getattr(self, name)
            if value is not None and value.shape != (n,):
                raise ValueError(f"{name} has shape {tuple(value.shape)}; token_ids has {n} tokens")
        for name in ("inference_logprobs", "advantages"):
            if getattr(self, name) is None:
                if bool(self.rl_tokens.any()):
                    raise ValueError(f"a sample with rl tokens needs {name}")
                set_(self, name, torch.zeros(n))
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, not {self.temperature}")

    @classmethod
    def ce_only(cls, prefix_ids: Sequence[int], label_ids: Sequence[int], alpha: float,
                temperature: float = 1.0) -> Sample:
        """The grafted CE-only sample: ``prefix_ids`` (the agent's tokens up to
        where the label starts) then ``label_ids`` (the verified label's
        tokens); nothing sampled, ce ``alpha`` on the label tokens only."""
        if len(label_ids) == 0:
            raise ValueError("a CE-only sample needs label tokens")
        token_ids = list(prefix_ids) + list(label_ids)
        return cls(token_ids=token_ids, mask=[False] * len(token_ids),
                   ce_weights=[0.0] * len(prefix_ids) + [float(alpha)] * len(label_ids),
                   temperature=temperature)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def rl_tokens(self) -> Tensor:
        """Members of the rl component: ``mask & (rl_weights != 0)``, or the mask."""
        return self.mask if self.rl_weights is None else self.mask & (self.rl_weights != 0)

    @property
    def ce_tokens(self) -> Tensor:
        """Members of the ce component: ``ce_weights != 0``, or none."""
        return torch.zeros_like(self.mask) if self.ce_weights is None else self.ce_weights != 0


@dataclass(frozen=True)
class LossParts:
    """The two normalised components (detached) and what went into them."""

    rl: Tensor  # rl_sum / rl_scale
    ce: Tensor  # ce_sum / ce_scale
    rl_tokens: int  # rl-component tokens in these samples
    ce_tokens: int  # ce-component tokens in these samples
    rl_scale: int  # the denominators used
    ce_scale: int
    dppo_masked: int  # rl tokens whose policy-gradient term the trust region dropped (KL term kept)


def token_counts(samples: Sequence[Sample]) -> tuple[int, int]:
    """(rl tokens, ce tokens) over ``samples``: a step's denominators before the
    ``max(., 1)``, as ``train.py:309-323`` counts them across all micro batches."""
    return (sum(int(s.rl_tokens.sum()) for s in samples), sum(int(s.ce_tokens.sum()) for s in samples))


def _vocab_size(config) -> int:
    return getattr(config, "vocab_size", None) or config.text_config.vocab_size


def token_logprobs(model: torch.nn.Module, samples: Sequence[Sample], *,
                   weighted_only: bool = False) -> list[Tensor]:
    """Trainer logprobs of each sample's own tokens: ``out[k][i] =
    log softmax(logits_{i-1} / T_k)[token_i]``, ``out[k][0] = log(1/vocab)``.

    ``model`` is a Hugging Face causal LM. Samples of equal length are run as
    one batch without padding, each from position 0, so no attention mask or
    padding enters a result. With ``weighted_only``, the lm head and softmax
    run only at positions that carry an rl or ce weight (through the model's
    ``logits_to_keep``); the other positions hold the pad value, without
    gradient. ``predict_loss`` reads nothing else, so its loss and gradients
    are the same either way; this is for speed on a large vocabulary.
    """
    if not samples:
        return []
    device = next(model.parameters()).device
    vocab = _vocab_size(model.config)
    pad = torch.log(torch.tensor(1.0 / vocab)).item()  # the value train.py:453 uses
    by_length: dict[int, list[int]] = {}
    for k, sample in enumerate(samples):
        by_length.setdefault(len(sample), []).append(k)
    out: list[Tensor | None] = [None] * len(samples)
    for length, members in by_length.items():
        ids = torch.stack([samples[k].token_ids for k in members]).to(device)
        if weighted_only:
            weighted = torch.zeros(length, dtype=torch.bool)
            for k in members:
                weighted |= samples[k].rl_tokens | samples[k].ce_tokens
            weighted[0] = False
            positions = weighted.nonzero().squeeze(1).to(device)
        else:
            positions = torch.arange(1, length, device=device)
        dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)
        rows = torch.full((len(members), length), pad, dtype=dtype, device=device)
        if len(positions):
            keep = positions - 1  # the logits at i-1 predict token i
            logits = model(input_ids=ids, logits_to_keep=keep, use_cache=False).logits
            temps = torch.tensor([samples[k].temperature for k in members], dtype=dtype, device=device)
            scaled = logits.to(dtype) / temps.view(-1, 1, 1)
            lp = scaled.log_softmax(dim=-1).gather(-1, ids[:, positions].unsqueeze(-1)).squeeze(-1)
            rows = rows.index_copy(1, positions, lp)
        for row, k in enumerate(members):
            out[k] = rows[row]
    return out


def _rl_component(t_logp: Tensor, sample: Sample, member: Tensor, *, dppo_mask_low: float,
                  dppo_mask_high: float, adv_tau: float, kl_tau: float) -> tuple[Tensor, int]:
    """``default_loss_fn`` (loss.py:109-161), summed; and its masked-token count."""
    inference = sample.inference_logprobs.to(t_logp.device)
    advantages = sample.advantages.to(t_logp.device)
    member = member.to(t_logp.device)
    log_ratio = t_logp - inference
    ratio = torch.exp(log_ratio)
    probs_diff = torch.exp(t_logp) - torch.exp(inference)
    # Positive advantage: drop tokens whose probability rose past the region; otherwise those that fell.
    invalid = torch.where(advantages > 0, probs_diff > dppo_mask_high, probs_diff < -dppo_mask_low)
    keep = member & ~invalid
    pg = keep * (adv_tau * advantages) * ratio
    kl = member * log_ratio**2
    per_token = -pg + kl_tau * kl
    if sample.rl_weights is not None:
        per_token = per_token * sample.rl_weights.to(t_logp.device)
    return per_token.sum(), int((member & invalid).sum())


def predict_loss(trainer_logprobs: Sequence[Tensor], samples: Sequence[Sample], *,
                 dppo_mask_low: float = 0.2, dppo_mask_high: float = 0.2, adv_tau: float = 1.0,
                 kl_tau: float = 1e-3, rl_scale: int | None = None,
                 ce_scale: int | None = None) -> tuple[Tensor, LossParts]:
    """PRIME-RL's trainer loss over ``samples`` (one step, or one micro batch
    of it when ``rl_scale`` / ``ce_scale`` carry the whole step's
    ``token_counts``; backward of each micro batch then sums to the step's
    gradient). ``trainer_logprobs[k]`` aligns with ``samples[k]`` as
    ``token_logprobs`` returns them."""
    if len(trainer_logprobs) != len(samples) or not samples:
        raise ValueError(f"{len(trainer_logprobs)} logprob streams for {len(samples)} samples")
    n_rl, n_ce = token_counts(samples)
    rl_scale = max(n_rl, 1) if rl_scale is None else rl_scale
    ce_scale = max(n_ce, 1) if ce_scale is None else ce_scale
    # Anchored in the graph (loss.py:355) so a step with no weighted token still backpropagates.
    rl_sum = trainer_logprobs[0].sum() * 0.0
    ce_sum = trainer_logprobs[0].sum() * 0.0
    masked = 0
    for t_logp, sample in zip(trainer_logprobs, samples):
        if t_logp.shape != (len(sample),):
            raise ValueError(f"logprobs of shape {tuple(t_logp.shape)} for a sample of {len(sample)} tokens")
        rl_member = sample.rl_tokens
        if bool(rl_member.any()):
            part, n_masked = _rl_component(t_logp, sample, rl_member, dppo_mask_low=dppo_mask_low,
                                           dppo_mask_high=dppo_mask_high, adv_tau=adv_tau, kl_tau=kl_tau)
            rl_sum = rl_sum + part
            masked += n_masked
        ce_member = sample.ce_tokens.to(t_logp.device)
        if bool(ce_member.any()):
            nll = -t_logp * sample.ce_weights.to(t_logp.device)
            ce_sum = ce_sum + nll[ce_member].sum()
    rl, ce = rl_sum / rl_scale, ce_sum / ce_scale
    parts = LossParts(rl=rl.detach(), ce=ce.detach(), rl_tokens=n_rl, ce_tokens=n_ce, rl_scale=rl_scale,
                      ce_scale=ce_scale, dppo_masked=masked)
    return rl + ce, parts


def prune_zero_advantages(sample: Sample) -> Sample | None:
    """The orchestrator's pruning (train_sink.py:36-61): rl weight 0 on every
    sampled token with advantage exactly 0; ``None`` when the sample is left
    with no rl or ce token (the orchestrator drops it)."""
    rl = sample.mask.float() if sample.rl_weights is None else sample.rl_weights.clone()
    prune = sample.mask & (sample.advantages == 0) & (rl != 0)
    if not bool(prune.any()):
        return sample
    rl[prune] = 0.0
    pruned = Sample(token_ids=sample.token_ids, mask=sample.mask,
                    inference_logprobs=sample.inference_logprobs, advantages=sample.advantages,
                    rl_weights=rl, ce_weights=sample.ce_weights, temperature=sample.temperature)
    if not bool(pruned.rl_tokens.any() or pruned.ce_tokens.any()):
        return None
    return pruned
