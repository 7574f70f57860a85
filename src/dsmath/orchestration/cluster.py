"""A study's runs as Prefect flow runs on a work pool: any number of machines, each running `prefect worker start`.

The driver (the `dsmath-study` flow with a `pool`, :mod:`flows.study`) builds and publishes each chain
(:mod:`dsmath.study.remote`), then :func:`run_on_pool` submits one flow run of the ``dsmath-study-run`` deployment per
variant x seed and gathers them:

- **The deployment** (:func:`ensure_deployment`, one per pool, made or updated on every study): entrypoint
  ``flows/study.py:study_run``, run in the directory a worker's machine names in ``DSMATH_PROJECT`` (its checkout:
  `make worker` sets it), with flow-run heartbeats every 30 s. Each machine needs the project at the driver's commit
  with `make setup` done, and reaches the Prefect server, the MLflow server and the DVC remote.
- **A dead worker** (machine gone, process killed): its flow run stops sending heartbeats. A Prefect automation
  (:func:`ensure_crash_automation`, proactive trigger on this deployment's runs) marks a run CRASHED when no heartbeat
  (and no end) came for ``cluster.silent_s``; the driver then submits the run again (at most ``cluster.resubmit``
  times), and a live worker runs it from the chain. Prefect's own flow retries re-run a flow that *raises*, in its
  process; a crashed process has nobody left to retry it, hence the resubmission.
- **Idempotent submission**: each attempt is submitted with an idempotency key (study, variant, seed, run key,
  attempt), so a driver killed and started again finds the flow runs it submitted (running, finished or crashed)
  instead of doubling them, and takes their MLflow children over.

What differs from a local study: where each run ran (`host`, `pool` and the machine's matmul rate in its record) and
timings. What does not: a run's params, code (a worker refuses another key) and seed, hence (same torch build and CPU
kind; thread count is a param) its curves, model and per-problem results; the e2e test compares them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from dsmath.runtime import tracking
from dsmath.study import remote, runner
from dsmath.study.runner import Runner

FLOW = "dsmath-study-run"  # the per-run flow (flows/study.py:study_run) and the prefix of its deployments
ENTRYPOINT = "flows/study.py:study_run"
PROJECT_ENV = "DSMATH_PROJECT"  # on each worker's machine: its checkout of the project
HEARTBEAT_S = 30  # flow runs' heartbeat period (Prefect's minimum)
POLL_S = 5.0  # how often the driver reads its flow runs' states


def deployment_name(pool: str) -> str:
    return f"{FLOW}/{pool}"


def ensure_deployment(pool: str) -> uuid.UUID:
    """The per-run flow's deployment on `pool` (a process work pool, made if missing); returns its id."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                                   base_job_template=ProcessWorker.get_default_base_job_template()))
        flow_id = client.create_flow_from_name(FLOW)
        return client.create_deployment(
            flow_id=flow_id, name=pool, work_pool_name=pool, entrypoint=ENTRYPOINT,
            description="One variant x seed of a dsmath study (submitted by the dsmath-study flow; docs/study.md)",
            pull_steps=[{"prefect.deployments.steps.set_working_directory":
                         {"directory": "{{ $" + PROJECT_ENV + " }}"}}],
            job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S)}},
            tags=["dsmath", "study"], enforce_parameter_schema=False)


