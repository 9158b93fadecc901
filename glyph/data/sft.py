"""SFT traces for both arms, in the agent protocol, with real outcomes.

For each SFT task: a *direct* trace (read, patch the reference solution,
[Arm B: predict PASS, KEEP], test, FINAL), or, for about a third of the
tasks (chosen by the seed), a *recovery* trace whose first candidate is a
real mutation of the reference solution that the grader fails, with the
outcome class the grader gave it:

* Arm A: the failing test is visible, then the fix, test, FINAL.
* Arm B, ``keep``: predicts PASS and KEEPs, sees the failure, fixes, tests.
* Arm B, ``revise``: predicts the candidate's real outcome and REVISEs (the
  candidate is shadow-tested; the outcome is recorded, hidden from the
  agent), fixes, predicts PASS, KEEPs, tests.

Arm A and Arm B traces of a task share the candidate and its outcome. Every
trace ends with ``FINAL:`` and its SFT sample, as PRIME-RL builds it with
glyph's one renderer (``glyph.render.sft_sample``: Qwen3, thinking off), fits
``MAX_TOKENS``, the SFT ``seq_len``; a task whose trace would not fit is left
out and listed. ``replay`` re-runs
a trace through glyph's episode (``glyph.agent.profiles.glyph``, the code the
runtime runs) and the grader (``glyph.data.replay``) and names the first step
whose recorded result differs.
"""

from __future__ import annotations

import io
import random
import tokenize
from dataclasses import dataclass

from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.agent.profiles.glyph import GLYPH, result_message
from glyph.data.mbpp import SEED, MbppTask
from glyph.grading import grade
from glyph.outcomes import Outcome
from glyph.sandbox import Limits

RECOVERY_SHARE = 1 / 3
MAX_TOKENS = 1280  # the SFT seq_len: every token of a trace's sample fits one packed row
LIMITS = Limits(cpu_s=3, wall_s=6)
SEARCH_LIMITS = Limits(cpu_s=1, wall_s=2)  # looking for a mutant: a slow one is skipped anyway

_SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+",
          "*": "+", "//": "/", "%": "//", "and": "or", "or": "and", "True": "False", "False": "True",
          "min": "max", "max": "min", "reversed": "sorted", "sorted": "reversed", "nlargest": "nsmallest",
          "nsmallest": "nlargest", "upper": "lower", "lower": "upper", "startswith": "endswith",
          "endswith": "startswith", "lstrip": "rstrip", "rstrip": "lstrip", "any": "all", "all": "any",
          "sum": "len", "len": "sum", "append": "insert", "pop": "copy", "isdigit": "isalpha",
          "isalpha": "isdigit", "count": "find", "find": "count", "floor": "ceil", "ceil": "floor",
          "reverse": "sort", "sort": "reverse", "split": "rsplit", "keys": "values", "values": "keys"}


@dataclass(frozen=True)
class Mutant:
    source: str
    line: int  # 1-based line of the change
    original_line: str
    mutated_line: str
    outcome: Outcome


def _mutations(code: str):
    """Every single-token mutation of ``code``: operators, keywords and
    builtins swapped, integers moved by one. Strings and comments are
    never touched (tokens come from ``tokenize``)."""
    lines = code.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    for tok in tokens:
        (row, col), (erow, ecol) = tok.start, tok.end
        if row != erow:
            continue
        if tok.type == tokenize.NUMBER and tok.string.isdigit():
            new = str(int(tok.string) + 1)
        elif tok.string in _SWAPS and tok.type in (tokenize.OP, tokenize.NAME):
            new = _SWAPS[tok.string]
        else:
            continue
        line = lines[row - 1]
        if line.lstrip().startswith("def "):
            continue
        mutated = line[:col] + new + line[ecol:]
        yield row, line, mutated, "".join(lines[:row - 1] + [mutated] + lines[row:])


def find_mutant(task: MbppTask, rng: random.Random, attempts: int = 40) -> Mutant | None:
    """A mutation of the reference solution that the grader fails (not by
    timeout), tried in a seeded order; None if none of ``attempts`` fails."""
    options = list(_mutations(task.code))
    rng.shuffle(options)
    for row, line, mutated_line, source in options[:attempts]:
        if source.count(mutated_line) != 1 or not mutated_line.strip():
            continue
        g = grade(source, task.test_setup_code, task.tests(), limits=SEARCH_LIMITS)
        if g.outcome not in (Outcome.PASS, Outcome.TIMEOUT, Outcome.OTHER):
            return Mutant(source, row, line, mutated_line, g.outcome)
    return None


class _Episode:
    """Builds the messages of one trace, numbering calls and counting budget."""

    def __init__(self, task: MbppTask, arm: str, budget: int) -> None:
        self.arm, self.budget, self.n = arm, budget, 0
        self.messages = protocol.messages(arm, task.text, task.test_list, budget)
        self.shadow: list[dict] = []

    def call(self, tool: str, args: dict, status: str, body: str = "", thought: str = "",
             prediction: str | None = None, decision: str | None = None) -> None:
        self.n += 1
        self.budget -= 1
        c = Call(GLYPH.call_id(self.n), tool, args)
        self.messages.append({"role": "assistant", "content": GLYPH.turn_text(c, prediction, decision, thought)})
        self.messages.append({"role": "user", "content": result_message(c, status, body, self.budget)})

    def final(self, summary: str) -> None:
        self.messages.append({"role": "assistant", "content": f"FINAL: {summary}"})


