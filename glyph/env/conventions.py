"""glyph-conventions: the verifiers v1 taskset, task, harness and env for the
conventions tasks (``glyph.tasks.conventions``).

Each task's prompt is ``conventions.messages(task, lessons)``: the spec and
the lessons in context, the only thing the flywheel changes. Two protocols
(``--env.taskset.protocol``):

* ``single`` (default): the stdlib program ``glyph/env/single.py`` makes one
  chat completion and writes ``solution.py`` from the reply's code block.
* ``agent``: glyph-mbpp's agent program and harness (``glyph.env.harness``,
  arm a) on the conventions prompt. There are no visible tests: ``python_test``
  only checks that ``solution.py`` imports (``IMPORT_CHECK``).

Guarantees:

* The hidden test and the references live in the task data, on the trusted
  side only; nothing written into the runtime holds them.
* finalize grades the final ``solution.py`` with ``conventions.grade``
  (glyph's grader, in glyph's sandbox, in a thread): reward 1.0 iff PASS, and
  ``info.glyph`` = reward, outcome, detail, mode, split, protocol, reason.
* A model call that failed for good is not a wrong answer: the rollout ends
  errored and unscored (in both verifiers versions), with the reason in
  ``info.glyph.reason``. In the agent protocol this is read from the
  program's trace only on the local runtime, where no model-written code
  runs in the workspace; on a container runtime it is graded as it stands,
  the reason recorded. A rollout that hit its deadline is handled as
  glyph-mbpp's is (``glyph.vfcompat``): scored 0 with the reason on 0.4.0,
  errored at PRIME-RL's pin.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import field_validator

from glyph import protocol
from glyph.env import harness
from glyph.env.harness import PROGRAM_DIR, GlyphHarness, GlyphHarnessConfig
from glyph.env.single import ENDPOINT_FAILED, SOLUTION_FILE
from glyph.env.taskset import GlyphData
from glyph.outcomes import Outcome
from glyph.sandbox import get_sandbox
from glyph.tasks import conventions
from glyph.vfcompat import timed_out

GLYPH = Path(__file__).resolve().parent.parent
CONFIG_FILE = ".glyph/config.json"
AGENT_TRACE = ".glyph/trace.json"
# The single program and what it imports: glyph-mbpp's shipped library (grammar, outcomes, tool
# semantics), plus program.py for its endpoint client. One list, so a new module is shipped to both.
SHIPPED = {
    "single.py": GLYPH / "env" / "single.py",
    **{target: source for target, source in harness.SHIPPED.items() if target != "program.py"},
    "glyph/env/program.py": GLYPH / "env" / "program.py",
    "glyph/env/single.py": GLYPH / "env" / "single.py",
}
IMPORT_CHECK = "import solution  # python_test checks only that solution.py imports\n" \
               "assert solution.__name__ == 'solution'"
"""The agent protocol's one visible test: it reveals nothing of the hidden test."""
MAX_READ = 8 << 20
SHOWN_ERRORS = 3


# ---------------------------------------------------------------- data


def data_problem(path: str) -> str | None:
    """One line on what makes the task file at ``path`` unusable, or None."""
    _, errors = conventions.read_tasks(path)
    if not errors:
        return None
    more = ""
    if len(errors) > SHOWN_ERRORS:
        more = (f"; and {len(errors) - SHOWN_ERRORS} more"
                f" (`glyph conventions validate --tasks {path}` lists them)")
    return "; ".join(errors[:SHOWN_ERRORS]) + more


