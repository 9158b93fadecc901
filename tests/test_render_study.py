"""The study profile's renderer (``glyph.render_study.StudyRenderer``, loaded by
import path as PRIME-RL loads it), its jinja twin
(``configs/chat_template_study.jinja``) and the per-profile API of
``glyph.render``, on the real Qwen3 ids (the offline build of the vocabulary)."""

import json
import random

import pytest
import render_checks
from render_checks import assistant_turns, check_parity, render_text, starts_with_a_line_break

from glyph import render as R
from glyph.agent import study as S
from glyph.data import study
from glyph.outcomes import Outcome
from glyph.render import OFFLINE, load_tokenizer, render_ids, renderer, sft_sample
from glyph.render_study import StudyRenderer, StudyRendererConfig

IM_START, IM_END = 151644, 151645


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(OFFLINE, profile="study")


@pytest.fixture(scope="module")
def traces(tmp_path_factory, mbpp_path) -> list[dict]:
    """Every SFT trace of both arms, as ``glyph data prepare --profile study`` writes them."""
    out = tmp_path_factory.mktemp("study")
    study.prepare(out, mbpp_path, progress=False)
    rows = [json.loads(line) for arm in "ab"
            for line in (out / "sft" / f"arm_{arm}" / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 * S.SFT_COUNT
    return rows


def check_every_prompt(messages: list[dict], tok) -> int:
    return render_checks.check_every_prompt(messages, tok, "study")


# Text a model or a task could put anywhere: unicode (composed and not: the
# tokenizer normalizes NFC), control characters, ChatML and think tags as text,
# trailing whitespace (the format right-strips each content).
PIECES = ["a", "def f(x):", " ", "  ", "\n", "\n\n", "\t", "\r\n", "é", "e\u0301", "你好", "🙂", "\u200b", "ß",
          "ﬁ", "<", ">", "|", "{", "}", "\\", "'", '"', "0", "_", "assert f(1) == 2", "<|im_end|>",
          "<|im_start|>", "<think>", "</think>", "<PREDICTION>", "RESULT c1:", "CALL ", "FINAL", ")", "\n    "]


def random_text(rng: random.Random, most: int = 12) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, most)))


def protocol_conversation(rng: random.Random) -> list[dict]:
    """A conversation in the study's protocol: its system prompt and task
    prompt, assistant turns (a thought, Arm B's PREDICTION/DECISION, one CALL
    line with the tool's argument keys), ``tool`` observations (the study's
    result text), and a FINAL, or ending on an observation."""
    arm = rng.choice("ab")
    tests = [f"assert {random_text(rng, 4)} == {random_text(rng, 3)}" for _ in range(rng.randint(0, 3))]
    messages = [{"role": "system", "content": S.SYSTEM_PROMPTS[arm]},
                {"role": "user", "content": S.USER_PROMPT.format(**prompt_fields(rng, tests))}]
    for n in range(1, rng.randint(0, S.MAX_TOOL_CALLS) + 1):
        tool = rng.choice(S.TOOLS)
        call_id = f"c{n}"
        args = {S.ID_KEY: call_id, **{key: random_text(rng) for key in S.TOOL_ARGS[tool]}}
        head = [random_text(rng)] if rng.random() < 0.6 else []
        if arm == "b" and rng.random() < 0.5:
            head += [S.PREDICTION_LINE.format(outcome=rng.choice(list(Outcome)).value),
                     S.DECISION_LINE.format(decision=rng.choice(["KEEP", "REVISE"]))]
        call = S.CALL_PREFIX + tool + " " + json.dumps(args, separators=S.JSON_SEPARATORS)
        content = "" if rng.random() < 0.05 else "\n".join(head + [call])
        observation = "" if rng.random() < 0.05 else S.RESULT_HEAD.format(id=call_id) + "\n" + random_text(rng)
        messages += [{"role": "assistant", "content": content}, {"role": "tool", "content": observation}]
    if rng.random() < 0.8:
        messages.append({"role": "assistant", "content": S.FINAL_PREFIX + " " + random_text(rng)})
    return messages


