"""PREDICT's per-token training signal on one rollout's message graph.

Framework-free: it reads and writes the graph through the attributes of the
PRIME-RL pin's verifiers ``MessageNode`` (``parent``, ``message``,
``sampled``, ``token_ids``, ``mask``, ``loss_weights``) and imports neither
verifiers nor PRIME-RL, so it is tested on its own and called by the adapter
(``glyph.predict.prime_rl``) before GRPO assigns advantages.

What it guarantees, for each Arm B prediction the environment verified
(``glyph.record.VerifiedCandidate``: ``sampled_label``, ``verified_label``, the
``context`` before the prediction turn and the turn's text):

* The prediction is found in the node the policy sampled it in (the sampled
  node whose path holds exactly that context and whose message is that
  turn), and its label span is read from that node's own token ids through
  the tokenizer's byte-level vocabulary: no text is re-encoded to find it.
  The span runs from the token holding the ``>`` of ``<PREDICTION>`` (with
  Qwen3's BPE that token may already carry the label's first letters:
  ``'>P'``, ``'>R'``, or stand alone before ``'ASSERT'``, so it is the first
  label decision) through the token holding the label's last byte.
* ``rl`` = 1.0 on every sampled token of every sampled node and 0.0 on every
  label span the policy sampled, verified or not (PRIME-RL gives nodes
  without a stream weight 0 once any node carries one, so every sampled token
  gets an explicit weight).
* sampled == verified: ``ce`` = alpha on the span, in place; no tokens added.
* sampled != verified: a CE-only node is grafted beside the sampled one (same
  parent): the policy's own tokens of that node up to the span, then the
  canonical tokenization of the corrected turn from there, decoding exactly
  to ``...<PREDICTION>VERIFIED</PREDICTION>``; ``mask`` all False, ``ce`` =
  alpha on the verified label's tokens only. Its prefix comes from the graph,
  never from the program's copy of the conversation.
* A prediction that cannot be located raises ``PredictionNotFound`` in
  :func:`locate`; :func:`annotate` records it (``unlocated``) and goes on. A
  graft longer than ``max_tokens`` (the trainer's ``seq_len``) is dropped
  and counted, never truncated; an in-place label past ``max_tokens`` is
  counted (the trainer would cut it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from glyph.record import VerifiedCandidate

OPEN = b"<PREDICTION>"
CLOSE = "</PREDICTION>"
_PREDICTION = re.compile(rb"<PREDICTION>\s*([A-Z_]+)\s*</PREDICTION>")
METRIC_PREFIX = "predict_"


class PredictionNotFound(LookupError):
    """A verified prediction could not be tied to the tokens the policy sampled."""


class NotByteLevel(ValueError):
    """The tokenizer is not a byte-level BPE vocabulary, so token bytes are unknown."""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes-to-unicode map, which byte-level BPE vocabularies use."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


class TokenBytes:
    """The exact bytes each token id stands for, from the tokenizer's own
    vocabulary (added tokens: their literal content). Concatenated over a
    node's ids they reproduce the bytes the policy emitted."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        self._cache: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        found = self._cache.get(token_id)
        if found is not None:
            return found
        if token_id in self._added:
            data = self._added[token_id].encode()
        else:
            piece = self.tokenizer.convert_ids_to_tokens(token_id)
            if piece is None:
                raise NotByteLevel(f"token id {token_id} is not in the vocabulary")
            decoder = _byte_decoder()
            try:
                data = bytes(decoder[ch] for ch in piece)
            except KeyError:
                raise NotByteLevel(f"token {token_id} ({piece!r}) is not byte-level BPE") from None
        self._cache[token_id] = data
        return data

    def offsets(self, ids: Sequence[int]) -> tuple[bytes, list[int]]:
        """The ids' bytes, and each token's start offset (plus the end, last)."""
        pieces = [self(i) for i in ids]
        starts = [0]
        for piece in pieces:
            starts.append(starts[-1] + len(piece))
        return b"".join(pieces), starts


def _token_at(starts: list[int], offset: int) -> int:
    """The index of the token whose bytes hold ``offset``."""
    lo, hi = 0, len(starts) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Located:
    """Where one prediction lies: ``trace.nodes[node]``, label tokens
    ``[start, end)`` of that node's ``token_ids``."""

    node: int
    start: int
    end: int
    label: str
    first_sampled: int  # index in token_ids of the node's first sampled token
    sampled_bytes: bytes  # the node's sampled tokens' bytes
    sampled_starts: list[int]  # byte offset of each sampled token (plus the end)
    gt: int  # byte offset, in sampled_bytes, of the opening tag's ">"


