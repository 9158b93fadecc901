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
  Which tokens make the span is the ``rule`` (:data:`SpanRule`: glyph's
  ``"decision"`` from the token holding the tag's ``>``, or the study's
  ``"study"``, the tokens overlapping the label's characters);
  :func:`label_token_span` is that rule on one turn's ids, for other code.
  Both profiles' turns carry the label as ``<PREDICTION>OUTCOME</PREDICTION>``
  (glyph: free text, the tags, then a CALL line; the study: exactly the
  PREDICTION line, the DECISION line and the CALL line,
  ``glyph.agent.study.PREDICTION_LINE``), and every label is found by the
  grammars' one scanner (``glyph.agent.profiles.base.scan``, on the tokens'
  bytes here); a mention of the tag inside a ``<think>`` block or on a CALL
  line (a tool argument) is not the prediction.
* ``rl`` = 1.0 on every sampled token of every sampled node and 0.0 on every
  label span the policy sampled: verified or not, closed or not, valid or
  not, mentioned or meant (PRIME-RL gives nodes without a stream weight 0
  once any node carries one, so every sampled token gets an explicit
  weight). Labels the protocol rejects (``invalid``), ones a token limit cut
  (``truncated``) and mentions (``quoted``) are counted and get no CE.
* sampled == verified: ``ce`` = alpha on the span, in place; no tokens added.
* sampled != verified: a CE-only node is grafted beside the sampled one (same
  parent): the policy's own tokens of that node up to the token holding the
  tag's ``>``, then the canonical tokenization of the corrected turn from
  there, decoding exactly to ``...<PREDICTION>VERIFIED</PREDICTION>``;
  ``mask`` all False, ``ce`` = alpha on the verified label's span only. Its
  prefix comes from the graph, never from the program's copy of the
  conversation.
* alpha = 0: no CE anywhere and no graft (``ce_off`` counts the labels);
  the label spans stay out of RL credit.
* The CE rule (:data:`CeRule`) says which samples carry that CE. The bullets
  above are glyph's, ``"in_place"``. Under the study's, ``"study"``
  (:func:`study_sample`), no label trains in place and nothing is grafted:
  every recorded prediction target, right or wrong, its sampled label
  valid, invalid or missing, becomes a CE-only sample of its own, its
  context re-rendered from the target's messages. It hangs in the graph as a
  root node (a branch of one node). Where the policy's own tokens before
  that prediction differ from the re-rendering, it is counted
  (``aux_context_differs``).
