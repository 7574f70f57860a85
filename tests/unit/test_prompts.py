"""The prompt format: our chat template, a real chat template, a plain frame; response-only SFT labels."""

from __future__ import annotations

import pytest

from dsmath.modeling import prompts
from dsmath.modeling.tokenizer import train_tokenizer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(["Sam has 3 apples. 3 + 4 = 7. The answer is \\boxed{7}."] * 20, vocab_size=300)


def test_user_message_appends_the_style_instruction():
    assert (
        prompts.user_message("  What is 2 + 3? ", "pot")
        == "What is 2 + 3?\nWrite a Python program that prints the answer."
    )
    assert set(prompts.INSTRUCTIONS) == set(prompts.MODES)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode: must be one of cot, pot, tool"):
        prompts.user_message("q", "latex")


def test_own_tokenizer_format(tok):
    assert prompts.format_prompt("Q?", "tool", tok) == (
        "<|user|>Q?\nSolve step by step, using Python where it helps.<|end|><|assistant|>"
    )


def test_real_chat_template_is_used():
    other = train_tokenizer(["x"] * 5, vocab_size=300)
    other.chat_template = CHATML
    assert prompts.format_prompt("Q?", "cot", other) == (
        "<|im_start|>user\nQ?\nSolve step by step.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_plain_frame_without_chat_template():
    other = train_tokenizer(["x"] * 5, vocab_size=300)
    other.chat_template = None
    assert prompts.format_prompt("Q?", "cot", other) == "Question: Q?\nSolve step by step.\nAnswer: "


def test_sft_ids_mask_the_prompt_and_end_with_eos(tok):
    prompt = prompts.format_prompt("What is 3 + 4?", "cot", tok)
    target = "3 + 4 = 7.\nThe answer is \\boxed{7}.\n"
    ids, labels = prompts.sft_ids(prompt, target, tok)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    t = tok(target.strip(), add_special_tokens=False)["input_ids"]
    assert ids == p + t + [tok.eos_token_id]
    assert labels == [-100] * len(p) + t + [tok.eos_token_id]
    assert tok.decode(ids) == prompts.sft_text(prompt, target, tok)


def test_sft_ids_batch_encodes_each_example_as_alone(tok):
    questions = ["What is 3 + 4?", "A shop sells 12 pens at 3 each. What do they cost?", "What is 5% of 40?"]
    targets = ["3 + 4 = 7.\nThe answer is \\boxed{7}.\n", "  12 * 3 = 36.\nThe answer is \\boxed{36}.",
               "```python\nprint(40 * 5 / 100)\n```\nThe answer is \\boxed{2}."]
    texts = [prompts.format_prompt(q, m, tok) for q, m in zip(questions, ["cot", "cot", "tool"], strict=True)]
    batch = prompts.sft_ids_batch(texts, targets, tok)
    for (ids, labels), text, target in zip(batch, texts, targets, strict=True):
        p = tok(text, add_special_tokens=False)["input_ids"]
        t = tok(target.strip(), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert (ids, labels) == (p + t, [-100] * len(p) + t)
    assert prompts.sft_ids_batch([], [], tok) == []
    with pytest.raises(ValueError, match="targets"):
        prompts.sft_ids_batch(texts, targets[:2], tok)
