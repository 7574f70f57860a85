"""The `rl` stage's work: load the SFT model, train it with the configured algorithm, checkpoint, report.

Resumable: the whole trainer state (policy, reference, critic, optimisers, scheduler, sampling RNG, step, metric
history) is saved every `rl.checkpoint_every` steps, atomically, with a fingerprint of the params and the SFT model;
a rerun after kill -9 continues from it and ends with the same weights as an uninterrupted run.

Under ``torchrun`` / ``accelerate launch`` every rank runs this; rank 0 alone writes the checkpoint, the model, the
curve and MLflow (the others get a :class:`dsmath.runtime.tracking.NullRun`), and every rank resumes from the same file.
A checkpoint that does not load (zero-byte, truncated, garbled) is moved aside to ``state.pt.corrupt`` with a
:class:`dsmath.train.checkpoint.CorruptCheckpointWarning` naming it, and the run starts afresh.

With ``rl.rejection.at_step`` the run samples, keeps its right outputs and fine-tunes on them before that step
(DeepSeek-R1's middle stages, :mod:`dsmath.rl.rejection`), logs ``rl/rs_*`` and checkpoints at once.

A diverged run fails with :class:`dsmath.train.loop.DivergenceError` and writes no model: as soon as more optimiser
updates were skipped (non-finite loss or gradient, see ``RLTrainer._optimise``) than ``rl.max_skipped_share`` of the
run's planned updates (``steps x mu x minibatches``), so that the share can no longer be met; at the end, when more
than that share of the updates made were skipped; and when the weights are non-finite before a checkpoint or the
model is saved.
"""

from __future__ import annotations

import csv
import os
import resource
import time
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from dsmath.config import seed_dir
from dsmath.core import codedeps
from dsmath.data.io import read_jsonl
from dsmath.generation.tools import sandbox_tool
from dsmath.modeling.model import load_dir, save_dir
from dsmath.rl.rejection import rejection_stage
from dsmath.rl.scoring import Scorer
from dsmath.rl.trainer import RLTrainer
from dsmath.runtime import distributed, precision
from dsmath.train import checkpoint
from dsmath.train import data as train_data
from dsmath.train.checkpoint import CorruptCheckpointError, CorruptCheckpointWarning, fingerprint
from dsmath.train.loop import DivergenceError, check_weights

CURVE = ("step", "rl/reward_mean", "rl/accuracy", "rl/kl", "rl/format_rate", "rl/response_len_mean",
         "rl/val_greedy_acc")


def rl_problems(params) -> tuple[list[dict], list[dict]]:
    """(training prompts: synthetic train split at `rl.prompt_levels`, held-out val problems for the probe)."""
    syn = Path(params.common.paths.synthetic)
    train = train_data.at_levels(read_jsonl(syn / "train.jsonl"), params.rl.prompt_levels, "rl.prompt_levels")
    return train, read_jsonl(syn / "val.jsonl")[: params.rl.eval_problems]


