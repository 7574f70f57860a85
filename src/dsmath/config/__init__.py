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


class Common(Section):
    seed: NonNegInt = 1234
    python: str = ".venv/bin/python"  # interpreter DVC runs the stage commands with
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


class Data(Section):
    synthetic: Synthetic = Synthetic()


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
    recall_pool_files: PosInt = 1000  # stdlib files whose docstrings form the pool the math classifier recalls from
    math_synthetic_docs: NonNegInt = 20000
    include_gsm8k_train: bool = True
    # your own math text, file names inside `common.paths.extra_math` (a DVC dependency of the corpus stage):
    # .jsonl with a `text` field per line, or plain text split on blank lines
    extra_math_files: list[str] = []
    decontamination: Decontamination = Decontamination()
    classifier: Classifier = Classifier()


# ----------------------------------------------------------------------------------------------------------------
# models and the supervised stages: tokenizer -> base (code) -> pretrain (math) -> sft (CoT/PoT/tool)

PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


class Tokenizer(Section):
    """Byte-level BPE trained on the corpus, digits one per token; a pretrained model keeps its own tokenizer."""

    vocab_size: Annotated[int, Field(ge=300)] = 1536  # 256 byte tokens + 4 specials + merges
    min_frequency: PosInt = 2
    max_chars: PosInt = 20_000_000  # corpus text (code + math) the BPE trainer reads
    eval_docs: PosInt = 200  # documents of each corpus used to report compression (chars per token)


