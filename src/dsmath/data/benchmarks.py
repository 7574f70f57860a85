"""Loaders for the real benchmarks shipped under `data/raw/`, mapped to one schema.

Schema (docs/formats.md): id, source, question, answer, solution (None where the source has none). GSM8K answers are
the number after `####` with commas removed; SVAMP's float answers are written as integers when integral.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dsmath.data.io import DataError, read_jsonl, require_records

BENCHMARKS = ("gsm8k_train", "gsm8k_test", "math500", "svamp")
EVAL_BENCHMARKS = ("gsm8k_test", "math500", "svamp")


def _number_text(x: float) -> str:
    """145.0 -> '145', 2.5 -> '2.5'."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def gsm8k_final_answer(solution: str) -> str:
    """The number after the last `####`, commas removed."""
    return solution.rsplit("####", 1)[-1].strip().replace(",", "")


def _gsm8k(split: str) -> Callable[[int, dict], dict]:
    return lambda i, r: {
        "id": f"gsm8k-{split}-{i}",
        "source": "gsm8k",
        "question": r["question"],
        "answer": gsm8k_final_answer(r["answer"]),
        "solution": r["answer"],
    }


def _math500(i: int, r: dict) -> dict:
    return {"id": r["unique_id"], "source": "math500", "question": r["problem"], "answer": r["answer"],
            "solution": r["solution"]}


def _svamp(i: int, r: dict) -> dict:
    return {
        "id": f"svamp-{r['ID']}",
        "source": "svamp",
        "question": f"{r['Body'].strip()} {r['Question'].strip()}",
        "answer": _number_text(r["Answer"]),
        "solution": None,
    }


_GSM8K_FIELDS = {"question": str, "answer": str}
# name: (file under the raw folder, the fields each record needs and their JSON types, record -> schema)
_SOURCES: dict[str, tuple[str, dict, Callable[[int, dict], dict]]] = {
    "gsm8k_train": ("gsm8k/train.jsonl", _GSM8K_FIELDS, _gsm8k("train")),
    "gsm8k_test": ("gsm8k/test.jsonl", _GSM8K_FIELDS, _gsm8k("test")),
    "math500": ("math500/test.jsonl", {"unique_id": str, "problem": str, "answer": str, "solution": str}, _math500),
    "svamp": ("svamp/test.jsonl", {"ID": (str, int), "Body": str, "Question": str, "Answer": (int, float)}, _svamp),
}


def benchmark_file(name: str, raw_dir: str | Path) -> Path:
    """The raw file of one benchmark (`data/raw/gsm8k/test.jsonl` for gsm8k_test)."""
    if name not in _SOURCES:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")
    return Path(raw_dir) / _SOURCES[name][0]


def load_benchmark(name: str, raw_dir: str | Path, limit: int | None = None, *,
                   wanted_by: str | None = None) -> list[dict]:
    """Records of one benchmark in file order (first `limit` if given).

    Raises DataError naming the file (and line) when a line is not a JSON object or lacks a field the schema is
    built from, and when the file is missing or holds no record at all (`wanted_by`: the params key that asks for
    the benchmark, named in that message): an empty benchmark is never read as a benchmark of 0 problems.
    """
    path = benchmark_file(name, raw_dir)
    if not path.is_file():
        raise DataError(f"{path}: no such file" + (f"; params {wanted_by} asks for it" if wanted_by else ""))
    _, fields, to_schema = _SOURCES[name]
    rows = require_records(read_jsonl(path, fields), path, wanted_by)
    rows = [to_schema(i, r) for i, r in enumerate(rows)]
    return rows if limit is None else rows[:limit]


def as_dataset(records: list[dict]):
    """The records as a Hugging Face `datasets.Dataset` (solution column kept even where all None)."""
    import datasets

    return datasets.Dataset.from_list([{**r, "solution": r.get("solution") or ""} for r in records])
