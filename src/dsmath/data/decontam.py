"""Benchmark decontamination, as in DeepSeekMath sec. 2.1.

A document is dropped when it shares any word 10-gram with an evaluation benchmark text; benchmark texts shorter
than 10 words but at least 3 words long are matched exactly (as a contiguous word sequence inside the document).
Texts are normalised to lowercase alphanumeric words, so punctuation and spacing do not hide a copy.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lowercase alphanumeric words: 'It costs $1,200.' -> ['it', 'costs', '1', '200']."""
    return _WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> Iterable[tuple[str, ...]]:
    return (tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


@dataclass
class ContaminationIndex:
    """N-grams of the evaluation texts, with the benchmark each came from."""

    n: int = 10
    short_min: int = 3
    short_max: int = 9
    long: dict[tuple[str, ...], str] = field(default_factory=dict)
    short: dict[tuple[str, ...], str] = field(default_factory=dict)

    def add(self, benchmark: str, text: str) -> None:
        toks = words(text)
        if len(toks) >= self.n:
            for g in ngrams(toks, self.n):
                self.long.setdefault(g, benchmark)
        elif len(toks) >= self.short_min:
            self.short.setdefault(tuple(toks), benchmark)

    def match(self, text: str) -> str | None:
        """The benchmark `text` is contaminated by, or None."""
        toks = words(text)
        for g in ngrams(toks, self.n):
            if g in self.long:
                return self.long[g]
        if self.short:
            for k in range(self.short_min, min(self.short_max, len(toks)) + 1):
                for g in ngrams(toks, k):
                    if g in self.short:
                        return self.short[g]
        return None


def build_index(benchmarks: dict[str, list[dict]], n: int = 10, short_min: int = 3, short_max: int = 9):
    """Index questions and solutions of every evaluation record: {name: records} -> ContaminationIndex."""
    index = ContaminationIndex(n=n, short_min=short_min, short_max=short_max)
    for name, records in benchmarks.items():
        for r in records:
            index.add(name, r["question"])
            if r.get("solution"):
                index.add(name, r["solution"])
    return index


def decontaminate(docs: list[dict], index: ContaminationIndex, blocked_keys: set[str] = frozenset()):
    """Split `docs` into (kept, removed_counts).

    A doc is removed if its text matches a benchmark (counted under that benchmark's name) or if it carries a
    synthetic problem `key` held out for evaluation (counted under 'synthetic_heldout': template-generated problems
    share 10-grams by design, so identity, not n-grams, decides for them).
    """
    kept, removed = [], Counter()
    for d in docs:
        if d.get("key") is not None and d["key"] in blocked_keys:
            removed["synthetic_heldout"] += 1
            continue
        hit = index.match(d["text"])
        if hit is None:
            kept.append(d)
        else:
            removed[hit] += 1
    return kept, dict(removed)
