"""The glyph-mbpp harness: ships the stdlib agent program into the runtime
and runs it against the rollout's interception endpoint.

Guarantees:

* One grader and one source for the grading limits. python_test is graded
  by ``glyph.grading.grade`` everywhere: on the local runtime by the test
  service in glyph's sandbox; on a container runtime by the same code,
  shipped into the runtime (``SHIPPED``: the grader, its outcomes and
  ``glyph/sandbox/``, all stdlib) and run by the program's ``"local"``
  tester. All grade under ``GlyphHarnessConfig.limits()`` (the program
  config's ``limits``), as does finalize (``trace.info["glyph_limits"]``,
  written here on the trusted side before the program starts), so any
  ``--env.agent.harness.tool-timeout`` grades the same way everywhere.
* The container's sandbox mode is this harness's explicit choice,
  ``LOCAL_SANDBOX`` = ``auto-or-bare``, recorded in the program config
  (``tester.sandbox``): the strongest isolating mode the container allows
  (``auto``), and ``bare`` where none starts (an unprivileged container
  without user namespaces). The grader's ``auto`` never falls back to
  ``bare`` by itself (``glyph.sandbox.client``, ``SandboxUnavailable``);
  here it is acceptable because the container is the isolation: in ``bare``
  the graded code can reach what the container holds (the workspace, the
  visible tests, the program and the rollout secret; as the stdlib runner
  this replaces allowed), but nothing of the host, and python_test's
  answers are a convenience for the agent, not a verdict: finalize
  re-grades every claim on the trusted side, in glyph's sandbox, and a
  claim no re-grade reproduces marks the rollout tampered.
  The program records the mode that graded (``tester_sandbox`` in its
  trace: the mode, its protections, and why ``auto`` did not start). The
  runtime's ``python3`` must be 3.10 or newer (``sys.stdlib_module_names``)
  with ``ctypes``, on Linux 5.3 or newer (``os.pidfd_open``); elsewhere the
  first python_test is a tester fault (``TESTER_FAILED``, scored 0 there).
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
  there the exit alone is not trusted. An ``ENDPOINT_FAILED`` exit there is
  errored only when the trusted side confirms it: verifiers' interception
  server (on the host, where the program's model calls go) recorded that the
  rollout's last model call failed upstream with a 5xx, a 429 or no HTTP
  status (transport, timeout, cancelled), and no ``@stop`` ended the rollout
  (``model_call_failure``). A 4xx is not a confirmation (a request code beside
  the program sent could provoke one). Otherwise (a ``TESTER_FAILED`` exit,
  an unconfirmed ``ENDPOINT_FAILED``) finalize scores the rollout, 0 with the
  reason. Not confirmed either: a model call the program gave up on at
  ``model_timeout`` while the interception server's upstream call was still
  running (it is recorded only once that call ends). Any other exit (a
  crashed program) is scored 0 by finalize with the reason, as before.
"""

from __future__ import annotations

import json
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from glyph.agent import protocol
from glyph.layers import shipped_files
from glyph.agent import program
from glyph.agent.program import ENDPOINT_FAILED, TESTER_FAILED
from glyph import record
from glyph.sandbox import Limits

PROGRAM_DIR = ".glyph/program"  # under .glyph: the agent's tools refuse every path there
PROGRAM = f"{PROGRAM_DIR}/glyph/agent/program.py"
SHIPPED = shipped_files()
"""What the runtime gets under ``PROGRAM_DIR``: the shipped layers (``glyph.layers``), whole."""
LOCAL_SANDBOX = "auto-or-bare"
"""The sandbox mode of python_test's grader on a container runtime (the module docstring says why)."""


# The program's fault exits (``glyph.agent.program``) the harness turns into errored rollouts.
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


def program_config(cfg: GlyphHarnessConfig, arm: str, task_text: str, visible_tests: list[str],
                   tester: dict, endpoint: dict) -> dict:
    """The agent program's configuration (``.glyph/config.json``), built in
    this one place from the harness config: the budget, the costs, the
    grading limits (``cfg.limits()``) and the prompt at the harness's budget
    (``protocol.messages``). ``tester``: how python_test is graded
    (``{"kind": "service", "url"}`` or ``{"kind": "local", ...}``);
    ``endpoint``: ``{"base_url", "model"}``."""
    return {"arm": arm, "max_tool_calls": cfg.max_tool_calls, "test_cost": cfg.test_cost,
            "revise_feedback": cfg.revise_feedback, "tool_timeout": cfg.tool_timeout,
            "limits": limits_record(cfg.limits()), "model_timeout": cfg.model_timeout,
            "messages": protocol.messages(arm, task_text, list(visible_tests), cfg.max_tool_calls),
            "tester": tester, "endpoint": endpoint}


def limits_for(tool_timeout: float) -> Limits:
    """``GlyphHarnessConfig.limits()`` for a ``tool_timeout`` (finalize
    uses it for a trace recorded without ``glyph_limits``: the default harness)."""
    return Limits(cpu_s=float(tool_timeout), wall_s=2 * float(tool_timeout))


def limits_record(limits: Limits) -> dict:
    """What ``trace.info["glyph_limits"]`` and the program config carry."""
    return {"cpu_s": limits.cpu_s, "wall_s": limits.wall_s}


