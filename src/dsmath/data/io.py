"""JSON-lines files: one record per line, UTF-8, `\\n` line ends, keys in insertion order (byte-reproducible)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def dumps_jsonl(records: Iterable[dict]) -> str:
    """The JSON-lines text of `records` (what :func:`write_jsonl` writes)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_jsonl(records: Iterable[dict], path: str | Path) -> Path:
    """Write `records` to `path` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write(dumps_jsonl(records))
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSON-lines file (blank lines skipped)."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
