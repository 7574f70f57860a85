"""Outputs DVC removed before a stage refused its params come back as dvc.lock records them."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from dsmath.runtime.restore import restore_stage_outputs


def _md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def _put(cache: Path, data: bytes) -> str:
    h = _md5(data)
    (cache / "files" / "md5" / h[:2]).mkdir(parents=True, exist_ok=True)
    (cache / "files" / "md5" / h[:2] / h[2:]).write_bytes(data)
    return h


def _project(tmp: Path) -> dict[str, bytes]:
    cache = tmp / ".dvc" / "cache"
    files = {"models/m/w.bin": b"\x00weights", "models/m/sub/config.json": b'{"a": 1}'}
    manifest = json.dumps(sorted(({"md5": _put(cache, b), "relpath": p.removeprefix("models/m/")}
                                  for p, b in files.items()), key=lambda e: e["relpath"])).encode()
    dir_md5 = _put(cache, manifest)  # DVC names a folder's manifest <md5>.dir
    (cache / "files" / "md5" / dir_md5[:2] / (dir_md5[2:] + ".dir")).write_bytes(manifest)
    metrics = b'{"loss": 0.5}\n'
    (tmp / "metrics").mkdir()
    (tmp / "metrics" / "m.json").write_bytes(metrics)
    for cmd in (["git", "init", "-q"], ["git", "add", "metrics/m.json"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m"]):
        subprocess.run(cmd, cwd=tmp, check=True)
    (tmp / "metrics" / "m.json").unlink()  # what `dvc repro` removed
    lock = {"schema": "2.0", "stages": {"train@1": {"cmd": "x", "outs": [
        {"path": "models/m", "hash": "md5", "md5": dir_md5 + ".dir", "size": 16, "nfiles": 2},
        {"path": "metrics/m.json", "hash": "md5", "md5": _md5(metrics), "size": len(metrics)},
        {"path": "plots/m.csv", "hash": "md5", "md5": _md5(b"step\n1\n"), "size": 7},  # neither cached nor committed
    ]}}}
    (tmp / "dvc.lock").write_text(yaml.safe_dump(lock))
    return files | {"metrics/m.json": metrics}


def test_restores_cached_folders_and_committed_files_and_names_what_it_cannot(tmp_path):
    expected = _project(tmp_path)
    restored, lost = restore_stage_outputs("train@1", tmp_path)
    assert restored == ["models/m", "metrics/m.json"] and lost == ["plots/m.csv"]
    assert {p: (tmp_path / p).read_bytes() for p in expected} == expected


def test_present_outputs_and_other_stages_are_left_alone(tmp_path):
    _project(tmp_path)
    (tmp_path / "metrics" / "m.json").write_text("newer")
    assert restore_stage_outputs("other", tmp_path) == ([], [])
    restored, _ = restore_stage_outputs("train@1", tmp_path)
    assert "metrics/m.json" not in restored and (tmp_path / "metrics" / "m.json").read_text() == "newer"


def test_a_changed_commit_is_not_restored(tmp_path):
    """The committed file is restored only when it is the content dvc.lock records."""
    _project(tmp_path)
    (tmp_path / "metrics" / "m.json").write_text("other")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x"], cwd=tmp_path,
                   check=True)
    (tmp_path / "metrics" / "m.json").unlink()
    _, lost = restore_stage_outputs("train@1", tmp_path)
    assert "metrics/m.json" in lost and not (tmp_path / "metrics" / "m.json").exists()
