"""``glyph serve``: an OpenAI-compatible chat endpoint on 127.0.0.1 that
plays a reference policy (``glyph.policies.policies``). The policy is the
``--policy`` given at start, or else the request's ``model`` field (so
``vf-eval -m oracle`` picks it)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from glyph.policies.policies import Planner, UnknownTask, known
from glyph.tasks.mbpp import MbppTask


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # many rollouts connect at once
    daemon_threads = True


class PolicyServer:
    def __init__(self, tasks: dict[str, MbppTask], policy: str | None = None, port: int = 0,
                 seed: int = 0) -> None:
        if policy is not None and not known(policy):
            raise ValueError(f"unknown policy {policy!r}")
        self.planner = Planner(tasks, seed)
        self.policy = policy
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": p, "object": "model"} for p in
                                                             ("oracle", "recover", "revise", "hack", "mix")]})

            def do_POST(self) -> None:  # noqa: N802
                server.requests += 1
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                    messages = body["messages"]
                    policy = server.policy or str(body.get("model", ""))
                except (ValueError, KeyError, TypeError):
                    return self._send(400, {"error": {"message": "malformed request"}})
                if not known(policy):
                    return self._send(404, {"error": {"message": f"unknown policy {policy!r}"}})
                if policy == "fault-500":
                    return self._send(500, {"error": {"message": "injected failure"}})
                if policy == "fault-hang":
                    time.sleep(3600)
                try:
                    content = server.planner.reply(policy, messages)
                except UnknownTask as exc:
                    return self._send(404, {"error": {"message": str(exc)}})
                self._send(200, {
                    "id": f"glyph-{server.requests}", "object": "chat.completion", "created": int(time.time()),
                    "model": policy,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": len(content) // 4,
                              "total_tokens": len(content) // 4}})

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="glyph-policy-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> "PolicyServer":
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
