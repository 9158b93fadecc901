"""The one way glyph serves HTTP: JSON over a threading server bound to
127.0.0.1 only (the test service, the reference-policy server)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer(ThreadingHTTPServer):
    request_queue_size = 256  # many rollouts connect at once
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self, name: str) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: callers record what matters
        pass

    def read_json(self, limit: int) -> object:
        """The request body as JSON; ``ValueError`` if absent, too large or not JSON."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= limit:
            raise ValueError(f"body of {length} bytes (limit {limit})")
        try:
            return json.loads(self.rfile.read(length))
        except RecursionError:  # nested past the stack: as unreadable as any other body that is not JSON
            raise ValueError("body nested too deep") from None

    def send_json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
