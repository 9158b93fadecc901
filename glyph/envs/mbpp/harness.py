"""The glyph-mbpp harness: ships the agent program (``glyph.layers.shipped_files``)
into the runtime and runs it against the rollout's interception endpoint.

Guarantees:

* One grader, one set of limits. Every python_test is graded by
  ``glyph.grading.grade`` under ``GlyphHarnessConfig.limits()``: on the local
  runtime by the trusted test service, on a container runtime by the shipped
  grader in the program's process (``tester.kind = "local"``). finalize
  grades under the same limits (``glyph.record.HarnessRecord.limits``, written
  here before the program starts).
* On a container, the sandbox mode is ``LOCAL_SANDBOX`` (``auto-or-bare``):
  the strongest isolating mode the container allows, else ``bare``. That is
  acceptable there because the container is the isolation and python_test's
  answers are only the agent's: finalize re-grades every claim in glyph's
  sandbox on the trusted side. The program records the mode that graded
  (``tester_sandbox``). The runtime needs ``python3`` >= 3.10 with ctypes on
  Linux >= 5.3; elsewhere the first python_test is a tester fault.
* Everything it records is one typed record, ``glyph.record.HarnessRecord``
  (``trace.info["glyph_harness"]``): written before the program starts
  (limits, protocol) and again when it has exited. On the local runtime the
  test service's log of the rollout (``service_log``) is recorded; finalize
  trusts it.
* How the episode ended is decided from trusted records, never from the
  trace alone (``glyph.envs.mbpp.finalize.check_end``): on the local runtime
  the program's report to the test service (``service_end``, None when it
  never reported); on every runtime what verifiers' interception server
  recorded of the model's replies (``interception_record``: up to the
  program's exit, with the protocol settings in ``protocol``). Code beside
  the program on a container can rewrite the trace, not those.
* Faults are errors, not zeros. A fault exit of the program
  (``ENDPOINT_FAILED`` 97, ``TESTER_FAILED`` 98) fails the rollout with its
  cause (a ``glyph.record`` fault record) where it can be trusted: on the
  local runtime (no model-written code runs beside the program), and on a
  container only for an endpoint fault that verifiers' interception server
  recorded (``model_call_failure``). Any other exit is scored 0 by finalize,
  with the reason.
"""

from __future__ import annotations

import json
import os
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field, field_validator, model_validator

from glyph import profiles, record
from glyph.agent import program
from glyph.agent.profiles.glyph import DEFAULT_BUDGET, DEFAULT_TEST_COST
from glyph.agent.program import ENDPOINT_FAILED, TESTER_FAILED
from glyph.envs import bundle, start
from glyph.envs.mbpp.finalize import ModelReplies
from glyph.layers import shipped_files
from glyph.record import HarnessRecord, InterceptionRecord, ProtocolRecord, ServiceEnd
from glyph.sandbox import Limits

PROGRAM_DIR = ".glyph/program"  # under .glyph: the agent's tools refuse every path there
BUNDLE = ".glyph/program.bundle"
COLD = bundle.argv("python3", BUNDLE, PROGRAM_DIR)
"""The cold start: one file written (``BUNDLE``: the shipped set and its bytecode), unpacked under
``PROGRAM_DIR`` by the command itself, which then runs the program (``glyph.envs.bundle``)."""
SHIPPED = shipped_files()
"""What the runtime gets under ``PROGRAM_DIR``: the shipped layers (``glyph.layers``), whole."""
LOCAL_SANDBOX = "auto-or-bare"
"""The sandbox mode of python_test's grader on a container runtime (the module docstring says why)."""


# The program's fault exits (``glyph.agent.program``) the harness turns into errored rollouts.
FAULTS = {ENDPOINT_FAILED: "endpoint_error", TESTER_FAILED: "tester_error"}
SWITCHES = ("budget_line", "free_text", "feedback", "bad_call")
"""The harness's switches, each one of glyph's departures (a profile says which it takes: ``glyph.profiles``)."""


