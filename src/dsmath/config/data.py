"""Params sections `common` (seed, device, paths, tracking), `data` (the synthetic math world) and `corpus` (code
corpus for the base model, decontaminated math corpus for continual pretraining)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dsmath.config.base import NonNegInt, PosInt, Prob, Section

# ----------------------------------------------------------------------------------------------------------------
# common


class Paths(Section):
    """Every path of the pipeline, defined once; dvc.yaml templates from these same keys."""

    raw: str = "data/raw"
    extra_math: str = "data/extra"
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
    registered_model: str = "dsmath-rl"  # the model registry entry of the RL model
    champion_alias: str = "champion"  # moved to a new RL model version when it beats the current one


TorchStage = Literal["base", "pretrain", "sft", "rl", "evaluate"]


class AutoBf16(Section):
    """The stages ``dtype: auto`` runs in bf16 on a CPU with native bf16, per kind of such CPU (those measured faster
    in bf16 there by benchmarks/bench_precision.py; a CUDA GPU with bf16: every stage). A CPU with AMX counts as
    ``amx`` even though it has AVX-512-BF16 too."""

    amx: list[TorchStage] = ["base", "pretrain", "sft"]  # Intel Xeon with AMX tiles
    avx512_bf16: list[TorchStage] = ["base", "pretrain", "sft"]  # AVX-512-BF16 without AMX (AMD Zen 4 and later)
    arm_bf16: list[TorchStage] = []  # Arm FEAT_BF16: not measured yet, so float32


class Common(Section):
    seed: NonNegInt = 1234  # the data, corpora and supervised models
    rl_seeds: list[NonNegInt] = [1234, 1235, 1236]  # one RL run per seed from the same SFT model: stage rl@<seed>
    python: str = ".venv/bin/python"  # interpreter DVC runs the stage commands with
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"  # compute precision (autocast); weights stay
    # float32. auto: bf16 where the device computes it natively (dsmath.runtime.precision), float32 elsewhere
    auto_bf16: AutoBf16 = AutoBf16()  # per kind of native-bf16 CPU, the stages auto runs in bf16 there
    num_threads: NonNegInt = 2  # torch intra-op threads of each process; 0 = library default
    processes: PosInt = 1  # local worker processes of each torch stage (base, pretrain, sft, rl, evaluate): the
    # stage launches itself over them (torch.distributed.run, gloo on CPU); 1 = one plain process
    paths: Paths = Paths()
    tracking: Tracking = Tracking()

    @model_validator(mode="after")
    def _seeds(self) -> Common:
        if not self.rl_seeds:
            raise ValueError("rl_seeds: must list at least one seed (got [])")
        if len(set(self.rl_seeds)) != len(self.rl_seeds):
            raise ValueError(f"rl_seeds: must not repeat a seed (got {self.rl_seeds})")
        return self


def seed_dir(seed: int) -> str:
    """The folder (and metrics file) name of the RL run with `seed`: models/rl/seed-1234, metrics/rl/seed-1234.json;
    dvc.yaml writes the same pattern (`rl/seed-${item}`)."""
    return f"seed-{seed}"


# ----------------------------------------------------------------------------------------------------------------
# data: the synthetic math world and the real benchmarks

SKILL_FAMILIES = ("arithmetic", "linear", "fraction_percent", "sums")


class Synthetic(Section):
    """Seeded generator of problems with verified CoT / PoT / tool-integrated solutions."""

    families: list[Literal["arithmetic", "linear", "fraction_percent", "sums"]] = ["arithmetic", "linear",
                                                                                   "fraction_percent"]
    levels: list[Annotated[int, Field(ge=1, le=5)]] = [1, 2, 3]
    n_train: PosInt = 20000
    n_val: PosInt = 500
    n_test: PosInt = 1000
    max_number: Annotated[int, Field(ge=10)] = 20
    scratchpad: bool = True  # CoT writes multi-digit operations as place-value chains of one-digit facts
    decimal_scratchpad: bool = False  # with it, a decimal operation too: 19 - 2.85 = 18 - 2 + 1 - 0.85 = 16 + 0.15

    @model_validator(mode="after")
    def _non_empty(self) -> Synthetic:
        if not self.families:
            raise ValueError("families: must list at least one of " + ", ".join(SKILL_FAMILIES))
        if not self.levels:
            raise ValueError("levels: must list at least one level in 1..5")
        return self


class Data(Section):
    synthetic: Synthetic = Synthetic()


# ----------------------------------------------------------------------------------------------------------------
# corpus: code corpus for the base model, decontaminated math corpus for continual pretraining


class Drills(Section):
    """Arithmetic drill pages in the math corpus, in the CoT's own format (dsmath.data.synthetic.drills)."""

    docs: NonNegInt = 8000  # 0 = none
    lines_per_doc: PosInt = 40
    one_digit_share: Prob = 0.5  # lines from the complete one-digit tables (and inverses)
    fraction_share: Prob = 0.2  # fraction lines: equivalences, sums / differences over the common denominator
    decimal_share: Prob = 0.0  # decimal lines (money): sums, differences, products, with their decimal chains
    max_operand: PosInt = 200  # the rest: whole-number operations with operands up to this (log-uniform)
    max_divisor: PosInt = 20

    @model_validator(mode="after")
    def _shares(self) -> Drills:
        if self.one_digit_share + self.fraction_share + self.decimal_share > 1:
            raise ValueError(f"fraction_share: one_digit_share + fraction_share + decimal_share must be <= 1 (got "
                             f"{self.one_digit_share} + {self.fraction_share} + {self.decimal_share})")
        return self


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
    recall_pool_files: PosInt = 1000  # stdlib files whose docstrings form the pool the math classifier recalls from
    # the pinned sources, inside `common.paths.raw`, so the corpus is the same on every machine (data/raw/README.md)
    code_snapshot: str = "code/python-3.11.7-stdlib.jsonl.xz"  # {path, text} of the standard library's .py files
    prose_snapshot: str = "code/python-3.11.7-pydoc-topics.jsonl.xz"  # {topic, text}: the non-math seed text
    math_synthetic_docs: NonNegInt = 20000
    include_gsm8k_train: bool = True
    # your own math text, file names inside `common.paths.extra_math` (a DVC dependency of the corpus stage):
    # .jsonl with a `text` field per line, or plain text split on blank lines
    extra_math_files: list[str] = []
    drills: Drills = Drills()
    decontamination: Decontamination = Decontamination()
    classifier: Classifier = Classifier()
