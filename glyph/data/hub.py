"""Whether the Hugging Face hub can be reached, decided in about two seconds.

Why: ``huggingface_hub`` retries a failed request with back-off (five tries,
up to 8 s apart), so an offline ``glyph demo`` or ``vf-eval glyph-mbpp``
without a data path spent 23-29 s printing retries before its one line on
``GLYPH_MBPP_PATH``. glyph asks once, with a deadline, whether a TCP
connection to the hub's endpoint opens; when it does not (or
``HF_HUB_OFFLINE`` is set) the download looks only in the local hub cache,
so a file fetched before is still found.

What it does not decide: whether the hub will answer (a host that accepts
and then stalls is left to the hub client's own timeouts). Behind a proxy
(``HTTPS_PROXY``, ``ALL_PROXY``) a direct connection says nothing, so no
check is made and the hub client goes through the proxy as before.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

DEADLINE_S = 2.0
"""How long the check waits for name resolution and the TCP handshake together."""
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def endpoint() -> str:
    """The hub endpoint the client uses (``HF_ENDPOINT``, default ``https://huggingface.co``)."""
    from huggingface_hub import constants
    return constants.ENDPOINT


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: the client must not touch the network."""
    from huggingface_hub import constants
    return bool(constants.HF_HUB_OFFLINE)


def unreachable(url: str | None = None, deadline: float = DEADLINE_S) -> str | None:
    """Why ``url`` (default: the hub endpoint) cannot be reached, in a few
    words (``name resolution failed for huggingface.co``, ``connection refused
    by 127.0.0.1:9``, ``no connection within 2 s``); None when a TCP
    connection opened within ``deadline`` seconds, or when a proxy is
    configured (see the module docstring). Name resolution cannot be given a
    timeout, so the attempt runs in a daemon thread and is abandoned at the
    deadline."""
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    parts = urlsplit(url or endpoint())
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list[str | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=deadline).close()
            result.append(None)
        except socket.gaierror as exc:
            result.append(f"name resolution failed for {host} ({exc.strerror or exc})")
        except ConnectionRefusedError:
            result.append(f"connection refused by {host}:{port}")
        except TimeoutError:
            result.append(f"no connection to {host}:{port} within {deadline:g} s")
        except OSError as exc:
            result.append(f"cannot connect to {host}:{port} ({exc.strerror or exc})")

    worker = threading.Thread(target=attempt, name="glyph-hub-check", daemon=True)
    worker.start()
    worker.join(deadline)
    if not result:
        return f"no connection to {host}:{port} within {deadline:g} s"
    return result[0]