def _save_checkpoint(trainer: RLTrainer, history: list[dict], path: Path, fp: str) -> None:
    tmp = path.with_suffix(".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"trainer": trainer.state_dict(), "history": history, "fingerprint": fp}, tmp)
    checkpoint.fsync(tmp)  # on disk before the rename: a machine crash cannot leave an empty state.pt
    os.replace(tmp, path)  # atomic: a kill mid-write leaves the previous checkpoint intact
    checkpoint.fsync_dir(path.parent)


def _corrupt(path: Path) -> Path:
    return path.with_name(path.name + ".corrupt")


def _load_checkpoint(path: Path, fp: str, device: torch.device, main: bool = True) -> dict | None:
    """The resume state at `path` if it has fingerprint `fp`, else None. One that does not load is moved aside (by
    the main process; one file, replaced each time) with a warning naming it: the run then starts afresh."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False, map_location=device)
        if not isinstance(state, dict) or not {"trainer", "history", "fingerprint"} <= state.keys():
            raise ValueError("not an RL resume state (a dict of trainer, history, fingerprint)")
    except Exception as err:
        if checkpoint.is_oom(err):
            raise
        if main:
            os.replace(path, _corrupt(path))
        warnings.warn(f"corrupt checkpoint: {path} does not load ({type(err).__name__}: {err}); moved aside to "
                      f"{_corrupt(path)}, starting afresh", CorruptCheckpointWarning, stacklevel=2)
        return None
    return state if state.get("fingerprint") == fp else None


def skipped_problem(trainer: RLTrainer, cfg, finished: bool) -> str | None:
    """Why the run has failed rl.max_skipped_share, or None: while running, when more updates were skipped than the
    share of the run's planned updates (the share can then no longer be met); at the end, of the updates made."""
    planned = cfg.steps * cfg.mu * cfg.minibatches
    of = max(trainer.updates, 1) if finished else planned
    if trainer.skipped <= cfg.max_skipped_share * of:
        return None
    of_what = "them" if finished else f"the {planned} planned"
    return (f"{trainer.skipped} of {trainer.updates} optimiser updates skipped (non-finite loss or gradient), "
            f"more than rl.max_skipped_share={cfg.max_skipped_share} of {of_what}")


def write_curve(history: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[c.removeprefix("rl/") for c in CURVE])
        w.writeheader()
        for h in history:
            w.writerow({c.removeprefix("rl/"): h.get(c, "") for c in CURVE})


def plot_curves(history: list[dict]):
    """Reward, accuracy and KL against step (matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for ax, key in zip(axes, ("rl/reward_mean", "rl/accuracy", "rl/kl"), strict=True):
        pts = [(h["step"], h[key]) for h in history if key in h]
        if pts:
            ax.plot(*zip(*pts, strict=True))
        ax.set_title(key)
        ax.set_xlabel("step")
    val = [(h["step"], h["rl/val_greedy_acc"]) for h in history if "rl/val_greedy_acc" in h]
    if val:
        axes[1].plot(*zip(*val, strict=True), marker="o", label="val greedy")
        axes[1].legend()
    fig.tight_layout()
    return fig


def run_paths(paths, seed: int) -> dict[str, Path]:
    """Where the RL run with `seed` writes its model, resume checkpoint and curve (the outs of dvc.yaml's rl@<seed>;
    its metrics go to metrics/rl/seed-<seed>.json)."""
    name = seed_dir(seed)
    return {"model": Path(paths.models) / "rl" / name, "checkpoint": Path(paths.checkpoints) / "rl" / name,
            "curve": Path(paths.plots) / "rl" / f"{name}.csv"}


def train_rl(params, run, seed: int, world: distributed.World | None = None) -> dict:
    """Run one RL run (stage rl@<seed>) end to end; returns the metrics written to metrics/rl/seed-<seed>.json.

    world: this process's rank and device (default: one process on `common.device`)."""
    cfg, paths = params.rl, params.common.paths
    world = world or distributed.setup(params.common.device)
    out = run_paths(paths, seed)
    sft_dir = Path(paths.models) / cfg.init  # the SFT model (the pretrained one for R1-Zero)
    policy, tok = load_dir(sft_dir)
    train, val = rl_problems(params)
    scorer = Scorer(cfg.reward, cfg.mode, params.rewards, params.sandbox, seed)
    tool_fn = sandbox_tool(params.sandbox) if cfg.mode == "tool" else None
    dtype = precision.stage_dtype(params.common, "rl", world.device)
    trainer = RLTrainer(cfg, policy, tok, train, scorer, seed, tool_fn, world=world, dtype=precision.DTYPES[dtype])
    code = codedeps.stage_code_hash("rl", "dsmath.rl.run")  # a checkpoint of other code is never resumed
    fp = fingerprint({"rl": cfg.model_dump(), "rewards": params.rewards.model_dump(), "seed": seed, "code": code},
                     [sft_dir])
    ckpt = out["checkpoint"] / "state.pt"
    state = _load_checkpoint(ckpt, fp, world.device, world.is_main)
    history: list[dict] = []
    resumed_from = 0
    if state is not None:
        try:
            trainer.load_state_dict(state["trainer"])
        except Exception as err:  # it read back but does not fit: the trainer may be half-loaded, so stop
            if world.is_main:
                os.replace(ckpt, _corrupt(ckpt))
            raise CorruptCheckpointError(f"{ckpt} does not load ({type(err).__name__}: {err}); moved aside to "
                                         f"{_corrupt(ckpt)}: a rerun starts afresh") from err
        history, resumed_from = state["history"], trainer.step_count
        for h in history:  # a resumed run carries the whole curve
            run.log_metrics({k: v for k, v in h.items() if k != "step"}, step=h["step"])
    else:
        history.append({"step": 0, "rl/val_greedy_acc": trainer.greedy_accuracy(val)})
        run.log_metrics({"rl/val_greedy_acc": history[0]["rl/val_greedy_acc"]}, step=0)
    t0 = time.perf_counter()
    for step in tqdm(range(trainer.step_count, cfg.steps), desc=f"rl {cfg.algorithm}", initial=trainer.step_count,
                     total=cfg.steps, disable=not world.is_main):
        if cfg.rejection.at_step == step and step and not trainer.rejection_done:  # R1's middle stages, once
            run.log_metrics(rejection_stage(trainer, seed), step=step)
            if world.is_main:  # a resumed run does not sample and fine-tune again
                _save_checkpoint(trainer, history, ckpt, fp)
            distributed.barrier(world)
        m = {"step": step + 1, **trainer.step()}
        problem = skipped_problem(trainer, cfg, finished=False)  # the same on every rank
        if problem:
            run.log_metrics({k: v for k, v in m.items() if k != "step"}, step=step + 1)
            raise DivergenceError(_diverged(seed, step + 1, problem, cfg))
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            m["rl/val_greedy_acc"] = trainer.greedy_accuracy(val)
        history.append(m)
        run.log_metrics({k: v for k, v in m.items() if k != "step"}, step=step + 1)
        if (step + 1) % cfg.samples_every == 0:
            run.log_table(trainer.last_samples, f"samples/step_{step + 1:05d}.json")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            check_weights(trainer.policy, f"rl@{seed}", step + 1, "rl.lr", cfg.lr)  # no diverged resume point
            if world.is_main:
                _save_checkpoint(trainer, history, ckpt, fp)
            distributed.barrier(world)
    wall = time.perf_counter() - t0
    out_dir = out["model"]
    problem = skipped_problem(trainer, cfg, finished=True)
    if problem:
        raise DivergenceError(_diverged(seed, trainer.step_count, problem, cfg))
    check_weights(trainer.policy, f"rl@{seed}", trainer.step_count, "rl.lr", cfg.lr)
    if world.is_main:
        save_dir(trainer.policy, tok, out_dir)
        write_curve(history, out["curve"])
        run.log_figure(plot_curves(history), "plots/rl_curves.png")
        ckpt.unlink(missing_ok=True)  # the finished model is the output; a rerun with the same params is DVC's no-op
    distributed.barrier(world)
    return summarise(history, trainer, wall) | {"seed": seed, "resumed_from_step": resumed_from,
                                                "model_dir": str(out_dir), "processes": world.size,
                                                "bf16": float(dtype == "bfloat16")}


def _diverged(seed: int, step: int, problem: str, cfg) -> str:
    return (f"rl@{seed}: training diverged at step {step}: {problem} (learning rate too high? rl.lr={cfg.lr}); "
            "stopped, no model written")


def summarise(history: list[dict], trainer: RLTrainer, wall_s: float) -> dict:
    steps = [h for h in history if "rl/reward_mean" in h]
    val = [h["rl/val_greedy_acc"] for h in history if "rl/val_greedy_acc" in h]
    last = steps[-10:] or [{}]
    mean = lambda k: sum(h.get(k, 0.0) for h in last) / len(last)  # noqa: E731
    return {
        "algorithm": trainer.cfg.algorithm,
        "steps": len(steps),
        "val_greedy_acc_start": val[0] if val else None,
        "val_greedy_acc_end": val[-1] if val else None,
        "reward_mean_last10": mean("rl/reward_mean"),
        "accuracy_last10": mean("rl/accuracy"),
        "kl_last10": mean("rl/kl"),
        "skipped_steps": trainer.skipped,
        "wall_s": wall_s,
        "s_per_step": wall_s / max(len(steps), 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trainer_state_mb": trainer_state_bytes(trainer) / 2**20,
    }


def trainer_state_bytes(trainer: RLTrainer) -> int:
    """Bytes of what the trainer holds between steps: the policy, the frozen reference, the optimiser state and, for
    PPO, the critic and its optimiser state (DeepSeekMath sec. 4.1: the critic GRPO drops)."""

    def tensors(obj) -> int:
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        if isinstance(obj, dict):
            return sum(tensors(v) for v in obj.values())
        if isinstance(obj, list | tuple):
            return sum(tensors(v) for v in obj)
        return 0

    held = [trainer.policy.state_dict(), trainer.ref.state_dict(), trainer.opt.state_dict()]
    if trainer.critic is not None:
        held += [trainer.critic.state_dict(), trainer.critic_opt.state_dict()]
    return sum(tensors(h) for h in held)
