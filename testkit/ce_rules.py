"""Arm B rollouts in the study's format, laid out as the PRIME-RL pin lays them out
with the study's renderer, each prediction of a known kind (right, wrong, an
invalid label, no label), and their verified records both ways: the study's
prediction targets and glyph's verified candidates. For the tests and the
benchmark of PREDICT's CE rules (``glyph.predict.annotate.CeRule``).

Every prediction turn is written by the study profile's own turn writer
(``glyph.agent.profiles.study.STUDY``); a wrong, invalid or missing label is
the only thing that differs. An invalid or missing label is a protocol error
in the study's grammar: the episode ends there, with its candidate
shadow-tested and recorded as a target, as the study's program does.
"""

from __future__ import annotations

from dataclasses import dataclass

from glyph.agent import study as S
from glyph.agent.profiles.base import Call
from glyph.agent.profiles.study import STUDY
from glyph.agent.trace import PredictionTarget, VerifiedCandidate
from glyph.predict.annotate import CE_RULES, Annotation, TokenBytes, annotate
from testkit.graph_layout import Node, rendered_layout

KINDS = ("right", "wrong", "invalid", "missing")
"""The kinds of prediction: the sampled label is the verified one, another
outcome class, a word that is no outcome class, or absent."""
VERIFIED = ("ASSERTION_FAILURE", "RUNTIME_ERROR", "PASS", "TIMEOUT", "SYNTAX_ERROR", "OTHER")
WRONG_FOR = {"PASS": "ASSERTION_FAILURE"}  # a wrong label: PASS where it failed, else PASS
INVALID_LABEL = "Pass"  # wrong case: no outcome class


@dataclass
class Rollout:
    """One rollout: its turns, its graph (``Node`` chain) and its predictions as both records."""

    turns: list[tuple[str, str]]
    nodes: list[Node]
    targets: list[PredictionTarget]
    candidates: list[VerifiedCandidate]


def _sampled(kind: str, verified: str) -> str | None:
    return {"right": verified, "wrong": WRONG_FOR.get(verified, "PASS"), "invalid": INVALID_LABEL,
            "missing": None}[kind]


def study_turns(kinds: list[str], first_verified: int = 0) -> tuple[list[tuple[str, str]], list[tuple]]:
    """An Arm B conversation whose predictions are of ``kinds`` in order (an invalid or missing
    one must be last: it ends the episode), and per prediction (turn index, sampled, verified,
    decision)."""
    if any(k in ("invalid", "missing") for k in kinds[:-1]):
        raise ValueError("an invalid or missing label ends the episode: it must come last")
    opening = STUDY.messages("b", "Write a function that sums a list.", "", ["assert f([1, 2]) == 3"],
                             "mbpp_1", 8)
    turns = [(m["role"], m["content"]) for m in opening]
    n = 0

    def call(tool: str, **args) -> Call:
        nonlocal n
        n += 1
        return Call(STUDY.call_id(n), tool, args)

    read = call(S.READ_FILE, **STUDY.args(S.READ_FILE, S.SOLUTION_FILE, "mbpp_1"))
    turns += [("assistant", STUDY.turn_text(read)), ("tool", f"RESULT {read.id}:\ndef f(xs):\n    pass")]
    predictions = []
    for k, kind in enumerate(kinds):
        patch = call(S.APPLY_PATCH, **STUDY.args(S.APPLY_PATCH, S.SOLUTION_FILE, "mbpp_1", "pass",
                                                 f"return sum(xs) + {k}"))
        turns += [("assistant", STUDY.turn_text(patch)), ("tool", f"RESULT {patch.id}:\npatched")]
        verified = VERIFIED[(first_verified + k) % len(VERIFIED)]
        sampled = _sampled(kind, verified)
        last = k == len(kinds) - 1
        decision = S.KEEP if last else S.REVISE
        nxt = (call(S.PYTHON_TEST, **STUDY.args(S.PYTHON_TEST, S.SOLUTION_FILE, "mbpp_1")) if last else
               call(S.APPLY_PATCH, **STUDY.args(S.APPLY_PATCH, S.SOLUTION_FILE, "mbpp_1", "+ 0", "+ 0 ")))
        predictions.append((len(turns), sampled, verified, decision if sampled else None))
        turns += [("assistant", STUDY.turn_text(nxt, sampled, decision))]
        if kind in ("invalid", "missing"):
            return turns, predictions  # a protocol error: the episode ends
        turns += [("tool", f"RESULT {nxt.id}:\ndone")]
    turns += [("assistant", S.FINAL_TURN)]
    return turns, predictions


