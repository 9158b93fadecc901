"""Saved rollouts in: the one reader of eval output that ``glyph report``,
credit assignment (``glyph flywheel credit``) and the demo share.

Three writers are read, all in verifiers' episode format (one JSON episode a
line of ``traces.jsonl``): ``vf-eval`` (0.4.0; beside
``configs/resolved/eval.json``), ``eval`` (the PRIME-RL pin's verifiers;
beside ``configs/eval.json``) and PRIME-RL's orchestrator at its pin (every
eval episode, errored ones included, in
``<output_dir>/rollouts/step_<N>/eval/all/traces.jsonl``; the ``effective``
file beside it is a subset and never read). ``find_runs`` finds them,
``iter_episodes`` reads a file's episodes, ``judge`` says what one rollout
was (``glyph.record.status``) and ``profile_of`` which protocol profile it
ran. Bad input is a ``glyph.errors.RunError`` naming the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from glyph import profiles, record
from glyph.agent.program import own_words
from glyph.errors import RunError
from glyph.text import encodable_data
from glyph.vfcompat import AGENT_TIMEOUT_PREFIX, STAGE_TIMEOUTS

TRACES = "traces.jsonl"
_PRIME_STEP = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class RunFile:
    traces: Path
    source: str
    step: int | None = None


def find_runs(root: Path) -> list[RunFile]:
    """The eval runs under ``root``: ``root`` itself when it holds a
    traces.jsonl, else every vf-eval/eval run and PRIME-RL eval step file
    below it."""
    if not root.exists():
        raise RunError(f"{root}: no such directory")
    if not root.is_dir():
        raise RunError(f"{root}: not a directory (give an eval run directory)")
    files = [root / TRACES] if (root / TRACES).is_file() else sorted(root.rglob(TRACES))
    parts = root.resolve().parts
    if (
        len(parts) >= 4
        and parts[-4] == "rollouts"
        and _PRIME_STEP.match(parts[-3])
        and parts[-2:] != ("eval", "all")
    ):
        raise RunError(
            f"{root}: PRIME-RL writes every eval rollout, errored ones included, to "
            f"{parts[-3]}/eval/all; {'/'.join(parts[-2:])} is "
            + ("the non-errored subset" if parts[-2:] == ("eval", "effective") else "not an eval")
            + "; give the eval/all folder or the run's output directory"
        )
    runs = []
    for f in files:
        parts = f.parent.parts
        if len(parts) >= 4 and parts[-4] == "rollouts" and _PRIME_STEP.match(parts[-3]):
            if parts[-2:] == ("eval", "all"):  # train rollouts, and the effective subset, are not read
                runs.append(RunFile(f, "prime-rl", int(_PRIME_STEP.match(parts[-3]).group(1))))
        elif (f.parent / "configs" / "resolved" / "eval.json").is_file():
            runs.append(RunFile(f, "vf-eval"))
        elif (f.parent / "configs" / "eval.json").is_file():
            runs.append(RunFile(f, "eval"))
        elif f.parent == root:
            runs.append(RunFile(f, "traces"))
    if not runs:
        raise RunError(
            f"{root}: no eval run under it (no traces.jsonl of vf-eval, eval or PRIME-RL's "
            f"rollouts/step_N/eval/all)"
        )
    return runs


def iter_episodes(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, episode) for each non-blank line; a line that is not a
    JSON episode is a RunError naming ``path:line``."""
    try:
        f = path.open("rb")
    except OSError as exc:
        raise RunError(f"{path}: cannot read it ({exc.strerror})") from None
    with f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                episode = _decode(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise RunError(
                    f"{path}:{number}: not valid JSON ({_json_why(exc)}); a run cut off mid-write "
                    f"can be resumed with the eval CLI's --resume"
                ) from None
            if not isinstance(episode, dict) or not isinstance(episode.get("traces"), list):
                raise RunError(f"{path}:{number}: not a verifiers episode (no 'traces' list)")
            yield number, episode


class _Trace(msgspec.Struct):
    """The fields of a trace the report reads (a line's nodes, calls and timing are skipped unparsed)."""

    task: Any = None
    agent: Any = None
    info: Any = None
    metrics: Any = None
    rewards: Any = None
    errors: Any = None
    ok: Any = None
    is_timeout: Any = None
    verifiers: Any = None


class _Episode(msgspec.Struct):
    traces: list[_Trace] | None = None
    task: Any = None
    errors: Any = None
    ok: Any = None
    is_timeout: Any = None
    env: Any = None


_EPISODE = msgspec.json.Decoder(_Episode)


def _fields(struct: msgspec.Struct) -> dict:
    return {k: v for k, v in msgspec.structs.asdict(struct).items() if v is not None}


def _decode(raw: bytes) -> object:
    """One traces.jsonl line as the dict the report reads: the episode's and its
    traces' fields that matter, decoded without building the rest (a 30 KB
    episode is mostly token ids). A line that does not fit is read by ``json``,
    whose result (or error) the caller judges, its strings made encodable
    (``glyph.text``: msgspec refuses a JSON-escaped lone surrogate, ``json``
    returns it, and the report's own files are UTF-8)."""
    try:
        episode = _EPISODE.decode(raw)
    except msgspec.DecodeError:
        return encodable_data(json.loads(raw))
    out = _fields(episode)
    if episode.traces is not None:
        out["traces"] = [_fields(t) for t in episode.traces]
    return out


def _json_why(exc: Exception) -> str:
    return f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)



