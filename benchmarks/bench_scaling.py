"""How cost grows: seconds per RL step against rows (questions x group size) and against new tokens, and evaluation
problems/s against the decoding batch size.

All on one trained model (default `models/sft`) in one process, on the default profile's settings (`params.yaml`):

- RL rows: GRPO steps in `rl.mode` (tool by default: the sandbox in the loop) at `rl.max_new_tokens`, rows stopping at
  EOS, for each `--rows` questions x group (e.g. 4x8); the median step after the first of `--steps`.
- RL tokens: the same with EOS disabled, so every row writes exactly N tokens, for each `--tokens` N (CoT prompts:
  no tool output spliced in), at `--token-rows`.
- Evaluation: greedy decoding of the first `--eval-problems` synthetic test problems in tool mode (program runs, the
  answer check) at each `--eval-batch` size; problems/s.

Every table carries the machine's fp32 matmul GFLOP/s measured in the same process (machines here differ by ~2x).

    .venv/bin/python benchmarks/bench_scaling.py --out benchmarks/results/scaling.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dsmath.config import load_params
from dsmath.data.io import read_jsonl
from dsmath.evaluation.evaluate import Generator, evaluate_split
from dsmath.generation.tools import sandbox_tool
from dsmath.modeling.model import load_dir
from dsmath.rl.run import rl_problems
from dsmath.rl.scoring import Scorer
from dsmath.rl.trainer import RLTrainer
from dsmath.train.flops import matmul_flops_per_s

ROOT = Path(__file__).resolve().parents[1]


def rl_seconds(params, model_dir: str, questions: int, group: int, steps: int, mode: str, new_tokens: int,
               stop_at_eos: bool, seed: int) -> dict:
    """Median s/step (after the first) of GRPO with these sizes, and the phase split of the trainer's metrics."""
    policy, tok = load_dir(model_dir)
    cfg = params.rl.model_copy(update={"prompts_per_step": questions, "group_size": group, "mode": mode,
                                       "max_new_tokens": new_tokens})
    train, _ = rl_problems(params)
    tool_fn = sandbox_tool(params.sandbox) if mode == "tool" else None
    trainer = RLTrainer(cfg, policy, tok, train, Scorer(cfg.reward, mode, params.rewards, params.sandbox), seed,
                        tool_fn)
    if not stop_at_eos:
        trainer.eos = [-1]  # no token id matches: every row decodes exactly new_tokens tokens
    times, rows = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        m = trainer.step()
        times.append(time.perf_counter() - t0)
        rows.append(m)
    timed = times[1:] or times
    mean = lambda k: statistics.fmean(r[k] for r in rows[1:] or rows)  # noqa: E731
    return {"questions": questions, "group": group, "rows": questions * group, "mode": mode,
            "new_tokens": new_tokens, "stop_at_eos": stop_at_eos, "s_per_step": statistics.median(timed),
            "generate_s": mean("rl/time_generate_s"), "score_s": mean("rl/time_score_s"),
            "train_s": mean("rl/time_train_s"), "completion_tokens_mean": mean("rl/response_len_mean")}


def eval_rate(params, model_dir: str, problems: int, batch: int) -> dict:
    """Greedy tool-mode problems/s on the first `problems` synthetic test problems at decoding batch `batch`."""
    model, tok = load_dir(model_dir)
    ev = params.evaluate.model_copy(update={"batch_size": batch})
    records = read_jsonl(Path(params.common.paths.synthetic) / "test.jsonl")[:problems]
    gen = Generator(model, tok, ev, params.sandbox, params.common.seed)
    t0 = time.perf_counter()
    m, _ = evaluate_split(gen, records, "tool", ev, params.sandbox, params.rewards, sampled=False)
    return {"batch": batch, "problems": problems, "problems_per_s": problems / (time.perf_counter() - t0),
            "greedy": m["greedy"]}


def sizes(spec: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split("x")) for item in spec.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "sft"))
    ap.add_argument("--rows", default="4x8,8x8,16x8,32x8", help="questions x group size, comma-separated")
    ap.add_argument("--tokens", default="32,64,128", help="new tokens per row (EOS disabled)")
    ap.add_argument("--token-rows", default="8x8")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--eval-problems", type=int, default=256)
    ap.add_argument("--eval-batch", default="16,32,64,128,256")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params(ROOT / "params.yaml")
    out: dict = {"settings": vars(args), "matmul_gflops_before": round(matmul_flops_per_s() / 1e9, 1)}
    mode, new_tokens = params.rl.mode, params.rl.max_new_tokens
    out["rl_rows"] = [rl_seconds(params, args.model, q, g, args.steps, mode, new_tokens, True, args.seed)
                      for q, g in sizes(args.rows)]
    (q, g), = sizes(args.token_rows)
    out["rl_tokens"] = [rl_seconds(params, args.model, q, g, args.steps, "cot", int(t), False, args.seed)
                        for t in args.tokens.split(",")]
    out["eval_batch"] = [eval_rate(params, args.model, args.eval_problems, int(b)) for b in args.eval_batch.split(",")]
    out["matmul_gflops_after"] = round(matmul_flops_per_s() / 1e9, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"matmul {out['matmul_gflops_before']} -> {out['matmul_gflops_after']} GFLOP/s")
    for r in out["rl_rows"] + out["rl_tokens"]:
        print(f"rl {r['mode']:<5}{r['questions']:>3}x{r['group']:<3}{r['new_tokens']:>5} tok"
              f"{' eos' if r['stop_at_eos'] else ' fix'}  {r['s_per_step']:6.2f} s/step  gen {r['generate_s']:5.2f} "
              f"score {r['score_s']:5.2f} train {r['train_s']:5.2f}  len {r['completion_tokens_mean']:.0f}")
    for r in out["eval_batch"]:
        print(f"eval batch {r['batch']:>4}  {r['problems_per_s']:6.1f} problems/s  greedy {r['greedy']:.3f}")


if __name__ == "__main__":
    main()
