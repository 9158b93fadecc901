"""glyph.envs.model_faults: the first failed model call of a run, named with its cause and remedy.

The end-to-end check (the eval CLI against a closed port, in both verifiers
versions) is ``tests/test_faults.py::test_eval_with_no_model_says_why_at_the_first_failed_call``.
"""

import io
import logging
import socket

import httpx
import pytest

from glyph.envs import model_faults
from glyph.vfcompat import eval_cli


class ProviderError(Exception):  # the shape of verifiers' ProviderError: a message and status_code
    def __init__(self, message: str, status_code: int = 502) -> None:
        super().__init__(message)
        self.status_code = status_code


def _wrapped(inner: BaseException, url: str, status: int = 503) -> ProviderError:
    """What verifiers' eval client raises for a transport fault: ProviderError from httpx's error
    (``v1/clients/eval.py:145-148``), that one over the socket error."""
    request = httpx.Request("POST", url)
    try:
        try:
            raise inner
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
    except httpx.ConnectError as exc:
        err = ProviderError(str(exc), status)
        err.__cause__ = exc
        return err


def test_causes_are_named_and_the_fatal_ones_told_apart():
    dns = model_faults.cause(_wrapped(socket.gaierror(-2, "Name or service not known"),
                                      "https://api.example/v1/chat/completions"))
    assert dns.fatal and dns.url == "https://api.example/v1/chat/completions"
    assert dns.what.startswith("name resolution failed for api.example (Name or service not known)")
    refused = model_faults.cause(_wrapped(ConnectionRefusedError(111, "Connection refused"),
                                          "http://127.0.0.1:9/v1/chat/completions"))
    assert refused.fatal and refused.what.startswith("connection refused (Connection refused)")
    assert model_faults.cause(ProviderError("upstream 401: bad key", 401)).fatal
    assert "-m" in model_faults.cause(ProviderError("upstream 404: unknown model", 404)).what
    busy = model_faults.cause(ProviderError("upstream 500: overloaded", 500))
    assert not busy.fatal and busy.what == "ProviderError (HTTP 500): upstream 500: overloaded"


def _record(*args) -> logging.LogRecord:
    return logging.LogRecord(model_faults.LOGGER, logging.WARNING, __file__, 1,
                             "model call failed: id=%s %s: %s", args, None)


def test_the_first_fatal_failure_is_said_once_with_the_remedy_and_the_end_counts_them():
    out = io.StringIO()
    watch = model_faults.Watch("glyph-mbpp", out)
    busy = ProviderError("upstream 500: overloaded", 500)
    watch.emit(_record("r1", "ProviderError", busy))
    assert out.getvalue() == ""  # a 5xx the program retries is only counted
    dead = _wrapped(ConnectionRefusedError(111, "Connection refused"), "http://127.0.0.1:9/v1/chat/completions")
    for rollout in ("r1", "r2", "r2"):
        watch.emit(_record(rollout, "ProviderError", dead))
    watch.emit(logging.LogRecord(model_faults.LOGGER, logging.WARNING, __file__, 1, "something else", (),
                                 None))
    said = out.getvalue().splitlines()
    text = " ".join(" ".join(said).split())
    assert text.startswith("glyph-mbpp: a model call failed: connection refused (Connection refused): "
                           "nothing listens at --client.base-url endpoint: "
                           "http://127.0.0.1:9/v1/chat/completions every rollout will fail the same way: "
                           "Ctrl-C stops the run"), said
    assert f"    uv run {eval_cli()} glyph-mbpp -m mix --client.base-url http://127.0.0.1:8000/v1" in said
    assert "    uv run glyph serve --port 8000    (in another terminal)" in said
    assert all(len(line) <= 80 for line in said), said
    summary = " ".join(" ".join(watch.summary()).split())
    assert summary.startswith("glyph-mbpp: 4 model call(s) failed in 2 rollout(s), the first: "
                              "ProviderError (HTTP 500)")


def test_start_and_stop_attach_to_verifiers_logger_and_detach(capsys):
    logger = logging.getLogger(model_faults.LOGGER)
    watch = model_faults.start("glyph-conventions")
    try:
        assert watch in logger.handlers
        logger.warning("model call failed: id=%s %s: %s", "r1", "ProviderError",
                       _wrapped(socket.gaierror(-3, "Temporary failure in name resolution"), "https://h.example/v1"))
    finally:
        model_faults.stop(watch)
    assert watch not in logger.handlers
    err = capsys.readouterr().err
    assert err.startswith("glyph-conventions: a model call failed: name resolution failed for h.example")
    assert " ".join(err.split()).endswith("lists each rollout's cause")


@pytest.mark.parametrize("text", ["", "word " * 60, "x" * 200])
def test_wrapping_keeps_lines_within_80_columns_and_long_words_whole(text):
    """A word longer than a line (a URL) is kept whole on a line of its own, never cut."""
    lines = model_faults._wrapped("glyph-mbpp: " + " ".join([text] * 3))
    assert all(len(line) <= 80 or " " not in line.strip() for line in lines), lines
    assert " ".join(" ".join(lines).split()) == " ".join(("glyph-mbpp: " + " ".join([text] * 3)).split())
