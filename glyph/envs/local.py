"""What both environments' finalize share: reading a file the rollout left in its runtime."""

from __future__ import annotations

import verifiers.v1 as vf


async def read_text(runtime: vf.Runtime, path: str, max_bytes: int) -> str | None:
    """``path`` in the rollout's runtime as text (UTF-8, surrogateescape: any
    bytes round-trip); None when it is absent or unreadable (the caller records why)."""
    try:
        return (await runtime.read(path, max_bytes=max_bytes)).decode("utf-8", "surrogateescape")
    except Exception:  # absent or unreadable: the caller records why
        return None
