"""Whether the episode ended with FINAL is the trace's claim, and it counts only
where every trusted record of the end given to ``verify`` says so too (none
given: it did not; ``check_end``):

* the test service's record (the local runtime, ``service_end``): the
  program reports its end to the service before it saves the trace with it;
  no report (the program killed) is no FINAL, and a trace whose end differs
  from the report is tampered;
* the interception's record of the model replies (``ModelReplies``: what
  verifiers' interception server committed for each model call, on any
  runtime), replayed through the profile's own episode
  (``glyph.agent.profiles``, ``Episode.turn``, in a scratch workspace: the budget,
  the call ids and Arm B's duty to predict after a successful patch are the
  protocol state; python_test's outcome is not). It says FINAL only where
  its last reply ends the episode as FINAL and no reply ended it before.
  Code that runs beside the program (a container, bare) can rewrite the
  trace but not what the model replied; it can add model calls of its own
  (the secret is readable there), and a reply recorded after the one that
  ended the episode is no FINAL. Not covered: a program stopped by a fault
  after a reply that ended nothing, then a call of that code's own that
  the model answers with FINAL.

A trace that says FINAL where a record does not is tampered, the reason
naming the record.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import NamedTuple

from glyph import profiles
from glyph.agent.program import REPLY_CAP
from glyph.agent.trace import FINAL, Trace

SERVICE_RECORD = "the test service's record"
REPLIES_RECORD = "the interception's record of the model replies"


@dataclass(frozen=True)
class ModelReplies:
    """The model's replies, in order, as verifiers' interception server
    recorded them (``glyph.envs.mbpp.harness.interception_record``; None: a
    reply with no text), with the protocol settings the program ran under
    (the harness's: ``glyph.record.HarnessRecord.protocol``). ``stopped``: a stop
    condition verifiers set while the program ran (its last recorded reply
    may then never have reached the program)."""

    replies: tuple[str | None, ...]
    arm: str
    budget: int
    test_cost: int
    stopped: str | None = None
    profile: str = "glyph"
    """The profile the program ran (``glyph.profiles``), as the harness recorded it."""
    project: str | None = None
    """The task's project folder (where ``solution.py`` is), as the harness recorded it."""
    switches: dict | None = None
    """The profile's switches, as the harness recorded them."""


class Account(NamedTuple):
    """What one trusted record says of how the episode ended."""

    record: str
    final: bool
    says: str
    """The account, completing "<record> ..." in a reason."""
    end: str | None = None
    """The end the record names exactly (the program's report), to compare with the trace's."""


def service_account(service_end: dict | None) -> Account:
    """The test service's record: the program's report (``{"end", "turns"}``)
    or None, when it never reported (killed before the end). Trusted: a
    malformed one is glyph's fault and raises."""
    if service_end is None:
        return Account(SERVICE_RECORD, False, "has no report from the program of how the episode ended")
    end, turns = service_end["end"], service_end["turns"]
    return Account(SERVICE_RECORD, end == FINAL, f"says the program reported {end} after {turns} replies", end)


def _no_outcome(source: str, shadow: bool) -> str:
    return "PASS"  # python_test's outcome changes no protocol state: the replay needs none


def _replay_episode(record: ModelReplies, root: str):
    """The episode of the record's profile, from a fresh scratch workspace ``root`` laid out as the
    harness lays it out. The record is the harness's: an unknown profile is glyph's fault and raises."""
    agent = profiles.get(record.profile).agent
    agent.lay_out(root, record.project)
    cfg = {"arm": record.arm, "max_tool_calls": record.budget, "test_cost": record.test_cost,
           "revise_feedback": "none", "project": record.project, "switches": record.switches,
           "limits": {"cpu_s": 1.0, "wall_s": 1.0}}  # no test runs in a replay
    return agent.episode(cfg, agent.trace_type(), root)


def replies_account(record: ModelReplies) -> Account:
    """The interception's record, replayed through the episode of its profile
    (``glyph.agent.profiles``): FINAL only where the
    last reply ends the episode as FINAL and no earlier one ended it (each
    reply cut at ``REPLY_CAP``, as the program cuts it)."""
    n = len(record.replies)
    if record.stopped is not None:
        return Account(REPLIES_RECORD, False, f"ends with verifiers stopping the rollout ({record.stopped})")
    if not n:
        return Account(REPLIES_RECORD, False, "holds no reply")
    with tempfile.TemporaryDirectory(prefix="glyph-replay-") as root:
        ep = _replay_episode(record, root)
        for k, reply in enumerate(record.replies, 1):
            if reply is None:
                return Account(REPLIES_RECORD, False, f"has reply {k} of {n} with no text")
            if ep.turn(reply[:REPLY_CAP], _no_outcome) is None:
                break
        else:
            return Account(REPLIES_RECORD, False, f"ends with a {ep.call.tool} CALL (reply {n}), "
                                                  "which does not end the episode")
    if k < n:
        return Account(REPLIES_RECORD, False, f"ends the episode by {ep.end} at reply {k} of {n}, "
                                              f"with {n - k} more after it")
    if ep.end == FINAL:
        return Account(REPLIES_RECORD, True, f"ends with FINAL (reply {n})")
    return Account(REPLIES_RECORD, False, f"ends with {ep.end.replace('_', ' ')} (reply {n}): {ep.error}")


def check_end(trace: Trace, accounts: list[Account]) -> tuple[bool, list[str]]:
    """Whether the episode ended with FINAL: the trace says so and every
    trusted record does (no record: it did not); and the tamper reasons:
    the trace says FINAL where a record does not, or names an end other
    than the one the program reported."""
    claims = trace.final and trace.end == FINAL
    tamper = []
    for a in accounts:
        if claims and not a.final:
            tamper.append(f"the trace says the episode ended with FINAL; {a.record} {a.says}")
        elif a.end is not None and trace.end is not None and trace.end != a.end:
            tamper.append(f"the trace says the episode ended by {trace.end}; {a.record} {a.says}")
    return claims and bool(accounts) and all(a.final for a in accounts), tamper


