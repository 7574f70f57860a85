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
    sampled_modes: list[Literal["cot", "pot", "tool"]] = ["cot", "tool"]
    sampled_models: list[Literal["base", "pretrain", "sft", "rl"]] = ["sft", "rl"]  # the others: greedy only
    threads: NonNegInt = 0  # torch threads of the evaluate stages; 0 = common.num_threads
    n_samples: NonNegInt = 8  # samples per problem for maj@k / pass@k (0 = greedy only)
    k: list[PosInt] = [1, 2, 4, 8]
    temperature: Annotated[float, Field(gt=0)] = 1.0
    passk_problems: NonNegInt = 0  # pass@k up to large k on the first N synthetic test problems (0 = off)
    passk_samples: PosInt = 64  # samples per problem of that subset (sampled models and modes)
    passk_k: list[PosInt] = [1, 4, 16, 64]  # reported as synthetic/<mode>/passk@<k>
    max_new_tokens: PosInt = 208
    max_tool_calls: PosInt = 2
    batch_size: PosInt = 256
    engine: Literal["auto", "fast", "hf"] = "auto"
    share_prompts: bool = True  # prefill each distinct prompt once (a problem's n_samples rows share its cache)
    primary_metric: str = "synthetic/cot/greedy"  # decides whether the RL model becomes the registry's champion ...
    val_problems: PosInt = 500  # ... measured on this many synthetic validation problems (the test split reports)
    # models whose answer may be the last number of the text (base models never learnt the answer line)
    last_number_answer: list[Literal["base", "pretrain", "sft", "rl"]] = ["base", "pretrain"]

    @model_validator(mode="after")
    def _k_within_samples(self) -> Evaluate:
        if self.n_samples and any(k > self.n_samples for k in self.k):
            raise ValueError(f"k: every k must be <= n_samples={self.n_samples} (got {self.k})")
        return self

    @model_validator(mode="after")
    def _passk_k_within_samples(self) -> Evaluate:
        if any(k > self.passk_samples for k in self.passk_k):
            raise ValueError(f"passk_k: every k must be <= passk_samples={self.passk_samples} (got {self.passk_k})")
        return self

    @model_validator(mode="after")
    def _something_evaluated(self) -> Evaluate:
        if not self.modes:
            raise ValueError("modes: must list at least one of cot, pot, tool (got [])")
        if not any(self.datasets.model_dump().values()):
            raise ValueError("datasets: at least one dataset must have size > 0 (got all 0)")
        return self

    @model_validator(mode="after")
    def _primary_metric_is_evaluated(self) -> Evaluate:
        choices = metric_names(self)
        if self.primary_metric not in choices:
            raise ValueError(f"primary_metric: must be one of the evaluated metrics {', '.join(choices)} "
                             f"(got {self.primary_metric!r})")
        if self.primary_metric.split("/")[0] != "synthetic":
            raise ValueError(f"primary_metric: must be a synthetic metric, the only set with a validation split "
                             f"where models are compared (got {self.primary_metric!r})")
        return self


GREEDY_METRICS = ("greedy", "format_error_rate", "mean_length")  # of every evaluated (dataset, mode)


def metric_names(ev: Evaluate, model: str = "rl") -> list[str]:
    """The `<dataset>/<mode>/<metric>` names `evaluate_model` reports for `model` under these settings (the ones
    `primary_metric` may name): greedy metrics for every dataset of size > 0 and every mode; pass@k and maj@k for
    each k <= n_samples where the dataset, the mode and the model are sampled."""
    sampled_ks = [k for k in ev.k if k <= ev.n_samples] if model in ev.sampled_models else []
    out = []
    for dataset, size in ev.datasets.model_dump().items():
        if not size:
            continue
        for mode in ev.modes:
            out += [f"{dataset}/{mode}/{m}" for m in GREEDY_METRICS]
            if dataset in ev.sampled_datasets and mode in ev.sampled_modes:
                out += [f"{dataset}/{mode}/{m}@{k}" for k in sampled_ks for m in ("pass", "maj")]
    return out
