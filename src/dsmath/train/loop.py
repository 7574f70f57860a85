"""The training loop shared by the base, continual-pretraining and SFT stages, on `accelerate`.

The same code runs in one process or under ``accelerate launch`` / ``torchrun`` with DDP: the global batch comes
from params, each process trains on ``global / world`` rows of it (see :class:`dsmath.train.data.StepSchedule`),
and the loss is normalised by the token count of the *global* batch, so gradients (and the loss curve) match the
single-process run up to floating-point summation order. AdamW, linear warmup + cosine decay, global-norm clipping;
a checkpoint every ``checkpoint_every`` steps holds everything needed to continue bit-for-bit.

Divergence stops the run at once with a :class:`DivergenceError`: a non-finite loss or gradient norm (under float16's
loss scaling an infinite gradient is the scaler's skipped step, not divergence), or non-finite weights before a
checkpoint and at the end. Nothing diverged is checkpointed, and the stage writes no model.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from dsmath.core.errors import StageError
from dsmath.modeling.lm_head import hidden_states, token_logprobs
from dsmath.train import checkpoint
from dsmath.train.data import IGNORE, StepSchedule

MakeBatch = Callable[[Sequence[int]], dict[str, torch.Tensor]]  # rows -> {input_ids, labels[, attention_mask, ...]}
LogFn = Callable[[dict[str, float], int], None]  # (metrics, step)


MIXED_PRECISION = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}  # params common.dtype -> accelerate


class DivergenceError(StageError, RuntimeError):
    """Training diverged (non-finite loss, gradient norm or weights): the stage fails and writes no model."""


def nonfinite_parameters(model: torch.nn.Module) -> list[str]:
    """Names of the parameters of `model` holding a NaN or an infinity."""
    return [n for n, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]


def diverged(stage: str, step: int, what: str, lr_key: str, lr: float) -> str:
    """The one-line message of a :class:`DivergenceError`."""
    return (f"{stage}: training diverged at step {step}: {what} (learning rate too high? {lr_key}={lr}); "
            "stopped, no model written")


def check_weights(model: torch.nn.Module, stage: str, step: int, lr_key: str, lr: float) -> None:
    """Raise :class:`DivergenceError` when `model` has a non-finite weight (named, first three)."""
    bad = nonfinite_parameters(model)
    if bad:
        names = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise DivergenceError(diverged(stage, step, f"non-finite weights in {names}", lr_key, lr))


def make_accelerator(device: str = "auto", dtype: str = "float32"):
    """An `Accelerator` on the CPU when asked (or when no accelerator device exists), else on the default device;
    `dtype` other than float32 trains in accelerate's mixed precision (float32 weights, autocast forwards)."""
    from accelerate import Accelerator

    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    return Accelerator(cpu=cpu, step_scheduler_with_optimizer=False, mixed_precision=MIXED_PRECISION[dtype])


@dataclass
class LoopState:
    """What the loop carries from step to step; saved in every checkpoint (the data position is `step`)."""

    step: int = 0
    tokens: int = 0  # input tokens trained on, all processes
    train_seconds: float = 0.0  # time inside training steps (no checkpoints, no evaluation)
    history: list[dict] = field(default_factory=list)  # one record per `log_every` steps
    window: list[tuple] = field(default_factory=list)  # (loss, grad norm, tokens, seconds) since the last record
    resumed_from: int = 0  # step of the checkpoint this run continued from (0: started afresh)

    def state_dict(self) -> dict:
        keys = ("step", "tokens", "train_seconds", "history", "window")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, d: dict) -> None:
        for k, v in d.items():
            setattr(self, k, list(v) if isinstance(v, list) else v)


