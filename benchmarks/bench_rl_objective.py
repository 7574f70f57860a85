"""RL variants from one SFT model, side by side in one process: accuracy gain and s/step.

Used for the objective choice of `rl.skip_zero_advantage` (faithful eq. 3 vs skipping zero-advantage rows) and to show
that `rl.algorithm=ppo` learns in tool mode. Each variant is the workdir's params.yaml with `rl.*` overrides, trained
from `<workdir>/models/sft` for `rl.steps` steps (no checkpoints, no MLflow), then evaluated greedily in `rl.mode` on
the validation split (where choices are made) and on the synthetic test split (reported), with the paired standard
error of the gain over the same problems. Curves go to `<out>.<variant>.csv`, a figure to `<out>.png`.

    .venv/bin/python benchmarks/bench_rl_objective.py --workdir /tmp/full --out benchmarks/results/rl_objective \\
        --variant faithful --variant skip:skip_zero_advantage=true --variant ppo:algorithm=ppo,steps=100
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import resource
import time
from pathlib import Path

import torch
import yaml

from dsmath.config import parse_params
from dsmath.data.io import read_jsonl
from dsmath.evaluation.evaluate import Generator, evaluate_split
from dsmath.generation.tools import sandbox_tool
from dsmath.modeling.model import load_dir
from dsmath.reporting.paper import standard_error_of_delta
from dsmath.rl.run import rl_problems
from dsmath.rl.scoring import Scorer
from dsmath.rl.trainer import RLTrainer
from dsmath.train import flops


def parse_variant(spec: str) -> tuple[str, dict]:
    """'name:key=value,key=value' -> (name, {key: yaml value}); keys are under `rl.`; a value may be a YAML list
    (`prompt_levels=[2,3]`: commas inside brackets do not split)."""
    name, _, rest = spec.partition(":")
    overrides = {}
    for item in filter(None, re.split(r",(?![^\[]*\])", rest)):
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    return name, overrides


def with_rl(raw: dict, overrides: dict):
    raw = json.loads(json.dumps(raw))
    for key, value in overrides.items():
        node = raw["rl"]
        *path, leaf = key.split(".")
        for p in path:
            node = node[p]
        node[leaf] = value
    return parse_params(raw)


def greedy_correct(model, tok, params, records, arithmetic: dict | None = None) -> list[bool]:
    """Greedy right/wrong per problem in rl.mode; in cot mode the completions' per-equation arithmetic
    (`equation_acc`, `n_equations`) goes into `arithmetic` when given."""
    if not records:
        return []
    gen = Generator(model, tok, params.evaluate, params.sandbox, params.common.seed)
    metrics, rows = evaluate_split(gen, records, params.rl.mode, params.evaluate, params.sandbox, params.rewards,
                                   sampled=False)
    if arithmetic is not None:
        arithmetic.update({k: metrics[k] for k in ("equation_acc", "n_equations") if k in metrics})
    return [bool(r["greedy_correct"]) for r in rows]


def _mean(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def paired(a: list[bool], b: list[bool]) -> dict:
    """Mean of b - a and its standard error over the same problems (the report's paired SE)."""
    return {"gain": (sum(b) - sum(a)) / len(a), "paired_se": standard_error_of_delta(a, b)}


def by_level(records: list[dict], before: list[bool], after: list[bool] | None = None) -> dict:
    """Greedy accuracy per synthetic level (the problem's step count), and the paired gain where `after` is given."""
    levels: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        levels.setdefault(str(rec.get("level", "?")), []).append(i)
    out = {}
    for level, rows in sorted(levels.items()):
        a = [before[i] for i in rows]
        out[level] = {"n": len(rows), "acc": sum(a) / len(a)}
        if after is not None:
            b = [after[i] for i in rows]
            out[level] |= {"acc": sum(b) / len(b), **paired(a, b)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a pipeline folder with params.yaml, data/ and models/sft")
    ap.add_argument("--variant", action="append", required=True, help="name[:rl_key=value,...]")
    ap.add_argument("--out", required=True, help="output prefix (writes <out>.json, <out>.<variant>.csv, <out>.png)")
    ap.add_argument("--val-only", action="store_true",
                    help="a tuning run: evaluate on the validation split only (the test split is not read)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    os.chdir(args.workdir)
    raw = yaml.safe_load(Path("params.yaml").read_text())
    base = parse_params(raw)
    threads = int(os.environ.get("BENCH_THREADS", 0))  # e.g. 1 for a second bench process beside the first
    torch.set_num_threads(threads or base.common.num_threads or torch.get_num_threads())
    syn = Path(base.common.paths.synthetic)
    val = read_jsonl(syn / "val.jsonl")
    test = [] if args.val_only else read_jsonl(syn / "test.jsonl")[: base.evaluate.datasets.synthetic]
    sft, tok = load_dir(Path(base.common.paths.models) / "sft")
    sft_arith: dict = {}
    sft_val, sft_test = greedy_correct(sft, tok, base, val, sft_arith), greedy_correct(sft, tok, base, test)
    sft_by_mode = {base.rl.mode: (sft_val, sft_test)}  # a variant in another rl.mode is paired with SFT in that mode
    report = {"machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                          "matmul_gflops": flops.matmul_flops_per_s() / 1e9},
              "sft": {"val_greedy": sum(sft_val) / len(val), "test_greedy": _mean(sft_test),
                      "val_arithmetic": sft_arith, "val_by_level": by_level(val, sft_val)},
              "variants": {}}
    print(json.dumps(report), flush=True)
    curves = {}
    for spec in args.variant:
        name, overrides = parse_variant(spec)
        params = with_rl(raw, overrides)
        cfg = params.rl
        policy, tok = load_dir(Path(params.common.paths.models) / "sft")
        train, probe = rl_problems(params)
        if cfg.mode not in sft_by_mode:
            sft_by_mode[cfg.mode] = (greedy_correct(sft, tok, params, val), greedy_correct(sft, tok, params, test))
            report["sft"] |= {f"{cfg.mode}_val_greedy": _mean(sft_by_mode[cfg.mode][0]),
                              f"{cfg.mode}_test_greedy": _mean(sft_by_mode[cfg.mode][1])}
        ref_val, ref_test = sft_by_mode[cfg.mode]
        scorer = Scorer(cfg.reward, cfg.mode, params.rewards, params.sandbox)
        tool_fn = sandbox_tool(params.sandbox) if cfg.mode == "tool" else None
        trainer = RLTrainer(cfg, policy, tok, train, scorer, params.common.rl_seeds[0], tool_fn)
        history = [{"step": 0, "rl/val_greedy_acc": trainer.greedy_accuracy(probe)}]
        t0 = time.perf_counter()
        for step in range(cfg.steps):
            m = {"step": step + 1, **trainer.step()}
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
                m["rl/val_greedy_acc"] = trainer.greedy_accuracy(probe)
            history.append(m)
            if (step + 1) % 10 == 0:
                print(name, step + 1, {k: round(v, 4) for k, v in m.items() if k in (
                    "rl/reward_mean", "rl/accuracy", "rl/kl", "rl/val_greedy_acc", "rl/time_step_s")}, flush=True)
        train_s = time.perf_counter() - t0
        rl_arith: dict = {}
        rl_val = greedy_correct(policy, tok, params, val, rl_arith)
        rl_test = greedy_correct(policy, tok, params, test)
        steps, last = history[1:], history[-10:]
        report["variants"][name] = {
            "overrides": overrides, "steps": cfg.steps, "s_per_step": train_s / cfg.steps,
            "val_greedy": sum(rl_val) / len(val), "test_greedy": _mean(rl_test),
            "val_arithmetic": rl_arith, "val": paired(ref_val, rl_val),
            "val_by_level": by_level(val, ref_val, rl_val),
            "test": paired(ref_test, rl_test) if test else None,
            "reward_first10": sum(h["rl/reward_mean"] for h in steps[:10]) / len(steps[:10]),
            "reward_last10": sum(h["rl/reward_mean"] for h in last) / len(last),
            "kl_last10": sum(h["rl/kl"] for h in last) / len(last),
            "trained_rows_mean": sum(h.get("rl/trained_rows", 0.0) for h in steps) / len(steps),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        print(name, json.dumps(report["variants"][name]), flush=True)
        curves[name] = history
        keys = ["step", "rl/reward_mean", "rl/accuracy", "rl/kl", "rl/zero_std_groups", "rl/trained_rows",
                "rl/time_step_s", "rl/val_greedy_acc"]
        with open(f"{out}.{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(history)
        Path(f"{out}.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(curves, Path(f"{out}.png"))


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    for name, hist in curves.items():
        rows = [h for h in hist if "rl/reward_mean" in h]
        steps = [h["step"] for h in rows]
        for ax, key in zip(axes[:2], ("rl/reward_mean", "rl/kl"), strict=True):
            ys = [h[key] for h in rows]
            smooth = [sum(ys[max(0, i - 9): i + 1]) / len(ys[max(0, i - 9): i + 1]) for i in range(len(ys))]
            ax.plot(steps, smooth, label=name)
            ax.set_title(f"{key} (10-step moving average)")
        val = [(h["step"], h["rl/val_greedy_acc"]) for h in hist if "rl/val_greedy_acc" in h]
        if val:
            axes[2].plot(*zip(*val, strict=True), marker="o", label=name)
        axes[2].set_title("greedy accuracy, 200 val problems")
    for ax in axes:
        ax.set_xlabel("RL step")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
