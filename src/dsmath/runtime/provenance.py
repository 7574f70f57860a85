"""Where and with what a run ran, as MLflow tags and record fields: the git commit, the CPU, the library versions,
the precision a torch stage computed in, and the dependency hashes DVC recorded. Nothing here talks to MLflow
(:mod:`dsmath.runtime.tracking` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def git_tags(cwd: str | os.PathLike = ".") -> dict[str, str]:
    """Git commit and dirty flag of the working tree ('unknown' outside a repository)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD") or "unknown"
        dirty = "true" if git("status", "--porcelain", "--untracked-files=no") else "false"
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "unknown", "unknown"
    return {"git.commit": commit, "git.dirty": dirty}


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo on Linux), else what `platform` knows."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ENV_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "sympy", "math-verify", "mlflow", "dvc", "prefect")


def env_tags() -> dict[str, str]:
    """Where a run ran: Python, the versions of the libraries that shape the numbers, the CPU and its core count."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    tags = {"env.python": platform.python_version(), "env.platform": platform.platform(), "env.cpu": cpu_name(),
            "env.cpu_count": str(os.cpu_count())}
    if "torch" in sys.modules:  # the threads this process computes with (common.num_threads, or the stage's own)
        tags["env.torch_threads"] = str(sys.modules["torch"].get_num_threads())
    for pkg in ENV_PACKAGES:
        try:
            tags[f"env.{pkg}"] = version(pkg)
        except PackageNotFoundError:
            continue
    return tags


def precision_tags(stage: str, params) -> dict[str, str]:
    """A torch stage's compute precision (``dsmath.dtype``: what ``common.dtype`` resolved to here) and the kind of
    native bf16 this CPU has (``env.cpu_bf16``: amx, avx512_bf16, arm_bf16 or none); nothing for the other stages."""
    from dsmath.runtime import precision

    if stage.split("@")[0] not in precision.STAGES:
        return {}
    return {"dsmath.dtype": precision.stage_dtype(params.common, stage),
            "env.cpu_bf16": precision.bf16_kind(precision.cpu_flags()) or "none"}


def dvc_dep_tags(stage: str, lock_path: str | os.PathLike = "dvc.lock") -> dict[str, str]:
    """The dependency hashes DVC recorded for `stage` in dvc.lock (`evaluate@sft` is stored as evaluate@sft)."""
    import yaml

    try:
        lock = yaml.safe_load(Path(lock_path).read_text()) or {}
    except FileNotFoundError:
        return {}
    entry = lock.get("stages", {}).get(stage, {})
    return {f"dvc.dep.{d['path']}": str(d.get("md5", d.get("hash", ""))) for d in entry.get("deps", [])}
