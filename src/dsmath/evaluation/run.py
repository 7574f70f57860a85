"""The `evaluate@<model>` stage's work: load a model of the chain, evaluate it, write metrics, predictions, curves.

`rl` is one model per seed of `common.rl_seeds` (models/rl/seed-<seed>): each is evaluated alike into
eval/rl/seed-<seed>/, and the stage's metrics are their mean (the spread across seeds is the report's). Every model
is also scored on `evaluate.val_problems` validation problems in the primary metric's mode (`val/...` keys): the
champion is chosen there, never on the test split.

Under ``torchrun`` / ``accelerate launch`` the problems are decoded by every rank (:mod:`dsmath.evaluation.evaluate`)
and rank 0 alone writes the outputs.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dsmath.config import seed_dir
from dsmath.data.benchmarks import load_benchmark
from dsmath.data.io import read_jsonl, require_records
from dsmath.evaluation.evaluate import Generator, evaluate_model, evaluate_split
from dsmath.modeling.model import load_dir
from dsmath.runtime import distributed, precision

VAL_PREFIX = "val/"  # metrics of the validation split: `val/synthetic/tool/greedy`
TIMING_SUFFIX = "_per_s"  # speed metrics (`greedy_problems_per_s`): kept out of the cached eval/ folders


def quality_only(metrics: dict[str, float]) -> dict[str, float]:
    """`metrics` without its timings: what a cached output may hold (a function of code, params and data alone;
    timings go to the stage's uncached metrics file, metrics/eval/<model>.json)."""
    return {k: v for k, v in metrics.items() if not k.endswith(TIMING_SUFFIX)}


def eval_datasets(params) -> dict[str, list[dict]]:
    """The first N problems of each evaluation set (N from `evaluate.datasets`, 0 skips the set). A set asked for
    whose file holds no record raises DataError naming the file and the params key (never a score over 0 problems)."""
    sizes = params.evaluate.datasets.model_dump()
    out = {}
    for name, n in sizes.items():
        if n == 0:
            continue
        key = f"evaluate.datasets.{name}"
        if name == "synthetic":
            path = Path(params.common.paths.synthetic) / "test.jsonl"
            out[name] = require_records(read_jsonl(path), path, key)[:n]
        else:
            out[name] = load_benchmark(name, params.common.paths.raw, limit=n, wanted_by=key)
    return out


def curve_rows(metrics: dict[str, float], ks: list[int]) -> list[dict]:
    """pass@k and maj@k against k for every sampled (dataset, mode): the data of the paper's Fig. 7."""
    rows = []
    prefixes = sorted({k.rsplit("/", 1)[0] for k in metrics if k.endswith("/pass@1")})
    for prefix in prefixes:
        dataset, mode = prefix.split("/")
        for k in ks:
            if f"{prefix}/pass@{k}" in metrics:
                rows.append({"dataset": dataset, "mode": mode, "k": k, "pass_at_k": metrics[f"{prefix}/pass@{k}"],
                             "maj_at_k": metrics[f"{prefix}/maj@{k}"]})
    return rows


def write_outputs(out_dir: Path, rows: list[dict], curves: list[dict]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "predictions.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    with (out_dir / "curves.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["dataset", "mode", "k", "pass_at_k", "maj_at_k"])
        w.writeheader()
        w.writerows(curves)


def model_dirs(params, model_name: str) -> dict[str, Path]:
    """{run name: model folder}: `{"": models/sft}` for one model, `{"seed-1234": models/rl/seed-1234, ...}` for rl."""
    root = Path(params.common.paths.models) / model_name
    if model_name != "rl":
        return {"": root}
    return {seed_dir(s): root / seed_dir(s) for s in params.common.rl_seeds}


def validation_metrics(model, tok, params, last_number: bool, sampling: bool,
                       world: distributed.World | None = None) -> dict[str, float]:
    """The primary metric's (dataset, mode) on the first `evaluate.val_problems` validation problems, as `val/...`
    keys; samples are drawn only when the primary metric is a maj@k / pass@k."""
    ev = params.evaluate
    _, mode, metric = ev.primary_metric.split("/")
    path = Path(params.common.paths.synthetic) / "val.jsonl"
    records = require_records(read_jsonl(path), path, "evaluate.val_problems")[: ev.val_problems]
    gen = Generator(model, tok, ev, params.sandbox, params.common.seed, last_number, world,
                    precision.stage_torch_dtype(params.common, "evaluate", world.device if world else None))
    m, _ = evaluate_split(gen, records, mode, ev, params.sandbox, params.rewards,
                          sampled=sampling and "@" in metric)
    return {f"{VAL_PREFIX}synthetic/{mode}/{k}": v for k, v in m.items()}


def mean_metrics(runs: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise mean over runs (the keys every run has)."""
    keys = set(runs[0]).intersection(*runs[1:])
    return {k: sum(r[k] for r in runs) / len(runs) for k in sorted(keys)}


def run_evaluation(params, model_name: str,
                   world: distributed.World | None = None) -> tuple[dict[str, float], list[dict], list[dict]]:
    """(metrics, prediction rows, curve rows) of `models/<model_name>` on every dataset and mode; for rl, the mean
    metrics and curves over its seeds, each seed's outputs in eval/rl/seed-<seed>/ (rows carry their `run`).
    world: the ranks sharing the decoding (default: one process on `common.device`); only rank 0 writes."""
    world = world or distributed.setup(params.common.device)
    dtype_name = precision.stage_dtype(params.common, "evaluate", world.device)
    dtype = precision.DTYPES[dtype_name]
    ev, out_root = params.evaluate, Path(params.common.paths.eval) / model_name
    last_number, sampling = model_name in ev.last_number_answer, model_name in ev.sampled_models
    datasets = eval_datasets(params)
    per_run, all_rows = [], []
    for run, folder in model_dirs(params, model_name).items():
        model, tok = load_dir(folder)
        metrics, rows = evaluate_model(model, tok, datasets, ev, params.sandbox, params.rewards, params.common.seed,
                                       last_number=last_number, sampling=sampling, world=world, dtype=dtype)
        metrics |= validation_metrics(model, tok, params, last_number, sampling, world)
        if run and world.is_main:
            write_outputs(out_root / run, rows, curve_rows(metrics, ev.k))
            text = json.dumps(quality_only(metrics), indent=2, sort_keys=True) + "\n"
            (out_root / run / "metrics.json").write_text(text)
            rows = [{"run": run, **r} for r in rows]
        per_run.append(metrics)
        all_rows += rows
    metrics = mean_metrics(per_run) | {"bf16": float(dtype_name == "bfloat16")}  # the precision auto chose here
    curves = curve_rows(metrics, ev.k)
    if world.is_main:
        write_outputs(out_root, [] if model_name == "rl" else all_rows, curves)
    return metrics, all_rows, curves
