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
from glyph.predict.annotate import Annotation, TokenBytes, annotate
from glyph.testing.graph_layout import Node, rendered_layout

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
        common = dict(sampled_label=sampled, verified_label=verified, decision=decision, shadow=decision != S.KEEP,
                      context=context, prediction_turn=turns[at][1])
        targets.append(PredictionTarget(candidate_sha256=f"{k:064x}", **common))
        candidates.append(VerifiedCandidate(index=k, sha256=f"{k:064x}", **common))
    return Rollout(turns, nodes, targets, candidates)


def annotated(tokenizer, renderer, ro: Rollout, ce_rule: str, alpha: float = 0.1,
              max_tokens: int | None = None) -> tuple[list[Node], Annotation]:
    """A fresh copy of ``ro``'s graph annotated under ``ce_rule``, with the study's span rule, as
    the adapter would: the study's targets under its rule, glyph's candidates under glyph's."""
    nodes = [Node(n.parent, dict(n.message), n.sampled, list(n.token_ids), list(n.mask)) for n in ro.nodes]
    out = annotate(nodes, ro.targets if ce_rule == "study" else ro.candidates, TokenBytes(tokenizer),
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
