"""The `evaluate@<model>` stage's work: load a model of the chain, evaluate it, write metrics, predictions, curves."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dsmath.data.benchmarks import load_benchmark
from dsmath.data.io import read_jsonl
from dsmath.evaluation.evaluate import evaluate_model
from dsmath.model import load_dir


def eval_datasets(params) -> dict[str, list[dict]]:
    """The first N problems of each evaluation set (N from `evaluate.datasets`, 0 skips the set)."""
    sizes = params.evaluate.datasets.model_dump()
    out = {}
    for name, n in sizes.items():
        if n == 0:
            continue
        if name == "synthetic":
            out[name] = read_jsonl(Path(params.common.paths.synthetic) / "test.jsonl")[:n]
        else:
            out[name] = load_benchmark(name, params.common.paths.raw, limit=n)
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


def run_evaluation(params, model_name: str) -> tuple[dict[str, float], list[dict], list[dict]]:
    """(metrics, prediction rows, curve rows) of `models/<model_name>` on every dataset and mode."""
    model, tok = load_dir(Path(params.common.paths.models) / model_name)
    metrics, rows = evaluate_model(model, tok, eval_datasets(params), params.evaluate, params.sandbox,
                                   params.rewards, params.common.seed,
                                   last_number=model_name in params.evaluate.last_number_answer,
                                   sampling=model_name in params.evaluate.sampled_models)
    curves = curve_rows(metrics, params.evaluate.k)
    write_outputs(Path(params.common.paths.eval) / model_name, rows, curves)
    return metrics, rows, curves
