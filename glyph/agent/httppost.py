"""One HTTP POST, for the agent program (stdlib only, shipped).

Written by hand on ``socket`` because a cold program spends a large share of
its start importing ``urllib.request`` (``http.client``, ``email``, ``ssl``,
``tempfile``); the plain-HTTP case on the rollout's endpoint and the test
service needs none of it. Anything else goes through ``urllib.request``,
imported then: an ``https`` URL, or a proxy named in the environment
(``*_proxy``, which ``urllib`` would honour).

What a caller sees is what it saw with ``urllib``: the answer's body (at most
``cap`` bytes) for a 2xx; ``HTTPStatusError`` (``code``, ``read()``) for any
other status; ``ConnectionError`` for a failure to connect or send (``urllib``
wraps those in ``URLError``) and for an answer that breaks off or is not
HTTP (``http.client``'s ``RemoteDisconnected``, ``BadStatusLine``);
``TimeoutError`` for an answer slower than ``timeout`` (each wait, as a
socket timeout is; a connect timeout is a ``ConnectionError``, as ``urllib``
raises it). Each request has its own connection (``Connection: close``, as
``urllib`` sends).
"""

from __future__ import annotations

import os
import socket

MAX_HEAD = 64 * 1024


class HTTPStatusError(Exception):
    """An answer whose status is not 2xx (``urllib.error.HTTPError``'s ``code`` and ``read``)."""

    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(f"HTTP Error {code}")
        self.code, self._body = code, body

    def read(self, n: int = -1) -> bytes:
        return self._body if n < 0 else self._body[:n]


def _proxied() -> bool:
    return any(k.lower().endswith("_proxy") and v for k, v in os.environ.items())


def post(url: str, body: bytes, headers: dict[str, str], timeout: float, cap: int) -> bytes:
    if not url.startswith("http://") or _proxied():
        return _post_urllib(url, body, headers, timeout, cap)
    rest = url[len("http://"):]
    hostport, slash, path = rest.partition("/")
    path = "/" + path if slash else "/"
    if hostport.startswith("["):  # [v6]:port
        host, _, port_s = hostport[1:].partition("]")
        port_s = port_s.lstrip(":")
    else:
        host, _, port_s = hostport.partition(":")
    port = int(port_s) if port_s else 80
    head = [f"POST {path} HTTP/1.1", f"Host: {hostport}", "Accept-Encoding: identity",
            f"Content-Length: {len(body)}", "Connection: close", "User-Agent: glyph-agent"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    try:
        sock = socket.create_connection((host, port), timeout)
    except OSError as exc:
        raise ConnectionError(f"could not connect to {hostport}: {exc}") from None
    with sock:
        try:
            sock.sendall(request)
        except OSError as exc:
            raise ConnectionError(f"could not send to {hostport}: {exc}") from None
        return _answer(sock, cap)


def _answer(sock: socket.socket, cap: int) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection without an answer" if not buf
                                  else "the answer broke off in its headers")
        buf += chunk
        if len(buf) > MAX_HEAD and b"\r\n\r\n" not in buf:
            raise ConnectionError("the answer's headers are too long")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP answer: {lines[0][:100]!r}")
    code = int(parts[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if "chunked" in fields.get("transfer-encoding", "").lower():
        data = _chunked(sock, rest, cap)
    elif "content-length" in fields:
        try:
            length = int(fields["content-length"])
        except ValueError:
            raise ConnectionError("the answer's Content-Length is not a number") from None
        data = _exactly(sock, rest, min(length, cap), complete=length <= cap)
    else:
        data = _to_eof(sock, rest, cap)
    if not 200 <= code <= 299:
        raise HTTPStatusError(code, data)
    return data


def _exactly(sock: socket.socket, buf: bytes, n: int, complete: bool) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            if complete:
                raise ConnectionError("the answer broke off before its Content-Length")
            break
        buf += chunk
    return buf[:n]


def _to_eof(sock: socket.socket, buf: bytes, cap: int) -> bytes:
    while len(buf) < cap:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf[:cap]


def _chunked(sock: socket.socket, buf: bytes, cap: int) -> bytes:
    out = b""
    while len(out) < cap:
        while b"\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the chunked answer broke off")
            buf += chunk
        size_line, _, buf = buf.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip() or b"x", 16)
        except ValueError:
            raise ConnectionError("a chunk size is not hexadecimal") from None
        if size == 0:
            break
        while len(buf) < size + 2:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the chunked answer broke off")
            buf += chunk
        out += buf[:size]
        buf = buf[size + 2:]
    return out[:cap]


def _post_urllib(url: str, body: bytes, headers: dict[str, str], timeout: float, cap: int) -> bytes:
    import http.client
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url, body, headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read(cap)
    except urllib.error.HTTPError as exc:
        raise HTTPStatusError(exc.code, exc.read(1 << 16)) from None
    except TimeoutError:
        raise
    except (urllib.error.URLError, http.client.HTTPException) as exc:
        raise ConnectionError(str(exc)) from None
