"""A study's runs on other machines: what travels between the study's driver and a worker, and a worker's side of a
run (the Prefect side, deployment and submission, is :mod:`dsmath.orchestration.cluster`).

Three shared services carry everything; no file system is shared:

- **The DVC remote** (the study file's ``cluster.remote``: a directory, NFS or ``s3://...``; else the project's
  default remote) carries outputs. The driver builds each chain in its chain workspace, as a local study does
  (:meth:`Runner.build_chain`), then :func:`publish_chain` pushes the cached outputs of the chain's stages and their
  upstream. A worker's run pushes its own (the RL model, the evaluation) when it is done.
- **The MLflow server** carries what is not in DVC's cache: the chain's *bundle* (``chains/<chain>.json`` on the
  study's parent run: the dvc.lock entries of the chain's stages and the content of their uncached outputs, the
  ``cache: false`` metrics and plots that DVC keeps in git, never in a remote), and each run's record
  (``record.json`` on its child, besides the curves and metrics :func:`runner.log_child` logs, and its dvc.lock).
- **Prefect** carries the work: one flow run per variant x seed, whose parameters name the study (its file's text:
  a driver's uncommitted study file works), the run, its MLflow child, its chain and its key.

A worker's run (:func:`run_here`) makes its workspace from its own checkout, writes the bundle's lock and files into
it, ``dvc pull``s the chain's outputs (found up to date then, as in a local run) and reproduces the run's targets.
It refuses a run whose key (settings and code, :meth:`Study.run_key`) differs from the driver's: its checkout is not
the driver's commit or its params.yaml differs, so its record would not be the one the study asked for.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from dsmath.runtime import tracking
from dsmath.study import workspace
from dsmath.study.runner import Runner, StudyRunFailed, machine_record
from dsmath.study.spec import load_study

RECORD = "record.json"  # the run's record, an artifact of its MLflow child


def bundle_path(chain: str) -> str:
    """Where a chain's bundle lies among the study parent's artifacts."""
    return f"chains/{chain}.json"


def uncached_outputs(ws: Path, stages: list[str]) -> list[str]:
    """The `cache: false` outputs (metrics, plots) of `stages` in the DVC project at `ws`, as paths under it."""
    from dvc.repo import Repo

    with Repo(str(ws)) as repo:
        return sorted({os.path.relpath(out.fs_path, ws) for stage in repo.index.stages if stage.name in stages
                       for out in stage.outs if not out.use_cache})  # (addressing is relative to the cwd)


def chain_bundle(ws: Path, chain: list[str]) -> dict:
    """What a worker needs besides the DVC remote to find `chain` (and what it depends on) up to date: the stages'
    dvc.lock entries and the content of their uncached outputs (files of a folder output one by one; text as it is,
    anything else, a figure, in base64 under `binary`)."""
    lock = yaml.safe_load((ws / "dvc.lock").read_text()) or {}
    stages = workspace.upstream(workspace.lock_graph(ws / "dvc.lock"), chain)
    files, binary = {}, {}
    for out in uncached_outputs(ws, stages):
        path = ws / out
        for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            data = f.read_bytes()
            try:
                files[str(f.relative_to(ws))] = data.decode()
            except UnicodeDecodeError:
                binary[str(f.relative_to(ws))] = base64.b64encode(data).decode()
    entries = {name: entry for name, entry in (lock.get("stages") or {}).items() if name in stages}
    return {"stages": stages, "lock": {"schema": lock.get("schema", "2.0"), "stages": entries}, "files": files,
            "binary": binary}


def unpack_bundle(bundle: dict, ws: Path, lock: bool = True) -> None:
    """Write a chain bundle into the workspace `ws`: its uncached outputs, and (`lock`) its dvc.lock."""
    contents = {rel: text.encode() for rel, text in bundle["files"].items()}
    contents |= {rel: base64.b64decode(b64) for rel, b64 in bundle.get("binary", {}).items()}
    for rel, data in contents.items():
        path = ws / rel
        if path.is_symlink() or path.exists():
            path.unlink()  # a hard link into the cache, or the project's tracked copy
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if lock:
        (ws / "dvc.lock").write_text(yaml.safe_dump(bundle["lock"], sort_keys=False))


def publish_chain(job: Runner, variant: str, ws: Path) -> str:
    """Push the chain workspace `ws`'s outputs to the study's DVC remote and log its bundle to the study's MLflow
    parent; returns the chain's name (the workers find its bundle under :func:`bundle_path`)."""
    name = job.chain_name(variant)
    bundle = chain_bundle(ws, job.study.chain)
    job.dvc_command(ws, ["push", *bundle["stages"]], name)
    job.parent.log_dict(bundle, bundle_path(name))
    return name


def fetch_json(run_id: str, path: str) -> dict:
    """A JSON artifact of an MLflow run (through the tracking server's artifact proxy when it is a server)."""
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as tmp:
        return json.loads(Path(MlflowClient().download_artifacts(run_id, path, tmp)).read_text())


def fetch_record(child_id: str) -> dict:
    """The record a worker logged to the run's MLflow child."""
    return fetch_json(child_id, RECORD)


def run_here(study_text: str, variant: str, seed: int, *, parent_id: str, child_id: str, chain: str, key: str,
             remote: str | None, pool: str | None = None, on_line: Callable[[str], None] = print) -> dict:
    """A worker's side of one variant x seed (run in the worker's checkout of the project): its record, logged to
    the MLflow child `child_id` (which the driver opened and closes), its outputs pushed to the DVC remote."""
    source = Path.cwd()
    files = source / workspace.ROOT.parent / "files"
    files.mkdir(parents=True, exist_ok=True)
    name_hint = yaml.safe_load(study_text).get("name", "study")
    study_file = files / f"{name_hint}.yaml"
    study_file.write_text(study_text)
    study = load_study(study_file)
    mine = study.run_key(variant, seed)
    if mine != key:
        raise StudyRunFailed(f"{variant} seed {seed}: this worker's run key {mine} is not the driver's {key}: its "
                             f"checkout ({source}) has other code or another params.yaml than the driver's; check "
                             "out the driver's commit (and its params.yaml) on this machine")
    job = Runner(study, None, source, on_line, machine_record(), remote=remote)
    name = job.name(variant, seed)
    bundle = fetch_json(parent_id, bundle_path(chain))
    resumed = (source / workspace.ROOT / name / "dvc.lock").exists()  # this machine ran it before, was killed
    t0 = time.perf_counter()
    ws = workspace.prepare(source, name, job.profile_raw, study.overrides(variant, seed), job.cache_dir,
                           remote=remote)
    unpack_bundle(bundle, ws, lock=not resumed)
    job.dvc_command(ws, ["pull", *bundle["stages"]], name)
    job.repro(ws, job.run_targets, name, child_id)  # its stage runs nest under the child
    child = tracking.StageRun(child_id)
    result = job.record(variant, seed, ws, child, time.perf_counter() - t0) | {
        "jobs": None, "pool": pool, "host": socket.gethostname()}
    job.dvc_command(ws, ["push", "--with-deps", *job.run_targets], name)
    child.log_artifact(ws / "dvc.lock")  # `dvc pull` with it brings this run's model back from the remote
    child.log_dict(result, RECORD)
    child.flush()
    workspace.remove(ws)
    return result
