"""JSON-lines files: one record per line, UTF-8, `\\n` line ends, keys in insertion order (byte-reproducible).

Every reader of JSON lines goes through :func:`parse_jsonl`: a line that is not a JSON object, or a record without a
field its reader needs, raises :class:`DataError` naming the file and the line (``data/raw/gsm8k/test.jsonl:17: not
valid JSON (...)``), never a bare ``JSONDecodeError`` / ``KeyError`` deep in a loader.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsmath.core.errors import RefusedInput

# fields a reader needs: names, or {name: the Python type(s) its JSON value must have}
Fields = Iterable[str] | Mapping[str, type | tuple[type, ...] | None]

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean"}


class DataError(RefusedInput, ValueError):
    """An input file the pipeline cannot use. The message is one line and starts with the file (and line):
    ``<path>:<line>: <what is wrong>`` or ``<path>: <what is wrong>``."""


def _json_type(value) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def parse_jsonl(lines: Iterable[bytes | str], source: str | Path, required: Fields = ()) -> list[dict]:
    """The records of JSON-lines text given line by line (blank lines skipped; line numbers count them).

    source: the file named in errors; required: fields every record must have, non-null (with a mapping, also of
    the given type). Raises DataError ``<source>:<line>: ...`` on the first line that is not valid UTF-8, not
    valid JSON, not a JSON object, or lacks a required field.
    """
    spec = dict(required) if isinstance(required, Mapping) else dict.fromkeys(required)
    out = []
    for lineno, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{source}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{source}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{source}:{lineno}: not a JSON object (got {_json_type(record)})")
        for name, kind in spec.items():
            value = record.get(name)
            if value is None:
                raise DataError(f"{source}:{lineno}: record has no {name!r} field" if name not in record
                                else f"{source}:{lineno}: field {name!r} is null")
            kinds = kind if isinstance(kind, tuple) else (kind,) if kind is not None else None
            if kinds and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                want = " or ".join(sorted({_JSON_TYPES.get(k, k.__name__) for k in kinds}))
                raise DataError(f"{source}:{lineno}: field {name!r} is {_json_type(value)}, expected {want}")
        out.append(record)
    return out


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


def read_jsonl(path: str | Path, required: Fields = ()) -> list[dict]:
    """The records of a JSON-lines file (blank lines skipped); a bad line or a record without a `required` field
    raises DataError naming the file and line (:func:`parse_jsonl`)."""
    path = Path(path)
    with path.open("rb") as f:  # split at b"\n" only, as written; each line decoded on its own (errors name it)
        return parse_jsonl(f, path, required)


def require_records(records: list, path: str | Path, wanted_by: str | None = None) -> list:
    """`records`, unless there are none: then DataError naming `path` and the params key that asks for the file."""
    if not records:
        why = f"; params {wanted_by} asks for it" if wanted_by else ""
        raise DataError(f"{path}: no records (the file is empty or blank){why}")
    return records
