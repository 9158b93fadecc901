r"""The PREDICT study's chat format as a ``renderers`` renderer, for PRIME-RL to
load by import path (``glyph.render_study.StudyRenderer``)::

    [renderer]                      # SFT; [orchestrator.renderer] for RL
    name = "custom"
    import_path = "glyph.render_study.StudyRenderer"

The format (the study's ``configs/chat_template.jinja`` and
``src/glyph/chat.py``, ``render_messages``; its pieces are read from
``glyph.agent.study.CHAT_TURN``):
each message is ``<|im_start|>{role}\n{content.rstrip()}\n<|im_end|>\n\n``,
any role (the study's observations are ``tool`` messages), no think block;
the generation prompt is ``<|im_start|>assistant\n``. The study trained and
sampled through that template with ``<|im_end|>`` as EOS (its
``configs/arm_a_sft.toml`` ``[tokenizer]``; ``arm_a_rl.toml``
``[orchestrator.renderer] name = "default"``), so a render here is the
tokenizer's encoding of the whole template text: the text between two special
tokens (``{role}\n{content}\n``) is encoded in one pass, as the template's
text is, never piece by piece. ``configs/chat_template_study.jinja`` is the
same rendering in jinja; ``check_parity(..., profile="study")`` (tests/render_checks.py)
holds the two equal.

What the model samples of an assistant turn (``sampled_mask``, the SFT loss
mask PRIME-RL builds with ``renderers.build_training_sample``): the tokens
that start inside its content, the ``\n`` that closes it and
``<|im_end|>``; never ``<|im_start|>assistant\n`` or the ``\n\n`` after
``<|im_end|>``. A token where the header's ``\n`` and the content merge (a
content opening with a line break; an empty content) starts in the header
and is not sampled. The attribution reads the tokenizer's character offsets
(a fast tokenizer); a tokenizer without them is refused.
"""

from __future__ import annotations

from typing import Any

from renderers.base import (
    ParsedResponse,
    RenderedTokens,
    attribute_text_segments,
    extract_message_tool_names,
    reject_assistant_in_extension,
    trim_to_turn_close,
)
from renderers.configs import BaseRendererConfig

from glyph.agent.study import CHAT_TURN
from glyph.render import STUDY_IMPORT_PATH

IMPORT_PATH = STUDY_IMPORT_PATH  # this class's import path; one source: glyph/render.py
IM_START, IM_END = "<|im_start|>", "<|im_end|>"


def _format_pieces(turn: str) -> tuple[str, str, str]:
    """(after the role, before ``<|im_end|>``, after it) of the study's turn
    ``<|im_start|>{role}HEAD{content}CLOSE<|im_end|>GAP``."""
    start, rest = turn.split("{role}")
    head, tail = rest.split("{content}")
    close, gap = tail.split(IM_END)
    if start != IM_START:
        raise ValueError(f"the study's turn {turn!r} does not open with {IM_START}")
    return head, close, gap


HEAD, CLOSE, TURN_GAP = _format_pieces(CHAT_TURN)  # "\n", "\n", "\n\n"


class StudyRendererConfig(BaseRendererConfig):
    """The study's format has no settings; ``thinking_retention`` (inherited)
    is accepted and changes nothing: the format carries no reasoning."""