def token_nll(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL and target count. hidden: (B, T, H) final hidden states (see
    :func:`dsmath.modeling.lm_head.hidden_states`), weight: (V, H) the output head's; labels: (B, T), IGNORE where no
    loss.

    Position t predicts labels[t+1], so the last position and the first label are dropped; the head is computed on
    the positions with a target only (:func:`dsmath.modeling.lm_head.token_logprobs`). Returns (sum, count).
    """
    targets = labels[:, 1:]
    keep = targets != IGNORE
    nll = -token_logprobs(hidden[:, :-1][keep], weight, targets[keep]).sum()
    return nll, keep.sum()


def batch_nll(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_nll` of a causal-LM batch ({input_ids, labels[, position_ids]}) under `model`.

    Batches are right-padded: under the causal mask no real token attends to a later pad, so the padding mask is not
    passed and attention keeps its fast causal kernel (pad positions carry no loss); packed batches
    (data.pack_batch) pass position ids instead, from which attention is kept within each example.
    """
    with hidden_states(model) as head:
        if "position_ids" in batch:
            hidden = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        else:
            hidden = model(input_ids=batch["input_ids"]).logits
    return token_nll(hidden, head, batch["labels"])


def build_optimizer(model: torch.nn.Module, optim) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (norm gains and biases are not decayed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=optim.eps)


def build_scheduler(optimizer, optim, max_steps: int):
    """Linear warmup over `warmup_steps`, then cosine decay to `lr * min_lr_ratio` at `max_steps`."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    warmup = min(optim.warmup_steps, max_steps)
    return get_cosine_with_min_lr_schedule_with_warmup(optimizer, warmup, max_steps, min_lr_rate=optim.min_lr_ratio)


def _step(model, accelerator, micro: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Forward/backward over this process's micro-batches; gradients sum to d(global mean NLL)/d(theta).

    DDP averages gradients over the W processes, so each process scales its summed NLL by W / global_count.
    Returns (global summed NLL, global target count, global input tokens) as reduced over processes.
    """
    local_count = sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in micro)
    local_tokens = sum(_n_tokens(b) for b in micro)
    counts = accelerator.reduce(torch.tensor([local_count, local_tokens], device=accelerator.device), "sum")
    global_count = counts[0].clamp(min=1).float()
    scale = accelerator.num_processes / global_count
    nll_total = torch.zeros((), device=accelerator.device)
    for i, b in enumerate(micro):
        sync = contextlib.nullcontext() if i == len(micro) - 1 else accelerator.no_sync(model)
        with sync:
            nll, _ = batch_nll(model, {k: v.to(accelerator.device) for k, v in b.items()})
            accelerator.backward(nll * scale)
            nll_total += nll.detach()
    return accelerator.reduce(nll_total, "sum"), global_count, int(counts[1])


def _n_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Input tokens of a batch, padding excluded."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()


def _resume(accelerator, state: LoopState, ckpt_dir: Path | None, fp: str) -> None:
    if ckpt_dir is None:
        return
    if accelerator.is_main_process:
        checkpoint.clear_stale(ckpt_dir, fp)
        checkpoint.discard_corrupt(ckpt_dir, fp)  # before load_state: it would fail half-way through, not before
    accelerator.wait_for_everyone()
    found = checkpoint.latest(ckpt_dir, fp)
    if found is not None:
        try:
            accelerator.load_state(str(found))
        except Exception as err:  # every file read back, yet it does not load: the model may be half-loaded now
            if checkpoint.is_oom(err):
                raise
            why = f"{found} does not load ({type(err).__name__}: {err})"
            aside = checkpoint.move_aside(found, why) if accelerator.is_main_process else "corrupt-" + found.name
            raise checkpoint.CorruptCheckpointError(
                f"{why}; moved aside to {aside}: rerun to resume from the previous checkpoint or start afresh") from err
        state.resumed_from = state.step
        accelerator.print(f"resumed from {found} (step {state.step})")