def prompt_fields(rng: random.Random, tests: list[str]) -> dict:
    """Values for every field of the study's task prompt."""
    import string

    names = [f for _, f, _, _ in string.Formatter().parse(S.USER_PROMPT) if f]
    return {name: "\n".join(tests) if "test" in name else random_text(rng, 6) or "x" for name in names}


# -- the renderer, as PRIME-RL loads it -----------------------------------------

def test_the_study_renderer_loads_by_import_path_as_prime_rl_configures_it(tok):
    from pydantic import TypeAdapter
    from renderers import RendererConfig, create_renderer
    from renderers.configs import CustomRendererConfig

    assert R.DEFAULT_PROFILE == "study" and set(R.PROFILES) == {"study", "glyph"}
    assert R.RENDERERS["study"] == {"name": "custom", "import_path": "glyph.render_study.StudyRenderer"}
    # What a `[renderer]` / `[orchestrator.renderer]` table parses into: renderers' own union.
    config = TypeAdapter(RendererConfig).validate_python(R.RENDERERS["study"])
    assert isinstance(config, CustomRendererConfig) and config == R.renderer_config("study") == R.renderer_config()
    r = create_renderer(tok, config)
    assert type(r) is StudyRenderer and isinstance(r.config, StudyRendererConfig)
    assert type(renderer(tok)) is StudyRenderer
    assert type(renderer(tok, "glyph")).__name__ == "Qwen3Renderer"
    with pytest.raises(Exception, match="extra|not permitted|Extra"):  # the study's format takes no settings
        TypeAdapter(RendererConfig).validate_python({**R.RENDERERS["study"], "enable_thinking": False})
    with pytest.raises(ValueError, match="unknown renderer"):
        R.renderer_config("qwen3")


def test_the_study_format_message_by_message(tok):
    msgs = [{"role": "system", "content": "S  "}, {"role": "user", "content": "U\n"},
            {"role": "assistant", "content": "CALL x"}, {"role": "tool", "content": "RESULT c1:\nok\n\n"}]
    want = ("<|im_start|>system\nS\n<|im_end|>\n\n<|im_start|>user\nU\n<|im_end|>\n\n"
            "<|im_start|>assistant\nCALL x\n<|im_end|>\n\n<|im_start|>tool\nRESULT c1:\nok\n<|im_end|>\n\n")
    assert render_text(msgs, tok) == want == study.chat_text(msgs)
    assert render_text(msgs, tok, add_generation_prompt=True) == want + "<|im_start|>assistant\n"
    ids = render_ids(msgs, tok)
    assert ids.count(IM_START) == ids.count(IM_END) == 4
    assert 151667 not in ids and 151668 not in ids  # no think block
    assert renderer(tok).get_stop_token_ids() == [IM_END]


def test_sft_sample_trains_what_the_model_samples_of_each_assistant_turn(tok):
    """PRIME-RL's SFT sample (default loss mask) with the study's renderer: each
    assistant turn's content (right-stripped), the line break closing it and
    its <|im_end|>; nothing of the headers, the blank lines or other turns."""
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "CALL read_file {}  "}, {"role": "tool", "content": "RESULT c1:"},
            {"role": "assistant", "content": "FINAL x)"}]
    ids, mask = sft_sample(msgs, tok)
    assert ids == render_ids(msgs, tok)
    trained = tok.decode([t for t, m in zip(ids, mask) if m])
    assert trained == "CALL read_file {}\n<|im_end|>FINAL x)\n<|im_end|>"
    assert not mask[0] and not mask[-1]  # <|im_start|> of the system turn; the blank line after the last turn
    # A token where the header's line break and the content merge starts in the header: not sampled.
    ids, mask = sft_sample(msgs[:2] + [{"role": "assistant", "content": ""}], tok)
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "<|im_end|>"


def test_the_study_renderer_is_the_study_templates_text_tokenized_whole(tok):
    """The study sampled through ``renderers``' DefaultRenderer over its template
    (``[orchestrator.renderer] name = "default"``): the same ids."""
    from renderers import create_renderer
    from renderers.configs import DefaultRendererConfig

    rng = random.Random(3)
    default = create_renderer(tok, DefaultRendererConfig())  # tok carries the study's template
    n = 0
    for _ in range(150):
        msgs = protocol_conversation(rng)
        for gen in (False, True):
            ids = render_ids(msgs, tok, add_generation_prompt=gen)
            assert ids == default.render_ids(msgs, add_generation_prompt=gen)
            assert ids == tok.encode(study.chat_text(msgs) + ("<|im_start|>assistant\n" if gen else ""),
                                     add_special_tokens=False)
            n += 1
    assert n == 300


