"""The one module that talks to MLflow.

A stage opens one run with :func:`stage_run`; it becomes a child of the pipeline's parent run when the orchestrator
passes the parent's id in ``DSMATH_PARENT_RUN_ID``. Step metrics are buffered and sent with ``log_batch`` (one
``log_metric`` call costs ~4 ms on a SQLite store). Default store: a SQLite file plus a local artifact folder, both
from ``params.common.tracking``; ``MLFLOW_TRACKING_URI`` in the environment overrides the URI.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dsmath.core.errors import RefusedInput
from dsmath.runtime.processes import process_gone, process_identity
from dsmath.runtime.provenance import dvc_dep_tags, env_tags, git_tags, precision_tags

PARENT_ENV = "DSMATH_PARENT_RUN_ID"
PROCESS_TAG = "dsmath.process"  # where a stage run's process lives (host, boot, pid namespace, pid, start time)
RUN_ID_ENV = "DSMATH_RUN_ID"  # set while a stage run is open, so subprocesses (accelerate workers) can find it
MODEL_URI_TAG = "dsmath.model_uri"  # set on a stage run that logged its final model
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call


def _mlflow():
    import mlflow  # imported lazily: ~1 s, and unit tests of pure code should not pay it

    return mlflow


# the UI opens an experiment without this tag in its GenAI (traces) view; runs, curves and models are its training view
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def tracking_uri(tracking) -> str:
    """`MLFLOW_TRACKING_URI` if set, else the params' URI (a relative sqlite path is taken from the cwd)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or tracking.uri


class TrackingUnavailable(RefusedInput, RuntimeError):
    """The MLflow tracking server does not answer; the message is one line naming the URI and where it was set."""


PROBE_TIMEOUT_S = 5.0  # connect and read timeout of the reachability probe of an http(s) tracking server
_reachable: set[str] = set()  # URIs that answered once in this process (probed once per process)


def _redacted(uri: str) -> str:
    """`uri` without the password of its user info (`http://me:pw@host` -> `http://me:***@host`)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.netloc.rsplit('@', 1)[1]}"
    return urlunsplit(parts._replace(netloc=netloc))


def check_reachable(uri: str, source: str = "MLFLOW_TRACKING_URI", timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise TrackingUnavailable (one line) unless the http(s) tracking server `uri` answers within `timeout` s.

    One GET of `<uri>/health` without retries: any HTTP answer (even 401/404) or a TLS error (MLflow's own TLS
    settings decide those) counts as reachable; a refused or timed-out connection, or an unknown host, does not.
    Without it a dead server costs ~270 s of MLflow's HTTP retries before a traceback. The retries of the real
    calls are left as configured (transient errors during a run are still retried). Other URIs: nothing to probe.
    """
    if not uri.startswith(("http://", "https://")) or uri in _reachable:
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout, allow_redirects=False)
    except requests.exceptions.SSLError:
        pass
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as e:
        if isinstance(e, requests.exceptions.Timeout):
            why = f"no answer within {timeout:g} s"
        else:
            text = str(e)
            why = next((m for m in ("Connection refused", "Name or service not known", "No route to host",
                                    "Network is unreachable", "Connection reset") if m in text), type(e).__name__)
        raise TrackingUnavailable(f"MLflow tracking server {_redacted(uri)} (from {source}) is not reachable: "
                                  f"{why.lower()}; start it, or point {source} at a live server") from None
    _reachable.add(uri)


def setup(tracking) -> str:
    """Point MLflow at the store and make sure the experiment exists; returns the experiment id.
    An http(s) store that does not answer raises TrackingUnavailable within seconds (:func:`check_reachable`)."""
    mlflow = _mlflow()
    uri = tracking_uri(tracking)
    check_reachable(uri, "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "common.tracking.uri")
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(tracking.experiment)
    if exp is not None:
        if exp.tags.get(EXPERIMENT_KIND[0]) is None:  # a store made before the tag: open it as training too
            mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
        return exp.experiment_id
    location = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):  # embedded default: artefacts next to the SQLite file
        location = Path(tracking.artifacts).resolve().as_uri()
    try:
        return mlflow.create_experiment(tracking.experiment, artifact_location=location,
                                        tags=dict([EXPERIMENT_KIND]))
    except Exception:  # created concurrently by another process
        return mlflow.get_experiment_by_name(tracking.experiment).experiment_id


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are kept as their JSON text."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list | tuple) else v
    return out


