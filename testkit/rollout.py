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
``GlyphHarness``. ``Scripted`` stands in for the policy server where a test
gives the model's replies itself; the harness config's ``profile``
(``glyph.profiles``) gives the task's row, the workspace and the prompt.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from glyph import profiles
from glyph.agent import program
from glyph.data.mbpp import MbppTask
from glyph.envs.mbpp.finalize import ModelReplies, TaskTests, verify
from glyph.envs.mbpp.harness import LOCAL_SANDBOX, GlyphHarnessConfig, program_config
from glyph.envs.mbpp.test_service import SandboxTestService
from glyph.localhttp import JsonHandler, LocalServer
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


class Scripted:
    """A chat endpoint answering turn ``i`` (the number of assistant messages
    in the request) with ``replies[i]``, keeping what it served under each
    bearer token as the policy server does (``take_replies``). Use it as a
    context manager."""

    def __init__(self, replies: list[str]) -> None:
        served: dict[str, list[str]] = {}
        self.served = served

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                messages = self.read_json(64 << 20)["messages"]
                turn = sum(m["role"] == "assistant" for m in messages)
                if turn >= len(replies):
                    return self.send_json(500, {"error": {"message": f"the script has no reply {turn + 1}"}})
                content = replies[turn]
                served.setdefault(self.headers.get("Authorization", ""), []).append(content)
                self.send_json(200, {"id": f"s{turn}", "object": "chat.completion", "created": 0, "model": "script",
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": content}}]})

        self.httpd = LocalServer(Handler)
        self.httpd.start("glyph-scripted-model")
        self.base_url = f"http://127.0.0.1:{self.httpd.port}/v1"

    def take_replies(self, secret: str) -> list[str]:
        return self.served.pop(f"Bearer {secret}", [])

    def close(self) -> None:
        self.httpd.close()

    def __enter__(self) -> Scripted:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Rollouts:
    """A policy server and a test service for many rollouts (close it, or use it as a context manager)."""

    def __init__(self, tasks: dict[str, MbppTask], harness: GlyphHarnessConfig | None = None) -> None:
        self.harness = harness or GlyphHarnessConfig(profile="glyph", tool_timeout=3, model_timeout=10)
        self.policies = PolicyServer(tasks, record_replies=True).start()
        self.service = SandboxTestService()

    def play(self, task: MbppTask, arm: str, policy: str, workspace: Path, *, tester: str = "service",
             service_url: str | None = None,
             forge: Callable[[dict], None] | None = None, files: dict[str, str] | None = None,
             save: Callable[[dict], None] | None = None, model: Scripted | None = None, **config) -> Played:
        """Run ``policy`` on ``task`` in ``workspace`` (created; ``solution.py``
        the placeholder) and finalize it. ``tester``: ``service`` (the local
        runtime) or ``local`` (the container branch: glyph's grader in the
        program's process); ``service_url`` replaces the service's URL (a proxy
        in front of it); ``forge(trace)`` edits the trace before finalize reads
        it; ``files`` are written into the workspace beside ``solution.py``;
        ``save`` is the program's per-turn save hook; ``model`` (a ``Scripted``)
        answers instead of the policy server; ``config`` overrides keys of the
        program config. The task is read as the harness's profile reads it
        (``Profile.row``: the study's normalises its text, setup and tests)."""
        limits = self.harness.limits()
        profile = profiles.get(self.harness.profile)
        row = profile.row(task)
        project = profile.agent.project(task.task_id)
        setup, visible = row.setup, list(row.tests)
        solution = profile.agent.lay_out(str(workspace), project)
        for name, text in (files or {}).items():
            (workspace / name).write_text(text)
        secret = secrets.token_hex(16)
        self.service.register(secret, setup, visible, limits, profile.semantics)
        spec = ({"kind": "service", "url": service_url or self.service.url, "end_url": self.service.end_url}
                if tester == "service" else
                {"kind": "local", "sandbox": LOCAL_SANDBOX, "setup": setup, "tests": visible,
                 "semantics": profile.semantics.name})
        served = model or self.policies
        cfg = program_config(self.harness, arm, row.text, setup, visible, task.task_id, spec,
                             {"base_url": served.base_url, "model": policy})
        cfg.update(config)
        try:
            with contextlib.chdir(workspace):
                trace = program.run(cfg, secret, save=save).to_json()
        finally:
            released = self.service.release(secret)
            replies = ModelReplies(tuple(served.take_replies(secret)), cfg["arm"], int(cfg["max_tool_calls"]),
                                   int(cfg["test_cost"]), profile=profile.name, project=project,
                                   switches=cfg.get("switches"))
        if forge is not None:
            forge(trace)
        final = Path(solution).read_bytes().decode("utf-8", "surrogateescape")
        tests = TaskTests(setup, tuple(visible), tuple(visible))
        log = released["log"] if tester == "service" else None
        record = verify(json.loads(json.dumps(trace)), final, tests, limits, log, service_end=released["end"],
                        replies=replies, profile=profile.name)
        return Played(trace, record, workspace, released if tester == "service" else {}, replies)

    def close(self) -> None:
        self.service.close()
        self.policies.close()

    def __enter__(self) -> Rollouts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