def _timed_out(trace: dict, episode: dict, errors: list) -> bool:
    if trace.get("is_timeout") or episode.get("is_timeout"):
        return True
    last = errors[-1].get("message", "") if errors else ""
    return last.startswith(AGENT_TIMEOUT_PREFIX) or last in STAGE_TIMEOUTS


def task_data(episode: dict, trace: dict | None) -> dict:
    """The task's data as the trace (else the episode) records it."""
    return ((trace or {}).get("task") or {}).get("data") or (episode.get("task") or {}).get("data") or {}


class Judged(NamedTuple):
    """A rollout's record and what it was (``glyph.record.status``)."""

    record: record.MbppRecord | None
    status: str
    reward: float | None
    reason: str
    passed: bool


def _error_text(error: object) -> str:
    """An error verifiers recorded, as a line: its message, with a JSON error body
    (``upstream 404: {"error": {"message": ...}}``, a model call's) reduced to the
    endpoint's own message (``glyph.agent.program.own_words``, the rule the
    program's fault reason follows); at most 500 characters."""
    message = str(error.get("message") or error.get("type") or "") if isinstance(error, dict) else str(error)
    return own_words(message)[:500]


def judge(episode: dict, trace: dict | None, where: str = "") -> Judged:
    """One rollout's status and reward, by ``glyph.record``'s rule, from a
    saved episode and one of its traces (None: the episode has none). A
    record of the wrong shape is a RunError naming ``where``."""
    t = trace or {}
    try:
        rec = record.mbpp_record(t.get("info"))
    except record.RecordError as exc:
        raise RunError(f"{where}: {exc}") from None
    reward = ((t.get("rewards") or {}).get("passed") or {}).get("score")
    errors = [*(episode.get("errors") or []), *(t.get("errors") or [])]
    ok = trace is not None and t.get("ok") is True and episode.get("ok") is True
    facts = {"ok": ok, "reward": reward, "timed_out": _timed_out(t, episode, errors)}
    status = record.status(rec, **facts)
    said = "; ".join(dict.fromkeys(filter(None, (_error_text(e) for e in errors))))
    reason = (rec.reason if rec is not None else "") or said
    if said and said not in reason:  # the framework's error says why (an unknown model's valid names)
        reason = f"{reason} ({said})"
    if not reason:
        reason = "no trace" if trace is None else "no reward recorded" if reward is None else "not ok"
    return Judged(rec, status, reward, reason, record.passed(rec, **facts))


def profile_of(trace: dict | None, run_profile: str | None = None) -> str | None:
    """The profile the rollout ran: as the harness recorded it (trusted; a record without one is glyph's,
    from before the study profile), else as the run's config asked (``run_profile``: the pin keeps no
    info of an errored rollout); None where neither names a known profile."""
    harness = record.harness_record((trace or {}).get("info"))
    profile = harness.protocol.profile if harness is not None and harness.protocol is not None else run_profile
    return profile if profile in profiles.PROFILES else None


