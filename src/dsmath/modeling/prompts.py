"""The prompt format shared by SFT, RL and evaluation: one place that turns a question into model input.

Two formats, chosen by the tokenizer alone, so callers never branch:

- a tokenizer with a chat template (our own BPE tokenizer carries :data:`CHAT_TEMPLATE`; real chat models such as
  SmolLM2-Instruct carry theirs) gets ``apply_chat_template`` with one user message and the generation prompt;
- a tokenizer without one (a plain base model such as GPT-2) gets ``Question: ...\\n<instruction>\\nAnswer: ``.

The user message is the question followed by one line that names the solution style (DeepSeekMath-Instruct prompts
each style with its own instruction). An SFT example is ``prompt + target + eos``; the loss covers ``target + eos``
only (see :func:`sft_ids`, which tokenises the two halves separately so the boundary is exact).

Our own tokenizer renders ``question="What is 2 + 3?"``, ``mode="cot"`` as::

    <|user|>What is 2 + 3?
    Solve step by step.<|end|><|assistant|>

and the model answers ``2 + 3 = 5.\\nThe answer is \\boxed{5}.<|end|>`` (``<|end|>`` is the EOS token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Mode = Literal["cot", "pot", "tool"]
MODES: tuple[str, ...] = ("cot", "pot", "tool")

# one short line per style: short because at laptop scale every prompt token costs training time
INSTRUCTIONS: dict[str, str] = {
    "cot": "Solve step by step.",
    "pot": "Write a Python program that prints the answer.",
    "tool": "Solve step by step, using Python where it helps.",
}

USER, ASSISTANT, END, PAD = "<|user|>", "<|assistant|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, END, USER, ASSISTANT)  # PAD first: id 0

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}<|end|>"
    "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def user_message(question: str, mode: Mode = "cot") -> str:
    """The user turn: the question, then the style's instruction on its own line."""
    if mode not in INSTRUCTIONS:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
    return f"{question.strip()}\n{INSTRUCTIONS[mode]}"


def format_prompt(question: str, mode: Mode, tokenizer) -> str:
    """The text the model continues from: chat template with generation prompt, or a plain Q/A frame."""
    content = user_message(question, mode)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    return f"Question: {content}\nAnswer: "


def sft_text(prompt: str, target: str, tokenizer) -> str:
    """The whole SFT example as text: prompt, target, EOS (for display and logging)."""
    return prompt + target.strip() + (tokenizer.eos_token or "")


def sft_ids(prompt: str, target: str, tokenizer) -> tuple[list[int], list[int]]:
    """Token ids of one SFT example and its labels (-100 on the prompt, so the loss covers the response only).

    Returns ``(input_ids, labels)``, both of length ``len(prompt_ids) + len(target_ids) + 1``.
    """
    return sft_ids_batch([prompt], [target], tokenizer)[0]


def sft_ids_batch(prompts: Sequence[str], targets: Sequence[str], tokenizer) -> list[tuple[list[int], list[int]]]:
    """:func:`sft_ids` of many examples: the prompts and the targets are each encoded in one call of the tokenizer
    (a fast tokenizer encodes a batch in Rust, without a Python round trip per text): the same ids."""
    if len(prompts) != len(targets):
        raise ValueError(f"sft_ids_batch: {len(prompts)} prompts but {len(targets)} targets")
    if not prompts:
        return []
    eos = [tokenizer.eos_token_id]
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    t_ids = tokenizer([t.strip() for t in targets], add_special_tokens=False)["input_ids"]
    return [(p + t + eos, [-100] * len(p) + t + eos) for p, t in zip(p_ids, t_ids, strict=True)]