def read_lessons(path: str) -> list[str]:
    """The kept lessons of a flywheel run file (``run.json``), in order.
    Raises ValueError, naming the file, where it is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    lessons = doc.get("lessons") if isinstance(doc, dict) else None
    if not isinstance(lessons, list):
        raise ValueError(f"{path}: no \"lessons\" list (expected a `glyph flywheel run` run.json)")
    kept = []
    for i, entry in enumerate(lessons):
        if not isinstance(entry, dict) or not isinstance(entry.get("kept"), bool) \
                or not isinstance(entry.get("text"), str):
            raise ValueError(f"{path}: lessons[{i}] needs a string \"text\" and a boolean \"kept\"")
        if entry["kept"] and entry["text"].strip():
            kept.append(entry["text"])
    return kept


class ConventionsData(vf.TaskData):
    """One conventions task under one set of lessons. ``hidden_test`` and the
    references are read on the trusted side only (recorded in the eval
    output, never given to the program)."""

    mode: str = ""
    split: Literal["train", "holdout"] = "holdout"
    spec: str = ""
    lessons: list[str] = []
    """The lessons in context, in order."""
    task_text: str = ""
    """The conventions user prompt (``conventions.user_prompt``): what the agent protocol is given."""
    protocol: Literal["single", "agent"] = "single"
    hidden_test: str = ""
    reference_broken: str = ""
    reference_fixed: str = ""

    def task(self) -> conventions.ConventionTask:
        return conventions.ConventionTask(self.name or "", self.mode, self.split, self.spec, self.hidden_test,
                                          self.reference_broken, self.reference_fixed)


def _info(data: ConventionsData, reward: float | None, reason: str, outcome: str | None = None,
          detail: str = "") -> dict:
    return {"reward": reward, "outcome": outcome, "detail": detail, "mode": data.mode, "split": data.split,
            "protocol": data.protocol, "reason": reason}


class ConventionsTask(vf.Task[ConventionsData]):
    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Grade the final solution.py. A failure of the grading itself is recorded and
        raised, so verifiers fails the rollout (errored, not scored); ``info.glyph.sandbox``
        records the sandbox mode and protections that graded it."""
        d = self.data
        try:
            code = await _read(runtime, SOLUTION_FILE)
            if code is None:
                info = _info(d, 0.0, "no solution.py in the workspace")
            else:
                g = await asyncio.to_thread(conventions.grade, d.task(), code)
                passed = g.outcome is Outcome.PASS
                reason = "passed" if passed else f"{g.outcome.value}: {g.detail}"
                info = _info(d, 1.0 if passed else 0.0, reason, g.outcome.value, g.detail)
                info["sandbox"] = get_sandbox().protections().record()
        except Exception as exc:
            trace.info["glyph"] = dict(_info(d, None, f"finalize failed: {type(exc).__name__}: {exc}"),
                                       fault="finalize_error")
            raise
        if d.protocol == "agent":  # what the agent program says of itself: untrusted, for reading only
            end = trace.info.get("glyph_agent_end")
            if end and end != "final":
                info["reason"] += f" (the agent ended with {end})"
        if timed_out(trace):
            info["reason"] = "the rollout timed out; " + info["reason"]
        trace.info["glyph"] = info

    @vf.reward(weight=1.0)
    async def passed(self, trace: vf.Trace) -> float:
        return float(trace.info.get("glyph", {}).get("reward") or 0.0)

    @vf.metric
    async def outcomes(self, trace: vf.Trace) -> dict[str, float]:
        """One 0/1 metric per outcome class of the final solution (``outcome_pass``, ...)."""
        got = trace.info.get("glyph", {}).get("outcome")
        return {f"outcome_{o.value.lower()}": float(o.value == got) for o in Outcome}


async def _read(runtime: vf.Runtime, path: str) -> str | None:
    try:
        return (await runtime.read(path, max_bytes=MAX_READ)).decode("utf-8", "surrogateescape")
    except Exception:  # absent or unreadable: the caller records why
        return None


class ConventionsTasksetConfig(vf.TasksetConfig):
    data_path: str | None = None
    """A conventions JSONL ({id, mode, split, spec, hidden_test, reference_broken, reference_fixed});
    default: glyph's own tasks."""
    split: Literal["train", "holdout", "all"] = "holdout"
    """holdout: the sealed split the flywheel measures on; train: the one it learns from;
    all: both, in file order."""
    lessons: list[str] = []
    """Lessons put in every prompt (after those of lessons_path)."""
    lessons_path: str | None = None
    """A `glyph flywheel run` run.json: its kept lessons, in order, go in every prompt."""
    protocol: Literal["single", "agent"] = "single"
    """single: one reply, its code block is solution.py; agent: glyph-mbpp's agent protocol (arm a)."""

    @field_validator("data_path")
    @classmethod
    def _usable_tasks(cls, path: str | None) -> str | None:
        problem = path and data_problem(path)
        if problem:
            raise ValueError(problem)
        return path

    @field_validator("lessons_path")
    @classmethod
    def _usable_lessons(cls, path: str | None) -> str | None:
        if path:
            read_lessons(path)
        return path


