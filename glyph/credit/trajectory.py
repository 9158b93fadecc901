"""A recorded glyph-mbpp episode as credit assignment reads it: its
conversation and the rules it ran under (profile, budget, test cost, arm,
switches), from a program trace (``.glyph/trace.json``), one verifiers trace,
or a rollout of an eval output directory (found and judged with
``glyph.report.episodes``, as ``glyph report`` does). A verifiers trace's
rules are its harness record's (``glyph.record.HarnessRecord``); a program
trace's profile and arm are those whose system prompt opens it."""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from glyph import profiles, record
from glyph.agent.profiles.glyph import DEFAULT_BUDGET, DEFAULT_TEST_COST, budget_left
from glyph.data.mbpp import MbppTask
from glyph.errors import RunError
from glyph.record import MBPP_ENV_ID
from glyph.report.episodes import find_runs, iter_episodes, judge, task_data


@dataclass(frozen=True)
class Trajectory:
    """One recorded episode: its conversation and the rules it ran under."""

    where: str  # the file (and line) it came from
    messages: tuple[dict, ...]  # system, user, then assistant turns each followed by its observation
    arm: str
    budget: int  # max_tool_calls
    test_cost: int
    task_id: str | None = None  # as an eval output records it; None: found from the user prompt
    recorded: str = ""  # how the original run ended, as it recorded it
    profile: str = "glyph"  # the protocol profile it ran (``glyph.profiles``)
    switches: dict | None = None  # the profile's switches, as the harness recorded them


def load_trajectory(path: Path, task: str | None = None, index: int | None = None, *,
                    budget: int | None = None, test_cost: int | None = None) -> Trajectory:
    """A program trace (``.glyph/trace.json``), one verifiers trace as JSON,
    or a rollout of an eval output directory (``--task``, ``--index``).
    ``budget`` and ``test_cost`` replace what the trajectory records."""
    traj = _load(path, task, index, budget)
    return dataclasses.replace(traj, budget=budget or traj.budget, test_cost=test_cost or traj.test_cost)


