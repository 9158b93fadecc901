"""The glyph-mbpp harness: ships the stdlib agent program into the runtime
and runs it against the rollout's interception endpoint.

Guarantees:

* One source for the grading limits: ``GlyphHarnessConfig.limits()``. The
  test service (local runtime), the shipped runner (container runtime, via
  the program config's ``limits``) and finalize (``trace.info["glyph_limits"]``,
  written here on the trusted side before the program starts) all grade
  under it, so any ``--env.agent.harness.tool-timeout`` grades the same way
  everywhere.
* On the local runtime the test service's log of what it graded for this
  rollout (``trace.info["glyph_service_log"]``, with its ``faults``) is
  recorded after the program ends; finalize takes outcomes from it.
* Faults are errors, not zeros. On the local runtime (no model-written code
  runs beside the program: python_test runs in glyph's sandbox) a program
  that exits ``ENDPOINT_FAILED`` (97: the model endpoint unreachable, 5xx
  after retries, or timed out) or ``TESTER_FAILED`` (98: the test service
  faulted) fails the rollout through verifiers' error path with the cause
  (``trace.info["glyph"]["reason"]``, ``reward`` None): errored in ``vf-eval``,
  not trained on (``glyph.vfcompat``, 5.). On a container runtime the
  solution's code runs beside the program and could provoke such an exit, so
  there the exit is not trusted: finalize scores the rollout, 0 with the
  reason. Any other exit (a crashed program) is scored 0 by finalize with the
  reason, as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from glyph import protocol
from glyph.env.program import ENDPOINT_FAILED, TESTER_FAILED
from glyph.sandbox import Limits

GLYPH = Path(__file__).resolve().parent.parent
PROGRAM_DIR = ".glyph/program"  # under .glyph: the agent's tools refuse every path there
# What the program needs beside it in the runtime: the grammar, outcomes and tool semantics exist once.
SHIPPED = {
    "program.py": GLYPH / "env" / "program.py",
    "glyph/__init__.py": GLYPH / "__init__.py",
    "glyph/outcomes.py": GLYPH / "outcomes.py",
    "glyph/protocol.py": GLYPH / "protocol.py",
    "glyph/env/__init__.py": GLYPH / "env" / "__init__.py",
    "glyph/env/runner.py": GLYPH / "env" / "runner.py",
    "glyph/env/tools.py": GLYPH / "env" / "tools.py",
}


# The program's fault exits (``glyph.env.program``) the harness turns into errored rollouts.
FAULTS = {ENDPOINT_FAILED: "endpoint_error", TESTER_FAILED: "tester_error"}


class GlyphHarnessConfig(vf.HarnessConfig):
    max_tool_calls: int = Field(protocol.DEFAULT_BUDGET, ge=1)
    """Tool calls an episode may make: the system prompt names it (``protocol.messages``)."""
    tool_timeout: float = Field(10.0, gt=0)
    """Seconds of CPU one grading may use (wall clock: twice that): each python_test and
    finalize's gradings of the rollout (``limits()``)."""
    test_cost: int = Field(1, ge=1)
    """Budget units one visible python_test costs."""
    revise_feedback: Literal["none", "outcome"] = "none"
    """Whether a REVISE shows the agent the shadow test's outcome (the study: none)."""
    model_timeout: float = Field(300.0, gt=0)

    def limits(self) -> Limits:
        """The grading limits of every python_test and of finalize's grading:
        ``tool_timeout`` seconds of CPU, twice that of wall clock."""
        return limits_for(self.tool_timeout)


def limits_for(tool_timeout: float) -> Limits:
    """``GlyphHarnessConfig.limits()`` for a ``tool_timeout`` (finalize
    uses it for a trace recorded without ``glyph_limits``: the default harness)."""
    return Limits(cpu_s=float(tool_timeout), wall_s=2 * float(tool_timeout))


def limits_record(limits: Limits) -> dict:
    """What ``trace.info["glyph_limits"]`` and the program config carry."""
    return {"cpu_s": limits.cpu_s, "wall_s": limits.wall_s}


def limits_from_record(record: object) -> Limits:
    """The ``Limits`` a trace was graded under (``trace.info["glyph_limits"]``);
    the default harness's when absent. A malformed record raises ValueError."""
    if record is None:
        return limits_for(GlyphHarnessConfig.model_fields["tool_timeout"].default)
    if not isinstance(record, dict) or set(record) != {"cpu_s", "wall_s"}:
        raise ValueError(f"trace.info['glyph_limits'] is {record!r}, not {{'cpu_s', 'wall_s'}}")
    return Limits(cpu_s=float(record["cpu_s"]), wall_s=float(record["wall_s"]))


class GlyphHarness(vf.Harness[GlyphHarnessConfig]):
    NEEDS_CONTAINER = False  # on the local runtime, python_test runs in glyph's sandbox

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        cfg = self.config
        local = isinstance(runtime, _subprocess_runtime())
        limits = cfg.limits()
        trace.info["glyph_limits"] = limits_record(limits)
        if local:
            from glyph.env.service import get_service
            service = get_service()
            service.register(secret, data.hidden_setup, data.visible_tests, limits)
            tester = {"kind": "service", "url": service.url}
        else:  # a container runtime: the container is the isolation
            tester = {"kind": "local", "setup": data.hidden_setup, "tests": data.visible_tests}
        messages = protocol.messages(data.arm, data.task_text, data.visible_tests, cfg.max_tool_calls)
        config = {"arm": data.arm, "max_tool_calls": cfg.max_tool_calls, "test_cost": cfg.test_cost,
                  "revise_feedback": cfg.revise_feedback, "tool_timeout": cfg.tool_timeout,
                  "limits": limits_record(limits),
                  "model_timeout": cfg.model_timeout, "messages": messages, "tester": tester,
                  "endpoint": {"base_url": endpoint, "model": ctx.model}}
        for target, source in SHIPPED.items():
            await runtime.write(f"{PROGRAM_DIR}/{target}", source.read_bytes())
        await runtime.write(protocol.SOLUTION_FILE, protocol.PLACEHOLDER.encode())
        await runtime.write(".glyph/config.json", json.dumps(config).encode())
        try:
            res = await runtime.run_program(["python3", "-I", f"{PROGRAM_DIR}/program.py"],
                                            {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": ".glyph/config.json"})
        finally:
            if local:
                record = service.release(secret)
                trace.info["glyph_service_log"] = record["log"]
                if record["faults"]:
                    trace.info["glyph_service_faults"] = record["faults"]
        trace.info["glyph_program"] = {"exit_code": res.exit_code, "stderr": (res.stderr or "")[-2000:]}
        if local and res.exit_code in FAULTS:
            lines = (res.stderr or "").strip().splitlines()
            fault = FAULTS[res.exit_code]
            why = lines[-1][-500:] if lines else f"{fault}: the program exited {res.exit_code}"
            trace.info["glyph"] = {"reward": None, "reason": why, "fault": fault}
            return vf.ProgramResult(exit_code=res.exit_code, stdout=res.stdout, stderr=why)
        # A crashed program is scored 0 by finalize with the reason, not left as an unscored error.
        return vf.ProgramResult(exit_code=0, stdout=res.stdout, stderr=res.stderr)


def _subprocess_runtime() -> type:
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime
    return SubprocessRuntime