def ensure_crash_automation(deployment_id: uuid.UUID, silent_s: int) -> str:
    """The automation that marks a run of the deployment CRASHED once it sent no heartbeat for `silent_s` seconds
    without ending (Prefect's zombie-run recipe, restricted to this deployment). Returns its name."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    name = f"{FLOW}: crash runs silent for {silent_s} s ({deployment_id})"
    try:
        return Automation.read(name=name).name
    except ValueError:  # not made yet
        pass
    Automation(
        name=name,
        description="A study run whose worker died stops sending heartbeats; its driver resubmits it once CRASHED.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat", "prefect.flow-run.Running"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.deployment.{deployment_id}",
                                                 "prefect.resource.role": "deployment"}),
            for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=silent_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message=f"no heartbeat for {silent_s} s: the worker is gone")],
    ).create()
    return name


def end_stage_runs(child_id: str) -> int:
    """Mark the stage runs still RUNNING under a crashed attempt's MLflow child KILLED; returns how many."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    runs = client.search_runs(
        [client.get_run(child_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{child_id}' and attributes.status = 'RUNNING'")
    for r in runs:
        client.set_terminated(r.info.run_id, status="KILLED")
    return len(runs)


def check_shared(job: Runner) -> None:
    """Refuse (StudyRunFailed) a study on a pool without what every machine must share: a Prefect server (not the
    ephemeral one of this process), an MLflow tracking server (not a local SQLite file) and a DVC remote (the
    study's, or the project's default)."""
    import subprocess

    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise runner.StudyRunFailed("a study on a work pool needs the Prefect server its workers poll: set "
                                    "PREFECT_API_URL=http://host:4200/api (`prefect server start` on some machine)")

    from dsmath.config import load_params

    uri = tracking.tracking_uri(load_params(job.study.profile).common.tracking)
    if not uri.startswith(("http://", "https://", "databricks")):
        raise runner.StudyRunFailed(f"a study on a work pool needs an MLflow tracking server every machine reaches "
                                    f"(MLFLOW_TRACKING_URI=http://host:5000), not {uri}")
    if not job.remote:
        proc = subprocess.run([job.dvc, "remote", "default"], cwd=job.source, capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise runner.StudyRunFailed("a study on a work pool needs a DVC remote every machine reaches: the study "
                                        "file's cluster.remote, --remote URL, or the project's default remote "
                                        "(dvc remote add -d NAME URL)")


def run_on_pool(job: Runner, runs: list[tuple[str, int]], chains: dict[str, str], pool: str,
                on_line: Callable[[str], None] = print) -> tuple[dict[tuple[str, int], dict], list[str]]:
    """Submit `runs` (variant, seed) to `pool`, each with its variant's published chain (`chains`: variant -> chain
    name), and wait for all: ({(variant, seed): record}, failures). A run that CRASHED is submitted again, at most
    ``cluster.resubmit`` times; a run that failed is not (its error would recur: the next study retries it)."""
    from mlflow.tracking import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    study, cluster = job.study, job.study.cluster
    deployment_id = ensure_deployment(pool)
    ensure_crash_automation(deployment_id, cluster.silent_s)
    text = Path(study.path).read_text()

    def submit(variant: str, seed: int, attempt: int):
        key = study.run_key(variant, seed)
        child = job.open_child(variant, seed, end_killed=attempt == 0)
        params = {"study_text": text, "variant": variant, "seed": seed, "parent_run_id": job.parent.run_id,
                  "child_run_id": child.run_id, "chain": chains[variant], "key": key, "remote": job.remote,
                  "pool": pool}
        fr = run_deployment(deployment_name(pool), parameters=params, timeout=0, tags=["dsmath", study.name],
                            flow_run_name=f"{job.name(variant, seed)}-{attempt}",
                            idempotency_key=f"{study.name}/{variant}/{seed}/{key}/{attempt}")
        if fr.parameters.get("child_run_id") != child.run_id:  # submitted before by a driver that was killed
            MlflowClient().delete_run(child.run_id)
            child = tracking.StageRun(fr.parameters["child_run_id"])
            MlflowClient().update_run(child.run_id, status="RUNNING")
            on_line(f"study {study.name}: {variant} seed {seed}: flow run {fr.name} submitted before, followed")
        else:
            on_line(f"study {study.name}: {variant} seed {seed}: flow run {fr.name} submitted to pool {pool}")
        return fr.id, child

    pending = {}
    for v, s in runs:
        fr_id, child = submit(v, s, 0)
        pending[fr_id] = (v, s, child, 0)
    records, failed = {}, []
    with get_client(sync_client=True) as client:
        while pending:
            time.sleep(POLL_S)
            for fr_id, (v, s, child, attempt) in list(pending.items()):
                state = client.read_flow_run(fr_id).state
                if state is None or not state.is_final():
                    continue
                del pending[fr_id]
                if state.is_completed():
                    record = remote.fetch_record(child.run_id)
                    if record.get("key") != study.run_key(v, s):
                        failed.append(f"{v} seed {s}: the worker's record has another key (other code)")
                        tracking.close_run(child, ok=False)
                        continue
                    tracking.close_run(child)
                    runner.write_record(study.result_path(v, s), record)
                    records[v, s] = record
                    on_line(f"study {study.name}: {v} seed {s} done on {record.get('host')}")
                elif state.is_crashed() and attempt < cluster.resubmit:
                    killed = end_stage_runs(child.run_id)
                    child.client.set_terminated(child.run_id, status="KILLED")
                    on_line(f"study {study.name}: {v} seed {s}: its flow run CRASHED ({state.message}); "
                            f"{killed} stage run(s) ended; submitted again (attempt {attempt + 2})")
                    new_id, new_child = submit(v, s, attempt + 1)
                    pending[new_id] = (v, s, new_child, attempt + 1)
                else:
                    tracking.close_run(child, ok=False)
                    failed.append(f"{v} seed {s}: flow run {state.name}: {state.message}")
    return records, failed