class Model(Section):
    """The network: a Llama built from these sizes (`source: scratch`), or any pretrained causal LM."""

    source: Literal["scratch", "pretrained"] = "scratch"
    hidden_size: PosInt = 160
    num_layers: PosInt = 4
    num_heads: PosInt = 4
    num_kv_heads: PosInt = 4
    intermediate_size: PosInt = 432
    max_position_embeddings: PosInt = 512
    rope_theta: PosFloat = 10000.0
    tie_embeddings: bool = True
    init_std: PosFloat = 0.02
    name_or_path: str = ""  # pretrained: hub id, local folder, or "pkg:<python package>" (that package's folder)
    gguf_file: str = ""  # pretrained: a GGUF file inside name_or_path (dequantised to float32 on load)

    @model_validator(mode="after")
    def _shapes(self) -> Model:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads: must divide hidden_size={self.hidden_size} (got {self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads} (got {self.num_kv_heads})")
        if self.source == "pretrained" and not self.name_or_path:
            raise ValueError("name_or_path: required when source is 'pretrained'")
        return self


class Optim(Section):
    """AdamW with linear warmup then cosine decay to `lr * min_lr_ratio`, global-norm gradient clipping."""

    lr: PosFloat = 1e-3
    min_lr_ratio: Prob = 0.1
    warmup_steps: NonNegInt = 20
    weight_decay: NonNegFloat = 0.1  # applied to matrices only (not norms, not biases)
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    eps: PosFloat = 1e-8
    grad_clip: PosFloat = 1.0


class Loop(Section):
    """One training run (base, pretrain, sft): steps, batch, checkpoints. Batch sizes count sequences."""

    max_steps: PosInt = 100
    global_batch_size: PosInt = 32  # per optimizer step, summed over processes (same data for any world size)
    micro_batch_size: PosInt = 32  # per forward pass and process; gradient accumulation makes up the rest
    seq_len: PosInt = 256  # packed block length (pretraining) or longest example kept (SFT)
    checkpoint_every: NonNegInt = 50  # steps; 0 = no checkpoints
    keep_checkpoints: PosInt = 1
    log_every: PosInt = 10  # steps between step-metric records (loss, lr, grad norm, tokens/s)
    optim: Optim = Optim()

    @model_validator(mode="after")
    def _batch(self) -> Loop:
        if self.global_batch_size % self.micro_batch_size:
            need = f"must divide global_batch_size={self.global_batch_size}"
            raise ValueError(f"micro_batch_size: {need} (got {self.micro_batch_size})")
        return self


class Base(Section):
    """The "coder base": pretraining from scratch on the code corpus; pass-through for a pretrained model."""

    train: Loop = Loop()
    heldout_docs: PosInt = 20  # documents of each corpus kept out of training, for perplexity
    eval_tokens: PosInt = 32768  # held-out tokens scored per corpus


class Pretrain(Section):
    """Continual pretraining on the math corpus (DeepSeekMath sec. 2.2, at laptop scale)."""

    train: Loop = Loop()
    heldout_docs: PosInt = 200
    eval_tokens: PosInt = 32768


class Mix(Section):
    """Share of SFT examples in each solution style (normalised; each training problem gets one style)."""

    cot: NonNegFloat = 0.6
    pot: NonNegFloat = 0.2
    tool: NonNegFloat = 0.2

    @model_validator(mode="after")
    def _positive(self) -> Mix:
        if self.cot + self.pot + self.tool <= 0:
            raise ValueError("cot: the shares cot + pot + tool must be > 0")
        return self


class Probe(Section):
    """End-of-SFT accuracy probe on held-out test problems (CoT prompt): greedy accuracy and pass@k."""

    n_problems: PosInt = 500
    k: PosInt = 8
    temperature: PosFloat = 1.0
    max_new_tokens: PosInt = 160
    batch_size: PosInt = 64  # sequences per generate call


class Sft(Section):
    """Supervised fine-tuning on CoT / PoT / tool-integrated solutions, loss on the response only."""

    train: Loop = Loop()
    mix: Mix = Mix()
    max_examples: NonNegInt = 0  # training problems used; 0 = all
    val_examples: PosInt = 500  # held-out problems (val split) for the held-out loss
    probe: Probe = Probe()


# ----------------------------------------------------------------------------------------------------------------
# rewards and the sandbox that runs model-written programs (dsmath.rewards, dsmath.sandbox)


class Rewards(Section):
    """Rule-based rewards (DeepSeekMath sec. 4.1, R1 sec. 2.2.2): r = accuracy_weight * acc + format_weight * fmt."""

    accuracy_weight: Annotated[float, Field(ge=0)] = 1.0  # final answer equivalent to the gold (0/1)
    format_weight: Annotated[float, Field(ge=0)] = 0.1  # answer line / code and output fences well formed (0/1)
    equivalence_timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0  # math-verify call cut off after this

    @model_validator(mode="after")
    def _some_weight(self) -> Rewards:
        if self.accuracy_weight + self.format_weight <= 0:
            raise ValueError("accuracy_weight: accuracy_weight + format_weight must be > 0 (got 0)")
        return self


class Sandbox(Section):
    """Limits for one model-written Python program (program-of-thought / tool-integrated reasoning)."""

    timeout_s: Annotated[float, Field(gt=0, le=600)] = 3.0  # wall clock; CPU limit is ceil(timeout_s) + 1 s
    memory_mb: Annotated[int, Field(ge=64)] = 512  # address-space limit (RLIMIT_AS)
    max_output_bytes: Annotated[int, Field(ge=256)] = 65536  # stdout (and stderr) cap; the program is killed beyond
    workers: PosInt = 2  # programs run in parallel by a batch


# ----------------------------------------------------------------------------------------------------------------
# rl: GRPO (DeepSeekMath sec. 4) and the algorithms of its unified paradigm (sec. 5.2.1) in one engine


class Ppo(Section):
    """PPO baseline (DeepSeekMath eq. 1-2): critic of the policy's size, GAE, per-token KL penalty in the reward."""

    gamma: Annotated[float, Field(gt=0, le=1)] = 1.0
    lam: Annotated[float, Field(ge=0, le=1)] = 0.95
    kl_coef: Annotated[float, Field(ge=0)] = 0.05
    value_clip: Annotated[float, Field(gt=0)] = 0.2
    critic_lr: Annotated[float, Field(gt=0)] = 1e-4


class Rl(Section):
    algorithm: Literal["grpo", "ppo", "online_rft", "rft"] = "grpo"
    mode: Literal["cot", "pot", "tool"] = "cot"
    reward: Literal["accuracy", "format", "combined"] = "combined"
    advantage: Literal["outcome", "process"] = "outcome"
    steps: PosInt = 150
    prompts_per_step: PosInt = 16
    group_size: Annotated[int, Field(ge=2)] = 8
    mu: PosInt = 1  # optimisation passes over each rollout batch (paper: 1)
    minibatches: PosInt = 1  # optimiser steps per pass
    lr: Annotated[float, Field(gt=0)] = 5e-5
    warmup_steps: NonNegInt = 10
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    max_grad_norm: Annotated[float, Field(gt=0)] = 1.0
    clip_eps: Annotated[float, Field(gt=0, lt=1)] = 0.2
    clip_eps_high: Annotated[float, Field(gt=0)] | None = None
    beta: Annotated[float, Field(ge=0)] = 0.04
    kl: Literal["k1", "k2", "k3"] = "k3"
    aggregation: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"] = "seq-mean-token-mean"
    scale_rewards: bool = True
    drop_equal_groups: bool = True
    temperature: Annotated[float, Field(gt=0)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    max_new_tokens: PosInt = 96
    max_tool_calls: PosInt = 2
    ref_reset_every: NonNegInt = 0  # iterative GRPO (sec. 4.2): reference := policy every N steps (0 = never)
    prompt_levels: list[Annotated[int, Field(ge=1, le=5)]] = []
    engine: Literal["auto", "fast", "hf"] = "auto"
    checkpoint_every: PosInt = 25
    eval_every: NonNegInt = 25
    eval_problems: PosInt = 200
    samples_every: PosInt = 25
    ppo: Ppo = Ppo()


# ----------------------------------------------------------------------------------------------------------------
# evaluate / report: every model of the chain on synthetic and real benchmarks (DeepSeekMath sec. 5)

CHAIN = ("base", "pretrain", "sft", "rl")
DATASETS = ("synthetic", "gsm8k_test", "svamp", "math500")


class EvalDatasets(Section):
    """Problems per dataset (the first N of each; 0 = skip)."""

    synthetic: NonNegInt = 1000
    gsm8k_test: NonNegInt = 100
    svamp: NonNegInt = 100
    math500: NonNegInt = 100


class Evaluate(Section):
    models: list[Literal["base", "pretrain", "sft", "rl"]] = list(CHAIN)
    datasets: EvalDatasets = EvalDatasets()
    modes: list[Literal["cot", "pot", "tool"]] = ["cot", "pot", "tool"]
    sampled_datasets: list[Literal["synthetic", "gsm8k_test", "svamp", "math500"]] = ["synthetic"]
    sampled_modes: list[Literal["cot", "pot", "tool"]] = ["cot"]
    n_samples: NonNegInt = 8  # samples per problem for maj@k / pass@k (0 = greedy only)
    k: list[PosInt] = [1, 2, 4, 8]
    temperature: Annotated[float, Field(gt=0)] = 1.0
    max_new_tokens: PosInt = 160
    max_tool_calls: PosInt = 2
    batch_size: PosInt = 256
    engine: Literal["auto", "fast", "hf"] = "auto"
    primary_metric: str = "synthetic/cot/greedy"  # decides whether the RL model becomes the registry's champion
    # models whose answer may be the last number of the text (base models never learnt the answer line)
    last_number_answer: list[Literal["base", "pretrain", "sft", "rl"]] = ["base", "pretrain"]

    @model_validator(mode="after")
    def _k_within_samples(self) -> Evaluate:
        if self.n_samples and any(k > self.n_samples for k in self.k):
            raise ValueError(f"k: every k must be <= n_samples={self.n_samples} (got {self.k})")
        return self


# ----------------------------------------------------------------------------------------------------------------
# the whole file


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


class ParamsError(ValueError):
    """Invalid params: the message is one line per problem, each starting with the key path."""


_BOUND_MSG = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "literal_error": "must be one of {expected}",
    "extra_forbidden": "unknown key",
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
