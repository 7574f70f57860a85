"""Shared fixtures: the smoke profile redirected into a temporary directory (outputs, metrics, MLflow store)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect gives its ephemeral server 20 s to start: too short on a busy 2-core machine
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")


def smoke_params(tmp: Path, **overrides) -> dict:
    """configs/smoke.yaml with every output path and the MLflow store under `tmp` (inputs stay in the repo)."""
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    paths = raw["common"]["paths"]
    for key in paths:
        paths[key] = str(ROOT / paths[key]) if key in ("raw", "extra_math") else str(tmp / paths[key])
    raw["common"]["tracking"] |= {"experiment": "dsmath-test", "uri": f"sqlite:///{tmp}/mlflow.db",
                                  "artifacts": str(tmp / "mlartifacts")}
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return raw


def subprocess_env() -> dict[str, str]:
    """Environment for a stage run as a child process: the repo importable, no outer MLflow run or store."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DSMATH_PARENT_RUN_ID")}
    return env | {"PYTHONPATH": str(ROOT), "MLFLOW_ENABLE_ASYNC_LOGGING": "false"}


def weights_digest(model_dir: Path) -> str:
    """sha256 of a saved model's safetensors file."""
    import hashlib

    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def write_params(tmp: Path, raw: dict) -> Path:
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    """(params file path, tmp dir) of the smoke profile writing into tmp; MLflow env cleared."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DSMATH_PARENT_RUN_ID", raising=False)
    return write_params(tmp_path, smoke_params(tmp_path)), tmp_path


@pytest.fixture(scope="session")
def chain(tmp_path_factory):
    """The smoke corpus plus the four supervised stages (tokenizer, base, pretrain, sft), run once in-process per
    test session (the stage tests start from it); returns the temporary directory."""
    from dsmath.runtime.stage import run_stage
    from stages import base, corpus, pretrain, sft, tokenizer

    tmp = tmp_path_factory.mktemp("supervised")
    saved = {k: os.environ.pop(k, None) for k in ("MLFLOW_TRACKING_URI", "DSMATH_PARENT_RUN_ID")}
    params = str(write_params(tmp, smoke_params(tmp)))
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        for stage in (corpus, tokenizer, base, pretrain, sft):
            run_stage(stage.main, ["--params", params])
    finally:
        os.chdir(cwd)
        os.environ.update({k: v for k, v in saved.items() if v is not None})
    return tmp


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    """The end-to-end tests' project: a copy of this one with the smoke profile as params.yaml, fully built once per
    session (`smoke_project.build`: `make repro`) and shared by tests/e2e's modules. Tests that change it (a param,
    a run) restore it or work on a copy of their own."""
    from smoke_project import build

    return build(tmp_path_factory.mktemp("clone"))