def metric_key(name: str) -> str:
    """An MLflow-legal metric name: `eval/synthetic/cot/maj@8` -> `eval/synthetic/cot/maj_at_8` (no '@' allowed)."""
    return name.replace("@", "_at_")


class StageRun:
    """An open MLflow run with buffered metric logging."""

    def __init__(self, run_id: str):
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
        self.client = MlflowClient()
        self._buffer: list = []

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Buffer one step's metrics; they are sent in batches (on flush, when the buffer is full, at close)."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self._buffer += [Metric(metric_key(k), float(v), ts, int(step)) for k, v in metrics.items() if v is not None]
        if len(self._buffer) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        for i in range(0, len(self._buffer), _BATCH):
            self.client.log_batch(self.run_id, metrics=self._buffer[i : i + _BATCH], synchronous=True)
        self._buffer = []

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100], synchronous=True)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()], synchronous=True)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_figure(self, figure, name: str) -> None:
        self.client.log_figure(self.run_id, figure, name)

    def log_dict(self, data: Any, name: str) -> None:
        self.client.log_dict(self.run_id, data, name)

    def log_table(self, rows: list[dict], name: str) -> None:
        """A list of row dicts as an MLflow table (shown in the UI's artefact view and the evaluation tab)."""
        if rows:
            columns = {k: [r.get(k) for r in rows] for k in rows[0]}
            self.client.log_table(self.run_id, data=columns, artifact_file=name)

    def log_model(self, model_dir: str | os.PathLike, name: str = "model", registered_name: str | None = None) -> str:
        """Log a `save_pretrained` folder (model + tokenizer) with the transformers flavour; returns the model URI."""
        mlflow = _mlflow()
        import transformers

        model_dir = Path(model_dir).resolve()  # a relative path sends transformers to the hub first (~30 s retrying)
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
        info = mlflow.transformers.log_model(
            {"model": model, "tokenizer": tokenizer},
            name=name,
            task="text-generation",
            registered_model_name=registered_name,
            pip_requirements=[f"torch=={_version('torch')}", f"transformers=={transformers.__version__}"],
        )
        self.set_tags({MODEL_URI_TAG: info.model_uri})
        return info.model_uri


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg).split("+")[0]


@contextlib.contextmanager
def stage_run(stage: str, params, sections: Mapping[str, Any] | None = None) -> Iterator[StageRun]:
    """Open the MLflow run of one stage, as a child of $DSMATH_PARENT_RUN_ID when it is set.

    Tags: git commit and dirty flag, the DVC stage name, the process (`process_identity`), library versions and the
    CPU (`env_tags`); the orchestrator adds the dependency hashes from dvc.lock once DVC has recorded them
    (`tag_children_from_lock`).
    `sections` are the params this stage reads (logged flattened as run params).
    Runs of the same stage left RUNNING by a process that is gone (SIGKILL) are first marked KILLED
    (:func:`end_orphaned_runs`).
    """
    mlflow = _mlflow()
    exp_id = setup(params.common.tracking)
    end_orphaned_runs(exp_id, stage)
    parent = os.environ.get(PARENT_ENV) or None
    tags = {"dsmath.stage": stage, PROCESS_TAG: json.dumps(process_identity()), **git_tags(), **env_tags(),
            **precision_tags(stage, params)}
    nested = mlflow.active_run() is not None  # the parent is open in this very process (flow tests, notebooks)
    with mlflow.start_run(experiment_id=exp_id, run_name=stage, parent_run_id=parent, tags=tags,
                          nested=nested) as active:
        run = StageRun(active.info.run_id)
        os.environ[RUN_ID_ENV] = run.run_id
        if sections:
            run.log_params(sections)
        try:
            yield run
        finally:
            run.flush()
            os.environ.pop(RUN_ID_ENV, None)


