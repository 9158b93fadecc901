"""One glyph-mbpp rollout wired as the local runtime wires it, in this process:
the reference policies (``glyph.policies.server.PolicyServer``) as the model
endpoint, the trusted test service (``glyph.envs.mbpp.test_service``) grading
``python_test``, the agent program (``glyph.agent.program.run``) in a fresh
workspace, and trusted finalize (``glyph.envs.mbpp.finalize.verify``) on what
it left, with the trusted records of how the episode ended that the harness
gives it: the program's report to the service, and the replies the policy
server served under the rollout's secret (what verifiers' interception server
records). No verifiers and no interpreter start: tests and benchmarks that need
an episode use ``Rollouts.play``; ``vf-eval`` runs the same pieces through
``GlyphHarness``.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from glyph.agent import program, protocol
from glyph.data.mbpp import MbppTask
from glyph.envs.mbpp.finalize import ModelReplies, TaskTests, verify
from glyph.envs.mbpp.harness import LOCAL_SANDBOX, GlyphHarnessConfig, program_config
from glyph.envs.mbpp.test_service import SandboxTestService
from glyph.policies.server import PolicyServer
from glyph.record import MbppRecord


@dataclass
class Played:
    """What one rollout left and how finalize judged it."""

    trace: dict
    """The program's trace, as it would be written to ``.glyph/trace.json``."""
    record: MbppRecord
    workspace: Path
    service: dict
    """The test service's record of the rollout (``log``, ``faults``, ``gradings``, ``end``); empty for the
    local tester."""
    replies: ModelReplies
    """The model's replies as the endpoint served them, the record finalize replays."""


class Rollouts:
    """A policy server and a test service for many rollouts (close it, or use it as a context manager)."""

    def __init__(self, tasks: dict[str, MbppTask], harness: GlyphHarnessConfig | None = None) -> None:
        self.harness = harness or GlyphHarnessConfig(tool_timeout=3, model_timeout=10)
        self.policies = PolicyServer(tasks, record_replies=True).start()
        self.service = SandboxTestService()

    def play(self, task: MbppTask, arm: str, policy: str, workspace: Path, *, tester: str = "service",
             service_url: str | None = None,
             forge: Callable[[dict], None] | None = None, files: dict[str, str] | None = None,
             save: Callable[[dict], None] | None = None, **config) -> Played:
        """Run ``policy`` on ``task`` in ``workspace`` (created; ``solution.py``
        the placeholder) and finalize it. ``tester``: ``service`` (the local
        runtime) or ``local`` (the container branch: glyph's grader in the
        program's process); ``service_url`` replaces the service's URL (a proxy
        in front of it); ``forge(trace)`` edits the trace before finalize reads
        it; ``files`` are written into the workspace beside ``solution.py``;
        ``save`` is the program's per-turn save hook; ``config`` overrides keys
        of the program config."""
        limits = self.harness.limits()
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / protocol.SOLUTION_FILE).write_text(protocol.PLACEHOLDER)
        for name, text in (files or {}).items():
            (workspace / name).write_text(text)
        secret = secrets.token_hex(16)
        self.service.register(secret, task.test_setup_code, list(task.test_list), limits)
        spec = ({"kind": "service", "url": service_url or self.service.url, "end_url": self.service.end_url}
                if tester == "service" else
                {"kind": "local", "sandbox": LOCAL_SANDBOX, "setup": task.test_setup_code,
                 "tests": list(task.test_list)})
        cfg = program_config(self.harness, arm, task.text, task.test_list, spec,
                             {"base_url": self.policies.base_url, "model": policy})
        cfg.update(config)
        try:
            with contextlib.chdir(workspace):
                trace = program.run(cfg, secret, save=save)
        finally:
            released = self.service.release(secret)
            replies = ModelReplies(tuple(self.policies.take_replies(secret)), cfg["arm"], int(cfg["max_tool_calls"]),
                                   int(cfg["test_cost"]))
        if forge is not None:
            forge(trace)
        final = (workspace / protocol.SOLUTION_FILE).read_bytes().decode("utf-8", "surrogateescape")
        tests = TaskTests(task.test_setup_code, tuple(task.test_list), tuple(task.test_list))
        log = released["log"] if tester == "service" else None
        record = verify(json.loads(json.dumps(trace)), final, tests, limits, log, service_end=released["end"],
                        replies=replies)
        return Played(trace, record, workspace, released if tester == "service" else {}, replies)

    def close(self) -> None:
        self.service.close()
        self.policies.close()

    def __enter__(self) -> Rollouts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