def build_traces(task: MbppTask, mutant: Mutant | None, variant: str,
                 budget: int = protocol.DEFAULT_BUDGET) -> dict[str, dict]:
    """The Arm A and Arm B traces of one task (``variant``: Arm B's
    recovery, ``keep`` or ``revise``; ignored for direct traces)."""
    path = protocol.SOLUTION_FILE
    traces = {}
    for arm in ("a", "b"):
        ep = _Episode(task, arm, budget)
        ep.call("read_file", {"path": path}, "ok", protocol.PLACEHOLDER,
                thought="Let me look at the file first.")
        first = mutant.source if mutant else task.code
        ep.call("apply_patch", {"path": path, "find": protocol.PLACEHOLDER, "replace": first}, "ok",
                thought="I'll write the function.")
        keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
        fix = {"path": path, "find": mutant.mutated_line, "replace": mutant.original_line} if mutant else None
        kind = "direct"
        if mutant is None:
            ep.call("python_test", {}, Outcome.PASS.value, **keep)
        elif arm == "b" and variant == "revise":
            kind = "recovery_revise"
            ep.shadow.append({"call": str(ep.n + 1), "outcome": mutant.outcome.value})
            ep.call("apply_patch", fix, "ok", prediction=mutant.outcome.value, decision="REVISE",
                    thought=f"Line {mutant.line} looks wrong; I'll fix it before testing.")
            ep.call("python_test", {}, Outcome.PASS.value, **keep)
        else:
            kind = "recovery_keep" if arm == "b" else "recovery"
            ep.call("python_test", {}, mutant.outcome.value, **keep)
            ep.call("apply_patch", fix, "ok",
                    thought=f"The test gave {mutant.outcome.value}. Line {mutant.line} is wrong; fixing it.")
            ep.call("python_test", {}, Outcome.PASS.value, **keep)
        ep.final("solution.py passes the tests.")
        traces[arm] = {"messages": ep.messages, "task_id": task.task_id, "arm": arm, "kind": kind,
                       "candidate_outcome": mutant.outcome.value if mutant else Outcome.PASS.value,
                       "shadow": ep.shadow}
    return traces


def count_tokens(messages: list[dict], tokenizer) -> int:
    """Tokens of the trace's SFT sample (``glyph.render.sft_sample``, glyph's renderer)."""
    from glyph.render import sft_sample
    return len(sft_sample(messages, tokenizer, profile="glyph")[0])


def build_sft(tasks: list[MbppTask], seed: int = SEED, tokenizer=None, max_tokens: int = MAX_TOKENS,
              progress: bool = True) -> tuple[dict[str, list[dict]], list[dict]]:
    """Traces for both arms over ``tasks``; returns ({arm: traces}, notes):
    a note for each task left out (too long) or given a direct trace
    because no mutation of its reference solution fails its tests."""
    from rich.progress import track

    from glyph.render import load_tokenizer

    tokenizer = tokenizer or load_tokenizer()
    want = round(len(tasks) * RECOVERY_SHARE)
    order = [t.task_id for t in tasks]
    random.Random(seed).shuffle(order)
    by_id = {t.task_id: t for t in tasks}
    mutants: dict[int, Mutant] = {}
    excluded = []
    for task_id in track(order, description="finding failing mutations", disable=not progress):
        if len(mutants) == want:
            break
        mutant = find_mutant(by_id[task_id], random.Random(f"{seed}:{task_id}"))
        if mutant is None:
            excluded.append({"task_id": task_id, "kept": "direct",
                             "reason": "no single-token mutation fails its tests"})
        else:
            mutants[task_id] = mutant
    out: dict[str, list[dict]] = {"a": [], "b": []}
    n_recovery = 0
    for task in track(tasks, description="building SFT traces", disable=not progress):
        mutant = mutants.get(task.task_id)
        variant = ("keep", "revise")[n_recovery % 2]
        n_recovery += mutant is not None
        traces = build_traces(task, mutant, variant)
        tokens = {arm: count_tokens(t["messages"], tokenizer) for arm, t in traces.items()}
        if max(tokens.values()) > max_tokens:
            excluded.append({"task_id": task.task_id, "kept": None,
                             "reason": f"{max(tokens.values())} tokens > {max_tokens}"})
            continue
        for arm, t in traces.items():
            t["tokens"] = tokens[arm]
            out[arm].append(t)
    return out, excluded


def replay(trace: dict, task: MbppTask) -> list[str]:
    """Re-run a trace through glyph's episode in a scratch workspace
    (``glyph.data.replay``), its tests (and shadow tests) graded in the sandbox,
    every recorded RESULT compared. Returns the mismatches (empty when it
    replays): a trace also starts with the arm's system prompt and the task's
    user prompt at the default budget."""
    from glyph.data.replay import grading_tester
    from glyph.data.replay import replay as run

    where = f"task {task.task_id} arm {trace['arm']}"
    opening = protocol.messages(trace["arm"], task.text, task.test_list, protocol.DEFAULT_BUDGET)
    if trace["messages"][:2] != opening:
        return [f"{where}: a trace starts with the arm's system prompt and the task's user prompt "
                f"(protocol.messages, budget {protocol.DEFAULT_BUDGET})"]
    tester = grading_tester(task.test_setup_code, task.tests(), LIMITS)
    r = run(0, trace, GLYPH, replay_config(trace["arm"]), tester)
    if r.ok:
        return []
    return [f"{where} message {r.index}: recorded {_head(r.recorded)!r}, replay gives {_head(r.replayed)!r}"]


def replay_config(arm: str) -> dict:
    """The program config glyph's SFT traces ran under: the default budget, a test costs 1."""
    return {"arm": arm, "max_tool_calls": protocol.DEFAULT_BUDGET, "test_cost": 1, "revise_feedback": "none"}


def _head(message: object) -> str:
    text = message.get("content") if isinstance(message, dict) and "content" in message else message
    return str(text).splitlines()[0][:200] if text else str(text)