class GlyphHarnessConfig(vf.HarnessConfig):
    profile: str = profiles.DEFAULT
    """The protocol the agent speaks (``glyph.profiles``). ``study`` (the default): the PREDICT study's
    (``glyph.agent.study``, ``glyph.agent.profiles.study``): its prompts (no budget told), one-line
    turns, its fixed observation strings, a failed call that costs 1, ``solution.py`` in the task's
    project folder with the study's placeholder; ``max_tool_calls``, ``tool_timeout`` (wall clock,
    as the study's) and ``model_timeout`` default to the study's (8, 30 s, 1800 s); the four
    switches below turn on one of glyph's departures at a time. ``glyph``: the bundle of glyph's
    recommended protocol (``glyph.agent.profiles.glyph``): its prompts with a tool manual, the budget
    named in the system prompt and after every RESULT, free text around a call, class-name feedback,
    a bad call ending the episode, ``test_cost`` and ``revise_feedback`` (the switches do not apply:
    it has them all). The task must come from a taskset of the same profile. glyph's trusted grader,
    tamper checks and sandbox are on in both: they change no honest rollout's outcome (where the
    study's own classifier would take a forged result for a PASS, glyph's grader decides)."""
    budget_line: bool | None = None
    """Study profile: tell the agent its budget, as glyph does (the system prompt ends with
    glyph's budget sentence, each RESULT with the calls left). Off (the study): the agent is
    never told; the study's finding that REVISE trajectories hit the 8-call cap 95-99% of the
    time may depend on it."""
    free_text: bool | None = None
    """Study profile: accept text around the protocol lines (one CALL or FINAL line, and on an
    Arm B prediction turn one PREDICTION and one DECISION, anywhere). Off (the study): a turn is
    exactly one line (a prediction turn exactly three), anything else a protocol error."""
    feedback: Literal["study", "outcome"] | None = None
    """Study profile: ``outcome`` adds the outcome class to each python_test RESULT (as glyph names
    it). ``study`` (the default): the study's fixed strings, which say "tests failed" for
    ASSERTION_FAILURE and OTHER alike."""
    bad_call: Literal["costs_one", "ends"] | None = None
    """Study profile: ``ends``: an unknown tool or an apply_patch without its arguments ends the
    episode as a protocol error (glyph's rule). ``costs_one`` (the default, the study's): the call
    answers ``status: failed``, costs 1, and the episode goes on."""
    max_tool_calls: int = Field(DEFAULT_BUDGET, ge=1)
    """Tool calls an episode may make: the system prompt names it (glyph's profile)."""
    tool_timeout: float = Field(profiles.TOOL_TIMEOUT_S, gt=0)
    """Seconds of CPU one grading may use (wall clock: twice that; the study's: the same): each
    python_test and finalize's gradings of the rollout (``limits()``)."""
    test_cost: int = Field(DEFAULT_TEST_COST, ge=1)
    """Budget units one visible python_test costs."""
    revise_feedback: Literal["none", "outcome"] = "none"
    """Whether a REVISE shows the agent the shadow test's outcome (the study: none)."""
    model_timeout: float = Field(300.0, gt=0)
    """Seconds one model call may take."""
    start: Literal["warm", "cold"] = "warm"
    """How the agent program starts (``glyph.envs.start``). ``warm`` (the default): on a runtime
    with a local workspace (verifiers' subprocess runtime), a fork of a server that imported the
    program once, its files written once per env process; elsewhere (a container) ``cold``.
    ``cold``: a fresh ``python3 -I`` on the shipped files written into each rollout's runtime."""

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        profiles.get(name)
        return name

    @model_validator(mode="before")
    @classmethod
    def _profile_settings(cls, data):
        """A setting not given is the profile's (``Profile.settings``: the study's are the study's)."""
        if isinstance(data, dict):
            data = {**profiles.get(data.get("profile", cls.model_fields["profile"].default)).settings, **data}
        return data

    @model_validator(mode="after")
    def _switches_of_the_profile(self):
        """A switch the profile does not take is refused (the glyph profile has glyph's rules already)."""
        self.switches()
        return self

    def switches(self) -> dict | None:
        """The switches the program runs under, as the profile reads the ones set (None: it takes none)."""
        given = {k: getattr(self, k) for k in SWITCHES if getattr(self, k) is not None}
        return profiles.get(self.profile).switch_values(given)

    def limits(self) -> Limits:
        """The grading limits of every python_test and of finalize's grading (``Profile.limits``):
        ``tool_timeout`` seconds of CPU, twice that of wall clock (the study's: wall clock)."""
        return profiles.get(self.profile).limits(self.tool_timeout)


