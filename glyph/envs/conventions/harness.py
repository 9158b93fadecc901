"""The glyph-conventions harness: the single-turn program (``glyph.agent.single_turn``)
or glyph-mbpp's agent harness on the conventions prompt (``--env.taskset.protocol``).

Nothing written into the runtime holds the hidden test or the references. A
model call that failed for good is not a wrong answer: the rollout ends errored
and unscored (in both verifiers versions), with the reason in
``info.glyph.reason``; in the agent protocol this is read from the program only
where glyph-mbpp's harness trusts its exit (the local runtime, or a container
failure verifiers' interception recorded)."""

from __future__ import annotations

import json
from typing import Literal

import verifiers.v1 as vf

from glyph import record
from glyph.agent import program
from glyph.agent.single_turn import ENDPOINT_FAILED
from glyph.envs import bundle
from glyph.envs.conventions.taskset import IMPORT_CHECK, MAX_READ, ConventionsData, info_record
from glyph.envs.local import read_text
from glyph.envs.mbpp import harness
from glyph.envs.mbpp.harness import PROGRAM_DIR, GlyphHarness, GlyphHarnessConfig
from glyph.envs.mbpp.taskset import GlyphData
from glyph.text import encodable

SINGLE_TURN = bundle.argv("python3", harness.BUNDLE, PROGRAM_DIR, "glyph.agent.single_turn")
"""The single protocol's command: the bundle's cold start (``glyph.envs.bundle``), running the single-turn
program."""


class ConventionsHarnessConfig(GlyphHarnessConfig):
    """``model_timeout`` bounds the model call in both protocols; the other
    fields (``max_tool_calls``, ``tool_timeout``, ...) apply to the agent protocol."""

    profile: Literal["glyph"] = "glyph"  # type: ignore[assignment]
    """The conventions tasks speak glyph's agent protocol (their prompts are glyph's): the only profile."""


def runtime_files(data: ConventionsData, endpoint: str, model: str, model_timeout: float) -> dict[str, bytes]:
    """Everything the single protocol writes into the runtime: the bundle
    (the program and what it imports) and its configuration (the prompt and
    the endpoint)."""
    messages = [m if isinstance(m, dict) else m.model_dump(mode="json", exclude_none=True)
                for m in data.prompt or []]
    config = {"messages": messages, "model_timeout": model_timeout,
              "endpoint": {"base_url": endpoint, "model": model}}
    return {harness.BUNDLE: bundle.build(), program.CONFIG: json.dumps(config).encode()}


def agent_view(data: ConventionsData) -> GlyphData:
    """The task as glyph-mbpp's agent harness takes it: the conventions user
    prompt as the task text, and the import check as the only visible test."""
    return GlyphData(name=data.name, arm="a", task_text=data.task_text, visible_tests=[IMPORT_CHECK], profile="glyph")


class ConventionsHarness(vf.Harness[ConventionsHarnessConfig]):
    NEEDS_CONTAINER = False  # single: no model-written code runs in the runtime; agent: as glyph-mbpp

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        if data.protocol == "agent":
            return await self._agent(ctx, trace, runtime, endpoint, secret, mcp_urls, data)
        for path, content in runtime_files(data, endpoint, ctx.model, self.config.model_timeout).items():
            await runtime.write(path, content)
        res = await runtime.run_program(SINGLE_TURN,
                                        {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": program.CONFIG})
        trace.info["glyph_program"] = {"exit_code": res.exit_code, "stdout": (res.stdout or "")[-2000:],
                                       "stderr": (res.stderr or "")[-2000:]}
        if res.exit_code != 0:  # not graded: the rollout fails with this reason
            why = (res.stderr or "").strip().splitlines()[-1:] or [f"the program exited {res.exit_code}"]
            record.store(trace.info, info_record(data, None, why[0][-500:]))
        return vf.ProgramResult(exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr)

    async def _agent(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        res = await GlyphHarness(self.config).launch(ctx, trace, runtime, endpoint, secret, mcp_urls,
                                                     agent_view(data))
        raw = await read_text(runtime, program.TRACE, MAX_READ)
        try:
            agent = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):  # the trace is untrusted: one too deep to read says nothing
            agent = {}
        end, error = (agent.get("end"), agent.get("error")) if isinstance(agent, dict) else (None, None)
        trace.info["glyph_agent_end"] = encodable(end) if isinstance(end, str) else None  # the trace is untrusted
        # GlyphHarness passes exit 97 on only when it is trusted: the local runtime (python_test ran in
        # the sandbox), or a container whose failed model call verifiers' interception recorded.
        if res.exit_code == ENDPOINT_FAILED:
            record.store(trace.info, info_record(data, None, f"endpoint_error: {error}"[:500], fault="endpoint_error"))
            return vf.ProgramResult(exit_code=ENDPOINT_FAILED, stdout=res.stdout,
                                    stderr=f"endpoint_error: {error}")
        return res
