"""A scripted OpenAI-compatible chat-completions server, for testing the live
path (``glyph flywheel run --agent openai --writer openai``) without a model.

It is glyph's one HTTP server (``glyph.localhttp``): 127.0.0.1 only. Every
POST to ``.../chat/completions`` is one *attempt* of a *conversation*: its
messages and sampling seed, which a client's retry sends again unchanged.
``script(request)`` says what each conversation gets (a :class:`Script`):
the faults of its first attempts, in order, then what every later attempt
gets: a good reply (:data:`OK`), or one fault for ever. A good reply's text
is ``reply(request)``: a recorded reply, the reference agent's, a lesson.

The faults (:data:`FAULTS`) are what a real endpoint does wrong: a 429 with
``Retry-After``, a 500 or 503, a 200 whose body is torn JSON, a page that is
not JSON, a completion with no choices, an empty or a missing content, a
reply slower than the client waits (``slow_s``), and a dropped connection.

Every request is recorded (:attr:`FakeOpenAI.log`), with its attempt number
and what it was served, so a test can check what reached the server.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from glyph.localhttp import JsonHandler, LocalServer

OK = "ok"
FAULTS = ("429", "500", "503", "malformed", "not_json", "no_choices", "empty", "null_content", "slow", "drop")
"""Every fault kind the server plays, besides :data:`OK`."""
FAILED_STATUSES = {"429": 429, "500": 500, "503": 503}


@dataclass(frozen=True)
class Script:
    """What one conversation gets: ``first`` for its first attempts, then ``then`` for every later one."""

    first: tuple[str, ...] = ()
    then: str = OK

    def __post_init__(self) -> None:
        for kind in (*self.first, self.then):
            if kind != OK and kind not in FAULTS:
                raise ValueError(f"unknown fault {kind!r} (known: {', '.join(FAULTS)})")

    def kind(self, attempt: int) -> str:
        return self.first[attempt] if attempt < len(self.first) else self.then

    @property
    def answers(self) -> bool:
        """Whether a client retrying long enough gets a good reply."""
        return self.then == OK


@dataclass
class Request:
    """One request as the server received it, and what it served."""

    body: dict
    conversation: str
    attempt: int
    """0 for a conversation's first request, 1 for its first retry, ..."""
    kind: str = ""
    received: float = field(default_factory=time.monotonic)

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages") or []

    @property
    def system(self) -> str:
        first = self.messages[0] if self.messages else {}
        return first.get("content") or "" if first.get("role") == "system" else ""

    @property
    def user(self) -> str:
        users = [m.get("content") or "" for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    def text(self) -> str:
        """Everything the request carries that a model would read."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


def conversation_of(body: dict) -> str:
    """A conversation's identity: its messages and seed (what a retry resends)."""
    return json.dumps([body.get("messages"), body.get("seed")], sort_keys=True)


class FakeOpenAI(LocalServer):
    """``with FakeOpenAI(reply, script) as server: ... server.url ...``."""

    def __init__(self, reply: Callable[[Request], str], script: Callable[[Request], Script] = lambda r: Script(),
                 *, retry_after: float = 0.0, slow_s: float = 30.0) -> None:
        super().__init__(_Handler)
        self.reply, self.script = reply, script
        self.retry_after, self.slow_s = retry_after, slow_s
        self.log: list[Request] = []
        self.lock = threading.Lock()
        self._attempts: dict[str, int] = {}
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def served(self, kind: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.log if kind is None or r.kind == kind]

    def __enter__(self) -> Self:
        self.start("fake-openai")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()  # a slow reply gives up at once
        super().close()

    # -- the handler's side

    def receive(self, body: dict) -> tuple[Request, str]:
        conversation = conversation_of(body)
        with self.lock:
            attempt = self._attempts.get(conversation, 0)
            self._attempts[conversation] = attempt + 1
            request = Request(body, conversation, attempt)
            self.log.append(request)
        kind = self.script(request).kind(attempt)
        with self.lock:
            request.kind = kind
        text = self.reply(request) if kind in (OK, "slow") else ""
        return request, text

    def wait_or_stop(self, seconds: float) -> bool:
        """Wait ``seconds``; False if the server is closing."""
        return not self._stop.wait(seconds)


def completion(model: str, content: str | None, finish_reason: str = "stop") -> dict:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class _Handler(JsonHandler):
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: FakeOpenAI

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = self.read_json(1 << 24)
        except ValueError as exc:
            self.send_json(400, {"error": {"message": f"bad request: {exc}"}})
            return
        request, text = self.server.receive(body)
        kind, model = request.kind, body.get("model", "")
        try:
            self._answer(kind, model, text)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a slow reply)
            pass

    def _answer(self, kind: str, model: str, text: str) -> None:
        if kind == OK:
            self.send_json(200, completion(model, text))
        elif kind in FAILED_STATUSES:
            status = FAILED_STATUSES[kind]
            data = json.dumps({"error": {"message": f"scripted {status}", "type": "server_error"}}).encode()
            headers = {"Retry-After": f"{self.server.retry_after:g}"} if kind == "429" else {}
            self._raw(status, "application/json", data, headers)
        elif kind == "malformed":
            data = json.dumps(completion(model, text or "x")).encode()
            self._raw(200, "application/json", data[: len(data) // 2])
        elif kind == "not_json":
            self._raw(200, "text/html", b"<html><body>502 Bad Gateway</body></html>")
        elif kind == "no_choices":
            self.send_json(200, completion(model, "") | {"choices": []})
        elif kind == "empty":
            self.send_json(200, completion(model, ""))
        elif kind == "null_content":
            self.send_json(200, completion(model, None, finish_reason="length"))
        elif kind == "slow":
            if self.server.wait_or_stop(self.server.slow_s):
                self.send_json(200, completion(model, text))
        elif kind == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:  # pragma: no cover (Script checks every kind)
            raise AssertionError(kind)

    def _raw(self, status: int, content_type: str, data: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
