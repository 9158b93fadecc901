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

Arm A and Arm B traces of a task share the candidate and its outcome. The
turns are the reference policies' honest plan (``plan``, which
``glyph.policies`` plays too and the study's traces share), played through
glyph's episode (``written``): each observation is what the episode answers.
Every trace ends with ``FINAL:`` and its SFT sample, as PRIME-RL builds it with
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
from collections.abc import Sequence
from dataclasses import dataclass

from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import AgentProfile, Call, Episode
from glyph.agent.profiles.glyph import GLYPH
from glyph.data.mbpp import SEED, MbppTask
from glyph.data.replay import grading_tester, play
from glyph.data.replay import replay as run
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


@dataclass(frozen=True)
class Fix:
    """One patch of a recovery, toward the reference: ``find`` -> ``replace``, fixing a candidate the
    grader gave ``outcome``; ``line``: the 1-based line it changes (glyph's thoughts name it)."""

    find: str
    replace: str
    outcome: str
    line: int = 0


@dataclass
class Step:
    """One scripted assistant turn: a call (None: FINAL), after Arm B's prediction and decision where
    given, after ``thought`` (glyph's free text; a FINAL line's summary) and ``noise`` (any grammar)."""

    call: Call | None
    prediction: str | None = None
    decision: str | None = None
    thought: str = ""
    noise: str = ""

    def text(self, agent: AgentProfile) -> str:
        """The turn in ``agent``'s grammar."""
        turn = agent.turn_text(self.call, self.prediction, self.decision, self.thought)
        return f"{self.noise}\n{turn}" if self.noise and self.call is not None else turn


class Script:
    """Calls in ``agent``'s grammar, numbered from 1, naming ``solution.py`` at ``solution``."""

    def __init__(self, agent: AgentProfile, solution: str, project: str | None) -> None:
        self.agent, self.solution, self.project, self.n = agent, solution, project, 0

    def call(self, tool: str, path: str | None = None, find: str | None = None, replace: str | None = None) -> Call:
        self.n += 1
        path = self.solution if path is None else path
        return Call(self.agent.call_id(self.n), tool, self.agent.args(tool, path, self.project, find, replace))


def plan(script: Script, arm: str, first: str, fixes: Sequence[Fix] = (), revise: bool = False) -> list[Step]:
    """The reference policies' honest episode, and an SFT trace's: read ``solution.py``, write ``first``
    over the placeholder, then each fix (Arm B with ``revise``: predicted and REVISEd before any test;
    else after a test shows the failure), a passing test, FINAL. Arm B predicts PASS and KEEPs before a test."""
    c = script.call
    keep = {"prediction": "PASS", "decision": "KEEP"} if arm == "b" else {}
    steps = [Step(c("read_file"), thought="Let me look at the file first."),
             Step(c("apply_patch", find=script.agent.placeholder, replace=first), thought="I'll write the function.")]
    for fix in fixes:
        if revise and arm == "b":
            steps.append(Step(c("apply_patch", find=fix.find, replace=fix.replace), fix.outcome, "REVISE",
                              f"Line {fix.line} looks wrong; I'll fix it before testing."))
        else:
            steps += [Step(c("python_test"), **keep),
                      Step(c("apply_patch", find=fix.find, replace=fix.replace),
                           thought=f"The test gave {fix.outcome}. Line {fix.line} is wrong; fixing it.")]
    return steps + [Step(c("python_test"), **keep), Step(None, thought="solution.py passes the tests.")]


def written(script: Script, cfg: dict, opening: list[dict], first: str, fixes: Sequence[Fix] = (),
            revise: bool = False) -> tuple[list[dict], Episode]:
    """``plan`` played through the script's profile's episode under ``cfg`` (``glyph.data.replay.play``),
    each test answered with the outcome its candidate has (``fixes``' outcomes, then PASS): the
    conversation as an SFT trace records it, and the episode."""
    sources = [first]
    for fix in fixes:
        sources.append(sources[-1].replace(fix.find, fix.replace, 1))
    known = dict(zip(sources, [f.outcome for f in fixes] + [Outcome.PASS.value]))
    turns = [s.text(script.agent) for s in plan(script, cfg["arm"], first, fixes, revise)]
    return play(script.agent, cfg, opening, turns, lambda source, shadow: known[source])


def build_traces(task: MbppTask, mutant: Mutant | None, variant: str,
                 budget: int = protocol.DEFAULT_BUDGET) -> dict[str, dict]:
    """The Arm A and Arm B traces of one task (``variant``: Arm B's
    recovery, ``keep`` or ``revise``; ignored for direct traces)."""
    fixes = () if mutant is None else (Fix(mutant.mutated_line, mutant.original_line, mutant.outcome.value,
                                           mutant.line),)
    traces = {}
    for arm in ("a", "b"):
        revise = arm == "b" and variant == "revise"
        kind = "direct" if mutant is None else "recovery_revise" if revise else \
            "recovery_keep" if arm == "b" else "recovery"
        opening = protocol.messages(arm, task.text, task.test_list, budget)
        cfg = replay_config(arm) | {"max_tool_calls": budget}
        messages, ep = written(Script(GLYPH, protocol.SOLUTION_FILE, None), cfg, opening,
                               mutant.source if mutant else task.code, fixes, revise)
        traces[arm] = {"messages": messages, "task_id": task.task_id, "arm": arm, "kind": kind,
                       "candidate_outcome": mutant.outcome.value if mutant else Outcome.PASS.value,
                       "shadow": [{"call": c.prediction_call, "outcome": c.verified_label}
                                  for c in ep.trace.candidates if c.shadow]}
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


def replay(trace: dict, task: MbppTask, limits: Limits = LIMITS) -> list[str]:
    """Re-run a trace through glyph's episode in a scratch workspace
    (``glyph.data.replay``), its tests (and shadow tests) graded in the sandbox,
    every recorded RESULT compared. Returns the mismatches (empty when it
    replays): a trace also starts with the arm's system prompt and the task's
    user prompt at the default budget."""
    where = f"task {task.task_id} arm {trace['arm']}"
    opening = protocol.messages(trace["arm"], task.text, task.test_list, protocol.DEFAULT_BUDGET)
    if trace["messages"][:2] != opening:
        return [f"{where}: a trace starts with the arm's system prompt and the task's user prompt "
                f"(protocol.messages, budget {protocol.DEFAULT_BUDGET})"]
    tester = grading_tester(task.test_setup_code, task.tests(), limits)
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
