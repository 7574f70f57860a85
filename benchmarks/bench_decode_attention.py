"""The last decoding lever of #34 measured: a bf16 KV cache read by a fused CPU kernel.

RL and evaluation decode one token at a time, and a decoding step of the default model is bound by reading the KV
cache (`dsmath.generation.engines`). bf16 halves those bytes, but torch's batched bf16 matmuls over the cache's
slices copy their operands first (1.5x slower steps on an AMX Xeon, `benchmarks/HISTORY.md`), so the engine keeps its
cache in float32. This benchmark compiles a fused decoding attention (`decode_attention_kernel.cpp`: the scores, the
softmax and the weighted values of one query per row and kv head in one pass, float32 arithmetic over a float32 or
bf16 cache, AVX-512 where the compiler targets it) and runs `FastLlama`'s decoding step with it, side by side with the
engine as it is, on the same model, prompts and tokens:

- ``fp32``: the engine as `make repro` runs it (float32 weights and cache);
- ``bf16w``: bf16 weights, float32 cache and attention (what the engine does under `dtype: bfloat16` on a CPU);
- ``fused32``: float32 weights, float32 cache, the fused kernel (the fusion alone);
- ``fused16c``: float32 weights, bf16 cache, the fused kernel (the cache's bytes alone);
- ``fused16``: bf16 weights, bf16 cache, the fused kernel (the whole lever).

Every variant decodes the same token sequence (teacher-forced, EOS never ends a row), so their logits are compared
step by step with the float32 engine's: max |difference| and the share of steps whose argmax agrees. Two timings,
each the median over ``--repeats`` interleaved runs: the decoding steps alone (``ms_per_step``, the prefill
excluded), and the whole of `dsmath.generation.rollout.sample` with that engine (``sample_s``: prefill, steps,
sampling at temperature 1, the rows' bookkeeping; prompts shared across a group as RL and evaluation do; no EOS, so
every row runs ``--steps`` tokens). Shapes: the RL step (16 prompts x 8), evaluation's samples (32 x 8) and its
greedy batch (256 distinct prompts).

    .venv/bin/python benchmarks/bench_decode_attention.py --out benchmarks/results/decode_attention.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_rollout import default_model, make_prompts

import dsmath.generation.rollout as rollout
from dsmath.generation.engines import FastLlama, _add_linear
from dsmath.generation.rollout import left_pad
from dsmath.runtime import precision
from dsmath.runtime.provenance import cpu_name
from dsmath.train.flops import matmul_flops_per_s

HERE = Path(__file__).resolve().parent
SHAPES = {"rl": (16, 8), "eval_sampled": (32, 8), "eval_greedy": (256, 1)}  # distinct prompts x rows per prompt


def load_kernel(avx512: bool = True):
    """Compile (or load from torch's extension cache) the fused decoding attention; avx512=False: its scalar loops,
    as a CPU without AVX-512 would run them."""
    from torch.utils.cpp_extension import load

    flags = ["-O3", "-march=native", "-fopenmp"] + ([] if avx512 else ["-mno-avx512f"])
    return load(name="dsmath_decode_attention" + ("" if avx512 else "_scalar"),
                sources=[str(HERE / "decode_attention_kernel.cpp")], extra_cflags=flags, extra_ldflags=["-fopenmp"],
                verbose=False)


class FusedLlama(FastLlama):
    """`FastLlama` whose decoding step attends through the fused kernel, over a cache in `cache_dtype` whose keys are
    stored in transposed blocks of 16 slots, (layers, N, kv_heads, max_len / 16, D, 16), so that the scores of 16
    slots are D 16-wide multiply-adds over one contiguous block (values as the engine's: (layers, N, kv_heads,
    max_len, D))."""

    def __init__(self, model, batch: int, max_len: int, kernel, dtype=None, cache_dtype=torch.float32):
        super().__init__(model, batch, max_len, dtype)
        self.kernel, self.cache_dtype = kernel, cache_dtype
        layers, _, n, kv, m, d = self.cache.shape
        self.kt = torch.empty(layers, n, kv, -(-m // 16), d, 16, dtype=cache_dtype)
        self.vv = torch.empty(layers, n, kv, m, d, dtype=cache_dtype)
        self.prompt_kt: list[torch.Tensor] = []
        self.prompt_v: list[torch.Tensor] = []
        self.prompt_bias = torch.empty(0)
        self.no_group = torch.zeros(batch, dtype=torch.long)

    def prefill(self, ids, mask, inverse=None):
        logits = super().prefill(ids, mask, inverse)  # the engine's float32 prefill, then its cache moved over
        p = ids.shape[1]
        if self.shared is None:
            self.kt[:, :, :, : -(-p // 16)] = blocks(self.cache[:, 0, :, :, :p])
            self.vv[..., :p, :] = self.cache[:, 1, :, :, :p]
        else:
            u, kv = mask.shape[0], self.kv_heads
            self.prompt_kt = [blocks(k.view(u, kv, p, -1)).to(self.cache_dtype) for k in self.shared.k]
            self.prompt_v = [v.view(u, kv, p, -1).to(self.cache_dtype) for v in self.shared.v]
            self.prompt_bias = torch.zeros(u, p).masked_fill_(~mask.bool(), float("-inf"))
        return logits

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """`FastLlama.step` with the attention over the cache in one kernel call per layer."""
        n, t = tokens.shape[0], self.length
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        shared = self.shared
        slot = t if shared is None else t - shared.length
        if shared is None:
            self.bias[:, t] = 0.0
        cis = self.cis[self.pos][:, None]
        empty = torch.empty(0, dtype=self.cache_dtype)
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            qkv = F.linear(self._norm(x), layer.wqkv, layer.bqkv).view(n, -1, d)
            self._rotate_(qkv, cis)
            self.kt[i, :, :, slot // 16, :, slot % 16] = qkv[:, h: h + kv]
            self.vv[i, :, :, slot] = qkv[:, h + kv:]
            q = qkv[:, :h].float().reshape(n, kv, h // kv, d).contiguous()
            if shared is None:
                a = self.kernel.attend(q, empty, empty, self.prompt_bias, self.no_group, self.kt[i], self.vv[i],
                                       t + 1, self.bias)
            else:
                a = self.kernel.attend(q, self.prompt_kt[i], self.prompt_v[i], self.prompt_bias, shared.group,
                                       self.kt[i], self.vv[i], slot + 1, torch.empty(0))
            x = _add_linear(x, a.view(n, -1).to(x.dtype), layer.wo_t, layer.bo)
            gate, up = F.linear(self._norm(x), layer.wgu, layer.bgu).chunk(2, dim=-1)
            x = _add_linear(x, F.silu(gate).mul_(up), layer.wd_t, layer.bd)
        self.length, self.pos = t + 1, self.pos + 1
        return F.linear(self._norm(x) * self.final_gain, *self.lm_head)

    def keep(self, rows: torch.Tensor) -> None:
        """Only the batch rows `rows` stay (a gather into new buffers: simpler than the engine's in-place moves)."""
        if self.shared is not None:
            self.shared.keep(rows)
        self.kt, self.vv = self.kt[:, rows], self.vv[:, rows]
        self.bias, self.pos = self.bias[rows], self.pos[rows]


def blocks(k: torch.Tensor) -> torch.Tensor:
    """Keys (..., L, D) -> (..., ceil(L / 16), D, 16): blocks of 16 slots, each transposed (the tail zero-padded)."""
    *lead, length, d = k.shape
    padded = F.pad(k, (0, 0, 0, -length % 16))
    return padded.view(*lead, -1, 16, d).transpose(-1, -2).contiguous()


def check_kernel(kernel, seed: int = 0) -> float:
    """Max |kernel - reference| over a small case with every path (shared prompts with padding, GQA, own slots with
    padding, a bf16 cache; the reference on the same bf16-rounded keys and values); raises above 1e-4."""
    g = torch.Generator().manual_seed(seed)
    u, rows_per, kv, heads_per, d, p, cap, s = 3, 4, 2, 3, 24, 21, 50, 37
    n = u * rows_per
    group = torch.arange(u).repeat_interleave(rows_per)
    q = torch.randn(n, kv, heads_per, d, generator=g)
    pk, pv = torch.randn(2, u, kv, p, d, generator=g)
    k, v = torch.randn(2, n, kv, cap, d, generator=g)
    pbias = torch.zeros(u, p).masked_fill_(torch.rand(u, p, generator=g) < 0.2, float("-inf"))
    kbias = torch.zeros(n, cap)
    kbias[:, :5].masked_fill_(torch.rand(n, 5, generator=g) < 0.5, float("-inf"))
    worst = 0.0
    for dtype in (torch.float32, torch.bfloat16):
        def r(x, dtype=dtype):  # what the cache holds
            return x.to(dtype).float()

        empty = torch.empty(0, dtype=dtype)
        keys, values = torch.cat([r(pk)[group], r(k)[:, :, :s]], 2), torch.cat([r(pv)[group], r(v)[:, :, :s]], 2)
        bias = torch.cat([pbias[group], kbias[:, :s]], 1)[:, None, None]
        want = torch.softmax(q @ keys.transpose(-1, -2) + bias, -1) @ values
        got = kernel.attend(q, blocks(pk).to(dtype), pv.to(dtype), pbias, group, blocks(k).to(dtype), v.to(dtype),
                            s, kbias)
        worst = max(worst, float((got - want).abs().max()))
        want = torch.softmax(q @ r(k)[:, :, :s].transpose(-1, -2) + kbias[:, None, None, :s], -1) @ r(v)[:, :, :s]
        got = kernel.attend(q, empty, empty, torch.empty(0), torch.zeros(n, dtype=torch.long), blocks(k).to(dtype),
                            v.to(dtype), s, kbias)
        worst = max(worst, float((got - want).abs().max()))
    if worst > 1e-4:
        raise AssertionError(f"fused attention differs from the reference by {worst:.2e}")
    return worst


VARIANTS = {  # name -> (engine class, keyword arguments); FusedLlama's get the kernel too
    "fp32": (FastLlama, {}),
    "bf16w": (FastLlama, {"dtype": torch.bfloat16}),
    "fused32": (FusedLlama, {}),
    "fused16c": (FusedLlama, {"cache_dtype": torch.bfloat16}),
    "fused16": (FusedLlama, {"dtype": torch.bfloat16, "cache_dtype": torch.bfloat16}),
}


def engine_maker(name: str, kernel):
    """(model, batch, max_len) -> the engine of variant `name`."""
    cls, kwargs = VARIANTS[name]
    kwargs = kwargs | ({"kernel": kernel} if cls is FusedLlama else {})
    return lambda model, batch, max_len: cls(model, batch, max_len, **kwargs)


def variants(model, kernel):
    """name -> engine constructor (batch, max_len) over `model`."""
    def over(make):
        return lambda batch, max_len: make(model, batch, max_len)

    return {name: over(engine_maker(name, kernel)) for name in VARIANTS}


def decode(make, ids, mask, inverse, tokens, keep_logits: bool):
    """Prefill, then one step per column of tokens (N, S); -> (seconds of the steps, logits per step or None)."""
    n = tokens.shape[0]
    engine = make(n, ids.shape[1] + tokens.shape[1] + 1)
    with torch.inference_mode():
        engine.prefill(ids, mask, inverse)
        out = []
        start = time.perf_counter()
        for j in range(tokens.shape[1]):
            logits = engine.step(tokens[:, j])
            if keep_logits:
                out.append(logits.float())
        return time.perf_counter() - start, out or None


def time_sample(model, make, prompts: list[list[int]], group: int, steps: int, seed: int) -> float:
    """Seconds of one `rollout.sample` call over `prompts`, each repeated `group` times, with the engine `make`."""
    real = rollout.make_engine
    rollout.make_engine = lambda _model, batch, max_len, _engine, _dtype: make(batch, max_len)
    try:
        start = time.perf_counter()
        rollout.sample(model, [p for p in prompts for _ in range(group)], max_new_tokens=steps, eos_token_id=[],
                       pad_token_id=0, temperature=1.0, seed=seed, share_prompts=group > 1)
        return time.perf_counter() - start
    finally:
        rollout.make_engine = real


def matmul_gflops(dtype=torch.float32) -> float:
    """This machine's 2048^2 matmul rate in GFLOP/s, as every benchmark here reports it."""
    return round(matmul_flops_per_s(2048, dtype=dtype) / 1e9, 1)


def cpu_flags() -> list[str]:
    """The CPU's vector and bf16 flags that matter to the kernel."""
    return sorted(precision.cpu_flags() & ({"avx2", "avx512f", "avx512bw", "avx512vl"} | precision.NATIVE_BF16_FLAGS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="decoding steps (the default max_new_tokens is 208)")
    ap.add_argument("--prompt-len", type=int, default=56, help="mean prompt length (+-25%%)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (params.yaml common.num_threads)")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernel = load_kernel()
    kernel_error = check_kernel(kernel)
    model = default_model(args.seed)
    engines = variants(model, kernel)
    vocab = model.config.vocab_size
    result = {"cpu": cpu_name(), "flags": cpu_flags(), "threads": args.threads, "steps": args.steps,
              "prompt_len": args.prompt_len, "repeats": args.repeats, "kernel_max_abs_error": kernel_error,
              "matmul_gflops_fp32_start": matmul_gflops(),
              "matmul_gflops_bf16_start": matmul_gflops(torch.bfloat16), "shapes": {}}
    print(f"{result['cpu']} {result['flags']} threads {args.threads}; 2048^2 matmul fp32 "
          f"{result['matmul_gflops_fp32_start']} / bf16 {result['matmul_gflops_bf16_start']} GFLOP/s")
    for shape in args.shapes:
        u, g = SHAPES[shape]
        prompts = make_prompts(u, args.prompt_len, vocab, args.seed)
        ids, mask = left_pad(prompts, pad_token_id=0)
        inverse = torch.arange(u).repeat_interleave(g) if g > 1 else None
        tokens = torch.randint(4, vocab, (u * g, args.steps), generator=torch.Generator().manual_seed(args.seed))
        _, ref = decode(engines["fp32"], ids, mask, inverse, tokens, keep_logits=True)
        row = {"rows": u * g, "prompts": u, "group": g, "variants": {}}
        for name, make in engines.items():
            _, logits = decode(make, ids, mask, inverse, tokens, keep_logits=True)
            diff = max(float((a - b).abs().max()) for a, b in zip(logits, ref, strict=True))
            agree = statistics.mean(float((a.argmax(-1) == b.argmax(-1)).float().mean())
                                    for a, b in zip(logits, ref, strict=True))
            row["variants"][name] = {"max_abs_logit_diff": diff, "argmax_agreement": round(agree, 5), "s": [],
                                     "sample_runs_s": []}
        for rep in range(args.repeats):  # interleaved: background load hits every variant alike
            for name, make in engines.items():
                v = row["variants"][name]
                v["s"].append(decode(make, ids, mask, inverse, tokens, keep_logits=False)[0])
                v["sample_runs_s"].append(time_sample(model, make, prompts, g, args.steps, seed=rep))
        base = statistics.median(row["variants"]["fp32"]["s"])
        base_sample = statistics.median(row["variants"]["fp32"]["sample_runs_s"])
        for name, v in row["variants"].items():
            v["ms_per_step"] = round(1e3 * statistics.median(v["s"]) / args.steps, 3)
            v["speedup_vs_fp32"] = round(base / statistics.median(v["s"]), 3)
            v["sample_s"] = round(statistics.median(v["sample_runs_s"]), 3)
            v["sample_speedup_vs_fp32"] = round(base_sample / v["sample_s"], 3)
            print(f"{shape:13s} {name:9s} {v['ms_per_step']:7.3f} ms/step  x{v['speedup_vs_fp32']:.2f}  "
                  f"sample() {v['sample_s']:6.2f} s  x{v['sample_speedup_vs_fp32']:.2f}  "
                  f"max|dlogit| {v['max_abs_logit_diff']:.2e}  argmax agree {v['argmax_agreement']:.4f}")
        result["shapes"][shape] = row
    result["matmul_gflops_fp32_end"] = matmul_gflops()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
