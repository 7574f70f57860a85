"""Resumable checkpoints: ``accelerator.save_state`` (model, optimizer, scheduler, loop state, RNG of every process)
written to a temporary folder and renamed into place, so a process killed mid-write never leaves a half checkpoint.

Layout: ``<dir>/step-000050/`` with accelerate's files plus ``fingerprint.json``. A checkpoint is resumed only when
its fingerprint (a hash of the stage's params, inputs and world size) equals the current run's: a checkpoint from
other params or data is discarded, never silently continued.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PREFIX = "step-"
FINGERPRINT = "fingerprint.json"


def fingerprint(config: Mapping[str, Any], inputs: Iterable[str | os.PathLike] = ()) -> str:
    """sha256 of the JSON of `config` and of the bytes of every file under `inputs` (files or folders)."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for root in inputs:
        root = Path(root)
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            h.update(str(f.relative_to(root) if root.is_dir() else f.name).encode())
            with f.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def step_dirs(ckpt_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints, oldest first (temporary folders of interrupted writes are not listed)."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_dir() and p.name.startswith(PREFIX))


def _fingerprint_of(path: Path) -> str | None:
    try:
        return json.loads((path / FINGERPRINT).read_text())["fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


def latest(ckpt_dir: str | os.PathLike, fp: str) -> Path | None:
    """The newest checkpoint whose fingerprint is `fp`, or None."""
    return next((p for p in reversed(step_dirs(ckpt_dir)) if _fingerprint_of(p) == fp), None)


def save(accelerator, ckpt_dir: str | os.PathLike, step: int, fp: str, keep: int) -> Path:
    """Save the accelerator's state at `step` atomically; keep the newest `keep` checkpoints. All processes call it."""
    d = Path(ckpt_dir)
    final = d / f"{PREFIX}{step:06d}"
    tmp = d / f".tmp-{PREFIX}{step:06d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / FINGERPRINT).write_text(json.dumps({"fingerprint": fp, "step": step}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in step_dirs(d)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def clear_stale(ckpt_dir: str | os.PathLike, fp: str) -> None:
    """Remove checkpoints of other fingerprints and leftovers of interrupted writes (main process only)."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return
    for p in d.iterdir():
        if p.name.startswith(".tmp-") or (p.name.startswith(PREFIX) and _fingerprint_of(p) != fp):
            shutil.rmtree(p, ignore_errors=True)
