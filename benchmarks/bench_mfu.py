"""Training throughput and model FLOPs utilisation (MFU) of the default model against a plain matmul.

MFU = tokens/s x FLOPs/token / (FLOP/s of an (n, n) @ (n, n) float32 matmul), FLOPs/token = 6N + 12LHT (PaLM).
Also reported against a matmul of the model's own MLP shape, (micro-batch tokens, hidden) @ (hidden, intermediate):
small hidden sizes cannot reach the square matmul's FLOP/s, and that second ratio shows how much of the gap is shape.
The training side is the real loop (:func:`dsmath.train.loop.train`: accelerate, AdamW, clipping, schedule) on
random tokens with the model and batch shape of a params profile (default: params.yaml, `pretrain` section).
Matmul and training runs are interleaved so background load hits both alike; the table gives every repeat, and
the JSON the median and best.

    .venv/bin/python benchmarks/bench_mfu.py                          # params.yaml, 3 repeats of 20 steps
    .venv/bin/python benchmarks/bench_mfu.py --params configs/smoke.yaml --steps 10 --out /tmp/mfu.json
    .venv/bin/python benchmarks/bench_mfu.py --device cuda --dtype bfloat16 --peak-tflops 989   # a GPU (H100/H200)

On a GPU the reference matmul runs in the training dtype there, and ``--peak-tflops`` (the card's dense spec) adds
MFU against the datasheet peak.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch

from dsmath.config import load_params
from dsmath.modeling.model import build_scratch, load_pretrained, param_count, train_flops_per_token
from dsmath.train.data import causal_batch
from dsmath.train.flops import matmul_flops_per_s
from dsmath.train.loop import make_accelerator, train


class _Vocab:
    """The tokenizer facts `build_scratch` needs: size and special ids."""

    pad_token_id, eos_token_id = 0, 1

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def train_tokens_per_s(params, steps: int, seed: int, device: str = "cpu",
                       dtype: str = "float32") -> tuple[float, object]:
    """Tokens/s of `steps` optimizer steps of the profile's model on random tokens (pretrain batch shape)."""
    loop = params.pretrain.train.model_copy(update={"max_steps": steps, "checkpoint_every": 0, "log_every": steps})
    if params.model.source == "pretrained":  # e.g. configs/smollm2.yaml: the real model's weights and vocabulary
        model, _ = load_pretrained(params.model)
    else:
        model = build_scratch(params.model, _Vocab(params.tokenizer.vocab_size), seed)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(4, vocab, (steps * loop.global_batch_size, loop.seq_len), generator=g)
    model, state = train(model, loop, lambda r: causal_batch(rows[list(r)]), len(rows), seed,
                         make_accelerator(device, dtype))
    return state.tokens / state.train_seconds, model


def _mlp_shape(params) -> tuple[int, int]:
    """(hidden, intermediate) of the profile's model: from params, or the pretrained model's config."""
    if params.model.source != "pretrained":
        return params.model.hidden_size, params.model.intermediate_size
    from transformers import AutoConfig

    from dsmath.modeling.model import resolve_path

    kwargs = {"gguf_file": params.model.gguf_file} if params.model.gguf_file else {}
    cfg = AutoConfig.from_pretrained(resolve_path(params.model.name_or_path), **kwargs)
    return cfg.hidden_size, cfg.intermediate_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--matmul-n", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the profile's common.num_threads)")
    ap.add_argument("--out", default="benchmarks/results/mfu.json")
    ap.add_argument("--batch", type=int, default=0, help="sequences per step, one micro-batch (0: the profile's)")
    ap.add_argument("--seq-len", type=int, default=0, help="tokens per sequence (0: the profile's)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--dtype", default="float32", help="training precision: float32 | bfloat16 (GPUs)")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's spec peak in --dtype (0: none)")
    args = ap.parse_args()
    from dsmath.runtime.precision import DTYPES

    mm_dtype = DTYPES[args.dtype]

    params = load_params(args.params)
    if args.batch or args.seq_len:
        loop = params.pretrain.train
        b = args.batch or loop.global_batch_size
        loop = loop.model_copy(update={"global_batch_size": b, "micro_batch_size": args.batch or loop.micro_batch_size,
                                       "seq_len": args.seq_len or loop.seq_len})
        params = params.model_copy(update={"pretrain": params.pretrain.model_copy(update={"train": loop})})
    torch.set_num_threads(args.threads or params.common.num_threads or torch.get_num_threads())
    loop = params.pretrain.train
    hidden, inter = _mlp_shape(params)
    shaped = (loop.micro_batch_size * loop.seq_len, hidden, inter)  # the model's MLP matmul
    runs = []
    for r in range(args.repeats):
        peak = matmul_flops_per_s(args.matmul_n, device=args.device, dtype=mm_dtype)
        peak_shaped = matmul_flops_per_s(*shaped, device=args.device, dtype=mm_dtype)
        tps, model = train_tokens_per_s(params, args.steps, seed=r, device=args.device, dtype=args.dtype)
        fpt = train_flops_per_token(model, loop.seq_len)
        achieved = tps * fpt
        runs.append(
            {
                "matmul_gflops": peak / 1e9,
                "shaped_matmul_gflops": peak_shaped / 1e9,
                "tokens_per_s": tps,
                "train_gflops": achieved / 1e9,
                "mfu": achieved / peak,
                "mfu_vs_shaped": achieved / peak_shaped,
                **({"mfu_vs_spec": achieved / (args.peak_tflops * 1e12)} if args.peak_tflops else {}),
            }
        )
        print(
            f"repeat {r}: matmul {args.matmul_n}^2 {peak / 1e9:6.1f} GFLOP/s | {shaped} {peak_shaped / 1e9:6.1f} "
            f"GFLOP/s | train {tps:7.0f} tok/s = {achieved / 1e9:6.1f} GFLOP/s | MFU {achieved / peak:.1%} "
            f"(vs shaped {achieved / peak_shaped:.1%})"
        )
    summary = {
        "load_avg_1m_at_end": os.getloadavg()[0],  # > 0.5 on 2 cores: other processes shared the CPU, numbers low
        "params_file": args.params,
        "device": args.device,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "model_params": param_count(model),
        "flops_per_token": fpt,
        "batch": [loop.global_batch_size, loop.seq_len],
        "shaped_matmul": list(shaped),
        "median": {k: statistics.median(run[k] for run in runs) for k in runs[0]},
        "best": {k: max(run[k] for run in runs) for k in runs[0]},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("median", "best")}, indent=2))


if __name__ == "__main__":
    main()
