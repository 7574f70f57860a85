"""The output head and its log-softmax, plain against fused (:mod:`dsmath.modeling.lm_head`), side by side in one
process.

Times forward + backward of ``log_softmax(h @ W.T)[target]`` summed, on the default model's head (hidden 160,
vocabulary 1,536 from params.yaml) at the row counts the stages use:

- pretrain / base: 32 x 256 positions, every one a target (8,160 after the shift);
- SFT: ~21 packed rows x 320 positions, the loss on the responses only (the fused path computes the targets only);
- RL: 128 rows x 112 completion tokens (the policy forward's per-token log-probs; no row dropped).

plain: the logits, ``log_softmax`` and ``gather`` of the code before :mod:`dsmath.modeling.lm_head` (what autograd keeps
and allocates for a (rows, vocab) tensor); fused: :func:`dsmath.modeling.lm_head.token_logprobs`. The two alternate; the
table gives the median ms per call, the ratio, the largest gradient difference, and the machine's matmul GFLOP/s.

    .venv/bin/python benchmarks/bench_lm_head.py --repeats 5 --out benchmarks/results/lm_head.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import torch

from dsmath.config import load_params
from dsmath.modeling.lm_head import token_logprobs
from dsmath.train.flops import matmul_flops_per_s


def plain(h: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = h @ w.t()
    return z.gather(-1, y[..., None]).squeeze(-1) - z.logsumexp(-1)


def plain_on(h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The plain head on every position, then the target positions `keep` (targets y) kept."""
    return plain(h, w, torch.zeros(len(h), dtype=torch.long).index_copy(0, keep, y))[keep]


def fused_on(h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The fused head on the target positions `keep` only."""
    return token_logprobs(h[keep], w, y)


def time_call(fn, h, w, y, repeats: int) -> tuple[list[float], tuple[torch.Tensor, torch.Tensor]]:
    times = []
    for _ in range(repeats + 1):  # the first call warms the allocator and is not counted
        h.grad = w.grad = None
        t0 = time.perf_counter()
        fn(h, w, y).sum().backward()
        times.append(time.perf_counter() - t0)
    return times[1:], (h.grad.clone(), w.grad.clone())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sft-target-share", type=float, default=0.56,
                    help="share of SFT positions with a loss (responses: 56% of the SFT stage's 20,000 examples)")
    ap.add_argument("--out", default="benchmarks/results/lm_head.json")
    args = ap.parse_args()
    params = load_params(args.params)
    torch.set_num_threads(params.common.num_threads or torch.get_num_threads())
    hidden, vocab = params.model.hidden_size, params.tokenizer.vocab_size
    rl_rows = params.rl.prompts_per_step * params.rl.group_size
    shapes = {
        "pretrain 32x256": (32 * 255, 32 * 255),
        "sft packed 21x320": (21 * 319, int(21 * 319 * args.sft_target_share)),
        f"rl {rl_rows}x{params.rl.max_new_tokens}": (rl_rows * params.rl.max_new_tokens,) * 2,
    }
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(vocab, hidden, generator=g) * 0.02).requires_grad_()
    rows, mm = [], [matmul_flops_per_s() / 1e9]
    for name, (positions, targets) in shapes.items():
        h_all = torch.randn(positions, hidden, generator=g).requires_grad_()
        y = torch.randint(0, vocab, (targets,), generator=g)
        keep = torch.randperm(positions, generator=g)[:targets].sort().values
        # plain computes the head on every position, then keeps the targets; fused only on the targets
        t_plain, g_plain = time_call(functools.partial(plain_on, keep=keep), h_all, w, y, args.repeats)
        t_fused, g_fused = time_call(functools.partial(fused_on, keep=keep), h_all, w, y, args.repeats)
        row = {"shape": name, "positions": positions, "targets": targets,
               "plain_ms": 1e3 * statistics.median(t_plain), "fused_ms": 1e3 * statistics.median(t_fused),
               "grad_h_max_abs_diff": float((g_plain[0] - g_fused[0]).abs().max()),
               "grad_w_max_rel_diff": float((g_plain[1] - g_fused[1]).abs().max() / g_plain[1].abs().max())}
        row["speedup"] = row["plain_ms"] / row["fused_ms"]
        rows.append(row)
        print(f"{name:24s} plain {row['plain_ms']:7.1f} ms  fused {row['fused_ms']:7.1f} ms  "
              f"{row['speedup']:.2f}x  (grad diff: h {row['grad_h_max_abs_diff']:.1e}, "
              f"W rel {row['grad_w_max_rel_diff']:.1e})")
    mm.append(matmul_flops_per_s() / 1e9)
    print(f"matmul 2048^2: {mm[0]:.0f} GFLOP/s before, {mm[1]:.0f} after")
    with open(args.out, "w") as f:
        json.dump({"matmul_gflops_before_after": mm, "threads": torch.get_num_threads(), "hidden": hidden,
                   "vocab": vocab, "repeats": args.repeats, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
