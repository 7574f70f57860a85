"""The RL step with length-bucketed training forwards (`rl.train_buckets`) and shared prompts (`rl.share_prompts`)
against one padded forward, side by side.

GRPO steps of the default profile (tool mode: the sandbox in the loop, rows stopping at EOS, `rl.max_new_tokens`) from
one trained model (default `models/sft`), once per bucket count, all in one process and from the same seed, so every
setting samples the same first batch. The reference and policy forwards run over the rows sorted by real length in
`train_buckets` groups, each cut to its own padding, and with `+share` after one forward over the distinct prompts
whose keys and values the rows of each group share; the log-probs are the same up to floating-point order, so the
later steps' loss, KL and reward must agree with the one-forward run's (the JSON gives their largest relative
difference; the first step's loss and KL do not depend on the policy). Reported: median s/step
after the first, the training phase (reference + policy forward + backward + AdamW, `rl/time_train_s`) and the
padding share of the batch that one forward computes. The settings alternate over `--repeats` rounds so background
load hits them alike; the machine's fp32 matmul GFLOP/s is measured before each run.

    .venv/bin/python benchmarks/bench_buckets.py --buckets 1,2,4,8 --steps 4 --repeats 2
    .venv/bin/python benchmarks/bench_buckets.py --buckets 1,4,4+share --out benchmarks/results/share_prompts.json

A setting is a bucket count, `+share` adding `rl.share_prompts: true` (otherwise false, whatever the params say).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dsmath.config import load_params
from dsmath.generation.tools import sandbox_tool
from dsmath.modeling.model import load_dir
from dsmath.rl.run import rl_problems
from dsmath.rl.scoring import Scorer
from dsmath.rl.trainer import RLTrainer
from dsmath.train.flops import matmul_flops_per_s


def parse_setting(label: str) -> dict:
    """'4' -> 4 buckets, prompts not shared; '4+share' -> 4 buckets, prompts shared."""
    buckets, _, extra = label.partition("+")
    if extra not in ("", "share"):
        raise ValueError(f"setting {label!r}: expected N or N+share")
    return {"train_buckets": int(buckets), "share_prompts": extra == "share"}


def run(params, model_dir: str, setting: str, steps: int, seed: int) -> dict:
    policy, tok = load_dir(model_dir)
    cfg = params.rl.model_copy(update=parse_setting(setting))
    train, _ = rl_problems(params)
    tool_fn = sandbox_tool(params.sandbox) if cfg.mode == "tool" else None
    trainer = RLTrainer(cfg, policy, tok, train, Scorer(cfg.reward, cfg.mode, params.rewards, params.sandbox), seed,
                        tool_fn)
    times, rows, padding = [], [], []
    collect = trainer.collect

    def collect_and_measure():  # the padding share of the batch the training forwards see
        batch, sampled, phase_times = collect()
        padding.append(1.0 - float(batch.rollout.attention_mask.float().mean()))
        return batch, sampled, phase_times

    trainer.collect = collect_and_measure
    for _ in range(steps):
        t0 = time.perf_counter()
        rows.append(trainer.step())
        times.append(time.perf_counter() - t0)
    later = rows[1:] or rows
    return {"buckets": setting, "s_per_step": statistics.median(times[1:] or times),
            "train_s": statistics.fmean(r["rl/time_train_s"] for r in later),
            "generate_s": statistics.fmean(r["rl/time_generate_s"] for r in later),
            "padding_share": statistics.fmean(padding),
            "per_step": {k: [r[k] for r in rows] for k in ("rl/loss", "rl/kl", "rl/reward_mean")},
            "response_len_mean": statistics.fmean(r["rl/response_len_mean"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--model", default="models/sft")
    ap.add_argument("--buckets", default="1,2,4,8")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="benchmarks/results/buckets.json")
    args = ap.parse_args()
    params = load_params(args.params)
    torch.set_num_threads(params.common.num_threads or torch.get_num_threads())
    settings = args.buckets.split(",")
    for b in settings:
        parse_setting(b)
    runs = []
    for r in range(args.repeats):
        for b in settings:
            gflops = matmul_flops_per_s() / 1e9
            out = run(params, args.model, b, args.steps, args.seed) | {"repeat": r, "matmul_gflops": gflops}
            runs.append(out)
            print(f"repeat {r} buckets {b}: {out['s_per_step']:.2f} s/step, train {out['train_s']:.2f} s, "
                  f"generate {out['generate_s']:.2f} s, padding {out['padding_share']:.0%} (matmul {gflops:.0f} "
                  f"GFLOP/s)", flush=True)
    median = {b: {k: statistics.median(x[k] for x in runs if x["buckets"] == b)
                  for k in ("s_per_step", "train_s", "generate_s", "matmul_gflops")} for b in settings}
    base = median[settings[0]]
    per_step = {b: next(x["per_step"] for x in runs if x["buckets"] == b) for b in settings}
    ref = per_step[settings[0]]

    def rel_diff(b: str, key: str) -> float:  # over the steps after the first (the first step's loss and KL do not
        return max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(per_step[b][key][1:], ref[key][1:],  # depend
                                                                     strict=True)), default=0.0)  # on the policy)
    summary = {
        "settings": {"params_file": args.params, "model": args.model, "mode": params.rl.mode,
                     "rows": params.rl.prompts_per_step * params.rl.group_size,
                     "max_new_tokens": params.rl.max_new_tokens, "steps": args.steps, "repeats": args.repeats,
                     "seed": args.seed, "threads": torch.get_num_threads()},
        "padding_share_one_forward": statistics.fmean(x["padding_share"] for x in runs),
        "median": median,
        "ratio_vs_first": {b: {"step": base["s_per_step"] / m["s_per_step"], "train": base["train_s"] / m["train_s"]}
                           for b, m in median.items()},
        "max_rel_diff_later_steps": {b: {k: rel_diff(b, k) for k in ref} for b in settings},
        "max_abs_diff_later_steps": {b: {k: max((abs(x - y) for x, y in zip(per_step[b][k][1:], ref[k][1:],
                                                                            strict=True)), default=0.0)
                                         for k in ref} for b in settings},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("padding_share_one_forward", "median", "ratio_vs_first",
                                              "max_rel_diff_later_steps", "max_abs_diff_later_steps")},
                     indent=1))


if __name__ == "__main__":
    main()