class ConventionsTaskset(vf.Taskset[ConventionsTask, ConventionsTasksetConfig]):
    def load(self):
        cfg = self.config
        tasks = conventions.load_tasks(cfg.data_path)
        chosen = tasks if cfg.split == "all" else conventions.split(tasks, cfg.split)
        if not chosen:
            where = cfg.data_path or conventions.DATA_FILE
            raise conventions.ConventionsDataError(
                f"--env.taskset.split {cfg.split}: {where} has no such tasks")
        lessons = (read_lessons(cfg.lessons_path) if cfg.lessons_path else []) + list(cfg.lessons)
        for t in chosen:
            text = conventions.user_prompt(t, lessons)
            prompt = conventions.messages(t, lessons) if cfg.protocol == "single" else \
                protocol.messages("a", text, [IMPORT_CHECK])
            yield ConventionsTask(ConventionsData(
                id=t.id, name=t.id, prompt=prompt, mode=t.mode, split=t.split, spec=t.spec, lessons=lessons,
                task_text=text, protocol=cfg.protocol, hidden_test=t.hidden_test,
                reference_broken=t.reference_broken, reference_fixed=t.reference_fixed), cfg.task)


# ---------------------------------------------------------------- harness


class ConventionsHarnessConfig(GlyphHarnessConfig):
    """``model_timeout`` bounds the model call in both protocols; the other
    fields (``max_tool_calls``, ``tool_timeout``, ...) apply to the agent protocol."""


def runtime_files(data: ConventionsData, endpoint: str, model: str, model_timeout: float) -> dict[str, bytes]:
    """Everything the single protocol writes into the runtime: the program,
    what it imports, and its configuration (the prompt and the endpoint)."""
    messages = [m if isinstance(m, dict) else m.model_dump(mode="json", exclude_none=True)
                for m in data.prompt or []]
    config = {"messages": messages, "model_timeout": model_timeout,
              "endpoint": {"base_url": endpoint, "model": model}}
    files = {f"{PROGRAM_DIR}/{target}": source.read_bytes() for target, source in SHIPPED.items()}
    files[CONFIG_FILE] = json.dumps(config).encode()
    return files


def agent_view(data: ConventionsData) -> GlyphData:
    """The task as glyph-mbpp's agent harness takes it: the conventions user
    prompt as the task text, and the import check as the only visible test."""
    return GlyphData(name=data.name, arm="a", task_text=data.task_text, visible_tests=[IMPORT_CHECK])


class ConventionsHarness(vf.Harness[ConventionsHarnessConfig]):
    NEEDS_CONTAINER = False  # single: no model-written code runs in the runtime; agent: as glyph-mbpp

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        if data.protocol == "agent":
            return await self._agent(ctx, trace, runtime, endpoint, secret, mcp_urls, data)
        for path, content in runtime_files(data, endpoint, ctx.model, self.config.model_timeout).items():
            await runtime.write(path, content)
        res = await runtime.run_program(["python3", "-I", f"{PROGRAM_DIR}/single.py"],
                                        {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": CONFIG_FILE})
        trace.info["glyph_program"] = {"exit_code": res.exit_code, "stdout": (res.stdout or "")[-2000:],
                                       "stderr": (res.stderr or "")[-2000:]}
        if res.exit_code != 0:  # not graded: the rollout fails with this reason
            why = (res.stderr or "").strip().splitlines()[-1:] or [f"the program exited {res.exit_code}"]
            trace.info["glyph"] = _info(data, None, why[0][-500:])
        return vf.ProgramResult(exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr)

    async def _agent(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        res = await GlyphHarness(self.config).launch(ctx, trace, runtime, endpoint, secret, mcp_urls,
                                                     agent_view(data))
        raw = await _read(runtime, AGENT_TRACE)
        try:
            agent = json.loads(raw) if raw else {}
        except ValueError:
            agent = {}
        end, error = (agent.get("end"), agent.get("error")) if isinstance(agent, dict) else (None, None)
        trace.info["glyph_agent_end"] = end if isinstance(end, str) else None
        # GlyphHarness passes exit 97 on only when it is trusted: the local runtime (python_test ran in
        # the sandbox), or a container whose failed model call verifiers' interception recorded.
        if res.exit_code == ENDPOINT_FAILED:
            trace.info["glyph"] = _info(data, None, f"endpoint_error: {error}"[:500])
            return vf.ProgramResult(exit_code=ENDPOINT_FAILED, stdout=res.stdout,
                                    stderr=f"endpoint_error: {error}")
        return res
