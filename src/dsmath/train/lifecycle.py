"""What a training stage leaves behind: loss-curve file for `dvc plots`, PNG and model in MLflow, metrics JSON.

Only the main process talks to MLflow; under DDP the other processes get a :class:`dsmath.runtime.tracking.NullRun`.
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dsmath.runtime import precision, tracking
from dsmath.runtime.stage import write_metrics

CURVE_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens_per_s")


@contextlib.contextmanager
def stage_tracking(accelerator, stage: str, params, sections: dict[str, Any]) -> Iterator[Any]:
    """`tracking.stage_run` on the main process, a `tracking.NullRun` elsewhere."""
    with tracking.main_process_run(accelerator.is_main_process, stage, params, sections) as run:
        yield run


def write_curve(history: Sequence[dict], path: str | Path) -> Path:
    """The loss curve as CSV (step, loss, lr, grad_norm, tokens_per_s), one row per logged step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CURVE_FIELDS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for rec in history:
            w.writerow({k: f"{rec[k]:.6g}" if isinstance(rec[k], float) else rec[k] for k in CURVE_FIELDS})
    return path


def loss_figure(history: Sequence[dict], title: str):
    """Training loss (left axis) and learning rate (right axis) against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [r["step"] for r in history]
    ax.plot(steps, [r["loss"] for r in history], color="tab:blue", label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (nats/token)")
    ax.set_title(title)
    lr_ax = ax.twinx()
    lr_ax.plot(steps, [r["lr"] for r in history], color="tab:orange", alpha=0.6, label="lr")
    lr_ax.set_ylabel("learning rate")
    fig.tight_layout()
    return fig


def publish(run, params, stage: str, model_dir: str | Path, history: Sequence[dict], metrics: dict[str, Any]) -> None:
    """Write plots/<stage>.csv and metrics/<stage>.json; log final metrics, PNG, curve and model to MLflow."""
    import matplotlib.pyplot as plt

    curve = write_curve(history, Path(params.common.paths.plots) / f"{stage}.csv")
    metrics_path = write_metrics(params, stage, metrics)
    run.log_metrics({f"{stage}/final/{k}": v for k, v in metrics.items() if isinstance(v, int | float)})
    run.log_artifact(curve)
    run.log_artifact(metrics_path)
    if history:
        fig = loss_figure(history, f"{stage}: training loss")
        run.log_figure(fig, f"{stage}_loss.png")
        plt.close(fig)
    run.log_model(Path(model_dir).resolve())  # an absolute path: MLflow then skips its hub model-card lookup


def finish(accelerator, run, params, stage: str, outcome, model_dir: str | Path, wall_seconds: float) -> None:
    """Main process: save the model folder, then publish curve, metrics (+ wall time), samples and model.

    A model with a non-finite weight is never saved: :class:`dsmath.train.loop.DivergenceError` instead (the loop
    stops a diverging run before this; this is the last guard)."""
    from dsmath.modeling.model import save_dir
    from dsmath.train.loop import DivergenceError, nonfinite_parameters

    if not accelerator.is_main_process:
        return
    bad = nonfinite_parameters(outcome.model)
    if bad:
        raise DivergenceError(f"{stage}: the trained model has non-finite weights ({', '.join(bad[:3])}"
                              f"{', ...' if len(bad) > 3 else ''}); not saved to {model_dir}")
    save_dir(outcome.model, outcome.tokenizer, model_dir)
    metrics = outcome.metrics | {"wall_seconds": wall_seconds,
                                 "bf16": float(precision.stage_dtype(params.common, stage) == "bfloat16")}
    publish(run, params, stage, model_dir, outcome.history, metrics)
    if outcome.rows:
        run.log_table(outcome.rows, f"{stage}_samples.json")


def run_training_stage(params, stage: str, recipe, sections: dict[str, Any]) -> None:
    """A training stage from end to end: accelerator, MLflow run, `recipe(params, accelerator, log)`, outputs."""
    import time

    from dsmath.train.loop import make_accelerator

    t0 = time.perf_counter()
    accelerator = make_accelerator(params.common.device, precision.stage_dtype(params.common, stage))
    if accelerator.is_main_process:  # a DVC output even when no checkpoint is written (pass-through, no interval)
        (Path(params.common.paths.checkpoints) / stage).mkdir(parents=True, exist_ok=True)
    with stage_tracking(accelerator, stage, params, sections) as run:
        outcome = recipe(params, accelerator, run.log_metrics)
        model_dir = Path(params.common.paths.models) / stage
        finish(accelerator, run, params, stage, outcome, model_dir, time.perf_counter() - t0)
    accelerator.end_training()
