"""Causal-LM training on a document corpus: the base ("coder") stage and continual math pretraining.

Both stages: hold out documents, pack the rest into ``(N, seq_len)`` blocks (each document ends with EOS), train with
:func:`dsmath.train.loop.train`, score held-out perplexity. Continual pretraining also scores the starting model, so
its metrics show the perplexity before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dsmath.modeling.model import param_count, train_flops_per_token
from dsmath.train import data, evaluate, flops
from dsmath.train.loop import LogFn, LoopState, train


@dataclass
class Corpus:
    """Training blocks (N, T) and held-out blocks (M, T) of one corpus."""

    train: torch.Tensor
    heldout: torch.Tensor


def prepare_corpus(docs: Sequence[dict], tokenizer, section, seed: int) -> Corpus:
    """Split documents (seeded), pack training blocks for `max_steps * global_batch_size` rows, held-out blocks
    for `eval_tokens` tokens. `section` is a params Base / Pretrain section."""
    loop = section.train
    train_docs, held_docs = data.split_heldout(docs, section.heldout_docs, seed)
    n_rows = loop.max_steps * loop.global_batch_size
    blocks = data.pack_docs((d["text"] for d in train_docs), tokenizer, loop.seq_len, n_rows)
    n_held = max(1, section.eval_tokens // loop.seq_len)
    heldout = data.pack_docs((d["text"] for d in held_docs), tokenizer, loop.seq_len, n_held)
    return Corpus(blocks, heldout)


def heldout_metrics(model, corpus: Corpus, batch_size: int, prefix: str = "heldout") -> dict[str, float]:
    """Mean NLL and perplexity of `model` on the held-out blocks: {prefix_nll, prefix_ppl}."""
    nll, _ = evaluate.heldout_nll(model, evaluate.block_batches(corpus.heldout, batch_size), desc=prefix)
    return {f"{prefix}_nll": nll, f"{prefix}_ppl": evaluate.perplexity(nll)}


def speed_metrics(model, state: LoopState, seq_len: float, measure_peak: bool = True) -> dict[str, float]:
    """Throughput and model FLOPs utilisation of a finished loop (MFU against a plain matmul, measured now)."""
    tps = state.tokens / max(state.train_seconds, 1e-9)
    fpt = train_flops_per_token(model, int(seq_len))
    out = {"tokens_per_s": tps, "flops_per_token": fpt, "params": param_count(model)}
    if measure_peak:
        peak = flops.matmul_flops_per_s()
        out |= {"matmul_gflops": peak / 1e9, "mfu": flops.mfu(tps, fpt, peak)}
    return out


def train_causal(
    model, corpus: Corpus, section, seed: int, accelerator, ckpt_dir, fingerprint: str, log: LogFn, stage: str
) -> tuple[torch.nn.Module, LoopState]:
    """Train `model` on the packed blocks for `section.train.max_steps` steps (resumable)."""
    blocks = corpus.train
    return train(
        model,
        section.train,
        lambda rows: data.causal_batch(blocks[list(rows)]),
        len(blocks),
        seed,
        accelerator,
        ckpt_dir=ckpt_dir,
        fingerprint=fingerprint,
        log=lambda m, step: log({f"{stage}/{k}": v for k, v in m.items()}, step),
        desc=stage,
    )


def loop_metrics(state: LoopState) -> dict[str, float]:
    """Final loss (mean of the last logged window), steps, tokens, training seconds, resume point."""
    last = state.history[-1]["loss"] if state.history else float("nan")
    return {
        "final_loss": last,
        "steps": state.step,
        "tokens": state.tokens,
        "train_seconds": state.train_seconds,
        "resumed_from_step": state.resumed_from,
    }