def train(
    model: torch.nn.Module,
    loop,
    make_batch: MakeBatch,
    n_rows: int,
    seed: int,
    accelerator,
    ckpt_dir: str | Path | None = None,
    fingerprint: str = "",
    log: LogFn | None = None,
    desc: str = "train",
    lengths: Sequence[int] | None = None,
) -> tuple[torch.nn.Module, LoopState]:
    """Train `model` for `loop.max_steps` optimizer steps on rows `0..n_rows-1` served by `make_batch`.

    `loop` is a params `Loop` section. Resumes from the newest matching checkpoint under `ckpt_dir`. `log(metrics,
    step)` is called on the main process every `loop.log_every` steps with window means of loss, grad norm and
    tokens/s. `lengths` (tokens per row) groups rows of similar length into micro-batches (see `StepSchedule`).
    Returns the unwrapped model and the final loop state (its `history` holds the logged records).
    Raises :class:`DivergenceError` (naming `desc`, the step and ``<desc>.train.optim.lr``) when training diverges.
    """
    optimizer = build_optimizer(model, loop.optim)
    scheduler = build_scheduler(optimizer, loop.optim, loop.max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    state = LoopState()
    accelerator.register_for_checkpointing(scheduler, state)
    fp = f"{fingerprint}:world={accelerator.num_processes}"
    ckpt_dir = Path(ckpt_dir) if ckpt_dir else None
    _resume(accelerator, state, ckpt_dir, fp)
    if log is not None and accelerator.is_main_process:  # a resumed run's MLflow run gets the whole curve
        for record in state.history:
            log({k: v for k, v in record.items() if k != "step"}, record["step"])
    schedule = StepSchedule(n_rows, loop.global_batch_size, loop.micro_batch_size, seed)
    rank, world = accelerator.process_index, accelerator.num_processes
    bar = tqdm(total=loop.max_steps, initial=state.step, desc=desc, disable=not accelerator.is_main_process)
    lr_key, lr = f"{desc}.train.optim.lr", loop.optim.lr
    scaled = getattr(accelerator, "scaler", None) is not None  # float16: an inf gradient is a skipped step
    model.train()
    while state.step < loop.max_steps:
        t0 = time.perf_counter()
        micro = [make_batch(rows) for rows in schedule.micro_batches(state.step, rank, world, lengths)]
        nll, count, tokens = _step(model, accelerator, micro)
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), loop.optim.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        loss, norm = float(nll / count), float(grad_norm)  # the same on every process (reduced / DDP-averaged)
        if not math.isfinite(loss) or not (math.isfinite(norm) or scaled):
            what = f"loss {loss:.4g}, gradient norm {norm:.4g}"
            raise DivergenceError(diverged(desc, state.step + 1, what, lr_key, lr))
        state.step += 1
        state.tokens += tokens
        state.train_seconds += dt
        state.window.append((loss, norm, tokens, dt))
        bar.update(1)
        if state.step % loop.log_every == 0 or state.step == loop.max_steps:
            record = _record(state.step, state.window, scheduler.get_last_lr()[0])
            state.history.append(record)
            state.window = []
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            if log is not None and accelerator.is_main_process:
                log({k: v for k, v in record.items() if k != "step"}, state.step)
        if ckpt_dir and loop.checkpoint_every and state.step % loop.checkpoint_every == 0:
            check_weights(accelerator.unwrap_model(model), desc, state.step, lr_key, lr)  # no diverged resume point
            checkpoint.save(accelerator, ckpt_dir, state.step, fp, loop.keep_checkpoints)
    bar.close()
    model.eval()
    check_weights(accelerator.unwrap_model(model), desc, state.step, lr_key, lr)
    return accelerator.unwrap_model(model), state


def _record(step: int, window: list[tuple[float, float, int, float]], lr: float) -> dict:
    """Window means: loss, grad norm; tokens/s over the window's wall time."""
    n = max(len(window), 1)
    return {
        "step": step,
        "loss": sum(w[0] for w in window) / n,
        "grad_norm": sum(w[1] for w in window) / n,
        "lr": lr,
        "tokens_per_s": sum(w[2] for w in window) / max(sum(w[3] for w in window), 1e-9),
    }
