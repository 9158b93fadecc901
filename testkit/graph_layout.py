"""A conversation laid out as the PRIME-RL pin's verifiers lays out a rollout's
message graph, without verifiers: for tests and benchmarks of
``glyph.predict.annotate`` on the real vocabulary.

The layout (seen in real traces of the pin's ``eval`` on the token path, Qwen3
renderer, thinking off): a linear chain of nodes; a prompt message's node
holds its own chat scaffold (``<|im_start|>role\\n...<|im_end|>\\n``, with the
newline after the previous assistant's ``<|im_end|>`` at its front); a
sampled assistant node holds the generation prompt (mask False) then the
sampled completion closed by ``<|im_end|>`` (mask True).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GENERATION_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@dataclass
class Node:
    """The attributes of a verifiers ``MessageNode`` that annotate reads and writes."""

    parent: int | None
    message: dict
    sampled: bool = False
    token_ids: list[int] = field(default_factory=list)
    mask: list[bool] = field(default_factory=list)
    loss_weights: dict[str, list[float]] | None = None


def layout(
    tokenizer, turns: list[tuple[str, str]], sampled_ids: dict[int, list[int]] | None = None
) -> list[Node]:
    """The graph of ``turns`` ((role, content) pairs); ``sampled_ids[i]`` replaces
    the canonical completion ids of assistant turn ``i`` (a policy may sample a
    non-canonical tokenization)."""
    encode = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    nodes: list[Node] = []
    for i, (role, content) in enumerate(turns):
        parent = i - 1 if i else None
        if role == "assistant":
            gen = encode(GENERATION_PROMPT)
            comp = (sampled_ids or {}).get(i) or encode(content) + [im_end]
            nodes.append(
                Node(
                    parent,
                    {"role": role, "content": content},
                    True,
                    gen + comp,
                    [False] * len(gen) + [True] * len(comp),
                )
            )
        else:
            lead = "\n" if i and turns[i - 1][0] == "assistant" else ""
            ids = encode(f"{lead}<|im_start|>{role}\n{content}<|im_end|>\n")
            nodes.append(Node(parent, {"role": role, "content": content}, False, ids, [False] * len(ids)))
    return nodes


def rendered_layout(
    renderer, turns: list[tuple[str, str]], sampled_ids: dict[int, list[int]] | None = None
) -> list[Node]:
    """The graph of ``turns`` as the pin's train client and verifiers build it with
    ``renderer`` (a ``renderers`` renderer, e.g. ``glyph.render_study.StudyRenderer``):
    the first turn's prompt rendered, each later one bridged
    (``renderer.bridge_to_next_turn``: the previous prompt and completion kept
    verbatim) or, where the renderer does not bridge, rendered again (and, if its
    tokens part from the stored prefix, forked there as verifiers forks). One node
    per prompt message, its tokens from the end of the previous node through the
    message's own; a sampled node holds the generation prompt, then the completion.
    A completion is the canonical one (the tokens the renderer samples of that
    assistant turn) unless ``sampled_ids[i]`` replaces it (through ``<|im_end|>``)."""
    nodes: list[Node] = []
    path: list[int] = []  # the node ids of the current branch, one a message
    prev: tuple[list[int], list[int], int] | None = None  # prompt, completion, messages before the tail
    for i, (role, content) in enumerate(turns):
        if role != "assistant":
            continue
        messages = [{"role": r, "content": c} for r, c in turns[:i]]
        rendered, shift = None, 0
        if prev is not None:
            rendered, shift = renderer.bridge_to_next_turn(prev[0], prev[1], messages[prev[2]:]), prev[2]
        if rendered is None:
            rendered, shift = renderer.render(messages, add_generation_prompt=True), 0
        prompt = list(rendered.token_ids)
        keep, cursor = 0, 0
        for j in path:  # reuse whole nodes within the common token prefix, fork at the first divergence
            if prompt[cursor:cursor + len(nodes[j].token_ids)] != nodes[j].token_ids:
                break
            cursor += len(nodes[j].token_ids)
            keep += 1
        path = path[:keep]
        indices = list(rendered.message_indices)
        for m in range(len(path), len(messages)):
            ends = [p + 1 for p, k in enumerate(indices) if k >= 0 and k + shift == m]
            end = ends[-1] if ends else cursor
            ids = prompt[cursor:end]
            nodes.append(Node(path[-1] if path else None, messages[m], False, ids, [False] * len(ids)))
            path.append(len(nodes) - 1)
            cursor = end
        full = renderer.render(messages + [{"role": role, "content": content}])
        canonical = [t for t, s, k in zip(full.token_ids, full.sampled_mask, full.message_indices)
                     if s and k == len(messages)]
        comp = (sampled_ids or {}).get(i) or canonical
        gen = prompt[cursor:]
        nodes.append(Node(path[-1] if path else None, {"role": role, "content": content}, True, gen + comp,
                          [False] * len(gen) + [True] * len(comp)))
        path.append(len(nodes) - 1)
        prev = (prompt, comp, i + 1)
    return nodes
