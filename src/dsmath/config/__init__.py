"""Typed, frozen, validated params: the one place `params.yaml` is read.

Every stage calls :func:`load_params` before touching any output. Unknown keys, wrong types and out-of-range
values raise :class:`ParamsError` whose message names the key path and the allowed range, e.g.
``rl.group_size: must be >= 2 (got 1)``.

The sections live in thematic modules (`base`, `data`, `training`, `rl`, `evaluation`); everything public is
re-exported here, so ``from dsmath.config import X`` is the way to use them.
"""

from __future__ import annotations

import os

import yaml
from pydantic import ValidationError

from dsmath.config.base import (
    PARAMS_ENV,
    NonNegFloat,
    NonNegInt,
    ParamsError,
    PosFloat,
    PosInt,
    Prob,
    Section,
    _format_errors,
    params_path,
)
from dsmath.config.data import (
    SKILL_FAMILIES,
    AutoBf16,
    Classifier,
    Common,
    Corpus,
    Data,
    Decontamination,
    Paths,
    Synthetic,
    Tracking,
    seed_dir,
)
from dsmath.config.evaluation import CHAIN, DATASETS, GREEDY_METRICS, EvalDatasets, Evaluate, metric_names
from dsmath.config.rl import Ppo, Rejection, Rewards, Rl, Sandbox
from dsmath.config.training import Base, Loop, Mix, Model, Optim, Pretrain, Probe, Sft, Tokenizer

__all__ = [
    "CHAIN",
    "DATASETS",
    "PARAMS_ENV",
    "SKILL_FAMILIES",
    "Base",
    "Classifier",
    "AutoBf16",
    "Common",
    "Corpus",
    "Data",
    "Decontamination",
    "EvalDatasets",
    "Evaluate",
    "GREEDY_METRICS",
    "Loop",
    "Mix",
    "Model",
    "NonNegFloat",
    "NonNegInt",
    "Optim",
    "Params",
    "ParamsError",
    "Paths",
    "PosFloat",
    "PosInt",
    "Ppo",
    "Pretrain",
    "Probe",
    "Rejection",
    "Prob",
    "Rewards",
    "Rl",
    "Sandbox",
    "Section",
    "Sft",
    "Synthetic",
    "Tokenizer",
    "Tracking",
    "load_params",
    "load_raw",
    "merge",
    "metric_names",
    "params_path",
    "parse_params",
    "seed_dir",
]


class Params(Section):
    common: Common = Common()
    data: Data = Data()
    corpus: Corpus = Corpus()
    tokenizer: Tokenizer = Tokenizer()
    model: Model = Model()
    base: Base = Base()
    pretrain: Pretrain = Pretrain()
    sft: Sft = Sft()
    rewards: Rewards = Rewards()
    sandbox: Sandbox = Sandbox()
    rl: Rl = Rl()
    evaluate: Evaluate = Evaluate()


def parse_params(raw: dict) -> Params:
    """Validate a params mapping. Raises ParamsError naming every bad key path."""
    try:
        return Params.model_validate(raw or {})
    except ValidationError as err:
        raise ParamsError(_format_errors(err)) from None


OVERLAY_KEY = "extends"  # a profile that starts `extends: ../params.yaml` is an overlay on that file


def merge(base: dict, overlay: dict) -> dict:
    """`overlay` merged onto `base`: mappings key by key, recursively; any other value (lists too) replaces."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_raw(path: str | os.PathLike | None = None, _seen: tuple = ()) -> dict:
    """The params mapping of a file, overlays resolved: a file with ``extends: <file>`` (relative to itself) is merged
    onto that file's mapping, so a profile lists only what it changes and every default lives in params.yaml."""
    p = params_path(path).resolve()
    if p in _seen:
        raise ParamsError(f"{p}: `{OVERLAY_KEY}` chain loops back to itself")
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ParamsError(f"{p}: params file not found") from None
    except yaml.YAMLError as err:
        raise ParamsError(f"{p}: not valid YAML ({err})") from None
    if not raw:  # an empty file would silently run on the code's defaults, not on what the user meant
        raise ParamsError(f"{p}: params file is empty (copy params.yaml, or write an overlay: `{OVERLAY_KEY}: "
                          "params.yaml` plus the keys you change)")
    if not isinstance(raw, dict):
        raise ParamsError(f"{p}: top level must be a mapping")
    if OVERLAY_KEY in raw:
        base = raw.pop(OVERLAY_KEY)
        if not isinstance(base, str):
            raise ParamsError(f"{p}: `{OVERLAY_KEY}` must name a params file (got {base!r})")
        raw = merge(load_raw(p.parent / base, (*_seen, p)), raw)
    return raw


def load_params(path: str | os.PathLike | None = None) -> Params:
    """Read and validate the params file (default: $DSMATH_PARAMS or ./params.yaml), overlays resolved."""
    return parse_params(load_raw(path))
