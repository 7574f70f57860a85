"""The supervised stages on the smoke profile: tokenizer -> base -> pretrain -> sft, in a temporary directory.

Checks outputs (loadable models, metrics, loss curves), the MLflow runs, rerun determinism, kill -9 and resume,
2-process DDP against 1 process, and (slow) the real SmolLM2 profile.
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
import yaml
from conftest import ROOT, smoke_params, subprocess_env, weights_digest, write_params

from dsmath.runtime.stage import run_stage
from stages import base, pretrain, sft, tokenizer

TRAINING = ("base", "pretrain", "sft")


def _metrics(tmp: Path, stage: str) -> dict:
    return json.loads((tmp / "metrics" / f"{stage}.json").read_text())


def _curve(tmp: Path, stage: str) -> list[dict]:
    return list(csv.DictReader((tmp / "plots" / f"{stage}.csv").open()))


def _copy_inputs(src: Path, dst: Path, *folders: str) -> None:
    for folder in folders:
        shutil.copytree(src / folder, dst / folder)


def test_every_output_loads_with_auto_classes(chain):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chain / "models" / "tokenizer")
    assert tok("1234", add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(c) for c in "1234"]
    for stage in TRAINING:
        model = AutoModelForCausalLM.from_pretrained(chain / "models" / stage)
        assert model.config.vocab_size == len(tok)
        assert AutoTokenizer.from_pretrained(chain / "models" / stage).eos_token == tok.eos_token
        assert (chain / "checkpoints" / stage).is_dir()


def _matmul_params(config: dict) -> int:
    """Weights of every Linear of a Llama from its config.json alone (q, k, v, o, gate, up, down; the LM head)."""
    h, n_layers, i, v = (config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"))
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim") or h // heads
    return n_layers * (2 * h * heads * hd + 2 * h * kv * hd + 3 * h * i) + v * h


def test_speed_metrics_follow_their_formula(chain):
    """tokens/s, FLOPs/token (PaLM 6N + 12 L H T) and MFU recomputed from the logged numbers and the saved config:
    exact on any machine, unlike a range on the MFU itself."""
    params = yaml.safe_load((chain / "params.yaml").read_text())
    for stage in TRAINING:
        m = _metrics(chain, stage)
        config = json.loads((chain / "models" / stage / "config.json").read_text())
        assert m["tokens_per_s"] == pytest.approx(m["tokens"] / m["train_seconds"], rel=1e-9)
        attention = 12 * config["num_hidden_layers"] * config["hidden_size"]
        seq_len = (m["flops_per_token"] - 6 * _matmul_params(config)) / attention  # T of 12 L H T
        max_len = params[stage]["train"]["seq_len"]
        if stage == "sft":  # T = the mean example length (whole tokens)
            assert seq_len == int(seq_len) and 1 <= seq_len <= max_len
        else:  # T = the packed block length
            assert seq_len == max_len
        assert m["matmul_gflops"] > 0
        assert m["mfu"] == pytest.approx(m["tokens_per_s"] * m["flops_per_token"] / (m["matmul_gflops"] * 1e9),
                                         rel=1e-9)


def test_metrics_and_curves_show_learning(chain):
    for stage in TRAINING:
        m, curve = _metrics(chain, stage), _curve(chain, stage)
        assert m["steps"] == len(curve) * 5 and m["tokens_per_s"] > 0 and m["mfu"] > 0 and m["wall_seconds"] > 0
        assert float(curve[-1]["loss"]) < float(curve[0]["loss"])
    pre = _metrics(chain, "pretrain")
    assert pre["heldout_after_ppl"] < pre["heldout_before_ppl"]  # continual pretraining lowers math perplexity
    s = _metrics(chain, "sft")
    assert s["probe_problems"] == 16 and 0 <= s["greedy_acc"] <= 1 and s["greedy_acc"] <= s["pass_at_4"] + 1e-9
    assert s["heldout_loss"] > 0 and s["train_examples"] > 0


def test_mlflow_runs_hold_params_step_metrics_curve_and_model(chain):
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{chain}/mlflow.db")
    exp_id = mlflow.get_experiment_by_name("dsmath-test").experiment_id
    runs = {r.info.run_name: r for r in mlflow.search_runs([exp_id], output_format="list")}
    assert {"tokenizer", *TRAINING} <= set(runs)
    client = MlflowClient()
    for stage in TRAINING:
        run = runs[stage]
        assert run.data.params[f"{stage}.train.max_steps"] == str(_metrics(chain, stage)["steps"])
        history = client.get_metric_history(run.info.run_id, f"{stage}/loss")
        assert [h.step for h in history] == [int(r["step"]) for r in _curve(chain, stage)]
        assert {f"{stage}/lr", f"{stage}/grad_norm", f"{stage}/tokens_per_s"} <= set(run.data.metrics)
        files = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {f"{stage}_loss.png", f"{stage}.csv", f"{stage}.json"} <= files
        logged = mlflow.search_logged_models([exp_id], f"source_run_id = '{run.info.run_id}'", output_format="list")
        assert logged and "transformers" in mlflow.models.get_model_info(logged[0].model_uri).flavors


def test_same_params_same_seed_identical_weights(chain, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _copy_inputs(chain, tmp_path, "data", "models/tokenizer")
    monkeypatch.chdir(tmp_path)
    run_stage(base.main, ["--params", str(write_params(tmp_path, smoke_params(tmp_path)))])
    assert weights_digest(tmp_path / "models" / "base") == weights_digest(chain / "models" / "base")


@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_dtype_auto_is_float32_without_native_bf16_and_bf16_with_it(chain, tmp_path, monkeypatch, cpu_bf16):
    """`common.dtype: auto` on a CPU without native bf16 trains the very weights float32 trains; on one with it
    (the CPU's flags stand in for the machine) it trains in bf16: other weights, `bf16` in the metrics and the
    `dsmath.dtype` tag on the MLflow run, and the same weights again when run again."""
    import mlflow

    from dsmath.runtime import precision

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"} if cpu_bf16 else
                                                                  {"avx2", "avx512f"}))
    _copy_inputs(chain, tmp_path, "data", "models/tokenizer")
    monkeypatch.chdir(tmp_path)
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()  # one precision per process in a stage; this test process trains in two
    params = write_params(tmp_path, smoke_params(tmp_path, **{"common.dtype": "auto"}))
    digests = []
    try:
        for _ in range(2 if cpu_bf16 else 1):  # bf16: twice, for determinism by seed in that precision too
            run_stage(base.main, ["--params", str(params)])
            digests.append(weights_digest(tmp_path / "models" / "base"))
    finally:
        AcceleratorState._reset_state()
    assert (digests[0] == weights_digest(chain / "models" / "base")) is not cpu_bf16
    assert len(set(digests)) == 1
    assert _metrics(tmp_path, "base")["bf16"] == float(cpu_bf16) and _metrics(chain, "base")["bf16"] == 0.0
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("dsmath-test").experiment_id])
    assert [r.data.tags["dsmath.dtype"] for r in runs] == ["bfloat16" if cpu_bf16 else "float32"] * len(digests)
    assert {r.data.tags["env.cpu_bf16"] for r in runs} == {"avx512_bf16" if cpu_bf16 else "none"}


def _pretrain_cmd(tmp: Path, **overrides) -> list[str]:
    raw = smoke_params(tmp, **overrides)
    return [sys.executable, "-m", "stages.pretrain", "--params", str(write_params(tmp, raw))]


@pytest.mark.slow
def test_kill_9_then_rerun_continues_from_checkpoint_to_the_same_weights(chain, tmp_path):
    long_run = {"pretrain.train.max_steps": 240, "pretrain.train.checkpoint_every": 20}
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    for d in (ref, killed):
        _copy_inputs(chain, d, "data", "models/base")
    subprocess.run(_pretrain_cmd(ref, **long_run), cwd=ref, env=subprocess_env(), check=True, capture_output=True)

    proc = subprocess.Popen(
        _pretrain_cmd(killed, **long_run),
        cwd=killed,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not list((killed / "checkpoints" / "pretrain").glob("step-*")) and time.time() < deadline:
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "models" / "pretrain").exists()  # really killed mid-run

    subprocess.run(_pretrain_cmd(killed, **long_run), cwd=killed, env=subprocess_env(), check=True, capture_output=True)
    m = _metrics(killed, "pretrain")
    assert 20 <= m["resumed_from_step"] < 240 and m["steps"] == 240
    assert weights_digest(killed / "models" / "pretrain") == weights_digest(ref / "models" / "pretrain")
    assert [r["loss"] for r in _curve(killed, "pretrain")] == [r["loss"] for r in _curve(ref, "pretrain")]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(chain, tmp_path):
    import torch
    from safetensors.torch import load_file

    one, two = tmp_path / "one", tmp_path / "two"
    settings = {"common.num_threads": 1, "pretrain.train.max_steps": 20, "pretrain.train.checkpoint_every": 0}
    for d in (one, two):
        _copy_inputs(chain, d, "data", "models/base")
    cmd = _pretrain_cmd(one, **settings)
    subprocess.run(cmd, cwd=one, env=subprocess_env(), check=True, capture_output=True)
    # common.processes: the stage launches itself over 2 workers (torch.distributed.run), params alone
    ddp = subprocess.run(_pretrain_cmd(two, **settings, **{"common.processes": 2}), cwd=two, env=subprocess_env(),
                         capture_output=True, text=True)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    loss_one = [float(r["loss"]) for r in _curve(one, "pretrain")]
    loss_two = [float(r["loss"]) for r in _curve(two, "pretrain")]
    assert len(loss_one) == len(loss_two) == 4
    torch.testing.assert_close(torch.tensor(loss_two), torch.tensor(loss_one), rtol=1e-4, atol=1e-4)
    w1, w2 = (load_file(d / "models" / "pretrain" / "model.safetensors") for d in (one, two))
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-3, atol=1e-4)
    assert _metrics(two, "pretrain")["tokens"] == _metrics(one, "pretrain")["tokens"]


@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_profile_runs_every_stage_for_a_few_steps(chain, tmp_path, monkeypatch):
    """The real-model overlay through the whole chain, rl and evaluate included (its own tokenizer and template)."""
    from dsmath.config import load_raw
    from stages import evaluate, rl

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _copy_inputs(chain, tmp_path, "data")
    raw = load_raw(ROOT / "configs" / "smollm2.yaml")
    smoke = smoke_params(tmp_path)
    raw["common"]["paths"], raw["common"]["tracking"] = smoke["common"]["paths"], smoke["common"]["tracking"]
    params = str(write_params(tmp_path, raw))
    monkeypatch.chdir(tmp_path)
    for stage in (tokenizer, base, pretrain, sft):
        run_stage(stage.main, ["--params", params])
    assert _metrics(tmp_path, "tokenizer")["vocab_size"] == 49152
    assert _metrics(tmp_path, "base")["params"] > 100_000_000
    pre = _metrics(tmp_path, "pretrain")
    assert pre["steps"] == raw["pretrain"]["train"]["max_steps"] and pre["heldout_after_ppl"] > 1
    assert "greedy_acc" in _metrics(tmp_path, "sft")
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path / "models" / "sft").config.model_type == "llama"
    seed = str(raw["common"]["rl_seeds"][0])
    run_stage(rl.main, ["--params", params, seed])
    m = json.loads((tmp_path / "metrics" / "rl" / f"seed-{seed}.json").read_text())
    assert m["steps"] == raw["rl"]["steps"] and m["algorithm"] == "grpo"
    assert all(k in m for k in ("reward_mean_last10", "kl_last10", "s_per_step"))
    for model in ("sft", "rl"):
        run_stage(evaluate.main, ["--params", params, model])
        ev = _metrics(tmp_path, f"eval/{model}")
        for key in ("synthetic/cot/greedy", "gsm8k_test/cot/greedy", "svamp/cot/greedy", "val/synthetic/cot/greedy"):
            assert 0.0 <= ev[key] <= 1.0, key
    assert "synthetic/cot/maj@2" in _metrics(tmp_path, "eval/rl")
