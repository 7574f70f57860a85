"""The smoke project the end-to-end tests share: a copy of this project with the smoke profile as params.yaml, built
once per test session (`python -m dsmath.orchestration.pipeline`, i.e. `make repro`: `dvc repro` inside an MLflow
parent run; the `repo` fixture of tests/conftest.py), and the helpers that run commands in it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SEEDS = (1234, 1235)  # common.rl_seeds of the smoke profile: one rl@<seed> stage each
CHAIN = ["corpus", "tokenizer", "base", "evaluate@base", "pretrain", "evaluate@pretrain", "sft", "evaluate@sft",
         *(f"rl@{s}" for s in SEEDS), "evaluate@rl", "report"]



def copy_project(dst: Path) -> None:
    """Tracked and untracked-but-not-ignored files (what a clone of the working tree would hold), without dvc.lock."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        src = ROOT / rel
        if rel == "dvc.lock" or not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def project_env(repo: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DSMATH_", "PREFECT_"))}
    return env | {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "PYTHONPATH": str(repo),
                  "PREFECT_HOME": str(repo / ".prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                  "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
                  "MLFLOW_ENABLE_ASYNC_LOGGING": "false"}


def run_in(repo: Path, *cmd: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=repo, env=project_env(repo), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def hash_tree(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f.relative_to(path).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def mlflow_at(repo: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{repo}/mlflow.db")
    return mlflow


def build(repo: Path) -> Path:
    """A copy of the project in `repo` with the smoke profile as params.yaml, fully built."""
    copy_project(repo)
    params = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    params["common"]["python"] = sys.executable
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "smoke"]):
        run_in(repo, *cmd)
    t0 = time.perf_counter()
    proc = run_in(repo, sys.executable, "-m", "dsmath.orchestration.pipeline")
    repo_build_s = time.perf_counter() - t0
    (repo / "build.log").write_text(proc.stdout + proc.stderr + f"\nbuild seconds: {repo_build_s:.1f}\n")
    return repo
