"""The study's renderer (``glyph.render_study.StudyRenderer``) as PRIME-RL loads
it at the pin (559b447, glyph's patches applied), in the pinned stack
(tests/test_pin.py): a ``[renderer]`` table with ``name = "custom"`` and the
import path, parsed by PRIME-RL's own config code, built by ``renderers``'
``create_renderer`` (its custom-config path, ``renderers/custom.py``), and the
study's SFT traces through PRIME-RL's own SFT dataset code
(``prime_rl/trainer/sft/data.py``, ``SFTDataset._process``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("prime_rl.configs.sft", reason="PRIME-RL (patched) must be on PYTHONPATH")

from prime_rl.configs.sft import SFTConfig
from prime_rl.utils.config import cli

from glyph import render as R
from glyph.agent import study as S
from glyph.render_study import StudyRenderer

SFT_TOML = """
[model]
name = "Qwen/Qwen3-4B-Base"

[data]
type = "sft"
name = "{data}"
seq_len = {seq_len}

[renderer]
name = "custom"
import_path = "{import_path}"
"""


@pytest.fixture(scope="module")
def study_sft(tmp_path_factory, mbpp_path):
    """The study's SFT folders, as ``glyph data prepare --profile study`` writes them."""
    from glyph.data import study

    out = tmp_path_factory.mktemp("study")
    study.prepare(out, mbpp_path, progress=False)
    return out / "sft"


@pytest.fixture(scope="module")
def tok():
    from renderers.base import load_tokenizer

    return load_tokenizer(str(R.offline_tokenizer_dir("study")))  # the Qwen3 vocabulary, offline


def sft_config(tmp_path, data: str, import_path: str = R.STUDY_IMPORT_PATH) -> SFTConfig:
    path = tmp_path / "sft.toml"
    path.write_text(SFT_TOML.format(data=data, seq_len=S.SFT_MAX_TOKENS, import_path=import_path))
    return cli(SFTConfig, args=["@", str(path)])


def test_prime_rl_parses_the_study_renderer_and_renderers_builds_it(tmp_path, tok):
    from renderers.base import create_renderer
    from renderers.configs import CustomRendererConfig

    c = sft_config(tmp_path, "unused")
    assert isinstance(c.renderer, CustomRendererConfig) and c.renderer == R.renderer_config("study")
    assert type(create_renderer(tok, c.renderer)) is StudyRenderer
    with pytest.raises(Exception, match="has no attribute"):  # the import path is resolved at config load
        sft_config(tmp_path, "unused", "glyph.render_study.NoSuchRenderer")


@pytest.mark.parametrize("arm", ["a", "b"])
def test_prime_rls_sft_samples_of_the_study_traces_are_glyphs(arm, tmp_path, tok, sft_data, study_sft):
    """Every trace fits the study's 1280 tokens untruncated; PRIME-RL's sample
    is ``glyph.render.sft_sample(profile="study")`` shifted by one; the loss
    falls on each assistant turn's content, its closing line break and
    <|im_end|>, and nowhere else."""
    from renderers.base import create_renderer

    c = sft_config(tmp_path, str(study_sft / f"arm_{arm}"))
    raw = sft_data.load_sft_dataset(c.data)  # what the trainer loads: the folder's train.jsonl
    assert len(raw) == S.SFT_COUNT
    ds = sft_data.SFTDataset(raw, create_renderer(tok, c.renderer), shuffle=False, seed=0, seq_len=c.data.seq_len,
                             loss_mask_config=c.data.loss_mask)
    for row in raw:
        messages = json.loads(json.dumps(row["messages"]))
        sample = ds._process(row)
        ids, mask = R.sft_sample(messages, tok, profile="study")
        assert len(ids) <= S.SFT_MAX_TOKENS, row["task_id"]
        assert sample["input_ids"] == ids[:-1] and sample["target_ids"] == ids[1:], row["task_id"]
        assert sample["loss_mask"] == mask[1:], row["task_id"]
        trained = tok.decode([t for t, m in zip(sample["target_ids"], sample["loss_mask"]) if m])
        assert trained == "".join(m["content"].rstrip() + "\n<|im_end|>" for m in messages
                                  if m["role"] == "assistant"), row["task_id"]
