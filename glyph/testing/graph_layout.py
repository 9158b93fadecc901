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
