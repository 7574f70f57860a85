"""Does bf16 training learn as much as float32? The SFT stage alone, in both precisions over several seeds.

The whole-pipeline comparison (`bench_precision_pipeline.py`) changes every training stage's precision at once and
runs one chain per precision, so a gap in the SFT model's accuracy there mixes bf16 with chain-to-chain noise (another
CPU's float32 rounding moved the SFT model by 0.5-4.2 points). This runs the real SFT stage (`python -m stages.sft`,
the full default budget) from one built chain's float32 pretrained model, once per (precision, seed), `--jobs` at a
time with `--threads` torch threads each (default one; runs of one seed go side by side, so that the machine's load
hits both precisions alike), and compares the SFT probe (greedy CoT / PoT / tool accuracy, per-equation accuracy,
pass@8 on the validation split) and the held-out loss: mean and sd over seeds per precision, and the paired (by
seed) difference with its standard error. `common.seed` is what a seed changes here: the order of the examples and
each problem's solution style (the data and the pretrained model are the chain's).

`--from pretrain` localizes one stage earlier: each run trains the pretrain stage in its precision from the chain's
base model, then SFT in float32 from that (so only pretraining's precision differs between arms); the table adds
the pretraining held-out NLL.

`--through rl` goes one stage on: from each run's SFT model, the RL stage (`python -m stages.rl <seed>`, the full
default budget, the run's seed as RL seed) in float32 (`--rl-dtype float32`: what `common.dtype: auto` does on a CPU
where RL measured slower in bf16) or in the arm's precision (`--rl-dtype arm`: auto on a GPU), and compares RL's
gain on the validation problems it tracks (`rl.eval_problems` greedy, at step 0 and every `rl.eval_every` steps):
the end minus the start, and the mean of the last three evaluations minus the start; and, with `--val-problems N`
(default 500), the SFT and RL models' greedy accuracy on N validation problems by the evaluate stage in float32, whose
difference is the gain to judge by (RL's curve reads 200 problems). The acceptance of a bf16 default asks the SFT ->
RL gain of both chains within noise of each other.

`--sampled N` (with `--through rl`) adds the Maj@K / Pass@K shape: the SFT and RL models of every run on the first N
synthetic **test** problems in CoT by the evaluate stage in float32, greedy and `evaluate.n_samples` samples (maj@k,
pass@k for `evaluate.k`), and with `--passk M` pass@k up to `evaluate.passk_samples` on the first M of them, the
stage's own seeds. Nothing is chosen from these figures: they are the curves the report's Fig. 7 draws, compared
between the arms. Besides mean, sd and the by-seed paired difference, the output gives each difference paired by
problem (`by_problem`: per problem the mean over seeds of arm minus control; SE = sd over problems / sqrt(n)).

An arm is a precision, optionally with a lever: `bfloat16+attention32` trains in bf16 with the attention's scores,
softmax and weighted values in float32 (`dsmath.modeling.attention.float32_attention` around the stage).

The code run is a snapshot of this project's `src/` and `stages/` taken at the start, so the working tree may change
while it runs.

    .venv/bin/python benchmarks/bench_precision_sft.py --chain /path/to/built/project --seeds 1234 1235 1236 \
        --out benchmarks/results/precision_sft.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from statistics import mean, stdev

import yaml
from bench_precision import _set  # a dotted params override, as the per-stage benchmark applies it
from precision_paired import by_problem, per_problem, sampled_result

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN_METRICS = ("heldout_after_nll", "tokens_per_s", "train_seconds")
RL_METRICS = ("val_greedy_acc_start", "val_greedy_acc_end", "reward_mean_last10", "kl_last10", "s_per_step")
METRICS = ("cot/greedy", "pot/greedy", "tool/greedy", "cot/equation_acc", "cot/pass@8", "cot/maj@8", "heldout_loss",
           "final_loss", "tokens_per_s", "train_seconds")


def snapshot(tmp: Path) -> Path:
    """A copy of this project's code (src/, stages/) that the runs import, immune to edits of the working tree."""
    code = tmp / f"code-{os.getpid()}"  # one per call: an earlier call's runs may still be importing theirs
    shutil.rmtree(code, ignore_errors=True)
    for d in ("src", "stages"):
        shutil.copytree(ROOT / d, code / d, ignore=shutil.ignore_patterns("__pycache__"))
    return code


