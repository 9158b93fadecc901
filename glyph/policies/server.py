"""``glyph serve``: a reference policy (``glyph.policies.policies``) behind the
two endpoints a policy is called through, on 127.0.0.1 only:

* ``POST /v1/chat/completions`` (OpenAI-compatible; ``vf-eval`` / ``eval``
  with the default eval client);
* ``POST /inference/v1/generate``, the token-in/token-out endpoint PRIME-RL's
  inference server (vLLM) exposes and verifiers' train client calls
  (``--client.type train``): prompt token ids in, completion token ids and
  their logprobs out. The prompt is decoded with the served tokenizer, its
  ChatML turns are parsed back into messages, and the policy's reply is
  encoded with the same tokenizer and closed with ``<|im_end|>``. So a
  rollout's trace nodes carry token ids, a sampled mask and logprobs exactly
  as in a PRIME-RL rollout. The logprobs are a deterministic function of
  (position, token), not a model's: they only have to be well-formed.

The policy is the ``--policy`` given at start, or else the request's
``model`` field (so ``vf-eval -m oracle`` picks it); an unknown name is
answered 404 with the valid ones. Each request's own messages say which
protocol profile it speaks (``glyph.policies.policies.profile_of``), so one
server plays glyph-mbpp under ``study`` and ``glyph`` alike. The ``conv-*`` policies
answer conventions prompts (``glyph.policies.conventions``; glyph's own
conventions tasks unless others are given).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Iterable

from glyph.data.conventions import ConventionTask
from glyph.data.mbpp import MbppTask
from glyph.localhttp import JsonHandler, LocalServer
from glyph.policies.conventions import CONV_POLICIES, ConventionsPolicy, UnknownConventionsTask
from glyph.policies.policies import POLICIES, Planner, UnknownTask, known, unknown_policy

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"  # Qwen3's assistant scaffold with thinking off


def parse_chatml(text: str) -> list[dict]:
    """The messages of a ChatML prompt ending in an open assistant turn, in
    either renderer's format: Qwen3's (an empty think block opens every
    assistant turn, one line break after ``<|im_end|>``) or the study's
    (``glyph.render_study``: each content closed with a line break, two after
    ``<|im_end|>``), told apart by what follows ``<|im_end|>``."""
    from glyph.render_study import CLOSE, TURN_GAP

    messages = []
    for chunk in text.split(IM_START)[1:]:
        head, _, rest = chunk.partition("\n")
        content, closed, gap = rest.partition(IM_END)
        if not closed:  # the generation prompt
            break
        if gap == TURN_GAP:
            content = content.removesuffix(CLOSE)
        elif head == "assistant":
            content = content.removeprefix(EMPTY_THINK)
        messages.append({"role": head, "content": content})
    return messages


def fake_logprob(position: int, token: int) -> float:
    """A well-formed, deterministic sampling logprob in [-2, 0)."""
    h = hashlib.blake2b(f"{position}:{token}".encode(), digest_size=4).digest()
    return -(1 + int.from_bytes(h, "big") % 2000) / 1000


class PolicyServer:
    def __init__(self, tasks: dict[str, MbppTask], policy: str | None = None, port: int = 0,
                 seed: int = 0, tokenizer: object | str | None = None,
                 conventions: Iterable[ConventionTask] | None = None,
                 record: bool = False, record_replies: bool = False,
                 log: Callable[[str], None] | None = None) -> None:
        """``conventions``: the conventions tasks the ``conv-*`` policies know (default:
        glyph's own); ``record``: keep every request's messages in ``received`` (tests);
        ``record_replies``: keep every chat reply under the request's bearer token, as
        verifiers' interception server records a rollout's replies (``take_replies``); ``log``:
        told once per unknown policy name a request asks for, with the valid ones (``glyph serve``
        prints it, so the server's own log says why every rollout errored)."""
        if policy is not None and not known(policy):
            raise ValueError(unknown_policy(policy))
        self.planner = Planner(tasks, seed)
        self.conventions = ConventionsPolicy(conventions)
        self.received: list[list[dict]] | None = [] if record else None
        self.replies: dict[str, list[str]] | None = {} if record_replies else None
        self._replies_lock = threading.Lock()
        self.policy = policy
        self.requests = 0
        self._log, self._unknown_logged = log, set()
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_json(200, {"object": "list", "data": [{"id": p, "object": "model"}
                                                                for p in POLICIES + CONV_POLICIES]})

            def do_POST(self) -> None:  # noqa: N802
                server.requests += 1
                tokens = self.path.rstrip("/").endswith("/inference/v1/generate")
                try:
                    body = self.read_json(64 << 20)
                    policy = server.policy or str(body.get("model", ""))
                    messages = server.prompt_messages(body["token_ids"]) if tokens else body["messages"]
                except (ValueError, KeyError, TypeError):
                    return self.send_json(400, {"error": {"message": "malformed request"}})
                if server.received is not None:
                    server.received.append(messages)
                if not known(policy):
                    server.log_unknown(policy)
                    return self.send_json(404, {"error": {"message": unknown_policy(policy)}})
                if policy == "fault-500":
                    return self.send_json(500, {"error": {"message": "injected failure"}})
                if policy == "fault-hang":
                    time.sleep(3600)
                try:
                    content = server.conventions.reply(policy, messages) if policy in CONV_POLICIES \
                        else server.planner.reply(policy, messages)
                except (UnknownTask, UnknownConventionsTask) as exc:
                    return self.send_json(404, {"error": {"message": str(exc)}})
                if tokens:
                    return self.send_json(200, server.generate(content, body.get("sampling_params") or {},
                                                               len(body["token_ids"])))
                if server.replies is not None:
                    with server._replies_lock:
                        server.replies.setdefault(self.headers.get("Authorization", ""), []).append(content)
                self.send_json(200, {
                    "id": f"glyph-{server.requests}", "object": "chat.completion", "created": int(time.time()),
                    "model": policy,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": len(content) // 4,
                              "total_tokens": len(content) // 4}})

        self.httpd = LocalServer(Handler, port)

    def log_unknown(self, policy: str) -> None:
        with self._replies_lock:
            first = policy not in self._unknown_logged
            self._unknown_logged.add(policy)
        if first and self._log is not None:
            self._log(f"answering 404 to requests for model {policy!r}: {unknown_policy(policy)} "
                      "(vf-eval -m NAME picks one)")

    @property
    def tokenizer(self):
        with self._tokenizer_lock:
            if self._tokenizer is None or isinstance(self._tokenizer, str):
                from glyph.render import load_tokenizer
                self._tokenizer = load_tokenizer(self._tokenizer)
            return self._tokenizer

    def prompt_messages(self, token_ids: list[int]) -> list[dict]:
        if not isinstance(token_ids, list) or not all(isinstance(t, int) for t in token_ids):
            raise TypeError("token_ids must be a list of ints")
        return parse_chatml(self.tokenizer.decode(token_ids, skip_special_tokens=False))

    def generate(self, content: str, sampling: dict, prompt_len: int) -> dict:
        """The ``/inference/v1/generate`` answer for one reply: its ids end with
        ``<|im_end|>`` unless ``max_tokens`` cut it (``finish_reason`` length)."""
        tok = self.tokenizer
        ids = list(tok.encode(content, add_special_tokens=False)) + [tok.convert_tokens_to_ids(IM_END)]
        finish = "stop"
        max_tokens = sampling.get("max_tokens")
        if isinstance(max_tokens, int) and len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        return {"request_id": f"glyph-{self.requests}",
                "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish,
                             "logprobs": {"content": [{"token": f"token_id:{t}",
                                                       "logprob": fake_logprob(prompt_len + i, t)}
                                                      for i, t in enumerate(ids)]}}]}

    def take_replies(self, secret: str) -> list[str]:
        """The chat replies served under ``Bearer <secret>``, in order, forgotten here
        (``record_replies``)."""
        with self._replies_lock:
            return (self.replies or {}).pop(f"Bearer {secret}", [])

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
