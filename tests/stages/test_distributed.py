"""RL and evaluation across 2 CPU processes (torchrun, gloo) against 1 process, from the session's smoke SFT model.

What must hold (dsmath.rl.trainer, dsmath.evaluation.evaluate): each rank samples whole groups with noise keyed by
the row's global index, so the two processes sample exactly the rows one process samples; the loss is normalised
by global counts, so DDP's averaged gradient is the one-process gradient up to summation order. Stated tolerance:
the same rewards, accuracies and completions (exact), losses within 1e-4 and weights within rtol 1e-3 / atol 1e-4
(the SFT DDP test's). A 2-process run killed with SIGKILL and rerun ends with the weights of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import smoke_params, subprocess_env, weights_digest, write_params

SEED = "1234"
RUN = {"common.num_threads": 1, "rl.steps": 8, "rl.eval_every": 4, "rl.checkpoint_every": 2, "rl.samples_every": 8,
       "rl.prompts_per_step": 4, "rl.group_size": 4, "rl.eval_problems": 10}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
TIMING = ("time_", "_per_s", "wall_s", "s_per_step", "peak_rss_mb")


def _setup(chain: Path, tmp: Path, **overrides) -> str:
    tmp.mkdir(parents=True)
    for folder in ("data/synthetic", "models/sft"):
        shutil.copytree(chain / folder, tmp / folder)
    return str(write_params(tmp, smoke_params(tmp, **(RUN | overrides))))


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=subprocess_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _curve(tmp: Path) -> list[dict]:
    return list(csv.DictReader((tmp / "plots" / "rl" / f"seed-{SEED}.csv").open()))


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (torchrun's workers are not in its process group)."""
    import psutil

    root = psutil.Process(pid)
    for p in [*root.children(recursive=True), root]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)


def _untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING)}


@pytest.mark.slow
def test_two_process_rl_matches_one_process_and_resumes_after_kill_9(chain, tmp_path):
    import torch
    from safetensors.torch import load_file

    one, two, killed = tmp_path / "one", tmp_path / "two", tmp_path / "killed"
    params = {d: _setup(chain, d) for d in (one, two, killed)}
    stage = ["-m", "stages.rl", "--params"]
    _run([sys.executable, *stage, params[one], SEED], one)
    _run([*TORCHRUN, *stage, params[two], SEED], two)
    c1, c2 = _curve(one), _curve(two)
    assert len(c1) == len(c2) == 9  # step 0 (the held-out probe) and 8 steps
    for key in ("reward_mean", "accuracy", "format_rate", "response_len_mean", "val_greedy_acc"):
        assert [r[key] for r in c2] == [r[key] for r in c1], key  # the same samples, the same scores
    k1 = torch.tensor([float(r["kl"]) for r in c1[1:]])
    torch.testing.assert_close(torch.tensor([float(r["kl"]) for r in c2[1:]]), k1, rtol=1e-4, atol=1e-6)
    w1, w2 = (load_file(d / "models" / "rl" / f"seed-{SEED}" / "model.safetensors") for d in (one, two))
    assert any(not torch.equal(w1[k], load_file(chain / "models" / "sft" / "model.safetensors")[k]) for k in w1)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-3, atol=1e-4)
    m1, m2 = (json.loads((d / "metrics" / "rl" / f"seed-{SEED}.json").read_text()) for d in (one, two))
    assert m2["processes"] == 2 and m1["processes"] == 1
    assert m2["val_greedy_acc_end"] == m1["val_greedy_acc_end"]

    # kill -9 the 2-process run after its first checkpoint: both ranks first, then the launcher
    proc = subprocess.Popen([*TORCHRUN, *stage, params[killed], SEED], cwd=killed, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = killed / "checkpoints" / "rl" / f"seed-{SEED}" / "state.pt"
    deadline = time.time() + 300
    while not state.exists() and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.01)
    _kill_tree(proc.pid)
    proc.wait()
    assert not (killed / "models" / "rl" / f"seed-{SEED}").exists()
    _run([*TORCHRUN, *stage, params[killed], SEED], killed)
    m = json.loads((killed / "metrics" / "rl" / f"seed-{SEED}.json").read_text())
    assert 2 <= m["resumed_from_step"] < 8 and m["steps"] == 8
    assert weights_digest(killed / "models" / "rl" / f"seed-{SEED}") == weights_digest(
        two / "models" / "rl" / f"seed-{SEED}")
    assert _curve(killed) == _curve(two)


@pytest.mark.slow
def test_two_process_evaluation_matches_one_process(chain, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    small = {"evaluate.datasets.synthetic": 24, "evaluate.datasets.gsm8k_test": 0, "evaluate.datasets.svamp": 0,
             "evaluate.datasets.math500": 0, "evaluate.val_problems": 10, "evaluate.batch_size": 8}
    params = {d: _setup(chain, d, **small) for d in (one, two)}
    stage = ["-m", "stages.evaluate", "--params"]
    _run([sys.executable, *stage, params[one], "sft"], one)
    two_params = yaml.safe_load(Path(params[two]).read_text())
    two_params["common"]["processes"] = 2  # the stage launches itself over 2 workers: params alone
    Path(params[two]).write_text(yaml.safe_dump(two_params))
    _run([sys.executable, *stage, params[two], "sft"], two)
    m1, m2 = (json.loads((d / "metrics" / "eval" / "sft.json").read_text()) for d in (one, two))
    assert any("maj@" in k for k in m1)  # sampled metrics are compared too
    assert _untimed(m2) == _untimed(m1)
    p1, p2 = ((d / "eval" / "sft" / "predictions.jsonl").read_text() for d in (one, two))
    assert p1 == p2 and len(p1.splitlines()) == 24 * len(smoke_params(one)["evaluate"]["modes"])
