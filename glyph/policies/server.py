"""``glyph serve``: an OpenAI-compatible chat endpoint on 127.0.0.1 that
plays a reference policy (``glyph.policies.policies``). The policy is the
``--policy`` given at start, or else the request's ``model`` field (so
``vf-eval -m oracle`` picks it)."""

from __future__ import annotations

import time

from glyph.localhttp import JsonHandler, LocalServer
from glyph.policies.policies import POLICIES, Planner, UnknownTask, known
from glyph.tasks.mbpp import MbppTask


class PolicyServer:
    def __init__(self, tasks: dict[str, MbppTask], policy: str | None = None, port: int = 0,
                 seed: int = 0) -> None:
        if policy is not None and not known(policy):
            raise ValueError(f"unknown policy {policy!r}")
        self.planner = Planner(tasks, seed)
        self.policy = policy
        self.requests = 0
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_json(200, {"object": "list", "data": [{"id": p, "object": "model"} for p in POLICIES]})

            def do_POST(self) -> None:  # noqa: N802
                server.requests += 1
                try:
                    body = self.read_json(64 << 20)
                    messages = body["messages"]
                    policy = server.policy or str(body.get("model", ""))
                except (ValueError, KeyError, TypeError):
                    return self.send_json(400, {"error": {"message": "malformed request"}})
                if not known(policy):
                    return self.send_json(404, {"error": {"message": f"unknown policy {policy!r}"}})
                if policy == "fault-500":
                    return self.send_json(500, {"error": {"message": "injected failure"}})
                if policy == "fault-hang":
                    time.sleep(3600)
                try:
                    content = server.planner.reply(policy, messages)
                except UnknownTask as exc:
                    return self.send_json(404, {"error": {"message": str(exc)}})
                self.send_json(200, {
                    "id": f"glyph-{server.requests}", "object": "chat.completion", "created": int(time.time()),
                    "model": policy,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": len(content) // 4,
                              "total_tokens": len(content) // 4}})

        self.httpd = LocalServer(Handler, port)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.port}/v1"

    def start(self) -> "PolicyServer":
        self.httpd.start("glyph-policy-server")
        return self

    def close(self) -> None:
        self.httpd.close()

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