* A prediction that cannot be located raises ``PredictionNotFound`` in
  :func:`locate`; :func:`annotate` records it (``unlocated``) and goes on. A
  second record naming a label already named is a :class:`DuplicateRecord`:
  the label trains once, the rest are counted (``duplicates``). A graft
  longer than ``max_tokens`` (the trainer's ``seq_len``) is dropped and
  counted, never truncated; an in-place label past ``max_tokens`` is
  counted (the trainer would cut it). ``labels_trained`` and ``ce_tokens``
  say what CE the rollout carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from glyph.agent.profiles.base import scan
from glyph.agent.trace import Prediction, VerifiedCandidate
from glyph.outcomes import Outcome

OPEN = b"<PREDICTION>"
CLOSE = "</PREDICTION>"
LABELS = frozenset(o.value for o in Outcome)
METRIC_PREFIX = "predict_"
SpanRule = Literal["decision", "study"]
CeRule = Literal["in_place", "study"]
"""Which samples carry PREDICT's CE (``PredictAlgoConfig.ce_rule``):

* ``"in_place"`` (glyph's): the policy's own tokens. A right label gets CE
  in place, on the tokens the policy sampled. A wrong one gets a CE-only node
  grafted beside the sampled one at the same token prefix. An invalid or
  missing label gets none: no record names it.
* ``"study"`` (the PREDICT study's ``PredictAlgorithm.score_rollout`` and
  ``_auxiliary_sample``, its ``src/glyph/prime_rl.py`` at ``9eefac7``): one
  auxiliary CE-only sample for every recorded prediction target, right or
  wrong, whatever the sampled label was (missing, not an outcome class),
  built by :func:`study_sample`. The policy's tokens then carry no CE.
"""
"""Which tokens of a label PREDICT holds out of RL and trains with CE:

* ``"decision"`` (glyph's): from the token holding the ``>`` of
  ``<PREDICTION>`` through the token holding the label's last byte. With
  Qwen3's BPE that ``>`` token is already the first label decision: it is
  ``'>P'`` / ``'>R'`` for PASS / RUNTIME_ERROR, and a lone ``'>'`` before the
  other labels, whose choice it already makes.
* ``"study"`` (the PREDICT study's, ``src/glyph/prime_rl.py``
  ``_mask_label_tokens`` and ``_auxiliary_sample``): the tokens that overlap
  the label's own characters (``end > label_start and start < label_end``
  over the offsets of a re-encoding). So a lone ``'>'`` gets no CE and keeps
  its RL credit, while a merged ``'>P'`` / ``'>R'`` is in the span. Here the
  overlap is taken on the policy's own tokens, which is the study's result
  whenever the sampled tokens are the canonical encoding (the study re-encodes
  the turn and finds that encoding in the node's ids; where the policy
  sampled another tokenization its search fails and it masks nothing).
"""


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
        return offsets(ids, self)


def offsets(ids: Sequence[int], token_bytes: Callable[[int], bytes]) -> tuple[bytes, list[int]]:
    """The bytes of ``ids`` (``token_bytes``: id -> bytes, e.g. a :class:`TokenBytes`)
    and each token's start offset (plus the end, last)."""
    pieces = [token_bytes(i) for i in ids]
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


def _decision_span(starts: list[int], gt: int, label_at: int, label_end: int) -> tuple[int, int]:
    """glyph's rule: from the token holding the tag's ``>`` through the one holding the label's last byte."""
    start = _token_at(starts, gt)
    return start, (_token_at(starts, label_end - 1) + 1 if label_end > label_at else start + 1)


def _overlap_span(starts: list[int], gt: int, label_at: int, label_end: int) -> tuple[int, int]:
    """The study's rule: the tokens that overlap the label's characters."""
    if label_end == label_at:  # no label characters: no token overlaps them
        start = _token_at(starts, label_at) if label_at < starts[-1] else len(starts) - 1
        return start, start
    return _token_at(starts, label_at), _token_at(starts, label_end - 1) + 1


SPAN_RULES = {"decision": _decision_span, "study": _overlap_span}
CE_RULES: dict[str, bool] = {"in_place": False, "study": True}
"""Per :data:`CeRule`, whether it trains one CE-only sample per recorded prediction target
(:func:`study_sample`) instead of the policy's own tokens."""


def _rule_span(starts: list[int], gt: int, label_at: int, label_end: int, rule: SpanRule) -> tuple[int, int]:
    """The tokens ``[start, end)`` that ``rule`` takes for a label at bytes
    ``[label_at, label_end)`` whose opening tag's ``>`` is at byte ``gt``."""
    if rule not in SPAN_RULES:
        raise ValueError(f"unknown label span rule {rule!r} (decision or study)")
    return SPAN_RULES[rule](starts, gt, label_at, label_end)


@dataclass(frozen=True)
class LabelSpan:
    """One ``<PREDICTION>`` label the tokens hold, closed or not, valid or not:
    tokens ``[start, end)`` under the span rule it was read with."""

    start: int
    end: int
    label: str  # the label's text as written (stripped; may be empty, any case, cut short)
    gt: int  # byte offset of the opening tag's ">"
    label_at: int  # byte offset of the label's first byte (== label_end when there is none)
    label_end: int
    closed: bool  # "</PREDICTION>" follows the label (whitespace aside, any case)
    exact: bool  # both tags spelled as the protocol spells them (upper case)
    truncated: bool  # not closed, and the tokens end inside the tag: a token limit cut it
    quoted: bool  # inside a <think> block or on a CALL line: a mention, not the turn's prediction

    @property
    def valid(self) -> bool:
        """A label the protocol accepts: exact tags, closed, one of the outcome classes."""
        return self.closed and self.exact and self.label in LABELS


def label_spans(
    token_ids: Sequence[int], token_bytes: Callable[[int], bytes], rule: SpanRule = "decision"
) -> list[LabelSpan]:
    """Every ``<PREDICTION>`` label in ``token_ids`` (tags matched in any case).

    The label is the text after the tag (leading whitespace skipped) up to
    the next ``<`` or line end, trailing whitespace stripped; it is closed
    when ``</PREDICTION>`` follows. One cut by the end of the tokens (the
    label, or the closing tag, unfinished) is ``truncated``. Token spans
    follow ``rule`` (:data:`SpanRule`)."""
    return _spans_in(*offsets(token_ids, token_bytes), rule)


def _spans_in(data: bytes, starts: list[int], rule: SpanRule) -> list[LabelSpan]:
    """:func:`label_spans` on tokens given by their bytes and start offsets."""
    out = []
    for t in scan(data, "PREDICTION"):
        start, end = _rule_span(starts, t.gt, t.label_at, t.label_end, rule)
        out.append(LabelSpan(start, end, t.label, t.gt, t.label_at, t.label_end, t.closed, t.exact, t.truncated,
                             t.quoted))
    return out


def label_token_span(
    token_ids: Sequence[int], token_bytes: Callable[[int], bytes], rule: SpanRule = "decision"
) -> tuple[int, int]:
    """The tokens ``[start, end)`` of the one prediction label in ``token_ids``
    (one assistant turn's sampled ids) under ``rule``: the label PREDICT holds
    out of RL and trains with CE. Mentions inside ``<think>`` blocks or on a
    CALL line are not the prediction. Raises ``PredictionNotFound`` unless
    exactly one valid label remains. ``token_bytes``: id -> the token's bytes
    (a :class:`TokenBytes`)."""
    found = [s for s in label_spans(token_ids, token_bytes, rule) if not s.quoted]
    if len(found) != 1 or not found[0].valid:
        raise PredictionNotFound(
            f"{len(found)} <PREDICTION> labels outside think blocks and CALL lines"
            if len(found) != 1
            else f"the label {found[0].label!r} is not one the protocol accepts"
        )
    return found[0].start, found[0].end


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
    span: LabelSpan  # the label as label_spans read it (token indices relative to the sampled tokens)


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


def spans(
    nodes: Sequence[Any], index: int, token_bytes: TokenBytes, rule: SpanRule = "decision"
) -> list[Located]:
    """Every ``<PREDICTION>`` label in the sampled tokens of node ``index``."""
    node = nodes[index]
    if len(node.mask) != len(node.token_ids):
        raise PredictionNotFound(f"node {index}: mask and token_ids differ in length")
    first = next((i for i, m in enumerate(node.mask) if m), None)
    if first is None or not all(node.mask[first:]):
        raise PredictionNotFound(f"node {index}: its sampled tokens are not one suffix of the node")
    data, starts = token_bytes.offsets(node.token_ids[first:])
    return [
        Located(index, first + s.start, first + s.end, s.label, first, data, starts, s.gt, s)
        for s in _spans_in(data, starts, rule)
    ]


def locate(
    nodes: Sequence[Any],
    index: int,
    token_bytes: TokenBytes,
    expected: str | None = None,
    rule: SpanRule = "decision",
) -> Located:
    """The label span of the one prediction in sampled node ``index``: the one
    label outside ``<think>`` blocks and CALL lines, which must be valid."""
    return _prediction(spans(nodes, index, token_bytes, rule), index, expected)


def _prediction(located: Sequence[Located], index: int, expected: str | None) -> Located:
    found = [loc for loc in located if not loc.span.quoted]
    if len(found) != 1:
        raise PredictionNotFound(
            f"node {index}: {len(found)} <PREDICTION> tags outside think blocks and CALL lines"
        )
    if not found[0].span.valid:
        raise PredictionNotFound(
            f"node {index}: the label {found[0].label!r} is not one the protocol accepts"
        )
    if expected is not None and found[0].label != expected:
        raise PredictionNotFound(
            f"node {index}: the tokens hold {found[0].label}, the verified record says {expected}"
        )
    return found[0]


def graft_tokens(
    loc: Located,
    verified: str,
    token_bytes: TokenBytes,
    encode: Callable[[str], list[int]],
    rule: SpanRule = "decision",
) -> tuple[int, list[int], tuple[int, int]]:
    """The corrected continuation at the prediction: ``(keep, continuation,
    (label_start, label_end))``: keep the node's first ``keep`` token ids
    (the policy's own), then ``continuation``, whose tokens
    ``[label_start, label_end)`` hold the verified label under ``rule``. The
    continuation is the canonical tokenization of the corrected turn from
    the last token boundary, at or before the token holding the tag's ``>``,
    that the policy's and the canonical tokenization share (normally that
    token's start)."""
    corrected = loc.sampled_bytes[: loc.gt + 1] + verified.encode() + CLOSE.encode()
    try:
        text = corrected.decode("utf-8")
    except UnicodeDecodeError:
        raise PredictionNotFound(f"node {loc.node}: the turn before the label is not UTF-8") from None
    canon = list(encode(text))
    canon_bytes, canon_starts = token_bytes.offsets(canon)
    if canon_bytes != corrected:
        raise PredictionNotFound(f"node {loc.node}: the tokenizer does not round-trip the corrected turn")
    gt_token_start = loc.sampled_starts[_token_at(loc.sampled_starts, loc.gt)]
    shared = set(loc.sampled_starts) & set(canon_starts)
    cut = max(b for b in shared if b <= gt_token_start)
    keep_sampled = loc.sampled_starts.index(cut)
    from_canon = canon_starts.index(cut)
    continuation = canon[from_canon:]
    rel = [s - cut for s in canon_starts[from_canon:]]
    at = loc.gt + 1 - cut
    label_start, label_end = _rule_span(rel, loc.gt - cut, at, at + len(verified), rule)
    return loc.first_sampled + keep_sampled, continuation, (label_start, label_end)


def study_sample(
    context: Sequence[dict],
    verified: str,
    render: Callable[[list[dict]], list[int]],
    token_bytes: TokenBytes,
    encode: Callable[[str], list[int]],
    alpha: float,
) -> tuple[list[int], list[float], int]:
    """The study's auxiliary CE-only sample for one prediction target (:data:`CeRule`
    ``"study"``): ``(token_ids, ce, prefix_len)``. The prefix is ``render(context)``:
    the messages before the prediction turn rendered again, with the generation
    prompt (the study: its policy renderer's ``render_ids(context,
    add_generation_prompt=True)``). Then the tokenizer's encoding, on its own, of
    ``<PREDICTION>VERIFIED</PREDICTION>``. ``ce`` is alpha on that encoding's tokens
    overlapping the label's characters (the span rule ``"study"``), 0 elsewhere.
    Nothing in it is sampled; nothing of the policy's own tokens is read."""
    if verified not in LABELS:
        raise PredictionNotFound(f"no verified label ({verified!r})")
    prefix = list(render(list(context)))
    text = f"{OPEN.decode()}{verified}{CLOSE}"
    continuation = list(encode(text))
    data, starts = token_bytes.offsets(continuation)
    if data != text.encode():
        raise PredictionNotFound(f"the tokenizer does not round-trip {text!r}")
    at = len(OPEN)
    a, b = _overlap_span(starts, at - 1, at, at + len(verified))
    ce = [0.0] * (len(prefix) + len(continuation))
    ce[len(prefix) + a : len(prefix) + b] = [alpha] * (b - a)
    return prefix + continuation, ce, len(prefix)


def policy_prefix(nodes: Sequence[Any], index: int) -> list[int]:
    """The token ids the policy was given before it sampled node ``index``: its path's
    tokens, then the node's own tokens before its first sampled one."""
    node = nodes[index]
    first = next((i for i, m in enumerate(node.mask) if m), len(node.mask))
    return [t for j in _path(nodes, index)[:-1] for t in nodes[j].token_ids] + list(node.token_ids[:first])


class DuplicateRecord(ValueError):
    """Two verified records name the same sampled label (the same node and
    span). :func:`annotate` trains the label once, counts the others in
    ``duplicates`` and records this error's message in ``errors``."""


@dataclass
class Annotation:
    """What one rollout's annotation did (the counts become ``predict_*`` trace metrics)."""

    labels: int = 0  # records with a sampled label
    in_place: int = 0  # sampled == verified: CE on the sampled span
    grafted: int = 0  # sampled != verified: a CE-only node added
    unlocated: int = 0  # raised PredictionNotFound (not trained)
    duplicates: int = 0  # DuplicateRecord: a record naming a label another record already named
    graft_too_long: int = 0  # graft longer than max_tokens: dropped
    past_limit: int = 0  # in-place label beyond max_tokens (the trainer truncates it)
    ce_off: int = 0  # located labels not trained because alpha is 0
    unverified: int = 0  # valid sampled labels no record named (held out of RL, no CE)
    invalid: int = 0  # sampled labels the protocol rejects (unknown word, wrong case, unclosed): no CE
    truncated: int = 0  # sampled labels cut by the end of the tokens: held out, no CE
    quoted: int = 0  # labels inside <think> blocks or on CALL lines: held out, not the prediction
    rl_held_tokens: int = 0  # sampled tokens held out of RL as label tokens
    labels_trained: int = 0  # labels that carry CE (in place or on a graft)
    ce_tokens: int = 0  # tokens with a CE weight
    ce_dropped: int = 0  # labels whose CE the adapter dropped (a uniform-reward group, the study's rule)
    graft_tokens: int = 0  # tokens in the grafted nodes' branches (extra trainer tokens)
    aux_samples: int = 0  # study rule: CE-only samples re-rendered from a target's messages
    aux_unlabelled: int = 0  # study rule: of those, targets whose sampled label was missing or invalid
    aux_context_differs: int = 0  # study rule: re-rendered context != the policy's own tokens before the turn
    aux_too_long: int = 0  # study rule: samples longer than max_tokens: dropped
    aux_tokens: int = 0  # study rule: tokens in the auxiliary samples (extra trainer tokens)
    errors: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {f"{METRIC_PREFIX}{k}": float(v) for k, v in vars(self).items() if k != "errors"}


def default_graft_node(sampled: Any, token_ids: list[int], text: str, ce: list[float]) -> Any:
    """A CE-only sibling of ``sampled``: the same node type (a verifiers
    pydantic model, or a dataclass) carrying the corrected text and no
    sampled tokens."""
    fields = {
        "parent": sampled.parent,
        "sampled": False,
        "token_ids": token_ids,
        "mask": [False] * len(token_ids),
        "loss_weights": {"ce": ce},
    }
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
    rule: SpanRule = "decision",
    new_node: Callable[..., Any] = default_graft_node,
    ce_rule: CeRule = "in_place",
    render: Callable[[list[dict]], list[int]] | None = None,
) -> Annotation:
    """Write PREDICT's ``rl``/``ce`` weights onto ``nodes`` (appending grafts).

    Every label span the policy sampled, closed or not, valid or not,
    quoted or not, gets ``rl`` 0 and is counted. ``alpha`` 0 writes no CE
    and grafts nothing (labels still out of RL credit). ``ce_rule``
    (:data:`CeRule`) says where the CE goes; ``"study"`` reads every
    prediction in ``candidates`` (the study's prediction targets) and needs
    ``render``: messages -> the prompt ids the policy's renderer gives them,
    with the generation prompt."""
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, not {alpha}")
    if ce_rule not in CE_RULES:
        raise ValueError(f"unknown CE rule {ce_rule!r} ({' or '.join(CE_RULES)})")
    per_target = CE_RULES[ce_rule]
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
    # rollout lost, one the protocol rejected, one a token limit cut, a mention in a think block).
    prediction: set[tuple[int, int]] = set()  # valid, unquoted labels: what a record may name
    found_in: dict[int, list[Located]] = {}
    for i, weights in rl.items():
        node = nodes[i]
        try:
            found = found_in[i] = spans(nodes, i, token_bytes, rule)
        except PredictionNotFound as exc:
            emitted = b"".join(token_bytes(t) for t, m in zip(node.token_ids, node.mask) if m)
            if OPEN.lower() in emitted.lower():  # a node with no label needs no span
                out.errors.append(str(exc))
            continue
        for loc in found:
            weights[loc.start : loc.end] = [0.0] * (loc.end - loc.start)
            out.rl_held_tokens += loc.end - loc.start
            if loc.span.quoted:
                out.quoted += 1
            elif loc.span.truncated:
                out.truncated += 1
            elif not loc.span.valid:
                out.invalid += 1
            else:
                prediction.add((i, loc.start))
    if per_target:
        _study_samples(out, nodes, original, candidates, token_bytes, encode, render, alpha, max_tokens,
                       new_node)
        candidates = ()  # nothing trains in place, nothing is grafted
    named: set[tuple[int, int]] = set()
    for cand in candidates:
        sampled, verified = cand.sampled_label, cand.verified_label
        if sampled is None:
            continue
        out.labels += 1
        try:
            if not isinstance(verified, str) or verified not in LABELS:
                raise PredictionNotFound(f"candidate {cand.index}: no verified label")
            index = find_node(nodes[:original], cand.context or [], cand.prediction_turn)
            if index not in found_in:
                raise PredictionNotFound(f"node {index}: its sampled tokens are not one suffix of the node")
            loc = _prediction(found_in[index], index, sampled)
            if (index, loc.start) in named:
                raise DuplicateRecord(
                    f"candidate {cand.index}: node {index}'s label is named by an earlier record; "
                    "trained once"
                )
            named.add((index, loc.start))
            if alpha == 0:
                out.ce_off += 1
                continue
            node = nodes[index]
            if sampled == verified:
                ce = list((node.loss_weights or {}).get("ce") or [0.0] * len(node.token_ids))
                a, b = loc.start, loc.end
                ce[a:b] = [alpha] * (b - a)
                node.loss_weights = {**(node.loss_weights or {}), "ce": ce}
                out.in_place += 1
                out.labels_trained += 1
                out.ce_tokens += b - a
                if max_tokens is not None and tokens_before(index) + loc.end > max_tokens:
                    out.past_limit += 1
                continue
            keep, continuation, (a, b) = graft_tokens(loc, verified, token_bytes, encode, rule)
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
            out.labels_trained += 1
            out.ce_tokens += b - a
            out.graft_tokens += total
        except PredictionNotFound as exc:
            out.unlocated += 1
            out.errors.append(str(exc))
        except DuplicateRecord as exc:
            out.duplicates += 1
            out.errors.append(f"{type(exc).__name__}: {exc}")
    out.unverified = 0 if per_target else len(prediction - named)
    for i, weights in rl.items():
        nodes[i].loss_weights = {**(nodes[i].loss_weights or {}), "rl": weights}
    return out


