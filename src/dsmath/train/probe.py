"""The end-of-SFT accuracy probe: greedy accuracy and pass@k on held-out problems, CoT prompt.

Answers are checked through the reward layer (`dsmath.rewards.extract_answer` / `is_equivalent`). Until that layer
exists, :func:`_fallback_extract` / :func:`_fallback_equivalent` stand in for it (FALLBACK, to be removed once
`dsmath.rewards` lands): last ``\\boxed{...}``, compared as exact rationals, else as stripped strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from fractions import Fraction

from dsmath import prompts
from dsmath.train.evaluate import generate

Checker = Callable[[str, str], bool]  # (completion, gold answer) -> correct?


def _fallback_extract(text: str) -> str | None:
    """FALLBACK for dsmath.rewards.extract_answer: the content of the last \\boxed{...} (no nested braces)."""
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1].strip() if found else None


def _fallback_equivalent(pred: str | None, gold: str) -> bool:
    """FALLBACK for dsmath.rewards.is_equivalent: equal as rationals (`3/4` == `0.75`), else as strings."""
    if pred is None:
        return False
    try:
        return Fraction(pred.replace(",", "")) == Fraction(gold.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return pred.strip() == gold.strip()


def answer_checker() -> Checker:
    """(completion, gold) -> correct, through dsmath.rewards when it is installed, else the marked fallback."""
    try:
        from dsmath.rewards import extract_answer, is_equivalent
    except ImportError:
        extract_answer, is_equivalent = _fallback_extract, _fallback_equivalent
    return lambda completion, gold: bool(is_equivalent(extract_answer(completion), gold))


def accuracy_probe(model, tokenizer, records: Sequence[dict], probe, seed: int) -> tuple[dict[str, float], list[dict]]:
    """Greedy accuracy, pass@k and mean sampled accuracy of `model` on `records` (question/answer dicts).

    `probe` is the params `Probe` section (k, temperature, max_new_tokens, batch_size). Returns (metrics, rows),
    rows holding question, gold, greedy completion and its verdict, for an MLflow table.
    """
    check = answer_checker()
    texts = [prompts.format_prompt(r["question"], "cot", tokenizer) for r in records]
    gen = {"max_new_tokens": probe.max_new_tokens, "batch_size": probe.batch_size}
    greedy = generate(model, tokenizer, texts, **gen, desc="probe greedy")
    samples = generate(
        model,
        tokenizer,
        texts,
        **gen,
        num_samples=probe.k,
        temperature=probe.temperature,
        seed=seed,
        desc=f"probe pass@{probe.k}",
    )
    golds = [str(r["answer"]) for r in records]
    greedy_ok = [check(g[0], gold) for g, gold in zip(greedy, golds, strict=True)]
    sample_ok = [[check(s, gold) for s in ss] for ss, gold in zip(samples, golds, strict=True)]
    n = max(len(records), 1)
    metrics = {
        "greedy_acc": sum(greedy_ok) / n,
        f"pass_at_{probe.k}": sum(any(ok) for ok in sample_ok) / n,
        "sample_acc": sum(sum(ok) for ok in sample_ok) / (n * probe.k),
        "probe_problems": len(records),
    }
    rows = [
        {"question": r["question"], "gold": gold, "greedy": g[0], "correct": ok}
        for r, gold, g, ok in zip(records, golds, greedy, greedy_ok, strict=True)
    ]
    return metrics, rows
