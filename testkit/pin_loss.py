"""PRIME-RL's own trainer loss at the pin on glyph's ``reference_loss.Sample``s:
trainer logprobs made the way its ``train.py`` makes them, and its
``compute_loss`` normalised by the scales ``train.py`` computes. For tests and
benchmarks that run in the pinned stack (``tests/pinstack.py``: PRIME-RL's
``src`` on ``PYTHONPATH``, CPU torch); nothing here is on a user's path, and
PRIME-RL is imported only when a function is called.

Also the tiny random Qwen3 those checks run on: the real Qwen3 vocabulary
(151,936 embedding rows), two layers of width 32, eager attention.
"""

from __future__ import annotations

from testkit.reference_loss import Sample

QWEN3_VOCAB = 151936  # Qwen3's embedding rows (the tokenizer's 151669 ids, padded)


def tiny_qwen3(seed: int = 0):
    """A random Qwen3 with the real vocabulary, small enough for a CPU (eval mode)."""
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=QWEN3_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
        tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def loss_module():
    """``prime_rl.trainer.rl.loss`` (PRIME-RL's ``src`` must be importable)."""
    import prime_rl.trainer.rl.loss as loss

    return loss


def prime_rl_logprobs(model, sample: Sample):
    """Trainer logprobs the way train.py:381-454 makes them, for one sample:
    shifted labels, logits / per-token temperatures, log-softmax at the label
    (the compiled ``selective_log_softmax``'s two lines), shifted right with the
    ``log(1 / vocab)`` pad."""
    import torch

    loss_mod = loss_module()
    input_ids = sample.token_ids.unsqueeze(0)
    labels = loss_mod.shift_tensor_left(input_ids)
    temperatures = torch.full(input_ids.shape, sample.temperature)
    logits = model(input_ids=input_ids, use_cache=False).logits
    scaled = logits / temperatures.unsqueeze(-1)
    logprobs = torch.gather(scaled.log_softmax(dim=-1), dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    vocab_size = model.config.vocab_size
    pad = torch.log(torch.tensor(1.0 / vocab_size)).item()
    return loss_mod.shift_tensor_right(logprobs, pad_value=pad)[0]


def prime_rl_compute_loss(trainer_logprobs, samples, loss_config, *, pack: bool = True):
    """``compute_loss`` on the streams as a packed micro batch carries them
    (absent streams filled per ``batch.py``'s STREAM_FILL once one sample has
    them; ``pack=False`` passes each sample's ``None`` through), normalised by
    the scales train.py:309-323 computes."""
    import torch
    from prime_rl.trainer.batch import STREAM_FILL

    loss_mod = loss_module()
    streams = {}
    for name in ("rl_weights", "ce_weights"):
        per_sample = [getattr(s, name) for s in samples]
        if all(w is None for w in per_sample):
            streams[name] = None
        elif pack:
            streams[name] = [w if w is not None else torch.full((len(s),), STREAM_FILL[name])
                             for s, w in zip(samples, per_sample)]
        else:
            streams[name] = per_sample
    rl_scale = sum(int((s.mask & (w != 0)).sum()) if w is not None else int(s.mask.sum())
                   for s, w in zip(samples, streams["rl_weights"] or [None] * len(samples)))
    ce_scale = sum(int((w != 0).sum()) for w in streams["ce_weights"] or [] if w is not None)
    return loss_mod.compute_loss(
        trainer_logprobs=list(trainer_logprobs),
        inference_logprobs=[s.inference_logprobs for s in samples],
        ref_logprobs=None,
        advantages=[s.advantages for s in samples],
        loss_mask=[s.mask for s in samples],
        rl_weights=streams["rl_weights"],
        ce_weights=streams["ce_weights"],
        ref_kl_weights=None,
        rl_loss_fn=loss_mod.setup_rl_loss_fn(loss_config),
        rl_scale=max(rl_scale, 1),
        ce_scale=max(ce_scale, 1),
        ref_kl_scale=1,
    )


def from_training_sample(sample) -> Sample:
    """A PRIME-RL ``TrainingSample`` (what the orchestrator ships) as a ``Sample``."""
    return Sample(token_ids=sample.token_ids, mask=sample.mask, inference_logprobs=sample.logprobs,
                  advantages=sample.advantages, rl_weights=sample.rl_weights, ce_weights=sample.ce_weights,
                  temperature=sample.temperatures[0] if sample.temperatures else 1.0)