def limits_from_record(stored: object) -> Limits:
    """The ``Limits`` a trace was graded under (``trace.info["glyph_limits"]``);
    the default harness's when absent. A malformed one raises ValueError."""
    if stored is None:
        return limits_for(GlyphHarnessConfig.model_fields["tool_timeout"].default)
    if not isinstance(stored, dict) or set(stored) != {"cpu_s", "wall_s"}:
        raise ValueError(f"trace.info['glyph_limits'] is {stored!r}, not {{'cpu_s', 'wall_s'}}")
    return Limits(cpu_s=float(stored["cpu_s"]), wall_s=float(stored["wall_s"]))


class GlyphHarness(vf.Harness[GlyphHarnessConfig]):
    NEEDS_CONTAINER = False  # on the local runtime, python_test runs in glyph's sandbox

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        cfg = self.config
        local = isinstance(runtime, _subprocess_runtime())
        limits = cfg.limits()
        trace.info["glyph_limits"] = limits_record(limits)
        if local:
            from glyph.envs.mbpp.test_service import get_service
            service = get_service()
            service.register(secret, data.hidden_setup, data.visible_tests, limits)
            tester = {"kind": "service", "url": service.url}
        else:  # a container runtime: the container is the isolation
            tester = {"kind": "local", "sandbox": LOCAL_SANDBOX, "setup": data.hidden_setup,
                      "tests": data.visible_tests}
        config = program_config(cfg, data.arm, data.task_text, data.visible_tests, tester,
                                {"base_url": endpoint, "model": ctx.model})
        for target, source in SHIPPED.items():
            await runtime.write(f"{PROGRAM_DIR}/{target}", source.read_bytes())
        await runtime.write(protocol.SOLUTION_FILE, protocol.PLACEHOLDER.encode())
        await runtime.write(program.CONFIG, json.dumps(config).encode())
        try:
            res = await runtime.run_program(["python3", "-I", PROGRAM],
                                            {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": program.CONFIG})
        finally:
            if local:
                released = service.release(secret)
                trace.info["glyph_service_log"] = released["log"]
                if released["faults"]:
                    trace.info["glyph_service_faults"] = released["faults"]
        trace.info["glyph_program"] = {"exit_code": res.exit_code, "stderr": (res.stderr or "")[-2000:]}
        confirmed = None
        if not local and res.exit_code == ENDPOINT_FAILED:
            confirmed = model_call_failure(trace)
            trace.info["glyph_endpoint_fault_confirmed"] = confirmed
        if res.exit_code in FAULTS and (local or confirmed):
            lines = (res.stderr or "").strip().splitlines()
            fault = FAULTS[res.exit_code]
            why = lines[-1][-500:] if lines else f"{fault}: the program exited {res.exit_code}"
            trace.info[record.INFO_KEY] = record.encode(record.fault_record(fault, why, confirmed))
            return vf.ProgramResult(exit_code=res.exit_code, stdout=res.stdout, stderr=why)
        # A crashed program is scored 0 by finalize with the reason, not left as an unscored error.
        return vf.ProgramResult(exit_code=0, stdout=res.stdout, stderr=res.stderr)


def model_call_failure(trace) -> str | None:
    """The trusted record that the rollout's last model call failed upstream,
    as one line; None when there is none.

    verifiers' interception server (the host side of the rollout's model
    endpoint) appends one ``ModelCall`` per real upstream exchange to
    ``trace.calls``, with ``error`` (``type``, ``message``, ``status_code``)
    when the exchange committed no turn: ``record_call`` in
    ``v1/interception/server.py`` (0.4.0: 519-582, called from the turn's
    ``finally`` at 897 after the ``RolloutError`` / ``Exception`` /
    ``BaseException`` handlers at 863, 878, 887; a60a606: 317-375, called at
    643 after 611, 626, 635), into ``Trace.calls`` (``v1/trace.py``, 0.4.0:
    396, a60a606: 379; ``ModelCall.error`` at 170, ``Error`` at 84-88 in
    both). A provider failure is a ``ProviderError`` whose ``status_code`` is
    the provider's status or 502/503/504 for a transport fault or timeout
    (0.4.0 ``v1/errors.py``). Code running beside the program cannot write
    there; it could send its own requests, so only a failure no request's
    content explains counts: a 5xx, a 429, or no status (the exchange raised
    or was cancelled), on the last exchange, with no ``@stop`` on the trace
    (``Trace.stop_condition``, 0.4.0 ``v1/trace.py:426``, a60a606: 403).

    What verifiers does with the exit that follows: 0.4.0 maps exit 97 to an
    ``InterceptionError`` (``v1/harness.py:187``) and the rollout re-raises
    the stashed upstream error (``v1/rollout.py:513``); it forgets that error
    when the harness exits 0 (``v1/rollout.py:532``: a 0 exit here would be
    scored). a60a606 raises ``HarnessError`` for any non-zero exit
    (``v1/harness.py:159``) and fails the rollout on a stashed model error even
    after a 0 exit (``v1/rollout.py:418-419``)."""
    calls = list(getattr(trace, "calls", None) or [])
    if not calls or getattr(trace, "stop_condition", None) is not None:
        return None
    error = getattr(calls[-1], "error", None)
    if error is None:
        return None
    status = error.status_code
    if status is not None and status != 429 and not 500 <= status <= 599:
        return None
    code = f" (HTTP {status})" if status is not None else ""
    return f"the interception server recorded: {error.type}{code}: {error.message}"[:500]


def _subprocess_runtime() -> type:
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime
    return SubprocessRuntime
