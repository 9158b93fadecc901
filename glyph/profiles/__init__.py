"""Protocol profiles, found by name: ``get("study")`` (the default: the
PREDICT study as it was run) and ``get("glyph")`` (glyph's bundle of
departures). A profile is one typed object per side of the trust boundary:
``glyph.agent.profiles`` holds the half the runtime needs (workspace, opening
messages, turn grammar, episode: stdlib only, shipped), this package the
trusted half (``base.Profile``: task rows, renderer, harness settings and
switches, grading semantics, metric and prediction definitions), which names
its agent half.

Adding a profile: a module beside ``glyph/agent/profiles/glyph.py`` with an
``AgentProfile`` subclass and its ``register`` line in
``glyph/agent/profiles/__init__.py``; a module beside ``glyph.py`` here with a
``Profile`` subclass naming it and its ``register`` line below. Either half
may reuse an existing one's parts by subclassing it.
"""

from __future__ import annotations

from glyph.agent import profiles as agent_profiles
from glyph.agent.profiles.base import Registry
from glyph.profiles.base import TOOL_TIMEOUT_S, Profile
from glyph.profiles.glyph import GLYPH_PROFILE
from glyph.profiles.study import STUDY_PROFILE

__all__ = ["DEFAULT", "PROFILES", "TOOL_TIMEOUT_S", "Profile", "get", "names", "of_conversation", "register"]

DEFAULT = "study"
"""The profile glyph runs unless told otherwise: the study's."""
PROFILES = Registry()


def register(profile: Profile) -> Profile:
    """Make ``profile`` known by its name; its agent half must be registered (on its own side) too."""
    if agent_profiles.PROFILES.get(profile.agent.name) is not profile.agent:
        raise ValueError(f"the profile {profile.name!r} names an agent half that is not registered")
    return PROFILES.add(profile)


def get(name: str) -> Profile:
    return PROFILES.named(name)


def of_conversation(messages: list[dict]) -> tuple[Profile, str] | None:
    """(profile, arm) of a conversation a profile opened (its agent half's system prompt); None where
    none did. Where several profiles share an agent half, the first registered one."""
    found = agent_profiles.of_conversation(messages)
    if found is None:
        return None
    agent, arm = found
    return next(p for p in PROFILES.values() if p.agent is agent), arm


def names() -> tuple[str, ...]:
    """The registered profiles' names, the default first."""
    return tuple(PROFILES)


register(STUDY_PROFILE)
register(GLYPH_PROFILE)
