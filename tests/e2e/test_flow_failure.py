"""The Prefect flow's failure path, with fake stages: a failing stage fails the flow and names itself, nothing
downstream of it runs, a busy DVC lock is retried and a real error is not, and the MLflow parent run ends FAILED.

No training and no `dvc repro`: `dsmath.orchestration.pipeline.repro_stage` is replaced by `FakeStages`, which records
each call
(and the parent run id the stage would see), plays a scripted (exit code, output) per stage and, on success, writes
the metrics files the stage declares. Everything else is real: a tiny DVC project (its own dvc.yaml, the smoke params)
gives the stage graph and the metrics paths, a Prefect test harness (one per module, ~20 s to start) runs the flow,
and MLflow tracks into a temporary SQLite file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pytest
import yaml

from dsmath.orchestration import pipeline
from dsmath.runtime import tracking

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~30 s, most of it starting the Prefect test harness

# prepare -> train -> evaluate@train -> report; train declares two metrics files, report none
DVC_YAML = """\
stages:
  prepare:
    cmd: "true"
    outs:
      - data/prepared
    metrics:
      - ${common.paths.metrics}/prepare.json:
          cache: false
  train:
    cmd: "true"
    deps:
      - data/prepared
    outs:
      - models/train
    metrics:
      - ${common.paths.metrics}/train.json:
          cache: false
      - ${common.paths.metrics}/train_data.json:
          cache: false
  evaluate:
    foreach: [train]
    do:
      cmd: "true"
      deps:
        - models/${item}
      outs:
        - evals/${item}
      metrics:
        - ${common.paths.metrics}/eval/${item}.json:
            cache: false
  report:
    cmd: "true"
    deps:
      - evals/train
    outs:
      - reports
"""
BUSY = ("ERROR: failed to reproduce 'train': '.dvc/tmp/rwlock' is busy, it is being blocked by:\n"
        "  (PID 4242): dvc repro -s prepare")
BOOM = "ValueError: the loss is nan"


class FakeStages:
    """Stands in for `pipeline.repro_stage`: `script[stage]` is the list of (exit code, output lines) of its
    successive calls, then exit 0; a successful call writes `{"score": ..., "detail": {...}}` to each declared file."""

    def __init__(self, metrics_files: dict[str, list[str]], script: dict[str, list[tuple[int, list[str]]]]):
        self.metrics_files = metrics_files
        self.script = {stage: list(calls) for stage, calls in script.items()}
        self.calls: list[str] = []
        self.parent_ids: set[str | None] = set()

    def __call__(self, stage, on_line=print, cwd=".", dvc=None):
        self.calls.append(stage)
        self.parent_ids.add(os.environ.get(tracking.PARENT_ENV))
        calls = self.script.get(stage)
        code, lines = calls.pop(0) if calls else (0, [f"Running stage '{stage}':"])
        for line in lines:
            on_line(line)
        if code == 0:
            for i, path in enumerate(self.metrics_files.get(stage, [])):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(json.dumps({"score": 0.5 + i, "detail": {"stage": len(stage)}}))
        return code, lines


@dataclass
class FlowResult:
    state: object
    fake: FakeStages
    parent: object  # the MLflow parent run this flow execution opened
    task_runs: dict[str, object] = field(default_factory=dict)  # task run name -> Prefect task run
    artifacts: dict[str, object] = field(default_factory=dict)  # key -> Prefect artifact


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny DVC project as the working directory, MLflow in a temporary SQLite file, one Prefect test harness.
    Yields the project root and its {stage: metrics files}."""
    from dvc.repo import Repo

    root = tmp_path_factory.mktemp("flow-project")
    state = tmp_path_factory.mktemp("flow-state")  # outside the project: Prefect's home, MLflow's database
    (root / "dvc.yaml").write_text(DVC_YAML)
    params = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    params["common"]["python"] = sys.executable
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    Repo.init(str(root), no_scm=True).close()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{state}/mlflow.db")
        mp.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
        mp.setenv("PREFECT_HOME", str(state / "prefect"))
        mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        mp.delenv(tracking.PARENT_ENV, raising=False)
        from prefect.settings import temporary_settings
        from prefect.testing.utilities import prefect_test_harness

        from dsmath.orchestration.pipeline import stage_metrics_files

        # the env above is too late if prefect was imported before this module: set the same through its settings
        with temporary_settings(updates={"home": state / "prefect", "server.analytics_enabled": False}):
            with prefect_test_harness():
                yield root, stage_metrics_files()


