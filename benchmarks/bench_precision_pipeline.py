"""Two whole default pipeline runs on one machine, float32 and ``common.dtype: auto``: speed and learning parity (#34).

Reads two built projects (each ran ``make repro``, one after the other on the same machine, nothing else running):
their ``metrics/stage_times.json`` (the stage table and the wall time), ``metrics/eval/<model>.json`` (the supervised
models' accuracies) and ``eval/rl/seed-<s>/`` (each RL seed's metrics and per-problem predictions). Prints and
writes:

- the stage table: seconds per stage in each precision and auto / fp32, and the whole run's ratio;
- the supervised models' greedy accuracies on the synthetic test split per mode, in both precisions;
- SFT -> RL: per precision the mean and sd over seeds of the greedy gain (CoT and tool), the difference of the two
  means with its SE over seeds (sqrt(sd_a^2/n + sd_f^2/n)) and over problems (each precision's per-problem
  correctness averaged over its seeds, paired by problem), and whether the difference is within 2 SE;
- the Maj@K / Pass@K curves of the SFT and RL models in both precisions.

    .venv/bin/python benchmarks/bench_precision_pipeline.py --fp32 /tmp/fp32 --auto /tmp/auto \\
        --out benchmarks/results/precision_pipeline.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from statistics import mean, stdev

MODES = ("cot", "pot", "tool")
RL_MODES = ("cot", "tool")
KS = (1, 2, 4, 8)


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def stage_table(fp32: Path, auto: Path) -> dict:
    times = {name: load(root / "metrics" / "stage_times.json") for name, root in (("float32", fp32), ("auto", auto))}
    per = {name: {s["stage"]: s["seconds"] for s in t["stages"]} for name, t in times.items()}
    rows = [{"stage": s, "float32_s": per["float32"][s], "auto_s": per["auto"].get(s),
             "ratio": per["auto"][s] / per["float32"][s] if s in per["auto"] else None} for s in per["float32"]]
    wall = {name: t["wall_s"] for name, t in times.items()}
    return {"stages": rows, "wall_s": wall, "wall_ratio": wall["auto"] / wall["float32"],
            "machine": {name: {k: t.get(k) for k in ("cpu", "matmul_gflops", "git_commit")} for name, t in
                        times.items()}}


def rl_seeds(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "eval" / "rl").glob("seed-*") if (p / "metrics.json").exists())


def per_problem(root: Path, run: str | None, mode: str) -> dict[str, float]:
    """{problem id: 1.0 / 0.0} greedy correctness on the synthetic test split in `mode`."""
    folder = root / "eval" / ("sft" if run is None else f"rl/{run}")
    out = {}
    for line in (folder / "predictions.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("dataset", "synthetic") == "synthetic" and r["mode"] == mode:
            out[str(r["id"])] = float(r["greedy_correct"])
    return out


def rl_parity(fp32: Path, auto: Path) -> dict:
    out = {}
    for mode in RL_MODES:
        key = f"synthetic/{mode}/greedy"
        arms, problem_gain = {}, {}
        for name, root in (("float32", fp32), ("auto", auto)):
            sft = load(root / "metrics" / "eval" / "sft.json")[key]
            gains = [100 * (load(root / "eval" / "rl" / s / "metrics.json")[key] - sft) for s in rl_seeds(root)]
            arms[name] = {"sft": 100 * sft, "gains": gains, "mean": mean(gains), "sd": stdev(gains)}
            base = per_problem(root, None, mode)
            seeds = [per_problem(root, s, mode) for s in rl_seeds(root)]
            problem_gain[name] = {i: 100 * (mean(s[i] for s in seeds) - base[i]) for i in base}
        n = min(len(a["gains"]) for a in arms.values())
        diff = arms["auto"]["mean"] - arms["float32"]["mean"]
        se_seeds = math.sqrt(arms["auto"]["sd"] ** 2 / n + arms["float32"]["sd"] ** 2 / n)
        ids = sorted(set(problem_gain["auto"]) & set(problem_gain["float32"]))
        d = [problem_gain["auto"][i] - problem_gain["float32"][i] for i in ids]
        se_problems = stdev(d) / math.sqrt(len(d))
        se = max(se_seeds, se_problems)
        out[mode] = {**{name: arms[name] for name in arms}, "difference": diff, "se_seeds": se_seeds,
                     "se_problems": se_problems, "n_problems": len(ids), "within_2se": abs(diff) <= 2 * se}
    return out


def supervised(fp32: Path, auto: Path) -> dict:
    out = {}
    for model in ("base", "pretrain", "sft"):
        m = {name: load(root / "metrics" / "eval" / f"{model}.json") for name, root in
             (("float32", fp32), ("auto", auto))}
        out[model] = {mode: {name: 100 * m[name].get(f"synthetic/{mode}/greedy", math.nan) for name in m}
                      for mode in MODES}
        out[model]["bf16"] = {name: m[name].get("bf16") for name in m}
    return out


def curves(fp32: Path, auto: Path) -> dict:
    out = {}
    for model in ("sft", "rl"):
        m = {name: load(root / "metrics" / "eval" / f"{model}.json") for name, root in
             (("float32", fp32), ("auto", auto))}
        out[model] = {f"{kind}@{k}": {name: 100 * m[name][f"synthetic/cot/{kind}@{k}"] for name in m}
                      for kind in ("maj", "pass") for k in KS if f"synthetic/cot/{kind}@{k}" in m["float32"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", required=True, type=Path, help="a project that ran make repro with dtype float32")
    ap.add_argument("--auto", required=True, type=Path, help="the same, with dtype auto, on the same machine")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {"speed": stage_table(args.fp32, args.auto), "supervised": supervised(args.fp32, args.auto),
              "rl": rl_parity(args.fp32, args.auto), "curves": curves(args.fp32, args.auto)}
    speed = result["speed"]
    print(f"{'stage':20s} {'fp32 s':>9s} {'auto s':>9s} {'auto/fp32':>10s}")
    for r in speed["stages"]:
        print(f"{r['stage']:20s} {r['float32_s']:9.1f} {r['auto_s'] or math.nan:9.1f} {r['ratio'] or math.nan:10.2f}")
    print(f"{'make repro (wall)':20s} {speed['wall_s']['float32']:9.1f} {speed['wall_s']['auto']:9.1f} "
          f"{speed['wall_ratio']:10.2f}")
    print("\nsynthetic test, greedy (%)  fp32 / auto")
    for model, modes in result["supervised"].items():
        print(f"  {model:9s} " + "  ".join(f"{mode} {v['float32']:.1f} / {v['auto']:.1f}" for mode, v in modes.items()
                                         if mode in MODES) + f"   bf16: {modes['bf16']}")
    print("\nSFT -> RL gain (points, greedy): mean (sd) over seeds")
    for mode, r in result["rl"].items():
        print(f"  {mode:5s} fp32 {r['float32']['mean']:+.2f} ({r['float32']['sd']:.2f})  auto {r['auto']['mean']:+.2f}"
              f" ({r['auto']['sd']:.2f})  difference {r['difference']:+.2f}, SE seeds {r['se_seeds']:.2f},"
              f" SE problems {r['se_problems']:.2f}: within 2 SE {r['within_2se']}")
    print("\nCoT Maj@K / Pass@K (%)  fp32 / auto")
    for model, c in result["curves"].items():
        print(f"  {model:4s} " + "  ".join(f"{k} {v['float32']:.1f}/{v['auto']:.1f}" for k, v in c.items()))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