def end_orphaned_runs(exp_id: str, stage: str) -> list[str]:
    """Mark KILLED the runs of `stage` in experiment `exp_id` still RUNNING whose process is gone
    (:func:`process_gone`: killed with SIGKILL, or the machine lost it); returns their ids.

    The rule, so that a run of the same stage live in another process (a study runs variants side by side) is
    never touched: same experiment, same `dsmath.stage` tag, status RUNNING, and a `dsmath.process` tag showing a
    process of this host, boot and pid namespace that no longer exists. Runs recorded on another host or container
    (or before the tag existed) are left as they are.
    """
    from mlflow.tracking import MlflowClient

    query = f"tags.`dsmath.stage` = '{stage}' and attributes.status = 'RUNNING'"
    runs = _mlflow().search_runs(experiment_ids=[exp_id], filter_string=query, output_format="list")
    ended = []
    for r in runs:
        try:
            identity = json.loads(r.data.tags.get(PROCESS_TAG, ""))
        except ValueError:
            continue
        if isinstance(identity, dict) and process_gone(identity):
            MlflowClient().set_terminated(r.info.run_id, status="KILLED")
            ended.append(r.info.run_id)
            print(f"tracking: run {r.info.run_id} of stage {stage} was left RUNNING by process {identity['pid']}, "
                  "which is gone: marked KILLED", file=sys.stderr)
    return ended


class NullRun:
    """Stands in for :class:`StageRun` on the non-main processes of a multi-process stage: every call is a no-op."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def main_process_run(is_main: bool, stage: str, params,
                     sections: Mapping[str, Any] | None = None) -> Iterator[StageRun | NullRun]:
    """:func:`stage_run` on the main process, a :class:`NullRun` on the others (only rank 0 talks to MLflow)."""
    if is_main:
        with stage_run(stage, params, sections) as run:
            yield run
    else:
        yield NullRun()


def latest_stage_run(stage: str, tracking_cfg):
    """The newest run of `stage` that logged a model: in the current pipeline execution if it ran there, else the
    newest anywhere in the experiment (a pipeline execution in which DVC skipped `stage` as up to date)."""
    mlflow = _mlflow()
    exp = mlflow.get_experiment_by_name(tracking_cfg.experiment)
    if exp is None:
        return None
    base = f"tags.`dsmath.stage` = '{stage}'"
    filters = [base]
    if os.environ.get(PARENT_ENV):
        filters.insert(0, f"{base} and tags.mlflow.parentRunId = '{os.environ[PARENT_ENV]}'")
    for f in filters:
        runs = mlflow.search_runs([exp.experiment_id], f, output_format="list",
                                  order_by=["attributes.start_time DESC"])
        found = next((r for r in runs if MODEL_URI_TAG in r.data.tags), None)
        if found is not None:
            return found
    return None


LOWER_IS_BETTER = ("format_error_rate", "mean_length")  # primary metrics (last path part) where less is better


def beats_champion(value: float | None, champion: float | None, metric: str) -> bool:
    """Whether a new version scoring `value` on the primary `metric` (`<dataset>/<mode>/<metric>`) takes the
    champion alias from the current champion scoring `champion` (None: there is no champion yet). Strictly better
    only: a tie keeps the champion; an unknown or NaN `value` never wins; a NaN champion always loses."""
    if value is None or value != value:
        return False
    if champion is None or champion != champion:
        return True
    return value < champion if metric.rsplit("/", 1)[-1] in LOWER_IS_BETTER else value > champion


def promote_champion(params, value: float | None, stage: str = "rl", tags: Mapping[str, Any] | None = None) -> bool:
    """Register the latest `stage` model (e.g. `rl@1234`) as a new version; move the champion alias to it when
    `value`, the primary metric on the validation split, beats the current champion's (:func:`beats_champion`).
    A champion registered without a validation value (older versions compared a test figure) is not comparable and
    loses. `tags` (e.g. the test value, the seed) are stored on the version. Returns whether it became champion."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    t = params.common.tracking
    setup(t)
    run = latest_stage_run(stage, t)
    if run is None or value is None:
        return False
    client = MlflowClient()
    metric = params.evaluate.primary_metric
    version = _mlflow().register_model(
        run.data.tags[MODEL_URI_TAG], t.registered_model,
        tags={"primary_metric": metric, "split": "validation", "value": str(value), "stage": stage,
              **{k: str(v) for k, v in (tags or {}).items()}})
    try:
        current = client.get_model_version_by_alias(t.registered_model, t.champion_alias).tags
        comparable = current.get("split") == "validation" and current.get("primary_metric") == metric
        champion = float(current["value"]) if comparable and "value" in current else float("nan")
    except MlflowException:  # no champion yet
        champion = None
    if beats_champion(value, champion, metric):
        client.set_registered_model_alias(t.registered_model, t.champion_alias, version.version)
        return True
    return False