LEVERS = {"attention32": "float32_attention"}  # arm suffix -> context manager of dsmath.modeling.attention


def parse_arm(arm: str) -> tuple[str, list[str]]:
    """'bfloat16+attention32' -> ('bfloat16', ['attention32'])."""
    dtype, *levers = arm.split("+")
    unknown = [x for x in levers if x not in LEVERS]
    if dtype not in ("float32", "bfloat16", "float16") or unknown:
        raise SystemExit(f"bad arm {arm!r}: a precision, then +lever from {sorted(LEVERS)}")
    return dtype, levers


def workspace(chain: Path, tmp: Path, arm: str, seed: int, params: Path, overrides: dict, start: str,
              reuse: bool = False, threads: int = 1) -> Path:
    """A scratch project for one run from stage `start`: the chain's data and earlier models linked in (never
    written), its own outputs. With `reuse`, a finished run's workspace made with the same params is kept."""
    ws = tmp / f"{start}-{arm}-{seed}"
    raw = yaml.safe_load(params.read_text())
    raw["common"].update(dtype=parse_arm(arm)[0], seed=seed, num_threads=threads, processes=1)
    for dotted, value in overrides.items():
        _set(raw, dotted, value)
    text = yaml.safe_dump(raw, sort_keys=False)
    if reuse and (ws / "result.json").exists() and (ws / "params.given.yaml").read_text() == text:
        return ws  # finished before with these params: run() reads its result
    shutil.rmtree(ws, ignore_errors=True)
    (ws / "models").mkdir(parents=True)
    (ws / "data").symlink_to(chain / "data")
    for model in ("tokenizer", "base") + (("pretrain",) if start == "sft" else ()):
        (ws / "models" / model).symlink_to(chain / "models" / model)
    (ws / "params.yaml").write_text(text)
    (ws / "params.given.yaml").write_text(text)
    return ws


def command(stage: str, levers: list[str]) -> list[str]:
    """The stage's command, inside the levers' context managers."""
    if not levers:
        return [sys.executable, "-m", f"stages.{stage}"]
    enter = "".join(f"    stack.enter_context(attention.{LEVERS[x]}())\n" for x in levers)
    script = ("import contextlib, runpy\nfrom dsmath.modeling import attention\n"
              f"with contextlib.ExitStack() as stack:\n{enter}"
              f"    runpy.run_module('stages.{stage}', run_name='__main__', alter_sys=True)\n")
    return [sys.executable, "-c", script]


