"""Prefect flow: runs the DVC pipeline one task per stage, in the order of the DVC graph, inside one MLflow parent run.

Orchestration only: the stage order comes from `dvc.yaml` (through `dsmath.orchestration.pipeline.stage_graph`), each
task is `dvc repro -s <stage>`, and training logic lives in the stages. Run it:

    .venv/bin/python -m flows.pipeline            # once, ephemeral Prefect (no server needed)
    .venv/bin/python -m flows.pipeline --serve    # a deployment with a cron schedule, visible in `prefect server start`
    .venv/bin/python -m flows.pipeline --set rl.algorithm=ppo   # a variant: the pipeline as a DVC experiment
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from dsmath.config import load_raw, parse_params
from dsmath.orchestration import pipeline
from dsmath.runtime import tracking
from dsmath.study import runner
from dsmath.study.spec import apply

TRANSIENT_MARKERS = ("is busy", "Unable to acquire lock", "database is locked")


class StageFailed(RuntimeError):
    """A stage exited non-zero; the message names the stage and carries the tail of its output."""


class TransientStageError(StageFailed):
    """A failure worth retrying (another DVC command holds the lock, a busy database)."""


def _retry_only_transient(task, task_run, state) -> bool:
    return isinstance(state.result(raise_on_failure=False), TransientStageError)


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=_retry_only_transient, task_run_name="{stage}")
def run_stage(stage: str, metrics_files: list[str]) -> dict[str, dict]:
    """`dvc repro -s <stage>` with its output streamed into the Prefect log; publishes the metrics files the stage
    declares in dvc.yaml (`metrics_files`, from :func:`dsmath.orchestration.pipeline.stage_metrics_files`) as one table
    artifact with a row per metric. Returns {metrics file: its metrics}."""
    log = get_run_logger()
    code, lines = pipeline.repro_stage(stage, on_line=log.info)
    if code != 0:
        tail = "\n".join(lines[-15:])
        kind = TransientStageError if any(m in tail for m in TRANSIENT_MARKERS) else StageFailed
        raise kind(f"stage {stage!r} failed (exit {code}):\n{tail}")
    metrics = {path: m for path in metrics_files if (m := _read_metrics(Path(path)))}
    if metrics:
        rows = [{"file": path, "metric": k, "value": v}
                for path, m in metrics.items() for k, v in sorted(tracking.flatten(m).items())]
        create_table_artifact(rows, key=_key(stage, "metrics"), description=f"metrics of stage {stage}")
    return metrics


@task
def publish_links(parent_id: str, tracking_uri: str) -> None:
    """A link artifact per stage to its MLflow run (works with `mlflow ui` / a tracking server)."""
    base = tracking_uri if tracking_uri.startswith("http") else "http://127.0.0.1:5000"
    lines = ["| stage | MLflow run |", "|---|---|"]
    for stage, run in pipeline.child_runs(parent_id).items():
        url = f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        create_link_artifact(url, link_text=f"MLflow run of {stage}", key=_key(stage, "mlflow"))
        lines.append(f"| {stage} | [{run.info.run_id}]({url}) |")
    create_markdown_artifact("\n".join(lines), key="dsmath-mlflow-runs", description="MLflow runs of this pipeline")


def _key(stage: str, what: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return f"{stage}-{what}".lower().replace("@", "-").replace("_", "-")


def _read_metrics(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


@task(task_run_name="dvc exp run {name}")
def run_experiment(name: str, overrides: dict[str, Any], targets: list[str], parent_id: str) -> dict[str, dict]:
    """The pipeline with param overrides, as one DVC experiment in the workspace (`dvc exp run -n <name> -S ...`):
    DVC re-runs only the stages the overrides change and leaves the experiment's results in the workspace (`dvc exp
    show` lists it beside the others). Returns {metrics file: its metrics} of every stage."""
    log = get_run_logger()
    runner.run_experiment(name, overrides, targets, Path(".dvc/tmp/exps-logs") / f"{name}.log", log.info, parent_id)
    files = [f for fs in pipeline.stage_metrics_files().values() for f in fs]
    return {path: m for path in files if (m := _read_metrics(Path(path)))}


@flow(name="dsmath-pipeline", log_prints=True)
def dsmath_pipeline(stages: list[str] | None = None, overrides: dict[str, Any] | None = None,
                    experiment: str | None = None) -> dict[str, dict]:
    """Every stage of dvc.yaml (or only `stages`), in the DVC graph's dependency order; returns {stage: {metrics
    file: its metrics}}. With `overrides` ({"rl.algorithm": "ppo", ...}, dotted keys) the pipeline runs as the DVC
    experiment `experiment` instead (a variant launched from the UI): one task, `dvc exp run -S ...`."""
    if overrides:
        params = parse_params(apply(load_raw("params.yaml"), overrides))  # a bad override fails before anything runs
        name = experiment or "ui-" + "-".join(f"{k.split('.')[-1]}-{v}" for k, v in overrides.items())[:60]
        name = re.sub(r"[^A-Za-z0-9_-]", "-", name)
        with pipeline.pipeline_run(params, run_name=f"prefect flow: dvc exp {name}") as parent_id:
            return {"experiment": run_experiment(name, overrides, stages or [], parent_id)}
    params = pipeline.validate()  # bad params fail here, naming the stages that read them, before anything runs
    graph = pipeline.stage_graph()
    order = [s for s in pipeline.stage_order(graph) if not stages or s in stages]
    metrics_files = pipeline.stage_metrics_files()
    results: dict[str, dict] = {}
    with pipeline.pipeline_run(params, run_name="prefect flow") as parent_id:
        # one at a time: DVC holds a repository lock while it runs, so stages cannot overlap anyway; a failure
        # raises here, naming the stage, and nothing downstream runs
        try:
            for stage in order:
                results[stage] = run_stage(stage, metrics_files.get(stage, []))
        finally:
            tracking.tag_children_from_lock(parent_id)
        publish_links(parent_id, tracking.tracking_uri(params.common.tracking))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help="serve a deployment with a cron schedule")
    parser.add_argument("--cron", default="0 3 * * *", help="schedule of the served deployment (default: 03:00)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=YAML",
                        help="param overrides (dotted keys, YAML values): run the pipeline as a DVC experiment")
    parser.add_argument("--name", default=None, help="the experiment's name (with --set)")
    args = parser.parse_args()
    overrides = {k: yaml.safe_load(v) for k, _, v in (a.partition("=") for a in args.set)}
    if args.serve:  # the deployment's `overrides` / `experiment` parameters can be set per run in the UI
        dsmath_pipeline.serve(name="dsmath-nightly", cron=args.cron, tags=["dsmath"])
    else:
        dsmath_pipeline(overrides=overrides or None, experiment=args.name)


if __name__ == "__main__":
    main()
