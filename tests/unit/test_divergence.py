"""A diverged run fails loudly and writes no model: the supervised loop stops at the first non-finite loss or gradient
norm (nothing diverged is checkpointed), `finish` refuses non-finite weights, RL fails past `rl.max_skipped_share`."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from dsmath.config import Loop, Optim, Params, Rl
from dsmath.train import checkpoint
from dsmath.train.data import causal_batch
from dsmath.train.loop import DivergenceError, make_accelerator, nonfinite_parameters, train
from tests.unit.test_train_loop import rows_data, tiny_model


def _loop(lr: float, steps: int = 10, ckpt_every: int = 0) -> Loop:
    return Loop(max_steps=steps, global_batch_size=8, micro_batch_size=8, seq_len=12, checkpoint_every=ckpt_every,
                keep_checkpoints=20, log_every=1, optim=Optim(lr=lr, warmup_steps=0))


def test_supervised_divergence_stops_at_once_and_checkpoints_nothing_diverged(tmp_path):
    """lr 1e3 on the toy model: the loss is finite at step 1, then a gradient norm turns NaN within a few steps
    (step 2 on a 2-core AMD EPYC, step 4 on an Intel Xeon: the float rounding decides which). The loop raises in that
    step naming stage, step and lr; the checkpoints are exactly the steps before it, every one finite."""
    import re

    from safetensors.torch import load_file

    blocks = rows_data()
    with pytest.raises(DivergenceError) as err:
        train(tiny_model(), _loop(1e3, ckpt_every=1), lambda rows: causal_batch(blocks[list(rows)]), len(blocks), 0,
              make_accelerator("cpu"), ckpt_dir=tmp_path, fingerprint="x", desc="sft")
    msg = str(err.value)
    assert isinstance(err.value, RuntimeError)
    assert msg.startswith("sft: training diverged at step ") and "sft.train.optim.lr=1000.0" in msg, msg
    step = int(re.search(r"at step (\d+)", msg).group(1))
    assert 2 <= step < 10
    assert [p.name for p in checkpoint.step_dirs(tmp_path)] == [f"step-{s:06d}" for s in range(1, step)]
    for s in range(1, step):
        saved = load_file(tmp_path / f"step-{s:06d}" / "model.safetensors")
        assert all(bool(torch.isfinite(t).all()) for t in saved.values())


def test_a_sane_run_is_unchanged_by_the_checks():
    blocks = rows_data()
    model, state = train(tiny_model(), _loop(1e-2), lambda rows: causal_batch(blocks[list(rows)]), len(blocks), 0,
                         make_accelerator("cpu"))
    assert state.step == 10 and all(math.isfinite(h["loss"]) for h in state.history)
    assert nonfinite_parameters(model) == []


def test_finish_refuses_to_save_a_nonfinite_model(tmp_path):
    from dsmath.runtime.tracking import NullRun
    from dsmath.train import lifecycle

    model = tiny_model()
    with torch.no_grad():
        model.get_parameter("model.norm.weight")[0] = float("nan")
    tokenizer = SimpleNamespace(save_pretrained=lambda path: None)
    outcome = SimpleNamespace(model=model, tokenizer=tokenizer, history=[], metrics={"final_loss": float("nan")},
                              rows=[])
    params = SimpleNamespace(common=SimpleNamespace(paths=SimpleNamespace(metrics=str(tmp_path / "metrics"),
                                                                           plots=str(tmp_path / "plots"))))
    with pytest.raises(DivergenceError, match=r"sft: .*non-finite.*model\.norm\.weight"):
        lifecycle.finish(SimpleNamespace(is_main_process=True), NullRun(), params, "sft", outcome,
                      tmp_path / "models" / "sft", 1.0)
    assert not (tmp_path / "models").exists() and not (tmp_path / "metrics").exists()


# ------------------------------------------------------------------------------------------------------- RL


from tests.unit.test_rl_trainer import PROBLEMS, LengthScorer  # noqa: E402
from tests.unit.test_rl_trainer import tiny_model as tiny_rl_model  # noqa: E402
from tests.unit.test_rl_trainer import tok as tok  # noqa: E402, F401  (module fixture)


class NanAtScorer(LengthScorer):
    """LengthScorer whose rewards are NaN on the given calls (1-based): that step's loss is NaN and skipped."""

    def __init__(self, nan_calls):
        super().__init__()
        self.nan_calls, self.calls = set(nan_calls), 0

    def __call__(self, texts, golds):
        self.calls += 1
        s = super().__call__(texts, golds)
        if self.calls in self.nan_calls:
            s.rewards = torch.full_like(s.rewards, float("nan"))
        return s