@contextmanager
def edited_params(ws: Path) -> Iterator[dict]:
    """The workspace's params.yaml as a mapping to edit in the block; written back when the block ends."""
    path = ws / "params.yaml"
    raw = yaml.safe_load(path.read_text())
    yield raw
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def stage_env(ws: Path, code: Path, threads: int) -> dict:
    """The environment of a stage run in workspace `ws`: the code snapshot, its own MLflow store, `threads` threads."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code / "src"), str(code)]),
               MLFLOW_TRACKING_URI=f"sqlite:///{ws}/mlflow.db", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               OMP_NUM_THREADS=str(threads))
    env.pop("DSMATH_PARENT_RUN_ID", None)
    return env


def run(ws: Path, code: Path, start: str, levers: list[str], threads: int = 1) -> dict:
    """Run stage `start` and, after pretrain, SFT in float32; the SFT metrics (and pretraining's, prefixed). A
    workspace whose run finished (`--reuse`) is read, not run again."""
    if (ws / "result.json").exists():
        return json.loads((ws / "result.json").read_text())
    env = stage_env(ws, code, threads)
    t0 = time.perf_counter()
    out = {}
    for stage in ("pretrain", "sft") if start == "pretrain" else ("sft",):
        if stage == "sft" and start == "pretrain":  # only pretraining's precision differs between the arms
            with edited_params(ws) as raw:
                raw["common"]["dtype"] = "float32"
        with open(ws / f"{stage}.log", "w") as log:
            subprocess.run(command(stage, levers if stage == start else []), cwd=ws, env=env, check=True, stdout=log,
                           stderr=subprocess.STDOUT)
        metrics = json.loads((ws / "metrics" / f"{stage}.json").read_text())
        if stage == "pretrain":
            out |= {f"pretrain/{k}": metrics.get(k) for k in PRETRAIN_METRICS} | {"bf16": metrics.get("bf16")}
        else:
            out |= {k: metrics.get(k) for k in METRICS}
            out.setdefault("bf16", metrics.get("bf16"))
            out["matmul_gflops"] = metrics.get("matmul_gflops")
    result = {"wall_s": time.perf_counter() - t0, **out}
    (ws / "result.json").write_text(json.dumps(result))
    return result


def run_rl(ws: Path, code: Path, seed: int, dtype: str, threads: int = 1) -> dict:
    """The RL stage at seed `seed` in `dtype` from the workspace's SFT model; its summary and its validation curve's
    gains, prefixed `rl/`. A finished RL run of this precision (`rl-<dtype>.json`) is read, not run again."""
    done = ws / f"rl-{dtype}.json"
    if done.exists():
        return json.loads(done.read_text())
    with edited_params(ws) as raw:
        raw["common"].update(dtype=dtype, rl_seeds=[seed])  # the stage runs only the seeds of common.rl_seeds
    env = stage_env(ws, code, threads)
    t0 = time.perf_counter()
    with open(ws / f"rl-{dtype}.log", "w") as log:
        subprocess.run([sys.executable, "-m", "stages.rl", str(seed)], cwd=ws, env=env, check=True, stdout=log,
                       stderr=subprocess.STDOUT)
    metrics = json.loads((ws / "metrics" / "rl" / f"seed-{seed}.json").read_text())
    with open(ws / "plots" / "rl" / f"seed-{seed}.csv") as f:
        curve = [float(row["val_greedy_acc"]) for row in csv.DictReader(f) if row["val_greedy_acc"]]
    out = {f"rl/{k}": metrics.get(k) for k in RL_METRICS}
    out |= {"rl/gain_end": curve[-1] - curve[0], "rl/gain_last3": mean(curve[-3:]) - curve[0],
            "rl/bf16": metrics.get("bf16"), "rl/wall_s": time.perf_counter() - t0}
    done.write_text(json.dumps(out))
    return out


def run_evaluate(ws: Path, code: Path, model: str, seed: int, threads: int, tag: str, log: str,
                 evaluate: dict, datasets: dict[str, int]) -> dict:
    """Run the evaluate stage in float32 on models/<model> (rl: its seed-<seed> run) with `evaluate` keys and the
    first `datasets[name]` problems of each dataset (the others 0); its metrics. `tag` is the RL run's precision,
    which names the caller's cache file and must be that of the RL model on disk (the last RL run of the workspace)."""
    if model == "rl":
        ran = json.loads((ws / "metrics" / "rl" / f"seed-{seed}.json").read_text())
        if tag != ("-bfloat16" if ran.get("bf16") else "-float32"):
            raise SystemExit(f"{ws}: the RL model on disk is not the {tag[1:]} run; remove its rl-*.json to "
                             "train it again")
    with edited_params(ws) as raw:
        raw["common"].update(dtype="float32", rl_seeds=[seed])
        ev = raw["evaluate"]
        ev.update(evaluate)
        ev["datasets"] = {k: 0 for k in ev["datasets"]} | datasets
    with open(ws / log, "w") as f:
        subprocess.run([sys.executable, "-m", "stages.evaluate", model], cwd=ws, env=stage_env(ws, code, threads),
                       check=True, stdout=f, stderr=subprocess.STDOUT)
    return json.loads((ws / "metrics" / "eval" / f"{model}.json").read_text())


def val_greedy(ws: Path, code: Path, model: str, seed: int, problems: int, threads: int = 1, tag: str = "") -> float:
    """Greedy accuracy of models/<model> (rl: its seed-<seed> run) on the first `problems` validation problems in
    the primary metric's mode, by the evaluate stage in float32 (test datasets cut to the one problem the stage
    needs, its score unread: only `val/...` is). `tag` as in :func:`run_evaluate`."""
    done = ws / f"val-{model}{tag}-{problems}.json"
    if not done.exists():
        metrics = run_evaluate(ws, code, model, seed, threads, tag, f"evaluate-{model}.log",
                               dict(val_problems=problems, sampled_models=[], passk_problems=0, modes=["cot"]),
                               {"synthetic": 1})  # the stage needs one; never read
        key = "val/" + yaml.safe_load((ws / "params.yaml").read_text())["evaluate"]["primary_metric"]
        done.write_text(json.dumps({"acc": metrics[key], "problems": problems, "metric": key}))
    return json.loads(done.read_text())["acc"]


def sampled_eval(ws: Path, code: Path, model: str, seed: int, problems: int, passk: int, threads: int = 1,
                 tag: str = "") -> dict:
    """Maj@K / Pass@K of models/<model> (rl: its seed-<seed> run) on the first `problems` synthetic test problems in
    CoT, by the evaluate stage in float32 (greedy, `evaluate.n_samples` samples, pass@k up to `passk_samples` on the
    first `passk` problems; validation cut to one problem, unread): {"metrics": the stage's synthetic/cot/...
    figures, "ids": the problems', "problems": :func:`precision_paired.per_problem`}. `tag` as in
    :func:`run_evaluate`."""
    done = ws / f"sampled-{model}{tag}-{problems}-{passk}.json"
    if not done.exists():
        metrics = run_evaluate(ws, code, model, seed, threads, tag, f"evaluate-{model}-sampled.log",
                               dict(val_problems=1, modes=["cot"], sampled_models=[model],
                                    sampled_datasets=["synthetic"], sampled_modes=["cot"], passk_problems=passk),
                               {"synthetic": problems})
        folder = ws / "eval" / model / (f"seed-{seed}" if model == "rl" else "")
        rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line]
        rows = [r for r in rows if r.get("dataset") == "synthetic" and r.get("mode") == "cot"]
        n_k = max(yaml.safe_load((ws / "params.yaml").read_text())["evaluate"]["k"])
        done.write_text(json.dumps({"metrics": {k.removeprefix("synthetic/cot/"): v for k, v in metrics.items()
                                                if k.startswith("synthetic/cot/")},
                                    "ids": [r["id"] for r in rows], "problems": per_problem(rows, n_k)}))
    return json.loads(done.read_text())


