"""The agent program's POST (``glyph.agent.httppost``): what a caller sees is
what ``urllib`` showed it, for every way an answer can come (a length, chunks,
to the end), fail (a status, a refusal, a break, silence) or need ``urllib``."""

from __future__ import annotations

import contextlib
import json
import socket
import threading

import pytest

from glyph.agent import httppost
from glyph.localhttp import JsonHandler, LocalServer


@contextlib.contextmanager
def raw_server(answer: bytes | None, close: bool = True):
    """A 127.0.0.1 server that reads one request and sends ``answer`` (None: never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    got, stop = [], threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            got.append((head.decode(), body))
            if answer is None:
                stop.wait(30)
            else:
                conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/x", got
    finally:
        stop.set()
        listener.close()
        t.join(30)


def test_a_json_answer_round_trips_through_a_real_server():
    class Echo(JsonHandler):
        def do_POST(self) -> None:
            body = self.read_json(1 << 20)
            self.send_json(200, {"path": self.path, "auth": self.headers.get("Authorization"), "body": body})

    httpd = LocalServer(Echo)
    httpd.start("echo")
    try:
        url = f"http://127.0.0.1:{httpd.port}/v1/chat/completions"
        out = json.loads(httppost.post(url, b'{"a": 1}', {"Content-Type": "application/json",
                                                          "Authorization": "Bearer s"}, 10, 1 << 20))
    finally:
        httpd.close()
    assert out == {"path": "/v1/chat/completions", "auth": "Bearer s", "body": {"a": 1}}


@pytest.mark.parametrize("answer,cap,want", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 100, b"hello"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 3, b"hel"),  # at most cap bytes, as resp.read(cap)
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n", 100, b"hello"),
    (b"HTTP/1.0 200 OK\r\n\r\nhello world", 100, b"hello world"),  # no length: to the end
])
def test_an_answer_is_read_however_it_is_framed(answer, cap, want):
    with raw_server(answer) as (url, got):
        assert httppost.post(url, b"{}", {"X-Test": "1"}, 10, cap) == want
    head, body = got[0]
    assert head.startswith("POST /v1/x HTTP/1.1\r\n") and "X-Test: 1" in head and body == b"{}"


def test_a_status_that_is_not_2xx_is_an_error_with_its_code_and_body():
    answer = b'HTTP/1.1 503 Busy\r\nContent-Length: 17\r\n\r\n{"error": "down"}'
    with raw_server(answer) as (url, _), pytest.raises(httppost.HTTPStatusError) as err:
        httppost.post(url, b"{}", {}, 10, 100)
    assert err.value.code == 503 and json.loads(err.value.read(1 << 16)) == {"error": "down"}


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 200 OK\r\nContent-Le", b"garbage\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"])
def test_an_answer_that_breaks_off_or_is_not_http_is_a_connection_error(answer):
    with raw_server(answer) as (url, _), pytest.raises(ConnectionError):
        httppost.post(url, b"{}", {}, 10, 100)


def test_a_refused_connection_is_a_connection_error():
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectionError):
        httppost.post(f"http://127.0.0.1:{port}/", b"{}", {}, 10, 100)


def test_silence_past_the_timeout_is_a_timeout():
    with raw_server(None) as (url, _), pytest.raises(TimeoutError):
        httppost.post(url, b"{}", {}, 0.5, 100)


@pytest.mark.parametrize("url,env", [("https://127.0.0.1:9/v1", {}), ("http://127.0.0.1:9/v1", {"http_proxy": "x"})])
def test_https_or_a_proxy_goes_through_urllib(monkeypatch, url, env):
    for k in [k for k in __import__("os").environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    seen = []
    monkeypatch.setattr(httppost, "_post_urllib", lambda *a: seen.append(a[0]) or b"ok")
    assert httppost.post(url, b"{}", {}, 1, 10) == b"ok" and seen == [url]
