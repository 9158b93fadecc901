"""The first failed model call of a run, said on the terminal with its cause and the remedy.

Why: with no reachable model (vf-eval's default endpoint offline, a wrong
``--client.base-url``, a stopped server) every rollout of ``vf-eval
glyph-mbpp`` errors, and the terminal showed only ``ProviderError`` per
rollout and ``err 1.00``. verifiers does log the cause, as a WARNING
``model call failed: id=<trace> <type>: <error>`` from its interception
server (0.4.0 ``v1/interception/server.py:868-873, 881-886``; a60a606
``:616-621, 628-633, 701-706, 712``), but under the eval dashboard console
logging is off (``v1/cli/eval/main.py:124``, ``console=config.rich is None``;
a60a606 the same line, and its env-server workers log as the main process
does, ``v1/cli/eval/runner.py:77-83``), so the line reached only
``eval.log``.

What it does: the environment's ``start`` (``Env.start``: inside
``serving()``, before any rollout; ``Env.stop`` when it ends, 0.4.0
``v1/env.py:181-188``, a60a606 ``:178-185``) attaches a ``Watch`` to that
logger. At the first failed call that no retry will mend (the host's name
did not resolve, the connection was refused, HTTP 401/403/404) it prints, to
stderr, what failed, where, and how to run against glyph's reference
policies instead (``glyph serve`` and ``-m mix --client.base-url``); at
``stop`` one line with how many calls failed in how many rollouts. Other
failures (a 5xx, a timeout: the agent program retries those) are only
counted. It reads the log record's exception object (the last argument of
the record in both versions), never the formatted text, and changes nothing
about how the rollouts run or are recorded: they still error with their
cause, and ``glyph report`` lists each.

What it does not do: stop the run. verifiers gives an environment no way
to end an eval early (a rollout's error is recorded, never raised to the
runner: ``v1/rollout.py:621-622``), and under PRIME-RL the same
environment serves training, where ending a process is not the
environment's call. The message says Ctrl-C stops the run.
"""

from __future__ import annotations

import logging
import socket
import sys
import textwrap
from dataclasses import dataclass
from typing import TextIO

from glyph import vfcompat

LOGGER = "verifiers.v1.interception.server"
"""The logger verifiers' interception server warns on (``logging.getLogger(__name__)`` there)."""
PREFIX = "model call failed"
WIDTH = 80
SERVE_PORT = 8000
"""The port the remedy names (``glyph serve``'s default)."""


@dataclass(frozen=True)
class Cause:
    """What a failed model call says about the endpoint."""

    what: str
    """One line: why the call failed."""
    url: str | None
    """The URL the call went to, where the error carries it."""
    fatal: bool
    """No retry will mend it: every rollout will fail the same way."""


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _url(exc: BaseException) -> str | None:
    for e in _chain(exc):
        try:
            request = getattr(e, "request", None)  # httpx's errors; a property that raises when unset
        except RuntimeError:
            continue
        url = getattr(request, "url", None)
        if url is not None:
            return str(url)
    return None


def cause(exc: BaseException) -> Cause:
    """Why a model call failed, from the error verifiers raised and the errors under it."""
    url = _url(exc)
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            host = url.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0] if url else "the model host"
            return Cause(f"name resolution failed for {host} ({e.strerror or e}): no network, or a wrong "
                         "--client.base-url", url, True)
        if isinstance(e, ConnectionRefusedError):
            return Cause(f"connection refused ({e.strerror or e}): nothing listens at --client.base-url", url,
                         True)
    status = getattr(exc, "status_code", None)
    text = " ".join(str(exc).split())[:300]
    if status in (401, 403):
        return Cause(f"HTTP {status}, the endpoint refused the API key: {text}", url, True)
    if status == 404:
        return Cause(f"HTTP 404, a model name (-m) or base URL the endpoint does not know: {text}", url, True)
    if any(isinstance(e, ConnectionError) for e in _chain(exc)):
        return Cause(f"cannot connect: {text}", url, True)
    return Cause(f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {text}", url, False)


def remedy(env_id: str, cli: str | None = None) -> list[str]:
    """How to evaluate without a reachable model: glyph's reference policies on 127.0.0.1."""
    cli = cli or vfcompat.eval_cli()
    return [f"offline, run glyph's reference policies and point {cli} at them:",
            f"  uv run glyph serve --port {SERVE_PORT}    (in another terminal)",
            f"  uv run {cli} {env_id} -m mix --client.base-url http://127.0.0.1:{SERVE_PORT}/v1"]


class Watch(logging.Handler):
    """Counts the failed model calls verifiers logs and says the first fatal one on ``stream``."""

    def __init__(self, env_id: str, stream: TextIO | None = None) -> None:
        super().__init__(logging.WARNING)
        self.env_id = env_id
        self.stream = stream
        self.failed = 0
        self.rollouts: set[str] = set()
        self.first: Cause | None = None
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str) or not record.msg.startswith(PREFIX):
            return
        args = record.args if isinstance(record.args, tuple) else ()
        exc = next((a for a in reversed(args) if isinstance(a, BaseException)), None)
        if exc is None:
            return
        self.failed += 1
        if args and isinstance(args[0], str):
            self.rollouts.add(args[0])
        found = cause(exc)
        self.first = self.first or found
        if found.fatal and not self.said:
            self.said = True
            lines = _wrapped(f"{self.env_id}: a model call failed: {found.what}")
            if found.url:
                lines.append(f"  endpoint: {found.url}")
            lines.append("  every rollout will fail the same way: Ctrl-C stops the run")
            self._say(lines + ["  " + line for line in remedy(self.env_id)])

    def summary(self) -> list[str]:
        """The closing lines, or none when no call failed."""
        if not self.failed:
            return []
        first = self.first.what if self.first else "?"
        return _wrapped(f"{self.env_id}: {self.failed} model call(s) failed in {len(self.rollouts)} "
                        f"rollout(s), the first: {first}; `glyph report RUN_DIR` lists each rollout's cause")

    def _say(self, lines: list[str]) -> None:
        stream = self.stream or sys.stderr  # read at the call: rich's live view swaps sys.stderr
        print("\n".join(lines), file=stream, flush=True)


def _wrapped(text: str) -> list[str]:
    """``text`` in lines of at most 80 columns, the later ones indented."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def start(env_id: str) -> Watch:
    """Attach a ``Watch`` to verifiers' interception logger (``Env.start``'s hook)."""
    watch = Watch(env_id)
    logger = logging.getLogger(LOGGER)
    logger.addHandler(watch)
    if logger.getEffectiveLevel() > logging.WARNING:  # the handler must see the warnings it watches
        logger.setLevel(logging.WARNING)
    return watch


def stop(watch: Watch | None) -> None:
    """Detach ``watch`` and say how many calls failed (``Env.stop``'s hook)."""
    if watch is None:
        return
    logging.getLogger(LOGGER).removeHandler(watch)
    if watch.summary():
        watch._say(["", *watch.summary()])  # a line of its own: the eval CLI may leave its last line open


class SaysModelFaults:
    """A mixin for an ``Env``: its ``start`` attaches a ``Watch`` named ``MODEL_FAULTS_NAME``, its
    ``stop`` detaches it and says the count (``Env.start``/``Env.stop``: the env's own hooks, inside
    ``serving()``, before the first rollout and after the last)."""

    MODEL_FAULTS_NAME = "glyph"
    _watch: Watch | None = None

    async def start(self) -> None:
        await super().start()
        self._watch = start(self.MODEL_FAULTS_NAME)

    async def stop(self) -> None:
        stop(self._watch)
        self._watch = None
        await super().stop()
