"""Model FLOPs utilisation: achieved training FLOP/s against a plain float32 matmul on the same machine.

MFU = tokens/s * FLOPs/token / matmul FLOP/s, with FLOPs/token from :func:`dsmath.modeling.model.train_flops_per_token`
(PaLM's 6N + 12LHT) and the reference the best of a few timed ``(2048, 2048) @ (2048, 2048)`` float32 products.
"""

from __future__ import annotations

import time

import torch


def matmul_flops_per_s(
    m: int = 2048, k: int | None = None, n: int | None = None, seconds: float = 0.5, repeats: int = 3,
    device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
) -> float:
    """Best-of-`repeats` FLOP/s of an (m, k) @ (k, n) matmul (square when k, n are omitted) in `dtype` on `device`,
    each repeat timed over about `seconds`; 2 m k n FLOPs per product (CUDA is synchronised before each reading)."""
    k, n = k or m, n or m
    a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    a @ b  # warm-up: thread pool, caches, kernels
    sync()
    best = 0.0
    for _ in range(repeats):
        calls, t0 = 0, time.perf_counter()
        while True:
            a @ b
            calls += 1
            if calls % 8 == 0 or torch.device(device).type != "cuda":
                sync()
                dt = time.perf_counter() - t0
                if dt >= seconds:
                    break
        best = max(best, 2.0 * m * k * n * calls / dt)
    return best


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops_per_s: float) -> float:
    """Achieved / reference FLOP/s (0..1 in practice)."""
    return tokens_per_s * flops_per_token / max(peak_flops_per_s, 1e-9)
