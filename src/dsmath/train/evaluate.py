"""Held-out scoring and batched generation used at the end of the training stages.

`heldout_nll` gives the mean next-token NLL (perplexity = exp of it) of packed blocks or padded SFT batches;
`generate` samples or decodes greedily with left padding, the layout `generate` needs for batched prompts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from tqdm.auto import tqdm

from dsmath.train.loop import token_nll


@torch.no_grad()
def heldout_nll(model, batches: Iterable[dict[str, torch.Tensor]], desc: str = "heldout") -> tuple[float, int]:
    """(mean NLL per target token, number of target tokens) over right-padded `batches` ({input_ids, labels, ...})."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for b in tqdm(list(batches), desc=desc, leave=False):
        b = {k: v.to(device) for k, v in b.items()}
        logits = model(input_ids=b["input_ids"]).logits  # right-padded: the causal mask suffices (see loop._step)
        nll, n = token_nll(logits, b["labels"])
        total, count = total + float(nll), count + int(n)
    return total / max(count, 1), count


def perplexity(mean_nll: float) -> float:
    return math.exp(min(mean_nll, 50.0))


def block_batches(blocks: torch.Tensor, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """Packed blocks (N, T) -> list of causal-LM batches of at most `batch_size` rows."""
    return [
        {"input_ids": blocks[i : i + batch_size], "labels": blocks[i : i + batch_size]}
        for i in range(0, len(blocks), batch_size)
    ]


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int,
    num_samples: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    desc: str = "generate",
) -> list[list[str]]:
    """Completions of each prompt: `num_samples` per prompt, greedy when `temperature == 0`, else sampled.

    Prompts are left-padded in groups of ``batch_size // num_samples``; sampling is seeded by `seed`.
    Returns one list of `num_samples` decoded completions (special tokens dropped) per prompt.
    """
    model.eval()
    device = next(model.parameters()).device
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    per_call = max(1, batch_size // num_samples)
    torch.manual_seed(seed)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    out: list[list[str]] = []
    try:
        for i in tqdm(range(0, len(prompts), per_call), desc=desc, leave=False):
            enc = tokenizer(
                list(prompts[i : i + per_call]), return_tensors="pt", padding=True, add_special_tokens=False
            ).to(device)
            seqs = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_samples,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **sampling,
            )
            texts = tokenizer.batch_decode(seqs[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            out += [texts[j : j + num_samples] for j in range(0, len(texts), num_samples)]
    finally:
        tokenizer.padding_side = side
    return out