def _rl_run(tmp_path, monkeypatch, tok, scorer, **rl):
    """train_rl on the tiny model and tokenizer with `scorer` (val probe: greedy, through the same scorer)."""
    from dsmath.rl import run as rl_run
    from dsmath.runtime.distributed import World
    from dsmath.runtime.tracking import NullRun

    cfg = dict(mode="cot", steps=4, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, warmup_steps=0,
               eval_every=0, eval_problems=2, checkpoint_every=2, samples_every=100) | rl
    paths = {k: str(tmp_path / k) for k in ("models", "checkpoints", "plots")}
    (tmp_path / "models" / "sft").mkdir(parents=True, exist_ok=True)  # hashed into the fingerprint; load_dir is faked
    (tmp_path / "models" / "sft" / "config.json").write_text("{}")
    params = Params.model_validate({"common": {"device": "cpu", "paths": paths}, "rl": Rl(**cfg).model_dump()})
    monkeypatch.setattr(rl_run, "load_dir", lambda d: (tiny_rl_model(tok), tok))
    monkeypatch.setattr(rl_run, "rl_problems", lambda p: (PROBLEMS, PROBLEMS[:2]))
    monkeypatch.setattr(rl_run, "Scorer", lambda *a: scorer)
    monkeypatch.setattr(rl_run, "plot_curves", lambda h: None)
    return rl_run.train_rl(params, NullRun(), 1, World()), rl_run.run_paths(params.common.paths, 1)


def test_rl_fails_once_skipped_updates_pass_the_share(tmp_path, monkeypatch, tok):
    """The scorer's 2nd call is step 1 (the 1st is the step-0 val probe): 1 skipped of 4 planned > 0.1 x 4, so the run
    fails in step 1, with no model written."""
    with pytest.raises(DivergenceError) as err:
        _rl_run(tmp_path, monkeypatch, tok, NanAtScorer({2}), lr=1e3)
    msg = str(err.value)
    assert msg.startswith("rl@1: ") and "step 1" in msg and "rl.max_skipped_share=0.1" in msg and "rl.lr=1000.0" in msg
    assert not (tmp_path / "models" / "rl").exists()


def test_rl_within_the_skip_budget_finishes(tmp_path, monkeypatch, tok):
    metrics, out = _rl_run(tmp_path, monkeypatch, tok, NanAtScorer({3}), max_skipped_share=0.25)  # 1 of 4 = 0.25
    assert metrics["skipped_steps"] == 1  # (a NaN-reward step logs no reward: metrics["steps"] counts 3)
    assert (out["model"] / "model.safetensors").exists()


def test_rl_refuses_to_save_nonfinite_weights(tmp_path, monkeypatch, tok):
    """A last guard: whatever made the policy non-finite, the RL model is not written."""
    from dsmath.rl.trainer import RLTrainer

    real_step = RLTrainer.step

    def poisoned(self):
        out = real_step(self)
        if self.step_count == 4:
            with torch.no_grad():
                next(self.policy.parameters())[0] = float("inf")
        return out

    monkeypatch.setattr(RLTrainer, "step", poisoned)
    with pytest.raises(DivergenceError, match="rl@1: .*non-finite"):
        _rl_run(tmp_path, monkeypatch, tok, LengthScorer(), max_skipped_share=1.0)
    assert not (tmp_path / "models" / "rl").exists()
