"""Every version glyph's recipe is pinned to, read from ``configs/versions.toml``
(packaged as ``glyph/_data/versions.toml``): the one record of the pins. The
PRIME-RL and verifiers pins (``glyph.predict.pin``, ``glyph prime-rl check``,
the pinned test stack) and the MBPP download (``glyph.data.mbpp``) read them
here."""

from __future__ import annotations

import tomllib
from pathlib import Path


def versions_file() -> Path:
    """``configs/versions.toml`` in a checkout; the copy packaged in the wheel otherwise."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs" / "versions.toml", here / "_data" / "versions.toml"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("glyph's pins (versions.toml) are in neither configs/ nor glyph/_data/")


VERSIONS = tomllib.loads(versions_file().read_text())
PRIME_RL_COMMIT: str = VERSIONS["prime_rl"]["commit"]
PRIME_RL_TAG: str = VERSIONS["prime_rl"]["tag"]
VERIFIERS_COMMIT: str = VERSIONS["verifiers"]["commit"]
VERIFIERS_VERSION: str = VERSIONS["verifiers"]["version"]
MBPP_REPO: str = VERSIONS["mbpp"]["repository"]
MBPP_REVISION: str = VERSIONS["mbpp"]["revision"]
MBPP_FILES: dict[str, tuple[str, str]] = {
    split: (filename, digest)
    for split in ("train", "validation", "test")
    for filename, digest in VERSIONS["mbpp"]["sha256"].items()
    if filename.startswith(f"{VERSIONS['mbpp']['config']}/{split}-")
}
"""Official split -> (file in the dataset repository, its SHA-256)."""