def tag_children_from_lock(parent_id: str, lock_path: str | os.PathLike = "dvc.lock") -> int:
    """Tag each child run of `parent_id` with its stage's dependency hashes from dvc.lock (written by DVC after the
    stage succeeded, so they are the hashes of exactly what the run consumed). Returns the number of runs tagged."""
    mlflow = _mlflow()
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    tagged = 0
    for run in runs:
        tags = dvc_dep_tags(run.data.tags.get("dsmath.stage", ""), lock_path)
        if tags:
            StageRun(run.info.run_id).set_tags(tags)
            tagged += 1
    return tagged


# ----------------------------------------------------------------------------------------------------------------
# runs opened and closed explicitly (a study's parent and its variant x seed children span many processes)


def find_run(params, tags: Mapping[str, str]) -> str | None:
    """The id of the newest run of the experiment carrying all `tags`, or None."""
    mlflow = _mlflow()
    exp_id = setup(params.common.tracking)
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = mlflow.search_runs(experiment_ids=[exp_id], filter_string=query, output_format="list",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def open_run(params, name: str, tags: Mapping[str, str], parent_id: str | None = None,
             reuse: bool = False) -> StageRun:
    """Create a run (a child of `parent_id` if given) and leave it open; with `reuse`, the newest run with the same
    tags is reopened instead (a resumed study keeps its parent run)."""
    from mlflow.tracking import MlflowClient

    exp_id = setup(params.common.tracking)
    client = MlflowClient()
    all_tags = {**git_tags(), **env_tags(), **tags}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    if reuse and (run_id := find_run(params, tags)):
        client.update_run(run_id, status="RUNNING")
        run = StageRun(run_id)
        run.set_tags(all_tags)
        return run
    created = client.create_run(exp_id, run_name=name, tags=all_tags)
    return StageRun(created.info.run_id)


def end_unfinished(params, tags: Mapping[str, str]) -> int:
    """Mark the runs with `tags` still RUNNING (their process was killed) as KILLED; returns how many."""
    from mlflow.tracking import MlflowClient

    mlflow = _mlflow()
    exp_id = setup(params.common.tracking)
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items()) + " and attributes.status = 'RUNNING'"
    runs = mlflow.search_runs(experiment_ids=[exp_id], filter_string=query, output_format="list")
    for r in runs:
        MlflowClient().set_terminated(r.info.run_id, status="KILLED")
    return len(runs)


def close_run(run: StageRun, ok: bool = True) -> None:
    """Flush a run opened by :func:`open_run` and mark it FINISHED (or FAILED)."""
    run.flush()
    run.client.set_terminated(run.run_id, status="FINISHED" if ok else "FAILED")
