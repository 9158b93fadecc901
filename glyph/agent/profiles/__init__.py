"""The agent half of each protocol profile, found by name.

A profile's agent half (``base.AgentProfile``) is what must run inside the
rollout's runtime: its workspace, its opening messages, its turn grammar and
its episode. It ships with the agent program, stdlib only; the trusted half
(renderer, metrics, grading semantics, switch validation) is
``glyph.profiles``, which names this one. The program reads its config's
``profile`` and asks ``get`` for the episode.

Adding a profile here: one module beside ``glyph.py`` and ``study.py`` with an
``AgentProfile`` subclass, and one ``register`` line below.
"""

from __future__ import annotations

from glyph.agent.profiles.base import AgentProfile, Registry
from glyph.agent.profiles.glyph import GLYPH
from glyph.agent.profiles.study import STUDY

PROFILES = Registry()


def register(profile: AgentProfile) -> AgentProfile:
    return PROFILES.add(profile)


def get(name: str) -> AgentProfile:
    return PROFILES.named(name)


def of_conversation(messages: list[dict]) -> tuple[AgentProfile, str] | None:
    """(profile, arm) of a conversation some profile opened (its system prompt); None where none did."""
    for profile in PROFILES.values():
        arm = profile.arm_of(messages)
        if arm is not None:
            return profile, arm
    return None


register(STUDY)
register(GLYPH)
