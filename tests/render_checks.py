"""What tests/test_render.py (glyph's profile) and tests/test_render_study.py
(the study's) check alike, for one ``profile``: the parity of a profile's chat
template and renderer (``check_parity``), at every prompt of a conversation,
and a multi-turn rollout built as PRIME-RL builds it."""

from __future__ import annotations

from collections.abc import Callable

from glyph import render as R


def assistant_turns(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def starts_with_a_line_break(content: str) -> bool:
    lead = content[:len(content) - len(content.lstrip())]
    return "\n" in lead or "\r" in lead


def render_text(messages: list[dict], tokenizer, add_generation_prompt: bool = False,
                profile: str = R.DEFAULT_PROFILE) -> str:
    """The text of ``render_ids`` (its decoding; the text the template renders,
    after the tokenizer's own normalization)."""
    return tokenizer.decode(R.render_ids(messages, tokenizer, add_generation_prompt, profile),
                            skip_special_tokens=False, clean_up_tokenization_spaces=False)


def check_parity(messages: list[dict], tokenizer, add_generation_prompt: bool = False,
                 profile: str = R.DEFAULT_PROFILE, template: str | None = None) -> None:
    """Raise ``AssertionError`` unless the profile's jinja template (or
    ``template``; through ``apply_chat_template``, whatever template
    ``tokenizer`` carries) and its renderer give the same ids, and the same
    text: the template's text, normalized as the tokenizer normalizes what it
    encodes (NFC for Qwen3), equals the decoding of the renderer's ids."""
    ids = R.render_ids(messages, tokenizer, add_generation_prompt, profile)
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)  # render_text
    template = R.chat_template(profile) if template is None else template
    jinja_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                               chat_template=template)
    normalizer = tokenizer.backend_tokenizer.normalizer
    if normalizer is not None:
        jinja_text = normalizer.normalize_str(jinja_text)
    if jinja_text != text:
        at = next((i for i, (a, b) in enumerate(zip(jinja_text, text)) if a != b), min(len(jinja_text), len(text)))
        raise AssertionError(f"template and renderer disagree on text at character {at}: "
                             f"{jinja_text[max(0, at - 40):at + 40]!r} vs {text[max(0, at - 40):at + 40]!r}")
    jinja_ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                              chat_template=template)
    if not isinstance(jinja_ids, list):  # transformers 5 returns a BatchEncoding
        jinja_ids = jinja_ids["input_ids"]
    if list(jinja_ids) != ids:
        at = next((i for i, (a, b) in enumerate(zip(jinja_ids, ids)) if a != b), min(len(jinja_ids), len(ids)))
        raise AssertionError(f"template and renderer disagree on ids at token {at}: "
                             f"{list(jinja_ids)[at:at + 8]} vs {ids[at:at + 8]}")


def check_every_prompt(messages: list[dict], tok, profile: str) -> int:
    """Parity for the conversation and for the generation prompt of each of
    its assistant turns (and of the next turn); returns the checks made."""
    check_parity(messages, tok, profile=profile)
    prefixes = [messages[:i] for i in assistant_turns(messages) if i > 0]
    if messages[-1]["role"] != "assistant":
        prefixes.append(messages)
    for prefix in prefixes:
        check_parity(prefix, tok, add_generation_prompt=True, profile=profile)
    return 1 + len(prefixes)


def rollout_ids(messages: list[dict], tok, profile: str, completion: Callable[[dict], list[int]],
                on_turn: Callable[[object, dict, list[int]], None] | None = None,
                on_bridge: Callable[[object], None] | None = None) -> tuple[list[int], list[list[int]]]:
    """The ids a multi-turn PRIME-RL rollout of ``messages`` holds at its end,
    and the prompt of each turn: the first prompt rendered, each later one
    ``bridge_to_next_turn(previous prompt, previous completion, new messages)``;
    ``completion(message)`` is what the model samples for an assistant turn.
    ``on_turn(renderer, message, completion)`` and ``on_bridge(bridged)`` check
    each step further."""
    r = R.renderer(tok, profile=profile)
    turns = assistant_turns(messages)
    prompt = R.render_ids(messages[:turns[0]], tok, add_generation_prompt=True, profile=profile)
    prompts = [prompt]
    for k, i in enumerate(turns):
        sampled = completion(messages[i])
        if on_turn is not None:
            on_turn(r, messages[i], sampled)
        new_messages = messages[i + 1:turns[k + 1]] if k + 1 < len(turns) else messages[i + 1:]
        if not new_messages:
            return prompt + sampled, prompts
        bridged = r.bridge_to_next_turn(prompt, sampled, new_messages)
        assert bridged is not None, f"no bridge after turn {i}"
        if on_bridge is not None:
            on_bridge(bridged)
        prompt = list(bridged.token_ids)
        prompts.append(prompt)
    return prompt, prompts