def _load(path: Path, task: str | None, index: int | None, budget: int | None) -> Trajectory:
    if path.is_dir():
        return load_eval_rollout(path, task, index)
    if index is not None:
        raise RunError(f"{path}: --index selects a rollout of an eval output directory, not of one trace file")
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
    except FileNotFoundError:
        raise RunError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise RunError(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise RunError(f"{path}: not JSON ({exc})") from None
    if isinstance(data, dict) and "messages" in data:
        return _from_program_trace(data, str(path), budget)
    if isinstance(data, dict) and "nodes" in data:
        return _from_vf_trace(data, str(path))
    raise RunError(f"{path}: neither a program trace (no 'messages') nor a verifiers trace (no 'nodes')")


def _from_program_trace(data: dict, where: str, budget: int | None = None) -> Trajectory:
    messages = _check_messages(data["messages"], where)
    profile, arm = _opened(messages, where)
    end = data.get("end")
    recorded = f"ended by {end}" + (f": {str(data.get('error'))[:200]}" if data.get("error") else "") if end else \
        "did not finish (no end recorded)"
    budget, cost = budget or data.get("budget"), data.get("test_cost")
    if not isinstance(budget, int):
        raise RunError(f"{where}: the trace records no tool budget (written by an older glyph); pass --budget")
    cost = int(cost) if isinstance(cost, int) else _infer_test_cost(messages, budget)
    return Trajectory(where, messages, data.get("arm") if data.get("arm") in ("a", "b") else arm, budget, cost,
                      None, recorded, profile.name)


def _from_vf_trace(trace: dict, where: str, episode: dict | None = None) -> Trajectory:
    messages = _check_messages(_conversation(trace.get("nodes"), where), where)
    data = ((trace.get("task") or {}).get("data") or ((episode or {}).get("task") or {}).get("data") or {})
    harness = record.harness_record(trace.get("info"))
    proto = harness.protocol if harness is not None else None
    if proto is None:  # a trace the harness did not run: the profile whose prompt opens it, glyph's defaults
        profile, arm = _opened(messages, where)
        proto = record.ProtocolRecord(arm=arm, max_tool_calls=DEFAULT_BUDGET, test_cost=DEFAULT_TEST_COST,
                                      profile=profile.name)
    judged = judge(episode or {"ok": True}, trace, where)
    recorded = f"reward {judged.reward}: {judged.reason if judged.record is not None else 'no reason recorded'}"
    name = data.get("name") or data.get("id")
    return Trajectory(where, messages, proto.arm, proto.max_tool_calls, proto.test_cost,
                      name if isinstance(name, str) else None, recorded, proto.profile, proto.switches)


def _opened(messages: tuple[dict, ...], where: str) -> tuple[profiles.Profile, str]:
    found = profiles.of_conversation(list(messages))
    if found is None:
        raise RunError(f"{where}: the conversation opens with no profile's system prompt")
    return found


def _conversation(nodes: object, where: str) -> list[dict]:
    """The messages on the path from the root to the last node (a glyph-mbpp
    conversation is one chain: the program resends the whole history)."""
    if not isinstance(nodes, list) or not nodes:
        raise RunError(f"{where}: the rollout records no conversation (no trace nodes)")
    chain, i, seen = [], len(nodes) - 1, set()
    while i is not None:
        if i in seen or not 0 <= i < len(nodes) or not isinstance(nodes[i], dict):
            raise RunError(f"{where}: the trace nodes' parent links are broken at node {i}")
        seen.add(i)
        chain.append(nodes[i].get("message"))
        parent = nodes[i].get("parent")
        i = None if parent is None else int(parent)
    return chain[::-1]


def _check_messages(messages: object, where: str) -> tuple[dict, ...]:
    if not isinstance(messages, list):
        raise RunError(f"{where}: 'messages' is not a list")
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content parts: keep the text
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool") \
                or not isinstance(content, str):
            raise RunError(f"{where}: message {i} is not a {{role, content}} chat message")
        out.append({"role": m["role"], "content": content}
                   | ({"tool_call_id": m["tool_call_id"]} if isinstance(m.get("tool_call_id"), str) else {}))
    if [m["role"] for m in out[:2]] != ["system", "user"]:
        raise RunError(f"{where}: a glyph-mbpp conversation starts with the system and user messages")
    return tuple(out)


def _infer_test_cost(messages: tuple[dict, ...], budget: int) -> int:
    """What one python_test cost, from the budget lines of the RESULTs (1 if no test was answered)."""
    before = budget
    for m in messages[2:]:
        if m["role"] != "user" or not m["content"].startswith("RESULT "):
            continue
        left = budget_left(m["content"])
        if left is None:
            continue
        if m["content"].split(" ", 3)[2:3] == ["python_test"]:
            return max(1, before - left)
        before = left
    return 1


@dataclass(frozen=True)
class Selected:
    """A rollout of an eval output directory that a selector picked, and why."""

    file: Path
    line: int
    trace: int  # index in the episode's traces
    task: str
    passed: bool


def load_eval_rollout(root: Path, task: str | None, index: int | None) -> Trajectory:
    """The rollout of ``task`` (``index``: the i-th of that task's rollouts in
    file order, 0-based; default: the first one that failed) under an eval
    output directory, read with ``glyph.report.load``'s discovery."""
    found: list[Selected] = []
    for rf in find_runs(root):
        for line, episode in iter_episodes(rf.traces):
            if (episode.get("env") or {}).get("id") not in (None, "", MBPP_ENV_ID):
                continue
            for ti, t in enumerate(episode["traces"]):
                if not isinstance(t, dict):
                    continue
                data = task_data(episode, t)
                name = data.get("name") or data.get("id")
                passed = judge(episode, t, f"{rf.traces}:{line}").passed
                found.append(Selected(rf.traces, line, ti, str(name), passed))
    if not found:
        raise RunError(f"{root}: no {MBPP_ENV_ID} rollouts")
    tasks = sorted({s.task for s in found})
    if task is None:
        if len(found) > 1:
            raise RunError(f"{root}: {len(found)} rollouts of {len(tasks)} tasks ({_few(tasks)}); "
                              f"pick the task with --task (then --index picks its rollout; default: its first failed one)")
        task = found[0].task
    mine = [s for s in found if s.task == task]
    if not mine:
        raise RunError(f"{root}: no rollout of {task} (tasks here: {_few(tasks)})")
    if index is None:
        failed = [i for i, s in enumerate(mine) if not s.passed]
        index = failed[0] if failed else 0
    elif not 0 <= index < len(mine):
        raise RunError(f"{root}: --index {index}: {task} has {len(mine)} rollouts (0..{len(mine) - 1})")
    pick = mine[index]
    with pick.file.open("rb") as f:
        raw = next(itertools.islice(f, pick.line - 1, None))
    episode = json.loads(raw)
    where = f"{pick.file}:{pick.line}"
    traj = _from_vf_trace(episode["traces"][pick.trace], where, episode)
    note = f"rollout {index} of {len(mine)} for {task}" + ("" if not pick.passed else " (it passed)")
    return dataclasses.replace(traj, task_id=task, recorded=f"{note}; {traj.recorded}")


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def resolve_task(traj: Trajectory, tasks: dict[str, MbppTask], task_id: str | None = None,
                 source: str = "the MBPP data") -> tuple[MbppTask, list[str]]:
    """The trajectory's task (``task_id``, else the one the eval output names,
    else the one whose user prompt, as its profile writes it, it carries), and
    notes on any mismatch."""
    notes = []
    profile = profiles.get(traj.profile)
    chosen = task_id or traj.task_id
    prompt = traj.messages[1]["content"]
    if chosen is not None:
        if chosen not in tasks:
            raise RunError(f"{traj.where}: task {chosen!r} is not in {source}")
        task = tasks[chosen]
        if profile.user_prompt(task) != prompt:
            notes.append(f"the trajectory's user prompt is not {chosen}'s as the {traj.profile} profile writes it")
        return task, notes
    for t in tasks.values():
        if profile.user_prompt(t) == prompt:
            return t, notes
    raise RunError(f"{traj.where}: its user prompt matches no task in {source}; pass --task mbpp_N")