def program_config(cfg: GlyphHarnessConfig, arm: str, task_text: str, setup: str, visible_tests: list[str],
                   task_id: int, tester: dict, endpoint: dict) -> dict:
    """The agent program's configuration (``.glyph/config.json``), built in
    this one place from the harness config: the profile's agent half (the
    program asks it for the episode), the budget, the costs, the grading
    limits (``cfg.limits()``), the task's project folder, the switches and
    the opening messages at the harness's budget (``AgentProfile.messages``).
    ``tester``: how python_test is graded (``{"kind": "service", "url"}`` or
    ``{"kind": "local", ...}``); ``endpoint``: ``{"base_url", "model"}``."""
    agent = profiles.get(cfg.profile).agent
    project, switches = agent.project(task_id), cfg.switches()
    return {"profile": agent.name, "arm": arm, "max_tool_calls": cfg.max_tool_calls, "test_cost": cfg.test_cost,
            "revise_feedback": cfg.revise_feedback, "tool_timeout": cfg.tool_timeout,
            "limits": limits_record(cfg.limits()), "model_timeout": cfg.model_timeout, "tester": tester,
            "endpoint": endpoint, "project": project, "switches": switches,
            "messages": agent.messages(arm, task_text, setup, list(visible_tests), project, cfg.max_tool_calls,
                                       switches)}


def limits_record(limits: Limits) -> dict:
    """What ``HarnessRecord.limits`` and the program config carry."""
    return {"cpu_s": limits.cpu_s, "wall_s": limits.wall_s}


def limits_from_record(stored: object) -> Limits:
    """The ``Limits`` a trace was graded under (``HarnessRecord.limits``);
    the default harness's when absent. A malformed one raises ValueError."""
    if stored is None:
        return GlyphHarnessConfig().limits()
    if not isinstance(stored, dict) or set(stored) != {"cpu_s", "wall_s"}:
        raise ValueError(f"the harness record's limits are {stored!r}, not {{'cpu_s', 'wall_s'}}")
    return Limits(cpu_s=float(stored["cpu_s"]), wall_s=float(stored["wall_s"]))


