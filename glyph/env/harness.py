"""The glyph-mbpp harness: ships the stdlib agent program into the runtime
and runs it against the rollout's interception endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from glyph import protocol
from glyph.sandbox import Limits

GLYPH = Path(__file__).resolve().parent.parent
PROGRAM_DIR = ".glyph/program"  # under .glyph: the agent's tools refuse every path there
# What the program needs beside it in the runtime: the grammar and outcomes exist once.
SHIPPED = {
    "program.py": GLYPH / "env" / "program.py",
    "glyph/__init__.py": GLYPH / "__init__.py",
    "glyph/outcomes.py": GLYPH / "outcomes.py",
    "glyph/protocol.py": GLYPH / "protocol.py",
    "glyph/env/__init__.py": GLYPH / "env" / "__init__.py",
    "glyph/env/runner.py": GLYPH / "env" / "runner.py",
}


class GlyphHarnessConfig(vf.HarnessConfig):
    max_tool_calls: int = Field(8, ge=1)
    tool_timeout: float = Field(10.0, gt=0)
    """Seconds of CPU one python_test may use (wall clock: twice that)."""
    test_cost: int = Field(1, ge=1)
    """Budget units one visible python_test costs."""
    revise_feedback: Literal["none", "outcome"] = "none"
    """Whether a REVISE shows the agent the shadow test's outcome (the study: none)."""
    model_timeout: float = Field(300.0, gt=0)


class GlyphHarness(vf.Harness[GlyphHarnessConfig]):
    NEEDS_CONTAINER = False  # on the local runtime, python_test runs in glyph's sandbox

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        cfg = self.config
        local = isinstance(runtime, _subprocess_runtime())
        limits = Limits(cpu_s=cfg.tool_timeout, wall_s=2 * cfg.tool_timeout)
        if local:
            from glyph.env.service import get_service
            service = get_service()
            service.register(secret, data.hidden_setup, data.visible_tests, limits)
            tester = {"kind": "service", "url": service.url}
        else:  # a container runtime: the container is the isolation
            tester = {"kind": "local", "setup": data.hidden_setup, "tests": data.visible_tests}
        messages = [{"role": "system", "content": protocol.system_prompt(data.arm, cfg.max_tool_calls)},
                    {"role": "user", "content": protocol.user_prompt(data.task_text, data.visible_tests)}]
        config = {"arm": data.arm, "max_tool_calls": cfg.max_tool_calls, "test_cost": cfg.test_cost,
                  "revise_feedback": cfg.revise_feedback, "tool_timeout": cfg.tool_timeout,
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
                trace.info["glyph_service_log"] = service.unregister(secret)
        trace.info["glyph_program"] = {"exit_code": res.exit_code, "stderr": (res.stderr or "")[-2000:]}
        # A crashed program is scored 0 by finalize with the reason, not left as an unscored error.
        return vf.ProgramResult(exit_code=0, stdout=res.stdout, stderr=res.stderr)


def _subprocess_runtime() -> type:
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime
    return SubprocessRuntime