def _study_samples(
    out: Annotation,
    nodes: list[Any],
    original: int,
    targets: Sequence[Prediction],
    token_bytes: TokenBytes,
    encode: Callable[[str], list[int]],
    render: Callable[[list[dict]], list[int]] | None,
    alpha: float,
    max_tokens: int | None,
    new_node: Callable[..., Any],
) -> None:
    """The study's CE rule: one :func:`study_sample` per target, appended to ``nodes``
    as a root node. A target whose prediction turn cannot be found in the graph
    (``unlocated``) still trains; only the comparison of its context with the
    policy's own tokens is missing."""
    if render is None:
        raise ValueError("the study's CE rule needs render (the policy renderer's prompt ids)")
    template = next((n for n in nodes[:original] if n.sampled), None)
    for k, target in enumerate(targets):
        if target.sampled_label is not None:
            out.labels += 1
        if alpha == 0:
            out.ce_off += 1
            continue
        try:
            if target.context is None or template is None:
                why = "no context recorded" if template else "the graph has no sampled node"
                raise PredictionNotFound(why)
            token_ids, ce, prefix_len = study_sample(target.context, target.verified_label, render,
                                                     token_bytes, encode, alpha)
        except PredictionNotFound as exc:
            out.unlocated += 1
            out.errors.append(f"target {k}: {exc}")
            continue
        try:
            index = find_node(nodes[:original], target.context, target.prediction_turn)
            if policy_prefix(nodes, index) != token_ids[:prefix_len]:
                out.aux_context_differs += 1
        except PredictionNotFound as exc:
            out.unlocated += 1
            out.errors.append(f"target {k}: {exc}; its context is not compared")
        if max_tokens is not None and len(token_ids) > max_tokens:
            out.aux_too_long += 1
            continue
        node = new_node(template, token_ids, f"{OPEN.decode()}{target.verified_label}{CLOSE}", ce)
        node.parent = None  # a sample of its own: the re-rendered context is its whole prefix
        nodes.append(node)
        out.aux_samples += 1
        out.aux_unlabelled += target.sampled_label not in LABELS
        out.labels_trained += 1
        out.ce_tokens += sum(1 for w in ce if w)
        out.aux_tokens += len(token_ids)