def rollout(renderer, kinds: list[str], first_verified: int = 0,
            sampled_ids: dict[int, list[int]] | None = None) -> Rollout:
    """``study_turns(kinds)`` laid out with ``renderer`` (``rendered_layout``), its predictions
    as the study's targets and as glyph's verified candidates."""
    turns, predictions = study_turns(kinds, first_verified)
    nodes = rendered_layout(renderer, turns, sampled_ids)
    targets, candidates = [], []
    for k, (at, sampled, verified, decision) in enumerate(predictions):
        context = [{"role": r, "content": c} for r, c in turns[:at]]
        common = {"sampled_label": sampled, "verified_label": verified, "decision": decision,
                  "shadow": decision != S.KEEP, "context": context, "prediction_turn": turns[at][1]}
        targets.append(PredictionTarget(candidate_sha256=f"{k:064x}", **common))
        candidates.append(VerifiedCandidate(index=k, sha256=f"{k:064x}", **common))
    return Rollout(turns, nodes, targets, candidates)


def annotated(tokenizer, renderer, ro: Rollout, ce_rule: str, alpha: float = 0.1,
              max_tokens: int | None = None) -> tuple[list[Node], Annotation]:
    """A fresh copy of ``ro``'s graph annotated under ``ce_rule``, with the study's span rule, as
    the adapter would: the study's targets under its rule, glyph's candidates under glyph's."""
    nodes = [Node(n.parent, dict(n.message), n.sampled, list(n.token_ids), list(n.mask)) for n in ro.nodes]
    out = annotate(nodes, ro.targets if CE_RULES[ce_rule] else ro.candidates, TokenBytes(tokenizer),
                   lambda text: list(tokenizer.encode(text, add_special_tokens=False)), alpha=alpha,
                   max_tokens=max_tokens, rule="study", ce_rule=ce_rule,
                   render=lambda messages: list(renderer.render_ids(messages, add_generation_prompt=True)))
    return nodes, out


def branches(nodes: list[Node]) -> list[tuple[list[int], list[bool], dict[str, list[float]]]]:
    """Each root-to-leaf path's (token ids, sampled mask, weight streams), a stream where a node
    carries it (zeros elsewhere), each node's weights in the first path that holds it: a plain
    reading of the graph, for tests without verifiers (the pin's ``trace_to_samples`` in
    ``tests/pin/``)."""
    leaves = [i for i in range(len(nodes)) if i not in {n.parent for n in nodes}]
    seen: set[int] = set()
    out = []
    for leaf in leaves:
        path, i = [], leaf
        while i is not None:
            path.append(i)
            i = nodes[i].parent
        path.reverse()
        ids = [t for j in path for t in nodes[j].token_ids]
        mask = [m for j in path for m in nodes[j].mask]
        streams: dict[str, list[float]] = {}
        for name in ("rl", "ce"):
            values = []
            for j in path:
                w = (nodes[j].loss_weights or {}).get(name)
                values += list(w) if w is not None and j not in seen else [0.0] * len(nodes[j].token_ids)
            if any(values):
                streams[name] = values
        seen.update(j for j in path if nodes[j].loss_weights)
        out.append((ids, mask, streams))
    return out


# ---------------------------------------------------------------- through PRIME-RL at the pin


def pin_samples(nodes: list[Node], inference: dict[int, list[float]], advantage: float,
                temperature: float) -> list:
    """The samples PRIME-RL's orchestrator ships for an annotated graph: the nodes as
    verifiers ``MessageNode``s (``inference[i]``: node ``i``'s sampling logprobs; GRPO's
    ``advantage`` on every sampled token) through the pin's ``trace_to_samples``, each
    stamped with the env's ``temperature`` as ``TrainSink`` does, as ``reference_loss.Sample``s.
    Needs the pinned stack (verifiers 0.3.1.dev62, PRIME-RL's ``src``)."""
    import verifiers.v1 as vf
    from prime_rl.orchestrator.trajectories import trace_to_samples

    from testkit.pin_loss import from_training_sample

    graph = [
        vf.MessageNode.model_construct(
            parent=n.parent, message=n.message, sampled=n.sampled, token_ids=list(n.token_ids),
            mask=list(n.mask),
            logprobs=list(inference.get(i, [])), advantages=[advantage] * sum(n.mask) if n.sampled else None,
            loss_weights=n.loss_weights)
        for i, n in enumerate(nodes)
    ]
    out = []
    for sample in trace_to_samples(vf.Trace.model_construct(nodes=graph, calls=[])):
        sample.temperatures = [temperature] * len(sample.token_ids)
        out.append(from_training_sample(sample))
    return out


def sampling_logprobs(model, nodes: list[Node], temperature: float, seed: int = 0) -> dict[int, list[float]]:
    """Per sampled node of the original chain, logprobs near the model's own (the trainer's
    plus noise: an importance ratio that is not 1), as the inference server would report them."""
    import torch

    from testkit.pin_loss import prime_rl_logprobs
    from testkit.reference_loss import Sample

    ids = [t for n in nodes for t in n.token_ids]
    with torch.no_grad():
        lp = prime_rl_logprobs(model, Sample(token_ids=ids, mask=[False] * len(ids), temperature=temperature))
    noise = torch.randn(len(ids), generator=torch.Generator().manual_seed(seed)) * 0.05
    out, at = {}, 0
    for i, n in enumerate(nodes):
        out[i] = [float(lp[at + j] + noise[at + j]) for j, m in enumerate(n.mask) if m]
        at += len(n.token_ids)
    return out