def content_text(content: Any) -> str:
    """A message's content as text: a string, ``None`` (empty) or a list of
    text parts (joined); anything else is refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise TypeError(f"the study's format renders text only, not {part!r}")
        return "".join(parts)
    raise TypeError(f"message content must be text, not {type(content).__name__}")


class StudyRenderer:
    """Messages to the study's ChatML tokens (module docstring), with the
    ``renderers.base.Renderer`` protocol PRIME-RL calls."""

    config_class = StudyRendererConfig

    def __init__(self, tokenizer, config: StudyRendererConfig | None = None):
        self._tokenizer = tokenizer
        self.config = config or StudyRendererConfig()
        self._im_start = self._token_id(IM_START)
        self._im_end = self._token_id(IM_END)

    @property
    def is_prefix_stable(self) -> bool:
        # Each message renders alone, whatever follows it.
        return True

    def _token_id(self, token: str) -> int:
        tid = self._tokenizer.convert_tokens_to_ids(token)
        if not isinstance(tid, int) or tid == self._tokenizer.unk_token_id:
            raise ValueError(f"{token!r} is not a token of this tokenizer")
        return tid

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []

    def _turn(self, message: dict, index: int, out: RenderedTokens) -> None:
        """Append one message's tokens to ``out`` (its lists, in place)."""
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"message {index} has no role")
        assistant = role == "assistant"
        body = content_text(message.get("content")).rstrip()
        # One BPE pass over the text between <|im_start|> and <|im_end|>, as
        # the template's text is encoded; each token goes to the segment its
        # first character is in.
        pieces = attribute_text_segments(self._tokenizer, [(role + HEAD, False), (body, True), (CLOSE, assistant)])
        if not pieces.has_content_attribution:
            raise ValueError("the study's renderer needs a tokenizer with character offsets (a fast tokenizer)")

        def emit(token_id: int, sampled: bool, content: bool) -> None:
            out.token_ids.append(token_id)
            out.message_indices.append(index)
            out.sampled_mask.append(sampled)
            out.is_content.append(content)

        emit(self._im_start, False, False)
        for token_id, inside in pieces:
            emit(token_id, assistant and inside, inside)
        emit(self._im_end, assistant, assistant)
        for token_id in self._encode(TURN_GAP):
            emit(token_id, False, False)

    def _generation_prompt(self, out: RenderedTokens) -> None:
        ids = [self._im_start, *self._encode("assistant" + HEAD)]
        out.token_ids.extend(ids)
        out.message_indices.extend([-1] * len(ids))
        out.sampled_mask.extend([False] * len(ids))
        out.is_content.extend([False] * len(ids))

    def render(self, messages: list[dict], *, tools: list | None = None,
               add_generation_prompt: bool = False) -> RenderedTokens:
        if tools:
            raise ValueError("the study's format has no tools section")
        if not messages:
            raise ValueError("No messages provided.")
        out = RenderedTokens(message_roles=[m.get("role") or "" for m in messages],
                             message_tool_names=extract_message_tool_names(messages))
        for i, message in enumerate(messages):
            self._turn(message, i, out)
        if add_generation_prompt:
            self._generation_prompt(out)
        return out

    def render_ids(self, messages: list[dict], *, tools: list | None = None,
                   add_generation_prompt: bool = False) -> list[int]:
        return self.render(messages, tools=tools, add_generation_prompt=add_generation_prompt).token_ids

    def parse_response(self, token_ids: list[int], *, tools: list | None = None,
                       prompt_ids: list[int] | None = None) -> ParsedResponse:
        """The assistant message of a completion: its text up to ``<|im_end|>``,
        less the ``\\n`` the format closes a turn with (``CLOSE``)."""
        ids = list(token_ids)
        if self._im_end in ids:
            ids = ids[:ids.index(self._im_end)]
        text = self._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return ParsedResponse(content=text.removesuffix(CLOSE), reasoning_content=None, tool_calls=[],
                              reasoning_complete=None)

    def get_stop_token_ids(self) -> list[int]:
        return [self._im_end]

    def bridge_to_next_turn(self, previous_prompt_ids: list[int], previous_completion_ids: list[int],
                            new_messages: list[dict], *, tools: list | None = None) -> RenderedTokens | None:
        """The previous prompt and completion kept verbatim (cut after its
        ``<|im_end|>``, or closed with one if it ran out of tokens), then the
        turn gap, ``new_messages`` and the generation prompt: the full
        render's tokens whenever the completion is the canonical encoding
        of its turn. ``None`` (re-render) for assistant messages."""
        if tools or not previous_prompt_ids or not new_messages or reject_assistant_in_extension(new_messages):
            return None
        previous = trim_to_turn_close(previous_prompt_ids, previous_completion_ids, {self._im_end},
                                      synthesize_close=self._im_end)
        if previous is None:
            return None
        gap = self._encode(TURN_GAP)
        new = self.render(new_messages, add_generation_prompt=True)
        head = previous + gap
        return RenderedTokens(
            token_ids=head + new.token_ids,
            message_indices=[-1] * len(head) + new.message_indices,
            sampled_mask=[False] * (len(head) + len(new.token_ids)),
            is_content=[False] * len(head) + new.is_content,
            message_roles=new.message_roles,
            message_tool_names=new.message_tool_names,
        )