def summarize(runs: dict[str, dict[int, dict]], arms: list[str]) -> dict:
    """Per metric: mean and sd over seeds per precision, and the paired difference (each other precision minus the
    first) over the seeds both have, with its standard error (sd of the per-seed differences / sqrt(n))."""
    table = {}
    first = arms[0]
    keys = next(iter(next(iter(runs.values())).values()))
    names = ([k for k in keys if k.startswith("pretrain/")] + list(METRICS)
             + [k for k in keys if k.startswith("rl/") and k != "rl/bf16"]
             + [k for k in keys if k.startswith("sampled/")])
    for m in names:
        row = {}
        for d in arms:
            xs = [r[m] for r in runs[d].values() if r.get(m) is not None]
            row[d] = {"mean": mean(xs), "sd": stdev(xs) if len(xs) > 1 else None, "n": len(xs)} if xs else None
        for d in arms[1:]:
            seeds = sorted(set(runs[first]) & set(runs[d]))
            diffs = [runs[d][s][m] - runs[first][s][m] for s in seeds if runs[d][s].get(m) is not None]
            if diffs:
                se = stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
                row[f"{d} - {first}"] = {"mean": mean(diffs), "se": se, "n": len(diffs)}
        table[m] = row
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", required=True, help="a project whose models/ (tokenizer, base, pretrain) and data/ "
                                                   "are built")
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--arms", nargs="+", default=["float32", "bfloat16"],
                    help="precisions, each optionally +lever (bfloat16+attention32); the first is the control")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1234, 1235, 1236])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=YAML",
                    help="params overrides for every run (e.g. sft.train.max_steps=100 for a quick look)")
    ap.add_argument("--from", dest="start", choices=["sft", "pretrain"], default="sft",
                    help="the stage whose precision the arms change (pretrain: then SFT in float32 from it)")
    ap.add_argument("--through", choices=["sft", "rl"], default="sft",
                    help="rl: then the RL stage from each run's SFT model (--rl-dtype), and its validation gain")
    ap.add_argument("--rl-dtype", choices=["float32", "arm"], default="float32",
                    help="RL's precision: float32 (auto on a CPU) or the arm's (auto on a GPU)")
    ap.add_argument("--val-problems", type=int, default=500,
                    help="with --through rl: the SFT and RL models' greedy accuracy on this many validation problems "
                         "(the evaluate stage, float32; 0: only RL's own curve)")
    ap.add_argument("--sampled", type=int, default=0,
                    help="with --through rl: Maj@K / Pass@K of the SFT and RL models on this many synthetic test "
                         "problems, CoT, the evaluate stage in float32 (0: off)")
    ap.add_argument("--passk", type=int, default=0,
                    help="with --sampled: pass@k up to evaluate.passk_samples on the first this many of them")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of each run (common.num_threads)")
    ap.add_argument("--tmp", default="/tmp/bench_precision_sft")
    ap.add_argument("--reuse", action="store_true", help="keep the runs of an earlier call with the same params")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    chain, tmp = Path(args.chain).resolve(), Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    code = snapshot(tmp)
    import torch

    from dsmath.runtime import precision  # noqa: E402  (the machine's facts, from this project's code)
    from dsmath.runtime.provenance import cpu_name
    from dsmath.train.flops import matmul_flops_per_s
    torch.set_num_threads(1)
    machine = {"cpu": cpu_name(), "cpu_bf16_kind": precision.bf16_kind(precision.cpu_flags()),
               "cores": os.cpu_count(),
               "matmul_gflops_1thread": {d: matmul_flops_per_s(2048, dtype=precision.DTYPES[d]) / 1e9
                                         for d in ("float32", "bfloat16")}}
    print(json.dumps(machine), flush=True)
    for arm in args.arms:
        parse_arm(arm)
    jobs = [(a, s) for s in args.seeds for a in args.arms]  # a seed's arms next to each other
    runs: dict[str, dict[int, dict]] = {a: {} for a in args.arms}
    problems: dict[str, dict[int, dict]] = {a: {} for a in args.arms}  # --sampled: per-problem figures

    def one(job):
        d, s = job
        ws = workspace(chain, tmp, d, s, Path(args.params), overrides, args.start, args.reuse, args.threads)
        result = run(ws, code, args.start, parse_arm(d)[1], args.threads)
        if args.through == "rl":
            rl_dtype = parse_arm(d)[0] if args.rl_dtype == "arm" else "float32"
            result = result | run_rl(ws, code, s, rl_dtype, args.threads)
            if args.val_problems:  # SFT and RL models on more validation problems than RL's own curve reads
                start = val_greedy(ws, code, "sft", s, args.val_problems, args.threads)
                end = val_greedy(ws, code, "rl", s, args.val_problems, args.threads, f"-{rl_dtype}")
                result |= {"rl/val_sft": start, "rl/val_rl": end, "rl/val_gain": end - start}
            if args.sampled:  # the Maj@K / Pass@K shape of both models on test problems
                sft = sampled_eval(ws, code, "sft", s, args.sampled, args.passk, args.threads)
                rl = sampled_eval(ws, code, "rl", s, args.sampled, args.passk, args.threads, f"-{rl_dtype}")
                result |= sampled_result(sft, rl)
                problems[d][s] = {"sft": sft["problems"], "rl": rl["problems"], "ids": sft["ids"]}
        runs[d][s] = result
        print(f"{d:9s} seed {s}: " + " ".join(f"{k}={v:.4g}" for k, v in result.items()
                                              if isinstance(v, float)), flush=True)
        return result

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    table = summarize(runs, args.arms)
    for m, row in table.items():
        cells = []
        for k, v in row.items():
            if v is None:
                continue
            spread = v.get("sd", v.get("se"))
            cells.append(f"{k} {v['mean']:.4g}" + (f" ({spread:.2g})" if spread is not None else ""))
        print(f"{m:18s} " + " | ".join(cells))
    paired = by_problem(problems, args.arms) if args.sampled else {}
    for name, v in paired.items():
        print(f"{name:40s} {v['mean']:+.4f} (SE {v['se']:.4f}, {v['problems']} problems x {v['seeds']} seeds)")
    if args.out:
        out = {"machine": machine, "from": args.start, "overrides": overrides, "seeds": args.seeds, "jobs": args.jobs,
               "threads": args.threads,
               "through": args.through, "rl_dtype": args.rl_dtype, "sampled": args.sampled, "passk": args.passk,
               "table": table, "by_problem": paired or None,
               "runs": {d: {str(s): r for s, r in rs.items()} for d, rs in runs.items()}}
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
