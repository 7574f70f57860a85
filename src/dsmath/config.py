"""Typed, frozen, validated params: the one place `params.yaml` is read.

Every stage calls :func:`load_params` before touching any output. Unknown keys, wrong types and out-of-range
values raise :class:`ParamsError` whose message names the key path and the allowed range, e.g.
``rl.group_size: must be >= 2 (got 1)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

PARAMS_ENV = "DSMATH_PARAMS"  # alternative params file (e.g. configs/smoke.yaml); default: ./params.yaml

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
Prob = Annotated[float, Field(ge=0.0, le=1.0)]


class Section(BaseModel):
    """Base of every params section: frozen, unknown keys rejected, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# ----------------------------------------------------------------------------------------------------------------
# common


class Paths(Section):
    """Every path of the pipeline, defined once; dvc.yaml templates from these same keys."""

    raw: str = "data/raw"
    synthetic: str = "data/synthetic"
    corpus: str = "data/corpus"
    metrics: str = "metrics"
    models: str = "models"
    checkpoints: str = "checkpoints"
    eval: str = "eval"
    reports: str = "reports"
    plots: str = "plots"


class Tracking(Section):
    """MLflow: `MLFLOW_TRACKING_URI` in the environment overrides `uri`. Not a DVC dependency of any stage."""

    experiment: str = "dsmath"
    uri: str = "sqlite:///mlflow.db"
    artifacts: str = "mlartifacts"


class Common(Section):
    seed: NonNegInt = 1234
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    num_threads: NonNegInt = 0  # torch intra-op threads; 0 = library default
    paths: Paths = Paths()
    tracking: Tracking = Tracking()


# ----------------------------------------------------------------------------------------------------------------
# data: the synthetic math world and the real benchmarks

SKILL_FAMILIES = ("arithmetic", "linear", "fraction_percent")


class Synthetic(Section):
    """Seeded generator of problems with verified CoT / PoT / tool-integrated solutions."""

    families: list[Literal["arithmetic", "linear", "fraction_percent"]] = list(SKILL_FAMILIES)
    levels: list[Annotated[int, Field(ge=1, le=5)]] = [1, 2, 3]
    n_train: PosInt = 20000
    n_val: PosInt = 500
    n_test: PosInt = 1000
    max_number: Annotated[int, Field(ge=10)] = 100

    @model_validator(mode="after")
    def _non_empty(self) -> Synthetic:
        if not self.families:
            raise ValueError("families: must list at least one of " + ", ".join(SKILL_FAMILIES))
        if not self.levels:
            raise ValueError("levels: must list at least one level in 1..5")
        return self


class Benchmarks(Section):
    """How many problems of each real benchmark the evaluation uses (0 = none, -1 would be ambiguous so not allowed)."""

    gsm8k_test: NonNegInt = 1319
    math500: NonNegInt = 500
    svamp: NonNegInt = 1000


class Data(Section):
    synthetic: Synthetic = Synthetic()
    benchmarks: Benchmarks = Benchmarks()


# ----------------------------------------------------------------------------------------------------------------
# corpus: code corpus for the base model, decontaminated math corpus for continual pretraining


class Decontamination(Section):
    """DeepSeekMath sec. 2.1: drop documents sharing a 10-gram with an eval set; exact-match short benchmark texts."""

    ngram: Annotated[int, Field(ge=3)] = 10
    short_min: Annotated[int, Field(ge=1)] = 3
    short_max: Annotated[int, Field(ge=1)] = 9
    benchmarks: list[Literal["gsm8k_test", "math500", "svamp"]] = ["gsm8k_test", "math500", "svamp"]

    @model_validator(mode="after")
    def _range(self) -> Decontamination:
        if self.short_max < self.short_min:
            raise ValueError(f"short_max: must be >= short_min={self.short_min} (got {self.short_max})")
        if self.short_max >= self.ngram:
            raise ValueError(f"short_max: must be < ngram={self.ngram} (got {self.short_max})")
        return self


class Classifier(Section):
    """Hashed n-gram logistic-regression math classifier (stands in for DeepSeekMath's fastText)."""

    n_features: Annotated[int, Field(ge=256)] = 2**18
    ngram_max: Annotated[int, Field(ge=1, le=4)] = 2
    epochs: PosInt = 5
    lr: Annotated[float, Field(gt=0)] = 0.5
    l2: Annotated[float, Field(ge=0)] = 1e-6
    holdout_frac: Annotated[float, Field(gt=0, lt=1)] = 0.2
    threshold: Prob = 0.5


class Corpus(Section):
    code_max_files: PosInt = 400
    code_max_chars_per_file: PosInt = 20000
    code_min_chars: NonNegInt = 200
    math_synthetic_docs: NonNegInt = 20000
    include_gsm8k_train: bool = True
    decontamination: Decontamination = Decontamination()
    classifier: Classifier = Classifier()


# ----------------------------------------------------------------------------------------------------------------
# the whole file


class Params(Section):
    common: Common = Common()
    data: Data = Data()
    corpus: Corpus = Corpus()


class ParamsError(ValueError):
    """Invalid params: the message is one line per problem, each starting with the key path."""


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if "input" in e and e["type"] != "extra_forbidden" and not isinstance(e["input"], dict):
            msg += f" (got {e['input']!r})"
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        # model validators report at the section: their message already starts with the field name
        lines.append(f"{loc}.{msg}" if loc and msg.split(":")[0].isidentifier() and ":" in msg else f"{loc}: {msg}")
    return "; ".join(lines)


def parse_params(raw: dict) -> Params:
    """Validate a params mapping. Raises ParamsError naming every bad key path."""
    try:
        return Params.model_validate(raw or {})
    except ValidationError as err:
        raise ParamsError(_format_errors(err)) from None


def params_path(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get(PARAMS_ENV) or "params.yaml")


def load_params(path: str | os.PathLike | None = None) -> Params:
    """Read and validate the params file (default: $DSMATH_PARAMS or ./params.yaml)."""
    p = params_path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ParamsError(f"{p}: params file not found") from None
    except yaml.YAMLError as err:
        raise ParamsError(f"{p}: not valid YAML ({err})") from None
    if raw is not None and not isinstance(raw, dict):
        raise ParamsError(f"{p}: top level must be a mapping")
    return parse_params(raw)
