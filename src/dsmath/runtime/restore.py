"""Put back the outputs DVC removed before a stage that then refused its params.

`dvc repro` deletes a stage's outputs before it runs the stage's command; a stage that stops at once on invalid
params (a typo in `dvc exp run -S ...` or in params.yaml) would leave the user without the outputs of the last good
run. :func:`restore_stage_outputs` brings each one back as `dvc.lock` records it: cached outputs (models, data,
evaluation folders) from the DVC cache, uncached ones (metrics, curves) from the git commit when it holds that exact
content. Only what is missing is written; nothing is restored whose recorded hash cannot be matched.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import yaml


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _cache_object(cache: Path, md5: str) -> Path:
    return cache / "files" / "md5" / md5[:2] / md5[2:]


def _cache_dir(root: Path) -> Path:
    """The DVC cache folder: `cache.dir` of .dvc/config (relative to .dvc/) if set, else .dvc/cache."""
    config = root / ".dvc" / "config"
    if config.is_file():
        section = None
        for line in config.read_text().splitlines():
            s = line.strip()
            if s.startswith("["):
                section = s.strip("[]").strip()
            elif section == "cache" and s.split("=")[0].strip() == "dir":
                return (root / ".dvc" / s.split("=", 1)[1].strip()).resolve()
    return root / ".dvc" / "cache"


def _from_git(root: Path, rel: str, md5: str) -> bytes | None:
    """The bytes of `rel` at git HEAD if they hash to `md5`, else None."""
    try:
        blob = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, timeout=30,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return blob if _md5(blob) == md5 else None


def _restore_one(root: Path, cache: Path, out: dict) -> bool:
    """Write one missing out of dvc.lock back (a file, or a folder from its `.dir` manifest); True if written."""
    rel, md5 = out["path"], out.get("md5", "")
    dst = root / rel
    if not md5:
        return False
    if md5.endswith(".dir"):
        manifest = _cache_object(cache, md5)
        if not manifest.is_file():
            return False
        entries = json.loads(manifest.read_text())
        sources = [(_cache_object(cache, e["md5"]), dst / e["relpath"]) for e in entries]
        if not all(src.is_file() for src, _ in sources):
            return False  # a partial folder would be worse than none
        for src, target in sources:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(src.read_bytes())
        dst.mkdir(parents=True, exist_ok=True)
        return True
    src = _cache_object(cache, md5)
    data = src.read_bytes() if src.is_file() else _from_git(root, rel, md5)
    if data is None:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data)
    return True


def restore_stage_outputs(stage: str, root: str | os.PathLike = ".") -> tuple[list[str], list[str]]:
    """(restored, lost): the outputs of DVC stage `stage` (`rl@1234`) that dvc.lock records and the workspace lacks,
    written back from the DVC cache or git HEAD, and those that could not be."""
    root = Path(root)
    lock = root / "dvc.lock"
    if not lock.is_file():
        return [], []
    entry = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(stage) or {}
    cache = _cache_dir(root)
    restored, lost = [], []
    for out in entry.get("outs", []):
        if (root / out["path"]).exists():
            continue
        (restored if _restore_one(root, cache, out) else lost).append(out["path"])
    return restored, lost