def _content(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else getattr(message, "content", None)


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def _path(nodes: Sequence[Any], index: int) -> list[int]:
    path = []
    seen = set()
    i: int | None = index
    while i is not None:
        if i in seen:
            raise PredictionNotFound(f"node {index}: the graph has a cycle")
        seen.add(i)
        path.append(i)
        i = nodes[i].parent
    return path[::-1]


def find_node(nodes: Sequence[Any], context: Sequence[dict], turn: str) -> int:
    """The sampled node whose message is ``turn`` and whose path before it is
    exactly ``context`` (roles and contents), or ``PredictionNotFound``."""
    hits = []
    for i, node in enumerate(nodes):
        if not (node.sampled and any(node.mask)) or _content(node.message) != turn:
            continue
        before = [nodes[j].message for j in _path(nodes, i)[:-1]]
        if len(before) == len(context) and all(
            _role(a) == _role(b) and _content(a) == _content(b) for a, b in zip(before, context)
        ):
            hits.append(i)
    if len(hits) != 1:
        raise PredictionNotFound(
            f"{len(hits)} sampled nodes hold this prediction turn at its recorded context"
            if hits
            else "no sampled node holds this prediction turn at its recorded context"
        )
    return hits[0]


def label_spans(token_ids: Sequence[int], token_bytes: TokenBytes) -> list[tuple[int, int, str, int]]:
    """Every ``<PREDICTION>`` label in ``token_ids``: (first token, end token,
    label, byte offset of the tag's ``>``); the span runs from the token
    holding that ``>`` through the token holding the label's last byte."""
    data, starts = token_bytes.offsets(token_ids)
    out = []
    for m in _PREDICTION.finditer(data):
        gt = m.start() + len(OPEN) - 1
        out.append((_token_at(starts, gt), _token_at(starts, m.end(1) - 1) + 1, m.group(1).decode(), gt))
    return out


def spans(nodes: Sequence[Any], index: int, token_bytes: TokenBytes) -> list[Located]:
    """Every ``<PREDICTION>`` label in the sampled tokens of node ``index``."""
    node = nodes[index]
    if len(node.mask) != len(node.token_ids):
        raise PredictionNotFound(f"node {index}: mask and token_ids differ in length")
    first = next((i for i, m in enumerate(node.mask) if m), None)
    if first is None or not all(node.mask[first:]):
        raise PredictionNotFound(f"node {index}: its sampled tokens are not one suffix of the node")
    sampled = node.token_ids[first:]
    data, starts = token_bytes.offsets(sampled)
    return [
        Located(index, first + a, first + b, label, first, data, starts, gt)
        for a, b, label, gt in label_spans(sampled, token_bytes)
    ]


def locate(nodes: Sequence[Any], index: int, token_bytes: TokenBytes, expected: str | None = None) -> Located:
    """The label span of the one prediction in sampled node ``index``."""
    found = spans(nodes, index, token_bytes)
    if len(found) != 1:
        raise PredictionNotFound(f"node {index}: {len(found)} <PREDICTION> tags in its sampled tokens")
    if expected is not None and found[0].label != expected:
        raise PredictionNotFound(
            f"node {index}: the tokens hold {found[0].label}, the verified record says {expected}"
        )
    return found[0]


def graft_tokens(
    loc: Located, verified: str, token_bytes: TokenBytes, encode: Callable[[str], list[int]]
) -> tuple[int, list[int], tuple[int, int]]:
    """The corrected continuation at the prediction: ``(keep, continuation,
    (label_start, label_end))``: keep the node's first ``keep`` token ids
    (the policy's own), then ``continuation``, whose tokens
    ``[label_start, label_end)`` hold the verified label (from the token
    holding ``>``). The continuation is the canonical tokenization of the
    corrected turn from the last token boundary, at or before the span,
    that the policy's and the canonical tokenization share (normally the
    span's start)."""
    corrected = loc.sampled_bytes[: loc.gt + 1] + verified.encode() + CLOSE.encode()
    try:
        text = corrected.decode("utf-8")
    except UnicodeDecodeError:
        raise PredictionNotFound(f"node {loc.node}: the turn before the label is not UTF-8") from None
    canon = list(encode(text))
    canon_bytes, canon_starts = token_bytes.offsets(canon)
    if canon_bytes != corrected:
        raise PredictionNotFound(f"node {loc.node}: the tokenizer does not round-trip the corrected turn")
    span_start = loc.sampled_starts[loc.start - loc.first_sampled]
    shared = set(loc.sampled_starts) & set(canon_starts)
    cut = max(b for b in shared if b <= span_start)
    keep_sampled = loc.sampled_starts.index(cut)
    from_canon = canon_starts.index(cut)
    continuation = canon[from_canon:]
    rel = [s - cut for s in canon_starts[from_canon:]]
    label_start = _token_at(rel, loc.gt - cut)
    label_end = _token_at(rel, loc.gt + len(verified) - cut) + 1
    return loc.first_sampled + keep_sampled, continuation, (label_start, label_end)


@dataclass
class Annotation:
    """What one rollout's annotation did (the counts become trace metrics)."""

    labels: int = 0  # verified predictions in the record
    in_place: int = 0  # sampled == verified: CE on the sampled span
    grafted: int = 0  # sampled != verified: a CE-only node added
    unlocated: int = 0  # raised PredictionNotFound (not trained)
    graft_too_long: int = 0  # graft longer than max_tokens: dropped
    past_limit: int = 0  # in-place label beyond max_tokens (the trainer truncates it)
    unverified: int = 0  # sampled labels with no verified record (held out of RL, no CE)
    graft_tokens: int = 0  # tokens in the grafted nodes' branches (extra trainer tokens)
    errors: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {f"{METRIC_PREFIX}{k}": float(v) for k, v in vars(self).items() if k != "errors"}


def default_graft_node(sampled: Any, token_ids: list[int], text: str, ce: list[float]) -> Any:
    """A CE-only sibling of ``sampled``: the same node type (a verifiers
    pydantic model, or a dataclass) carrying the corrected text and no
    sampled tokens."""
    fields = dict(
        parent=sampled.parent,
        sampled=False,
        token_ids=token_ids,
        mask=[False] * len(token_ids),
        loss_weights={"ce": ce},
    )
    if dataclasses.is_dataclass(sampled):
        return dataclasses.replace(sampled, message={**sampled.message, "content": text}, **fields)
    return type(sampled).model_construct(
        message=sampled.message.model_copy(update={"content": text}), is_content=[], logprobs=[], **fields
    )


def annotate(
    nodes: list[Any],
    candidates: Sequence[VerifiedCandidate],
    token_bytes: TokenBytes,
    encode: Callable[[str], list[int]],
    *,
    alpha: float,
    max_tokens: int | None = None,
    new_node: Callable[..., Any] = default_graft_node,
) -> Annotation:
    """Write PREDICT's ``rl``/``ce`` weights onto ``nodes`` (appending grafts)."""
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, not {alpha}")
    out = Annotation()
    original = len(nodes)
    rl: dict[int, list[float]] = {}
    for i, node in enumerate(nodes):
        if any(node.mask):
            rl[i] = [1.0 if m else 0.0 for m in node.mask]
    prefix_len: dict[int, int] = {}

    def tokens_before(i: int) -> int:
        if i not in prefix_len:
            prefix_len[i] = sum(len(nodes[j].token_ids) for j in _path(nodes, i)[:-1])
        return prefix_len[i]

    # Every label the policy sampled is held out of RL, verified or not (a label whose record the
    # rollout lost, or a turn the protocol rejected, must not earn credit either).
    held: set[tuple[int, int]] = set()
    for i in rl:
        if OPEN.decode() in (_content(nodes[i].message) or ""):
            try:
                for loc in spans(nodes, i, token_bytes):
                    rl[i][loc.start : loc.end] = [0.0] * (loc.end - loc.start)
                    held.add((i, loc.start))
            except PredictionNotFound as exc:
                out.errors.append(str(exc))
    trained: set[tuple[int, int]] = set()
    for cand in candidates:
        sampled, verified = cand.sampled_label, cand.verified_label
        if sampled is None:
            continue
        out.labels += 1
        try:
            if not isinstance(verified, str) or not re.fullmatch(r"[A-Z_]+", verified):
                raise PredictionNotFound(f"candidate {cand.index}: no verified label")
            index = find_node(nodes[:original], cand.context or [], cand.prediction_turn)
            loc = locate(nodes, index, token_bytes, expected=sampled)
            node = nodes[index]
            rl[index][loc.start : loc.end] = [0.0] * (loc.end - loc.start)
            trained.add((index, loc.start))
            if sampled == verified:
                ce = list((node.loss_weights or {}).get("ce") or [0.0] * len(node.token_ids))
                ce[loc.start : loc.end] = [alpha] * (loc.end - loc.start)
                node.loss_weights = {**(node.loss_weights or {}), "ce": ce}
                out.in_place += 1
                if max_tokens is not None and tokens_before(index) + loc.end > max_tokens:
                    out.past_limit += 1
                continue
            keep, continuation, (a, b) = graft_tokens(loc, verified, token_bytes, encode)
            token_ids = list(node.token_ids[:keep]) + continuation
            total = tokens_before(index) + len(token_ids)
            if max_tokens is not None and total > max_tokens:
                out.graft_too_long += 1
                continue
            ce = [0.0] * len(token_ids)
            ce[keep + a : keep + b] = [alpha] * (b - a)
            text = b"".join(token_bytes(t) for t in token_ids[loc.first_sampled :]).decode("utf-8")
            nodes.append(new_node(node, token_ids, text, ce))
            out.grafted += 1
            out.graft_tokens += total
        except PredictionNotFound as exc:
            out.unlocated += 1
            out.errors.append(str(exc))
    out.unverified = len(held - trained)
    for i, weights in rl.items():
        nodes[i].loss_weights = {**(nodes[i].loss_weights or {}), "rl": weights}
    return out
