"""Resumable checkpoints: ``accelerator.save_state`` (model, optimizer, scheduler, loop state, RNG of every process)
written to a temporary folder and renamed into place, so a process killed mid-write never leaves a half checkpoint.

Layout: ``<dir>/step-000050/`` with accelerate's files plus ``fingerprint.json``. A checkpoint is resumed only when
its fingerprint (a hash of the stage's params, inputs and world size) equals the current run's: a checkpoint from
other params or data is discarded, never silently continued.

Every file is flushed to disk (fsync) before the rename, so a crash of the machine cannot leave a complete-looking
checkpoint of empty files. Before resuming, every file of the checkpoint is read back (:func:`bad_file`): one that
does not (a truncated safetensors file, a zero-byte or garbled ``optimizer.bin``) makes the checkpoint moved aside to
``<dir>/corrupt-step-000050/`` with a :class:`CorruptCheckpointWarning` naming the file, and the previous checkpoint
(or a fresh start) is used. This happens before ``load_state``, which would otherwise load the model and fail on the
optimizer, leaving a half-loaded model to fall back from. Only the latest resume's moved-aside folders are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dsmath.core.errors import StageError

PREFIX = "step-"
FINGERPRINT = "fingerprint.json"
CORRUPT = "corrupt-"  # moved-aside checkpoints: corrupt-step-000050 (not a PREFIX name: never listed or resumed)


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint file could not be read back; the checkpoint was moved aside and the run falls back."""


class CorruptCheckpointError(StageError, RuntimeError):
    """A checkpoint whose files all read back still failed to load (the model may be half-loaded): it was moved
    aside, and the stage stops; a rerun resumes from the previous checkpoint or starts afresh."""


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


def fsync(path: str | os.PathLike) -> None:
    """Flush a file, or every file under a folder and the folder itself, to disk."""
    path = Path(path)
    files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
    for f in files:
        with f.open("rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(path if path.is_dir() else path.parent)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        fsync(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        fsync_dir(d)
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


def _read_back(f: Path) -> None:
    """Raise if `f` cannot be read back whole: safetensors header and size, JSON, zip (torch.save) CRCs of every
    member, else a full ``torch.load``."""
    if f.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(f), "pt"):  # parses the header and checks the file covers every tensor it lists
            pass
    elif f.suffix == ".json":
        json.loads(f.read_text())
    elif zipfile.is_zipfile(f):  # torch.save's format: the central directory is at the end, CRCs cover the data
        with zipfile.ZipFile(f) as z:
            member = z.testzip()
            if member is not None:
                raise ValueError(f"bad CRC in member {member}")
    else:
        import torch

        torch.load(f, map_location="cpu", weights_only=False)


def is_oom(err: BaseException) -> bool:
    """Out of (device) memory: a failure of this machine, not of the file being read."""
    import torch

    return isinstance(err, MemoryError | torch.OutOfMemoryError)


def bad_file(path: str | os.PathLike) -> tuple[Path, str] | None:
    """(first file of checkpoint folder `path` that does not read back, why) or None when all of them do."""
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        try:
            _read_back(f)
        except Exception as err:
            if is_oom(err):
                raise
            return f, f"{type(err).__name__}: {err}".strip()
    return None


def move_aside(path: str | os.PathLike, why: str, clear_earlier: bool = True) -> Path:
    """Rename checkpoint folder `path` to ``corrupt-<name>`` beside it (main process only), with a warning; first remove
    earlier moved-aside folders (`clear_earlier`), so the evidence of one resume is kept, never a growing pile."""
    path = Path(path)
    if clear_earlier:
        for old in path.parent.glob(f"{CORRUPT}*"):
            shutil.rmtree(old, ignore_errors=True)
    target = path.with_name(CORRUPT + path.name)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(path, target)
    warnings.warn(f"corrupt checkpoint: {why}; moved aside to {target}", CorruptCheckpointWarning, stacklevel=2)
    return target


def discard_corrupt(ckpt_dir: str | os.PathLike, fp: str) -> list[Path]:
    """Read back the checkpoints of fingerprint `fp`, newest first, until one reads back whole; move the ones before
    it aside (see :func:`move_aside`). Main process only, before :func:`latest`. Returns where they were moved."""
    moved: list[Path] = []
    for p in reversed(step_dirs(ckpt_dir)):
        if _fingerprint_of(p) != fp:
            continue
        bad = bad_file(p)
        if bad is None:
            break
        why = f"{bad[0]} does not read back ({bad[1]}), falling back to the previous checkpoint or a fresh start"
        moved.append(move_aside(p, why, clear_earlier=not moved))
    return moved
