"""Params section `evaluate` and the model chain / dataset names shared with the report."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dsmath.config.base import NonNegInt, PosInt, Section

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
    sampled_models: list[Literal["base", "pretrain", "sft", "rl"]] = ["sft", "rl"]  # the others: greedy only
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
