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

SEED = "1234"  # stage rl@1234: outputs under rl/seed-1234
RUN = {"rl.algorithm": "ppo", "rl.steps": 24, "rl.checkpoint_every": 3, "rl.eval_every": 0, "rl.samples_every": 12,
       "rl.prompts_per_step": 4, "rl.group_size": 4}  # a small batch: this test is about resuming, not learning


def _setup(chain: Path, tmp: Path, **overrides) -> list[str]:
    tmp.mkdir(parents=True)
    for folder in ("data/synthetic", "models/sft"):
        shutil.copytree(chain / folder, tmp / folder)
    params = write_params(tmp, smoke_params(tmp, **{**RUN, **overrides}))
    return [sys.executable, "-m", "stages.rl", "--params", str(params), SEED]


def _curve(tmp: Path) -> list[dict]:
    return list(csv.DictReader((tmp / "plots" / "rl" / "seed-1234.csv").open()))


@pytest.mark.slow
def test_rl_kill_9_then_rerun_continues_to_the_same_weights(chain, tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    cmd = {d: _setup(chain, d) for d in (ref, killed)}
    subprocess.run(cmd[ref], cwd=ref, env=subprocess_env(), check=True, capture_output=True)
    # the run did train
    assert weights_digest(ref / "models" / "rl" / "seed-1234") != weights_digest(chain / "models" / "sft")

    proc = subprocess.Popen(cmd[killed], cwd=killed, env=subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = killed / "checkpoints" / "rl" / "seed-1234" / "state.pt"
    deadline = time.time() + 300
    while not state.exists() and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "models" / "rl" / "seed-1234").exists()  # really killed mid-run

    subprocess.run(cmd[killed], cwd=killed, env=subprocess_env(), check=True, capture_output=True)
    m = json.loads((killed / "metrics" / "rl" / "seed-1234.json").read_text())
    assert 3 <= m["resumed_from_step"] < 24 and m["steps"] == 24 and m["seed"] == 1234
    # same seed, same weights: the resumed run ends exactly where the uninterrupted one did
    assert weights_digest(killed / "models" / "rl" / "seed-1234") == weights_digest(ref / "models" / "rl" / "seed-1234")
    assert _curve(killed) == _curve(ref)
    assert not state.exists()  # the finished model is the output; no stale resume point is left


def test_rl_stage_refuses_a_seed_outside_common_rl_seeds(tmp_path):
    cmd = [sys.executable, "-m", "stages.rl", "--params", str(write_params(tmp_path, smoke_params(tmp_path))), "99"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True)
    assert proc.returncode != 0 and "seed must be one of common.rl_seeds" in proc.stderr
    assert not (tmp_path / "models").exists()


def test_rl_in_bfloat16_is_deterministic_by_seed(chain, tmp_path):
    """`common.dtype: bfloat16` (what `auto` picks for rl on a CPU with AMX): two runs of one seed end on the same
    weights, bit for bit, and not on float32's; the metrics say bf16. (On a CPU without native bf16 torch emulates
    it: slower, and as deterministic.)"""
    short = {"rl.steps": 3, "rl.checkpoint_every": 1000, "rl.samples_every": 1000}  # PPO (RUN): it moves the weights
    digests = {}
    for name, dtype in (("a", "bfloat16"), ("b", "bfloat16"), ("fp32", "float32")):
        tmp = tmp_path / name
        cmd = _setup(chain, tmp, **short, **{"common.dtype": dtype})
        subprocess.run(cmd, cwd=tmp, env=subprocess_env(), check=True, capture_output=True)
        digests[name] = weights_digest(tmp / "models" / "rl" / "seed-1234")
        assert json.loads((tmp / "metrics" / "rl" / "seed-1234.json").read_text())["bf16"] == float(dtype == "bfloat16")
    assert digests["a"] == digests["b"] != digests["fp32"]
