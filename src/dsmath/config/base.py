"""Shared machinery of the params: the `Section` base class, constrained number types, `ParamsError` and the
formatting of pydantic errors into one-line, key-path-first messages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PARAMS_ENV = "DSMATH_PARAMS"  # alternative params file (e.g. configs/smoke.yaml); default: ./params.yaml

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
Prob = Annotated[float, Field(ge=0.0, le=1.0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


class Section(BaseModel):
    """Base of every params section: frozen, unknown keys rejected, no silent type coercion, no infinite or NaN
    number (`lr: .inf` is refused, not trained with)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ParamsError(ValueError):
    """Invalid params: the message is one line per problem, each starting with the key path."""


_BOUND_MSG = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "literal_error": "must be one of {expected}",
    "extra_forbidden": "unknown key",
    "finite_number": "must be a finite number",
}


def _format_error(e: dict) -> str:
    """One pydantic error -> 'key.path: must be >= 2 (got 1)'."""
    loc = ".".join(str(p) for p in e["loc"])
    template = _BOUND_MSG.get(e["type"])
    msg = template.format(**e.get("ctx", {})) if template else e["msg"].removeprefix("Value error, ")
    if e["type"] != "extra_forbidden" and "input" in e and not isinstance(e["input"], dict):
        if "(got " not in msg:
            msg += f" (got {e['input']!r})"
    head, sep, _ = msg.partition(":")
    if sep and head.isidentifier() and e["type"] == "value_error":  # a section validator naming its own field
        return f"{loc}.{msg}" if loc else msg
    return f"{loc}: {msg}" if loc else msg


def _format_errors(err: ValidationError) -> str:
    return "; ".join(_format_error(e) for e in err.errors())


def params_path(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get(PARAMS_ENV) or "params.yaml")
