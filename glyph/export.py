"""A trained step as a checkpoint a server loads, speaking its profile's chat
format: the export behind ``glyph train export``.

PRIME-RL at the pin writes HF-format weights only as the filesystem weight
broadcast (``<run>/broadcasts/step_N``: safetensors, their index, a ``STABLE``
marker); the SFT trainer saves no HF checkpoint of its own. A server needs the
model's config and tokenizer beside the weights; SFT and RL change neither,
so they come from the base model (a hub name, or a local folder offline).

What the study's checkpoints carried, and this export writes: its chat
template (the study's configs: ``[tokenizer] chat_template``; glyph's twin of
it, ``configs/chat_template_study.jinja``) and ``<|im_end|>`` as EOS (its
``patches/prime-rl-eos-token.patch``: the tokenizer's ``eos_token``, and
``eos_token_id`` / ``pad_token_id`` in the model config and generation config).
So a server that renders chat completions with the checkpoint's template and
stops at its EOS, as the study's ``scripts/evaluate.sh`` evaluated, speaks the
study's format. The glyph profile's export carries glyph's template
(``configs/chat_template.jinja``) and the same EOS.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from glyph import render

EOS = "<|im_end|>"
MARKER = "STABLE"
"""The broadcast's completion marker; not part of a checkpoint."""
BASE_PATTERNS = ("*.json", "*.txt", "*.jinja")
"""The base model's files a checkpoint takes: config, generation config, tokenizer, template."""
WEIGHTS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt")


class ExportError(ValueError):
    """A step or base folder that cannot make a checkpoint."""


def base_folder(base: str) -> Path:
    """``base`` as a local folder: itself, or the hub snapshot of its config and tokenizer files
    (``huggingface_hub``; offline, ``HF_HUB_OFFLINE=1`` reads the cache)."""
    path = Path(base).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(base, allow_patterns=list(BASE_PATTERNS), ignore_patterns=list(WEIGHTS)))


def token_id(folder: Path, token: str) -> int:
    """The id of a special token in ``folder``'s ``tokenizer.json``."""
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    for added in data.get("added_tokens", []):
        if added.get("content") == token:
            return int(added["id"])
    raise ExportError(f"{folder / 'tokenizer.json'}: no added token {token!r}")


def _edit(path: Path, **values) -> None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.update(values)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def speak(folder: Path, profile: str) -> None:
    """Give the checkpoint in ``folder`` the profile's chat template and ``<|im_end|>`` as EOS."""
    template = render.chat_template(profile)
    eos = token_id(folder, EOS)
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")  # what transformers 5 loads first
    _edit(folder / "tokenizer_config.json", chat_template=template, eos_token=EOS, pad_token=EOS)
    _edit(folder / "config.json", eos_token_id=eos, pad_token_id=eos)
    _edit(folder / "generation_config.json", eos_token_id=eos, pad_token_id=eos)


def export(step: Path, out: Path, profile: str, base: str, move: bool = False) -> Path:
    """``step`` (a ``broadcasts/step_N`` folder) as the checkpoint ``out``: its weights (moved with
    ``move``, else copied), the base model's config and tokenizer files, the profile's template and EOS."""
    step, out = Path(step), Path(out)
    if not step.is_dir() or not any(step.glob("*.safetensors")):
        raise ExportError(f"{step}: no safetensors weights (a broadcasts/step_N folder of a finished step)")
    if out.exists():
        raise ExportError(f"{out} exists; name a new folder")
    source = base_folder(base)
    if not (source / "tokenizer.json").is_file():
        raise ExportError(f"{source}: no tokenizer.json (the base model's folder or hub name)")
    if move:
        shutil.move(str(step), str(out))
    else:
        shutil.copytree(step, out)
    (out / MARKER).unlink(missing_ok=True)
    for pattern in BASE_PATTERNS:
        for f in sorted(source.glob(pattern)):
            if f.name.endswith(".safetensors.index.json") or (out / f.name).exists():
                continue  # the weights' own index, and what the step wrote, stay
            shutil.copy2(f, out / f.name)
    speak(out, profile)
    return out
