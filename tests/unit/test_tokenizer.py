"""Corpus BPE tokenizer: digits one per token, lossless round trip, special tokens, chat template, save/load."""

from __future__ import annotations

import pytest

from dsmath.modeling import prompts
from dsmath.modeling.tokenizer import chars_per_token, interleave, train_tokenizer

CODE = 'def total(boxes, per_box):\n    """Pencils."""\n    return boxes * per_box  # 3 * 12\n'
MATH = (
    "Sam buys 3 boxes of 12 pencils: 3 * 12 = 36.\nHe gives away 5 pencils: 36 - 5 = 31.\nThe answer is \\boxed{31}.\n"
)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([CODE, MATH] * 40, vocab_size=400, min_frequency=2)


def test_digits_are_split_one_per_token(tok):
    ids = tok("x = 12345", add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == ["1", "2", "3", "4", "5"]
    # "36" is frequent in the training text, but digits still never merge
    assert all(
        len(p.strip("Ġ")) <= 1 for p in tok.convert_ids_to_tokens(tok(MATH)["input_ids"]) if any(c.isdigit() for c in p)
    )


@pytest.mark.parametrize("text", [CODE, MATH, "  \tindented\n\n\nblank lines", "unicode: π ≈ 3.14159, café", ""])
def test_round_trip_is_lossless(tok, text):
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_frequent_words_are_merged(tok):
    # the trained vocabulary compresses its own corpus: fewer tokens than bytes
    assert chars_per_token(tok, [MATH]) > 1.5


def test_special_tokens_are_single_ids(tok):
    assert tok.pad_token_id == 0  # PAD is the first special token
    assert tok.eos_token == prompts.END
    for t in prompts.SPECIAL_TOKENS:
        assert tok(t, add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(t)]


def test_chat_template_renders_prompt_format(tok):
    text = prompts.format_prompt("What is 2 + 3?", "cot", tok)
    assert text == "<|user|>What is 2 + 3?\nSolve step by step.<|end|><|assistant|>"


def test_save_and_load_with_auto_tokenizer(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(MATH)["input_ids"] == tok(MATH)["input_ids"]
    assert loaded.eos_token_id == tok.eos_token_id and loaded.pad_token_id == tok.pad_token_id
    assert loaded.chat_template == prompts.CHAT_TEMPLATE


def test_interleave_alternates_and_stops_at_max_chars():
    code, math = ["c1" * 5, "c2" * 5, "c3" * 5], ["m1" * 5]
    assert list(interleave([code, math], max_chars=10**6)) == [code[0], math[0], code[1], code[2]]
    # each document is 10 chars: the third starts at 20 >= 20, so it is not taken
    assert list(interleave([code, math], max_chars=20)) == [code[0], math[0]]