def run_flow(script: dict[str, list[tuple[int, list[str]]]], project) -> FlowResult:
    """One flow execution with `FakeStages(script)` as the stages and no delay between retries."""
    import mlflow

    from flows import pipeline as flow_module

    _, metrics_files = project
    fake = FakeStages(metrics_files, script)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "repro_stage", fake)
        mp.setattr(flow_module, "run_stage", flow_module.run_stage.with_options(retry_delay_seconds=0))
        state = flow_module.dsmath_pipeline(return_state=True)
    (parent_id,) = fake.parent_ids  # every stage saw the same parent run id
    exp = mlflow.get_experiment_by_name(pipeline.validate().common.tracking.experiment)
    parents = mlflow.search_runs([exp.experiment_id], "tags.`dsmath.kind` = 'pipeline'", output_format="list")
    (parent,) = [r for r in parents if r.info.run_id == parent_id]
    task_runs, artifacts = asyncio.run(_prefect_records(state.state_details.flow_run_id))
    return FlowResult(state, fake, parent, task_runs, artifacts)


async def _prefect_records(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )

    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {r.name: r for r in runs}, {a.key: a for a in artifacts}


def _downstream(stage: str) -> set[str]:
    return nx.ancestors(pipeline.stage_graph(), stage)  # an edge a -> b means a depends on b


@pytest.fixture(scope="module")
def failed(project) -> FlowResult:
    """`train` exits 1 with a real error."""
    return run_flow({"train": [(1, ["Traceback (most recent call last):", BOOM])]}, project)


def test_failing_stage_fails_the_flow_and_the_error_names_it(failed):
    from flows.pipeline import StageFailed, TransientStageError

    assert failed.state.is_failed()
    err = failed.state.result(raise_on_failure=False)
    assert isinstance(err, StageFailed) and not isinstance(err, TransientStageError)
    assert "stage 'train' failed (exit 1)" in str(err) and BOOM in str(err)
    assert failed.task_runs["train"].state.is_failed()
    assert "stage 'train' failed" in failed.task_runs["train"].state.message


def test_nothing_downstream_of_the_failed_stage_runs(failed):
    downstream = _downstream("train")
    assert downstream == {"evaluate@train", "report"}
    assert failed.fake.calls == ["prepare", "train"]
    assert not downstream & set(failed.task_runs)  # not even submitted to Prefect
    assert failed.task_runs["prepare"].state.is_completed()
    assert "prepare-metrics" in failed.artifacts and "train-metrics" not in failed.artifacts


def test_a_real_error_is_not_retried(failed):
    assert failed.fake.calls.count("train") == 1
    assert failed.task_runs["train"].run_count == 1


def test_mlflow_parent_run_is_failed_when_the_flow_fails(failed):
    assert failed.parent.info.status == "FAILED"
    assert failed.parent.info.run_name == "prefect flow"
    assert tracking.PARENT_ENV not in os.environ  # the parent's id does not leak past the flow


@pytest.fixture(scope="module")
def retried(project) -> FlowResult:
    """`train` first finds the DVC lock busy, then succeeds."""
    return run_flow({"train": [(1, [BUSY])]}, project)


def test_busy_lock_is_retried_then_the_flow_succeeds(retried):
    assert retried.state.is_completed(), retried.state.message
    assert retried.fake.calls == ["prepare", "train", "train", "evaluate@train", "report"]
    assert retried.task_runs["train"].run_count == 2 and retried.task_runs["train"].state.is_completed()
    assert retried.parent.info.status == "FINISHED"


def test_metrics_artifacts_come_from_the_declared_metrics_files(retried):
    """evaluate@train publishes metrics/eval/train.json (the old name rewrite looked for metrics/evaluate/train.json);
    train's two files are merged into one table, a row per metric and file; report declares none: no artifact."""
    result = retried.state.result()
    assert result["evaluate@train"] == {"metrics/eval/train.json": {"score": 0.5, "detail": {"stage": 14}}}
    assert list(result["train"]) == ["metrics/train.json", "metrics/train_data.json"]
    assert result["report"] == {}
    rows = retried.artifacts["train-metrics"].data
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert rows == [{"file": "metrics/train.json", "metric": "detail.stage", "value": 5},
                    {"file": "metrics/train.json", "metric": "score", "value": 0.5},
                    {"file": "metrics/train_data.json", "metric": "detail.stage", "value": 5},
                    {"file": "metrics/train_data.json", "metric": "score", "value": 1.5}]
    assert "evaluate-train-metrics" in retried.artifacts and "report-metrics" not in retried.artifacts


def test_a_lock_busy_on_every_try_fails_after_the_retries(project):
    from flows.pipeline import TransientStageError, run_stage

    attempts = 1 + run_stage.retries
    result = run_flow({"train": [(1, [BUSY])] * attempts}, project)
    assert result.state.is_failed()
    assert isinstance(result.state.result(raise_on_failure=False), TransientStageError)
    assert result.fake.calls == ["prepare"] + ["train"] * attempts
    assert result.parent.info.status == "FAILED"