# -- the template agrees with the renderer --------------------------------------

def test_template_agrees_on_random_protocol_conversations(tok):
    rng = random.Random(0)
    conversations = [protocol_conversation(rng) for _ in range(300)]
    checks = sum(check_every_prompt(msgs, tok) for msgs in conversations)
    assert sum(1 for c in conversations for m in c if m["content"] == "") >= 10  # empty turns were drawn
    assert checks >= 1200, checks


def test_template_agrees_on_any_roles_and_content(tok):
    """Beyond the protocol: any order of roles, content as text parts or
    missing, leading whitespace and line breaks (kept), trailing (stripped)."""
    rng = random.Random(1)
    n = 0
    for _ in range(300):
        msgs = [{"role": rng.choice(["system", "user", "assistant", "tool"]), "content": random_text(rng)}
                for _ in range(rng.randint(1, 6))]
        for m in msgs:
            if rng.random() < 0.1:
                m["content"] = [{"type": "text", "text": random_text(rng, 4)}, {"type": "text", "text": "x"}]
            elif rng.random() < 0.05:
                m["content"] = None
        n += check_every_prompt(msgs, tok)
    assert n >= 600, n


def test_template_agrees_on_every_study_sft_trace_and_every_generation_prompt(tok, traces):
    checks = sum(check_every_prompt(row["messages"], tok) for row in traces)
    assert checks == len(traces) + sum(len(assistant_turns(row["messages"])) for row in traces)
    assert {m["role"] for row in traces for m in row["messages"]} == {"system", "user", "assistant", "tool"}


def test_parity_check_can_fail(tok):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "CALL x"},
            {"role": "tool", "content": "RESULT c1:"}]
    check_parity(msgs, tok, profile="study")
    unstripped = R.chat_template("study").replace("content.rstrip()", "content")
    check_parity(msgs, tok, profile="study", template=unstripped)  # nothing to strip: the same
    with pytest.raises(AssertionError, match="disagree on text"):
        check_parity([{"role": "user", "content": "hi "}], tok, profile="study", template=unstripped)
    with pytest.raises(AssertionError, match="disagree on text"):
        check_parity(msgs, tok, profile="study", template=R.chat_template("study").replace("\\n\\n", "\\n"))
    with pytest.raises(AssertionError, match="disagree"):
        check_parity(msgs, tok, profile="study", template=R.chat_template("glyph").replace(
            'raise_exception("glyph\'s chat template renders system, user and assistant messages, not " + '
            'message.role)', '""'))
    with pytest.raises(AssertionError, match="disagree on text"):
        check_parity(msgs, tok, add_generation_prompt=True, profile="glyph", template=R.chat_template("study"))


