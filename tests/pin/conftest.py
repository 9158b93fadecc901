"""Fixtures the pinned-stack tests share."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sft_data():
    """``prime_rl.trainer.sft.data``, which the SFT trainer builds its data from. Its
    DataLoader class (torchdata's ``StatefulDataLoader``) is not used here and the pinned
    test stack does not install torchdata, so a stand-in takes its place while it is
    imported, if it is missing."""
    names = ("torchdata", "torchdata.stateful_dataloader", "prime_rl.trainer.sft.data")
    saved = {name: sys.modules.get(name) for name in names}
    if importlib.util.find_spec("torchdata") is None:
        stand_in = types.ModuleType("torchdata.stateful_dataloader")
        stand_in.StatefulDataLoader = object
        sys.modules["torchdata"] = types.ModuleType("torchdata")
        sys.modules["torchdata.stateful_dataloader"] = stand_in
    from prime_rl.trainer.sft import data

    yield data
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


@pytest.fixture(scope="module")
def tokdir() -> Path:
    """The offline Qwen3 tokenizer's folder (the model name the token path's renderer loads)."""
    from glyph.render import offline_tokenizer_dir

    return offline_tokenizer_dir()


@pytest.fixture(scope="module")
def tok(tokdir):
    from renderers.base import load_tokenizer

    return load_tokenizer(str(tokdir))