@dataclass
class Step:
    """One trainer step's loss on a batch, through the pin's ``compute_loss``."""

    loss: float
    rl: float  # rl_sum / N_rl
    ce: float  # ce_sum / N_ce
    rl_tokens: int  # N_rl
    ce_tokens: int  # N_ce
    samples: int
    tokens: int
    grad: object  # every parameter's gradient, flattened into one vector


def pin_step(model, samples: list) -> Step:
    """``compute_loss`` (the pin's, default loss config) on ``samples`` and its gradient; the parts
    from the reference loss, which must agree with it."""
    import torch
    from prime_rl.configs.trainer import DefaultLossConfig

    from testkit.pin_loss import prime_rl_compute_loss, prime_rl_logprobs
    from testkit.reference_loss import predict_loss

    model.zero_grad()
    lps = [prime_rl_logprobs(model, s) for s in samples]
    loss, _ = prime_rl_compute_loss(lps, samples, DefaultLossConfig())
    _, parts = predict_loss(lps, samples)
    if not torch.allclose(parts.rl + parts.ce, loss.detach(), rtol=1e-5, atol=1e-7):
        raise AssertionError(f"the reference loss {parts.rl + parts.ce} is not the pin's {loss}")
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()
    return Step(float(loss.detach()), float(parts.rl.detach()), float(parts.ce.detach()), parts.rl_tokens,
                parts.ce_tokens, len(samples),
                sum(len(s) for s in samples), grad)


def agreement(a: Step, b: Step) -> tuple[float, float]:
    """(cosine, |g_b - g_a| / |g_a|) of two steps' gradients."""
    import torch

    ga, gb = a.grad.double(), b.grad.double()  # float32 sums over ~5M entries are off by ~1e-5
    cos = torch.nn.functional.cosine_similarity(ga, gb, dim=0)
    return float(cos), float((gb - ga).norm() / ga.norm())


SCENARIOS: dict[str, list[list[str]]] = {
    "valid": [["right", "wrong", "right"], ["wrong", "right"], ["right", "wrong"]],
    "invalid_missing": [["right", "wrong", "right"], ["wrong", "invalid"], ["right", "missing"]],
    "retokenized": [["right", "wrong", "right"], ["wrong", "right"], ["right", "wrong"]],
}
"""The batches compared: each a list of rollouts, each a list of prediction kinds. ``valid``:
every label an outcome class, every token canonical. ``invalid_missing``: one rollout ends on a
label that is no outcome class, one on a turn without a label. ``retokenized``: ``valid``, but in
each rollout the policy sampled its first turn in another tokenization of the same text (its
first token split in two), so every later context the policy saw differs from a re-rendering."""
ADVANTAGES = (0.6, -0.4, 0.25)


def split_first(tokenizer, ids: list[int]) -> list[int]:
    """``ids`` with its first token split into two tokens of the same bytes: the same text,
    another tokenization (a policy may sample one)."""
    text = tokenizer.decode(ids[:1])
    head, rest = (list(tokenizer.encode(t, add_special_tokens=False)) for t in (text[:1], text[1:]))
    if not rest or head + rest == ids[:1]:
        raise ValueError(f"the token {text!r} cannot be split")
    return head + rest + ids[1:]


def batch(tokenizer, renderer, kinds: list[list[str]], retokenized: bool = False) -> list[Rollout]:
    """One rollout per entry of ``kinds``, rollout ``k`` starting its verified labels at ``2k`` in
    the cycle; ``retokenized``: each rollout's first turn sampled in another tokenization of the
    same text (``split_first``)."""
    out = []
    for k, ks in enumerate(kinds):
        ro = rollout(renderer, ks, first_verified=2 * k)
        if retokenized:
            first = next(i for i, (role, _) in enumerate(ro.turns) if role == "assistant")
            node = next(n for n in ro.nodes if n.sampled)
            sampled = [t for t, m in zip(node.token_ids, node.mask) if m]
            ro = rollout(renderer, ks, first_verified=2 * k,
                         sampled_ids={first: split_first(tokenizer, sampled)})
        out.append(ro)
    return out


def scenario(tokenizer, renderer, name: str) -> list[Rollout]:
    """The rollouts of ``SCENARIOS[name]``."""
    return batch(tokenizer, renderer, SCENARIOS[name], retokenized=name == "retokenized")


def rule_step(tokenizer, renderer, model, rollouts: list[Rollout], ce_rule: str, alpha: float = 0.1,
              temperature: float = 0.8) -> tuple[Step, list[Annotation]]:
    """One step of PREDICT on ``rollouts`` under ``ce_rule`` through the pin: annotate, the
    pin's samples, its loss and gradient; the annotations' counts beside."""
    samples, notes = [], []
    for k, ro in enumerate(rollouts):
        inference = sampling_logprobs(model, ro.nodes, temperature, seed=k)
        nodes, note = annotated(tokenizer, renderer, ro, ce_rule, alpha=alpha)
        samples += pin_samples(nodes, inference, ADVANTAGES[k % len(ADVANTAGES)], temperature)
        notes.append(note)
    return pin_step(model, samples), notes
