"""A code change re-trains: the resume checkpoint is keyed by the code a stage imports, so after a change to a
training file the stage trains from step 0 instead of "resuming" the finished checkpoint of the old code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, smoke_params, subprocess_env, weights_digest, write_params

pytestmark = pytest.mark.slow

# appended to the copy's train/loop.py: a real change of the numbers (the optimiser at half the learning rate)
HALF_LR = '''

_build_optimizer = build_optimizer


def build_optimizer(model, optim):  # a code change under test
    opt = _build_optimizer(model, optim)
    for group in opt.param_groups:
        group["lr"] *= 0.5
    return opt
'''


def _base(tmp: Path, code: Path) -> dict:
    env = subprocess_env() | {"PYTHONPATH": f"{code / 'src'}{os.pathsep}{code}"}
    params = write_params(tmp, smoke_params(tmp))
    proc = subprocess.run([sys.executable, "-m", "stages.base", "--params", str(params)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp / "metrics" / "base.json").read_text())


def test_a_training_code_change_trains_from_step_0(chain, tmp_path):
    code, work = tmp_path / "code", tmp_path / "work"
    shutil.copytree(ROOT / "src", code / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "stages", code / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("data", "models/tokenizer"):
        shutil.copytree(chain / folder, work / folder)

    first = _base(work, code)
    assert first["resumed_from_step"] == 0 and first["steps"] > 0
    weights = weights_digest(work / "models" / "base")
    assert list((work / "checkpoints" / "base").glob("step-*"))  # the finished run's checkpoint stays

    again = _base(work, code)  # same code, same params: the finished checkpoint is resumed (nothing to train)
    assert again["resumed_from_step"] == first["steps"]
    assert weights_digest(work / "models" / "base") == weights

    loop = code / "src" / "dsmath" / "train" / "loop.py"
    loop.write_text(loop.read_text() + HALF_LR)
    changed = _base(work, code)
    assert changed["resumed_from_step"] == 0 and changed["steps"] == first["steps"]
    assert weights_digest(work / "models" / "base") != weights
