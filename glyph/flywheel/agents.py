"""The flywheel's agents: chat messages in, reply text out.

An agent sees exactly what ``conventions.messages(task, lessons)`` builds
(the one prompt builder) and answers with text; the loop takes the solution
with ``conventions.extract_code(reply)`` and grades it. Two agents:

* :class:`ReferenceAgent`, offline and free: it recognises the task from
  the spec in the prompt and the lessons in the prompt, and emits the task's
  ``reference_broken`` unless the lesson for the task's mode is in context,
  then ``reference_fixed``. Seeded noise (``p_lucky``: fixed without the
  lesson; ``p_slip``: broken with it) is drawn from a hash of (seed, phase,
  round, task id, rollout index), so results do not depend on execution
  order, concurrency or resumption. With ``noise_draw="task"`` the draw
  leaves out the rollout index, so a task's K rollouts in one phase are
  alike (perfectly correlated rollouts, for measuring what that does to
  the noise floor). A task with no mode (``mode == ""``)
  has no lesson it recognises: it is fixed only by luck.
* :class:`OpenAIAgent`: any OpenAI-compatible endpoint through the
  ``openai`` SDK (:class:`Endpoint`). Only what may pass is retried, with
  a short backoff or the server's ``Retry-After``: timeouts, 408, 429 and
  5xx, a dropped connection once the endpoint has answered, and a 200 that
  is no usable reply (a body that is not JSON or not a chat completion, no
  choices, an empty or missing content); a call that still fails raises
  :class:`ModelCallFailed` (the loop records the rollout as excluded, never
  as a wrong answer). An endpoint that cannot
  be reached before it ever answered (refused, unresolvable, not a URL)
  or that answers any other 4xx (a bad key, an unknown model, a bad
  request) raises :class:`ModelSetupError` at once, naming the option to
  fix: it stops the run, since retrying every rollout would only exclude
  them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from glyph.data import conventions
from glyph.data.conventions import ConventionTask
from glyph.errors import SetupError

RETRIED_STATUSES = frozenset({408, 429})
"""HTTP statuses a call is retried on, besides 5xx; any other 4xx is a :class:`ModelSetupError`."""
MAX_BACKOFF = 8.0
"""Seconds: the longest wait between two tries (the server's ``Retry-After`` is capped at 60)."""


@dataclass(frozen=True)
class RolloutKey:
    """Which rollout a call is for: the reference agent's noise is drawn from it
    (with the seed); an OpenAI agent derives the request's sampling seed from it."""

    phase: str
    round: int
    task: str
    k: int


class ModelCallFailed(Exception):
    """A model call failed after its retries; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ModelSetupError(SetupError):
    """The endpoint refused the request in a way no retry fixes (bad key, unknown model)."""


class Agent(Protocol):
    name: str

    def reply(self, messages: list[dict], key: RolloutKey | None = None) -> str: ...


def unit_draw(*parts: object) -> float:
    """A deterministic uniform draw in [0, 1) from the parts' text."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def reference_lesson(name: str, mode_lessons: dict[str, str] | None = None) -> str:
    """The reference writer's lesson for a cluster: the mode's lesson from
    ``conventions.MODE_LESSONS``; for a mode not there, or an outcome signature
    (``OUTCOME`` or ``OUTCOME:ExceptionClass``, the cluster of mode-less
    tasks), a lesson built from the name."""
    lessons = conventions.MODE_LESSONS if mode_lessons is None else mode_lessons
    if name in lessons:
        return lessons[name]
    outcome, _, exc = name.partition(":")
    if outcome.isupper() and outcome.replace("_", "").isalpha():
        what = f"{outcome.replace('_', ' ').lower()}" + (f" ({exc})" if exc else "")
        return f"Several attempts ended in {what}: check the edge cases the spec leaves open before returning."
    return f"Follow the '{name}' convention the hidden tests enforce, even where the spec does not state it."


def _user_text(messages: Sequence[dict]) -> str:
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    if not users:
        raise ValueError("the messages have no user turn")
    return users[-1] if isinstance(users[-1], str) else str(users[-1])


def _fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


class ReferenceAgent:
    """Emits ``reference_broken`` until its mode's lesson is in context, then
    ``reference_fixed``; with seeded noise. Works from the messages alone
    (plus the rollout key for the noise draw), so it can be served over HTTP."""

    name = "reference"

    def __init__(self, tasks: Iterable[ConventionTask], *, seed: int, p_lucky: float, p_slip: float,
                 mode_lessons: dict[str, str] | None = None, noise_draw: str = "rollout") -> None:
        if noise_draw not in ("rollout", "task"):
            raise ValueError(f"noise_draw must be 'rollout' or 'task', got {noise_draw!r}")
        self.noise_draw = noise_draw
        for p, what in ((p_lucky, "p_lucky"), (p_slip, "p_slip")):
            if not 0 <= p <= 1:
                raise ValueError(f"{what} must be in [0, 1], got {p}")
        self.seed, self.p_lucky, self.p_slip = seed, p_lucky, p_slip
        self.mode_lessons = mode_lessons
        by_spec: dict[str, ConventionTask] = {}
        for t in tasks:
            spec = t.spec.strip()
            if spec in by_spec and by_spec[spec].id != t.id:
                raise ValueError(f"tasks {by_spec[spec].id!r} and {t.id!r} have the same spec: the reference "
                                 "agent identifies a task by its spec")
            by_spec[spec] = t
        # longest first, so a spec that is a prefix of another never shadows it
        self._specs = sorted(by_spec.items(), key=lambda kv: -len(kv[0]))

    def identify(self, messages: Sequence[dict]) -> ConventionTask:
        text = _user_text(messages)
        for spec, task in self._specs:
            if text.startswith(spec):
                return task
        raise ValueError(f"the prompt matches no task's spec: {text[:120]!r}")

    def lesson_for(self, task: ConventionTask) -> str | None:
        return reference_lesson(task.mode, self.mode_lessons) if task.mode else None

    def reply(self, messages: list[dict], key: RolloutKey | None = None) -> str:
        task = self.identify(messages)
        text = _user_text(messages)
        lesson = self.lesson_for(task)
        knows = lesson is not None and lesson.strip() in text
        if key is None:  # served without a key: draw from the prompt itself
            u = unit_draw(self.seed, "prompt", text)
        elif self.noise_draw == "task":
            u = unit_draw(self.seed, key.phase, key.round, task.id)
        else:
            u = unit_draw(self.seed, key.phase, key.round, task.id, key.k)
        fixed = (u >= self.p_slip) if knows else (u < self.p_lucky)
        return _fenced(task.reference_fixed if fixed else task.reference_broken)


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and how to call it: ``timeout`` seconds
    per HTTP request, and up to ``retries`` retries (module docstring: which
    failures), waiting ``backoff * 2**i`` seconds before retry ``i`` (at most
    :data:`MAX_BACKOFF`) unless the server says how long (``Retry-After``)."""

    base_url: str
    model: str
    timeout: float
    retries: int
    api_key: str | None = None
    """Default: ``$OPENAI_API_KEY``, else ``"EMPTY"`` (local servers ignore it)."""
    backoff: float = 0.5
    flags: tuple[str, str] = ("--base-url", "--model")
    """The options that set ``base_url`` and ``model``: a setup error names them."""

    def client(self) -> Client:
        return Client(self)


def _retry_after(response) -> float | None:
    """The server's ``retry-after-ms`` / ``retry-after`` (seconds), capped; None if absent."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return min(60.0, max(0.0, float(headers[name]) / scale))
        except (KeyError, ValueError, TypeError):
            continue
    return None


class Client:
    """The SDK's client for one endpoint, with glyph's retry rule; safe to share
    between threads. The SDK's own retries are off (it would retry a refused
    connection and every 409 too)."""

    def __init__(self, endpoint: Endpoint) -> None:
        from openai import OpenAI

        self.endpoint = endpoint
        self.reached = False  # whether the endpoint ever answered (any HTTP status)
        key = endpoint.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        sdk = OpenAI(base_url=endpoint.base_url, api_key=key, timeout=endpoint.timeout, max_retries=0)
        # Bound here: the SDK imports its ~500 resource modules on first access (0.7 s on an idle
        # machine, many seconds on a loaded one), which is set-up, not part of the first call.
        self._create = sdk.chat.completions.create

    def chat(self, messages: list[dict], **params) -> str:
        """One chat completion's reply text. Raises :class:`ModelSetupError` when no
        retry can help, :class:`ModelCallFailed` when the retries ran out."""
        import openai

        ep = self.endpoint
        url = ep.flags[0]
        for attempt in range(ep.retries + 1):
            wait = None
            try:
                resp = self._create(model=ep.model, messages=messages, **params)
            except openai.APIStatusError as exc:
                self.reached = True
                status, message = exc.status_code, _message(exc)
                if status < 500 and status not in RETRIED_STATUSES:
                    raise ModelSetupError(_setup_message(ep, status, message)) from exc
                reason, wait = f"HTTP {status}: {message}"[:500], _retry_after(exc.response)
            except openai.APITimeoutError:
                reason = f"timed out after {ep.timeout:g} s"
            except openai.APIConnectionError as exc:
                cause = str(exc.__cause__ or exc)[:300]
                if not self.reached:
                    raise ModelSetupError(f"{url} {ep.base_url}: cannot reach the endpoint ({cause}); is the "
                                          "server running, and is the URL right (e.g. http://127.0.0.1:8000/v1)?"
                                          ) from exc
                reason = f"connection error: {cause}"
            except (json.JSONDecodeError, UnicodeDecodeError, openai.APIResponseValidationError) as exc:
                # a 200 whose body the SDK cannot read (a proxy's page, a torn reply): the server's fault
                self.reached = True
                reason = f"malformed response: {str(exc)[:300]}"
            else:
                self.reached = True
                text, reason = _reply_text(resp)
                if text is not None:
                    return text
            if attempt == ep.retries:
                raise ModelCallFailed(reason if attempt == 0 else f"{reason} (after {attempt + 1} tries)")
            time.sleep(wait if wait is not None else min(MAX_BACKOFF, ep.backoff * 2**attempt))
        raise AssertionError("unreachable")  # pragma: no cover


def _reply_text(resp) -> tuple[str | None, str]:
    """The reply text of a 200's parsed body, or (None, why it is no usable reply). The SDK
    builds the body without validating it, and hands back the text of a body that is not
    JSON (``Content-Type`` other than JSON), so every field is checked here."""
    if isinstance(resp, str):
        return None, f"malformed response: not a JSON chat completion ({resp[:100]!r})"
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None, "malformed response: no choices"
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        return None, f"malformed response: the content is a {type(content).__name__}, not text"
    if not (content or "").strip():
        finish = getattr(choices[0], "finish_reason", None)
        return None, f"empty reply (finish_reason {finish})"
    return content, ""


def _message(exc) -> str:
    """The server's own error message (``{"error": {"message": ...}}``), else the SDK's."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(body.get("message"), str):
            return body["message"]
    return exc.message


def _setup_message(ep: Endpoint, status: int, message: str) -> str:
    url, model = ep.flags
    said = f"HTTP {status}: {message[:300]}"
    if status in (401, 403):
        return f"{url} {ep.base_url} refused the key ({said}); set $OPENAI_API_KEY"
    if status == 404:
        return f"{model} {ep.model} at {url} {ep.base_url}: {said} (is the model name right, and does the " \
               "URL end where the API does, e.g. .../v1?)"
    return f"{model} {ep.model} at {url} {ep.base_url}: {said}"


class OpenAIAgent:
    """An agent served by any OpenAI-compatible endpoint. Each request carries a
    sampling ``seed`` derived from the run seed and the rollout key (servers
    that honour it make rollouts repeatable)."""

    name = "openai"

    def __init__(self, endpoint: Endpoint, *, temperature: float, max_tokens: int, seed: int) -> None:
        self.endpoint, self.temperature, self.max_tokens, self.seed = endpoint, temperature, max_tokens, seed
        self._client = endpoint.client()

    def reply(self, messages: list[dict], key: RolloutKey | None = None) -> str:
        params: dict = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if key is not None:
            params["seed"] = int(unit_draw(self.seed, key.phase, key.round, key.task, key.k) * 2**31)
        return self._client.chat(messages, **params)