class GlyphHarness(vf.Harness[GlyphHarnessConfig]):
    NEEDS_CONTAINER = False  # on the local runtime, python_test runs in glyph's sandbox

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        cfg = self.config
        if data.profile != cfg.profile:
            raise ValueError(f"the harness's profile is {cfg.profile!r}, the task's {data.profile!r}: set "
                             f"--env.taskset.profile and --env.agent.harness.profile to the same")
        p = profiles.get(cfg.profile)
        agent = p.agent
        local = isinstance(runtime, _subprocess_runtime())
        limits = cfg.limits()
        project = agent.project(data.task_id)
        rec = HarnessRecord(limits=limits_record(limits), env_pid=os.getpid(),
                            protocol=ProtocolRecord(arm=data.arm, max_tool_calls=cfg.max_tool_calls,
                                                    test_cost=cfg.test_cost, profile=cfg.profile, project=project,
                                                    switches=cfg.switches()))
        record.store_harness(trace.info, rec)
        if local:
            from glyph.envs.mbpp.test_service import get_service
            service = get_service()
            service.register(secret, data.hidden_setup, data.visible_tests, limits, p.semantics)
            tester = {"kind": "service", "url": service.url, "end_url": service.end_url}
        else:  # a container runtime: the container is the isolation
            tester = {"kind": "local", "sandbox": LOCAL_SANDBOX, "setup": data.hidden_setup,
                      "tests": data.visible_tests, "semantics": p.semantics.name}
        config = program_config(cfg, data.arm, data.task_text, data.hidden_setup, data.visible_tests, data.task_id,
                                tester, {"base_url": endpoint, "model": ctx.model})
        warm = cfg.start == "warm" and local and start.workspace_of(runtime) is not None
        if not warm:  # warm, the server runs the shipped set from its own folder (written once)
            await runtime.write(BUNDLE, bundle.build())
        await runtime.write(agent.solution(project), agent.placeholder.encode())
        await runtime.write(program.CONFIG, json.dumps(config).encode())
        env = {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": program.CONFIG}
        started = {"start": "warm" if warm else "cold"}
        try:
            if warm:
                res = await start.run_warm(runtime, env)
                started.update(cpu_s=res.cpu_s, server_cpu_s=res.server_cpu_s)
            else:
                res = await runtime.run_program(COLD, env)
        finally:
            if local:
                released = service.release(secret)
                rec.service_log = released["log"]
                rec.service_end = None if released["end"] is None else ServiceEnd(**released["end"])
                rec.service_faults = released["faults"] or None
        # The interception's record as the program left it: what is recorded later is no turn of its.
        rec.interception = InterceptionRecord(calls=len(getattr(trace, "calls", None) or []),
                                              stop_condition=getattr(trace, "stop_condition", None))
        rec.program = {"exit_code": res.exit_code, "stderr": (res.stderr or "")[-2000:], **started}
        confirmed = None
        if not local and res.exit_code == ENDPOINT_FAILED:
            confirmed = rec.endpoint_fault_confirmed = model_call_failure(trace)
        record.store_harness(trace.info, rec)
        if res.exit_code in FAULTS and (local or confirmed):
            lines = (res.stderr or "").strip().splitlines()
            fault = FAULTS[res.exit_code]
            why = lines[-1][-500:] if lines else f"{fault}: the program exited {res.exit_code}"
            record.store(trace.info, record.fault_record(fault, why, confirmed))
            return vf.ProgramResult(exit_code=res.exit_code, stdout=res.stdout, stderr=why)
        # A crashed program is scored 0 by finalize with the reason, not left as an unscored error.
        return vf.ProgramResult(exit_code=0, stdout=res.stdout, stderr=res.stderr)


def model_call_failure(trace) -> str | None:
    """The trusted record that the rollout's last model call failed upstream,
    as one line; None when there is none.

    verifiers' interception server (on the host) records each upstream
    exchange in ``trace.calls``, with ``error`` when it committed no turn
    (``glyph.vfcompat``, 6.). Code beside the program cannot write there, but
    it could send requests of its own, so only a failure no request explains
    counts: a 5xx, a 429 or no status, on the last exchange, with no
    ``@stop`` on the trace. A call the program gave up on while the upstream
    call still ran is not recorded yet, so it is not confirmed."""
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


def interception_record(trace, rec: HarnessRecord | None) -> ModelReplies | None:
    """The model's replies as verifiers' interception server recorded them
    (a ``glyph.envs.mbpp.finalize.ModelReplies``), or None for a trace the
    harness did not run (``rec``, its harness record, has no protocol).

    The server appends one ``ModelCall`` per upstream exchange to
    ``trace.calls``; one that committed a turn names the assistant node it
    committed (``ModelCall.node``, an index into ``trace.nodes``), whose
    ``message.content`` is the text served to the program (``glyph.vfcompat``,
    8.). Code in the runtime cannot write there; it could only add exchanges
    of its own. Only the exchanges recorded by the program's exit count
    (``rec.interception``), and a stop condition verifiers had set by then is
    passed on (a reply it committed and then refused never reached the
    program)."""
    if rec is None or rec.protocol is None:
        return None
    proto, at_exit = rec.protocol, rec.interception
    calls = list(trace.calls)[:at_exit.calls if at_exit is not None else len(trace.calls)]
    replies = []
    for call in calls:
        if call.node is None:  # an exchange that committed no turn: the program got no reply from it
            continue
        content = trace.nodes[call.node].message.content
        replies.append(content if isinstance(content, str) else None)
    return ModelReplies(tuple(replies), proto.arm, proto.max_tool_calls, proto.test_cost,
                        at_exit.stop_condition if at_exit is not None else None, profile=proto.profile,
                        project=proto.project, switches=proto.switches)


def _subprocess_runtime() -> type:
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime
    return SubprocessRuntime
