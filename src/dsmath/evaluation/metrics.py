"""Sampling metrics of DeepSeekMath's evaluation: greedy accuracy, pass@k (unbiased), maj@k (self-consistency).

pass@k uses the unbiased estimator of Chen et al. (2021): with n samples of which c are correct,
``pass@k = 1 - C(n - c, k) / C(n, k)``, the probability that a random size-k subset holds a correct sample.
maj@k votes over the first k samples' extracted answers, grouping answers that are mathematically equivalent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 - C(n-c, k) / C(n, k); requires 0 <= c <= n and 1 <= k <= n."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # numerically stable product form: prod_{i=n-c+1}^{n} (1 - k/i)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    """Mean pass@k over problems; `correct[i]` holds the correctness of problem i's n samples."""
    return float(np.mean([pass_at_k(len(c), int(sum(c)), k) for c in correct])) if correct else 0.0


def majority_answer(answers: Sequence[str | None], equivalent: Callable[[str, str], bool]) -> str | None:
    """The most frequent answer, answers that are `equivalent` voting together; None answers do not vote.

    Ties are broken deterministically by first appearance (the earliest-sampled answer of the tied classes wins).
    Returns None when no sample has an answer.
    """
    classes: list[list[str]] = []  # each class: answers equivalent to its first member, in order of appearance
    for a in answers:
        if a is None:
            continue
        for cls in classes:
            if cls[0] == a or equivalent(a, cls[0]):
                cls.append(a)
                break
        else:
            classes.append([a])
    if not classes:
        return None
    best = max(range(len(classes)), key=lambda i: (len(classes[i]), -i))
    return classes[best][0]


def maj_at_k(answers: Sequence[str | None], gold: str, k: int, equivalent: Callable[[str, str], bool]) -> bool:
    """Whether the majority answer of the first k samples is equivalent to the gold answer."""
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj@k needs 1 <= k <= n (got k={k}, n={len(answers)})")
    voted = majority_answer(answers[:k], equivalent)
    return voted is not None and equivalent(voted, gold)
