"""The rl stage on the smoke profile, from the session's smoke SFT model: kill -9, resume, same final weights.

PPO is used here because it moves the weights even when every group's reward is equal (the smoke SFT model is
right on nothing, so GRPO's advantages would all be 0 and a resume test would compare untouched weights); its
checkpoint is also the largest (policy, reference, critic, two optimisers, scheduler, sampling RNG).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import smoke_params, subprocess_env, weights_digest, write_params

RUN = {"rl.algorithm": "ppo", "rl.steps": 24, "rl.checkpoint_every": 3, "rl.eval_every": 0, "rl.samples_every": 12}


def _setup(chain: Path, tmp: Path) -> list[str]:
    tmp.mkdir(parents=True)
    for folder in ("data/synthetic", "models/sft"):
        shutil.copytree(chain / folder, tmp / folder)
    return [sys.executable, "-m", "stages.rl", "--params", str(write_params(tmp, smoke_params(tmp, **RUN)))]


def _curve(tmp: Path) -> list[dict]:
    return list(csv.DictReader((tmp / "plots" / "rl.csv").open()))


@pytest.mark.slow
def test_rl_kill_9_then_rerun_continues_to_the_same_weights(chain, tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    cmd = {d: _setup(chain, d) for d in (ref, killed)}
    subprocess.run(cmd[ref], cwd=ref, env=subprocess_env(), check=True, capture_output=True)
    assert weights_digest(ref / "models" / "rl") != weights_digest(chain / "models" / "sft")  # the run did train

    proc = subprocess.Popen(cmd[killed], cwd=killed, env=subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = killed / "checkpoints" / "rl" / "state.pt"
    deadline = time.time() + 300
    while not state.exists() and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "models" / "rl").exists()  # really killed mid-run

    subprocess.run(cmd[killed], cwd=killed, env=subprocess_env(), check=True, capture_output=True)
    m = json.loads((killed / "metrics" / "rl.json").read_text())
    assert 3 <= m["resumed_from_step"] < 24 and m["steps"] == 24
    # same seed, same weights: the resumed run ends exactly where the uninterrupted one did
    assert weights_digest(killed / "models" / "rl") == weights_digest(ref / "models" / "rl")
    assert _curve(killed) == _curve(ref)
    assert not state.exists()  # the finished model is the output; no stale resume point is left