def test_template_refuses_tools_and_roleless_messages(tok):
    from jinja2.exceptions import TemplateError

    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="tools"):
        tok.apply_chat_template(user, tokenize=False, tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(TemplateError, match="role"):
        tok.apply_chat_template([{"role": "", "content": "x"}], tokenize=False)
    with pytest.raises(ValueError, match="no role"):
        render_ids([{"role": "", "content": "x"}], tok)
    with pytest.raises(ValueError, match="tools"):
        renderer(tok).render(user, tools=[{"type": "function", "function": {"name": "f"}}])


def test_each_profile_has_its_template_and_tokenizer_dir():
    from transformers import AutoTokenizer

    assert R.chat_template() == R.chat_template("study") != R.chat_template("glyph")
    assert R.template_path("study").name == "chat_template_study.jinja"
    for profile in R.PROFILES:
        saved = AutoTokenizer.from_pretrained(str(R.offline_tokenizer_dir(profile)))
        assert saved.chat_template == R.chat_template(profile)
        assert load_tokenizer(OFFLINE, profile=profile).chat_template == R.chat_template(profile)


# -- RL rollouts see the same tokens --------------------------------------------

def rollout_ids(messages: list[dict], tok) -> tuple[list[int], list[list[int]]]:
    """``render_checks.rollout_ids`` with each completion the assistant content's tokens, the format's
    closing line break and <|im_end|>; each parses back to its content, and no bridge is sampled."""
    nfc = tok.backend_tokenizer.normalizer.normalize_str  # what the tokenizer encodes

    def parses_back(r, message, completion):
        if "<|im_end|>" not in message["content"]:  # as text it stops the turn: a model never samples it
            assert r.parse_response(completion).content == nfc(message["content"].rstrip())

    def unsampled(bridged):
        assert not any(bridged.sampled_mask) and len(bridged.message_indices) == len(bridged.token_ids)

    return render_checks.rollout_ids(
        messages, tok, "study",
        lambda m: tok.encode(m["content"].rstrip() + "\n", add_special_tokens=False) + [IM_END],
        on_turn=parses_back, on_bridge=unsampled)


def test_rollout_bridge_reproduces_every_study_sft_trace(tok, traces):
    """A rollout (bridged prompts; completions = the turn's sampled tokens)
    holds exactly the trace's rendering, less the blank line after the last
    <|im_end|>, and each turn's prompt is that turn's generation prompt."""
    gap = tok.encode("\n\n", add_special_tokens=False)
    n_prompts = 0
    for row in traces:
        msgs = row["messages"]
        ids, prompts = rollout_ids(msgs, tok)
        assert ids + gap == render_ids(msgs, tok) == sft_sample(msgs, tok)[0], (row["task_id"], row["arm"])
        for prompt, i in zip(prompts, assistant_turns(msgs), strict=True):
            assert prompt == render_ids(msgs[:i], tok, add_generation_prompt=True)
        n_prompts += len(prompts)
    assert n_prompts > len(traces) * 3


def test_rollout_bridge_reproduces_random_protocol_conversations(tok):
    rng = random.Random(2)
    gap = tok.encode("\n\n", add_special_tokens=False)
    n = 0
    for _ in range(300):
        msgs = protocol_conversation(rng)
        if not assistant_turns(msgs) or any(starts_with_a_line_break(m["content"]) or not m["content"].strip()
                                            for m in msgs if m["role"] == "assistant"):
            continue  # a turn whose content merges with the header's line break: see the SFT mask test
        ids, _ = rollout_ids(msgs, tok)
        full = render_ids(msgs, tok, add_generation_prompt=msgs[-1]["role"] != "assistant")
        assert ids + (gap if msgs[-1]["role"] == "assistant" else []) == full
        n += 1
    assert n >= 150, n


def test_the_bridge_closes_a_truncated_turn_and_refuses_assistant_messages(tok):
    r = renderer(tok)
    prompt = render_ids([{"role": "user", "content": "q"}], tok, add_generation_prompt=True)
    cut = tok.encode("CALL read_file", add_special_tokens=False)  # ran out of tokens: no <|im_end|>
    bridged = r.bridge_to_next_turn(prompt, cut, [{"role": "tool", "content": "RESULT c1:"}])
    assert tok.decode(bridged.token_ids).endswith(
        "CALL read_file<|im_end|>\n\n<|im_start|>tool\nRESULT c1:\n<|im_end|>\n\n<|im_start|>assistant\n")
    assert r.bridge_to_next_turn(prompt, cut, [{"role": "assistant", "content": "x"}]) is None


# -- the study's SFT fit goes through the study's renderer ------------------------

def test_the_fit_gate_counts_the_study_renderers_tokens(tok, traces):
    """``SFT_MAX_TOKENS`` is checked on the Arm B recovery traces' renderings
    (``study.select_recoveries``); every recovery trace fits, and the count
    is the study's: its chat text, tokenized whole."""
    recoveries = [row for row in traces if row["arm"] == "b" and row["trace_type"] == S.RECOVERY]
    assert len(recoveries) == sum(S.MODE_COUNTS.values())
    for row in recoveries:
        n = len(render_ids(row["messages"], tok))
        assert n == len(tok.encode(study.chat_text(row["messages"]), add_special_tokens=False))
        assert n <= S.SFT_MAX_TOKENS, row["task_id"]

