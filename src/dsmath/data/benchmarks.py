"""Loaders for the real benchmarks shipped under `data/raw/`, mapped to one schema.

Schema (docs/formats.md): id, source, question, answer, solution (None where the source has none). GSM8K answers are
the number after `####` with commas removed; SVAMP's float answers are written as integers when integral.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

BENCHMARKS = ("gsm8k_train", "gsm8k_test", "math500", "svamp")
EVAL_BENCHMARKS = ("gsm8k_test", "math500", "svamp")


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _number_text(x: float) -> str:
    """145.0 -> '145', 2.5 -> '2.5'."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def gsm8k_final_answer(solution: str) -> str:
    """The number after the last `####`, commas removed."""
    return solution.rsplit("####", 1)[-1].strip().replace(",", "")


def _gsm8k(raw: Path, split: str) -> list[dict]:
    rows = _read_jsonl(raw / "gsm8k" / f"{split}.jsonl")
    return [
        {
            "id": f"gsm8k-{split}-{i}",
            "source": "gsm8k",
            "question": r["question"],
            "answer": gsm8k_final_answer(r["answer"]),
            "solution": r["answer"],
        }
        for i, r in enumerate(rows)
    ]


def _math500(raw: Path) -> list[dict]:
    return [
        {
            "id": r["unique_id"],
            "source": "math500",
            "question": r["problem"],
            "answer": r["answer"],
            "solution": r["solution"],
        }
        for r in _read_jsonl(raw / "math500" / "test.jsonl")
    ]


def _svamp(raw: Path) -> list[dict]:
    return [
        {
            "id": f"svamp-{r['ID']}",
            "source": "svamp",
            "question": f"{r['Body'].strip()} {r['Question'].strip()}",
            "answer": _number_text(r["Answer"]),
            "solution": None,
        }
        for r in _read_jsonl(raw / "svamp" / "test.jsonl")
    ]


_LOADERS: dict[str, Callable[[Path], list[dict]]] = {
    "gsm8k_train": lambda raw: _gsm8k(raw, "train"),
    "gsm8k_test": lambda raw: _gsm8k(raw, "test"),
    "math500": _math500,
    "svamp": _svamp,
}


def load_benchmark(name: str, raw_dir: str | Path, limit: int | None = None) -> list[dict]:
    """Records of one benchmark in file order (first `limit` if given)."""
    if name not in _LOADERS:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    rows = _LOADERS[name](Path(raw_dir))
    return rows if limit is None else rows[:limit]


def as_dataset(records: list[dict]):
    """The records as a Hugging Face `datasets.Dataset` (solution column kept even where all None)."""
    import datasets

    return datasets.Dataset.from_list([{**r, "solution": r.get("solution") or ""} for r in records])
