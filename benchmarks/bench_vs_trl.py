"""dsmath's GRPO step against TRL's GRPOTrainer at equal work, side by side on one machine.

Both train the same model folder (default `models/sft`) with the same objective and the same work per step:
`--questions` questions x `--group` samples from the current policy at temperature 1 (no top-p / top-k), at most
`--new-tokens` new tokens, dsmath's accuracy reward in `--mode` (default CoT: no sandbox in the loop), the group's
mean/std baseline, beta * k3 KL to the frozen reference, per-output token mean then mean over outputs (TRL's
`loss_type="grpo"`, dsmath's `seq-mean-token-mean`), one pass and one AdamW step per batch, every row in the
objective, float32, the same torch thread count. The questions are the same on both sides, in the same order (the
first of dsmath's RL prompt stream for `--seed`).

TRL is not a project dependency: it is installed into its own environment, `benchmarks/.venv-trl` (made on first
use: a venv that sees the project's packages through a .pth file, plus `pip install --no-deps trl==<--trl>`). Each
measurement runs in a fresh subprocess; the sides alternate (dsmath, TRL, dsmath, TRL, ... `--repeats` times) so that
drift in the machine's load falls on both. Per side: seconds per step (median over the steps after the first, which
pays for warm-up), the phase split (generate / reward / reference forward / old-policy forward / policy forward /
backward / optimiser / other), peak RSS, and the machine's fp32 matmul GFLOP/s measured in the same process.

    .venv/bin/python benchmarks/bench_vs_trl.py --steps 6 --repeats 2 --out benchmarks/results/vs_trl.json
    .venv/bin/python benchmarks/bench_vs_trl.py --skip-zero-advantage ...   # also dsmath with the optional skip
    .venv/bin/python benchmarks/bench_vs_trl.py --train-buckets 4 ...        # also dsmath with rl.train_buckets 4
    .venv/bin/python benchmarks/bench_vs_trl.py --defaults ...               # also dsmath with params.yaml's engine

Sides: `dsmath` is the plain engine (one padded training forward, every row's prompt in its own row), `dsmath-skip`
adds the zero-advantage skip, `dsmath-buckets` the length buckets alone, `dsmath-default` the engine switches of
params.yaml as they stand (`rl.train_buckets`, `rl.share_prompts`): the step `make repro` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRL_ENV = ROOT / "benchmarks" / ".venv-trl"
PHASES = ("generate", "reward", "reference", "old_policy", "policy_forward", "backward", "optimizer")


# ----------------------------------------------------------------------------------------------------------------
# timing helpers shared by both sides


class Phases:
    """Seconds per phase, accumulated over the current step; `lap()` closes the step."""

    def __init__(self):
        self.now: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []

    @contextlib.contextmanager
    def time(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.now[phase] += time.perf_counter() - t0

    def wrap(self, fn, phase):
        """fn, timed into `phase` (a name, or a callable of fn's arguments returning one)."""
        def timed(*args, **kwargs):
            with self.time(phase(*args, **kwargs) if callable(phase) else phase):
                return fn(*args, **kwargs)
        return timed

    def lap(self, step_s: float) -> None:
        row = {p: self.now.get(p, 0.0) for p in PHASES}
        row["step"] = step_s
        row["other"] = step_s - sum(row[p] for p in PHASES)
        self.steps.append(row)
        self.now = defaultdict(float)


def time_backward_and_optimizer(phases: Phases) -> None:
    """Every Tensor.backward and every optimizer step of this process into the backward / optimizer phases."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    torch.Tensor.backward = phases.wrap(torch.Tensor.backward, "backward")
    started: list[float] = []
    register_optimizer_step_pre_hook(lambda *a: started.append(time.perf_counter()))
    register_optimizer_step_post_hook(lambda *a: phases.now.__setitem__(
        "optimizer", phases.now["optimizer"] + time.perf_counter() - started.pop()))


def summary(phases: Phases, side: str, args, extra: dict) -> dict:
    from dsmath.train.flops import matmul_flops_per_s

    timed = phases.steps[1:] or phases.steps  # the first step pays for warm-up
    return {
        "side": side, "steps": len(phases.steps), "s_per_step_median": statistics.median(r["step"] for r in timed),
        "s_per_step_mean": statistics.fmean(r["step"] for r in timed),
        "phases_mean_s": {p: statistics.fmean(r[p] for r in timed) for p in (*PHASES, "other")},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "matmul_gflops": round(matmul_flops_per_s() / 1e9, 1), "threads": args.threads, **extra,
    }


ENGINE_SWITCHES = ("train_buckets", "share_prompts")  # how the step is computed, not what: from params for -default


def engine_switches(side: str | None, params_rl, train_buckets: int) -> dict:
    """The engine switches of a dsmath side: params.yaml's for `dsmath-default`, else the plain engine (with
    `train_buckets` for `dsmath-buckets`)."""
    if side == "dsmath-default":
        return {k: getattr(params_rl, k) for k in ENGINE_SWITCHES}
    return {"train_buckets": train_buckets if side == "dsmath-buckets" else 1, "share_prompts": False}


def shared_setup(args):
    """(params, the RL config of the benchmark, the questions of every step, the reward function)."""
    import torch

    from dsmath.config import load_params
    from dsmath.rewards import build_reward
    from dsmath.rl.run import rl_problems

    torch.set_num_threads(args.threads)
    params = load_params(ROOT / "params.yaml")
    cfg = params.rl.model_copy(update={
        "algorithm": "grpo", "advantage": "outcome", "mode": args.mode, "reward": "accuracy",
        "prompts_per_step": args.questions, "group_size": args.group, "max_new_tokens": args.new_tokens,
        "beta": args.beta, "kl": "k3", "mu": 1, "minibatches": 1, "temperature": 1.0, "top_p": 1.0,
        "aggregation": "seq-mean-token-mean", "scale_rewards": True, "warmup_steps": 0, "dynamic_sampling": False,
        "overlong_buffer": 0, "clip_eps_high": None, "importance_ratio": "token", "ref_reset_every": 0,
        "skip_zero_advantage": args.skip_zero_advantage,
        **engine_switches(getattr(args, "side", None), params.rl, args.train_buckets),
    })
    train, _ = rl_problems(params)
    reward = build_reward("accuracy", args.mode, params.rewards, params.sandbox)
    return params, cfg, train, reward


def step_questions(cfg, train, seed: int, steps: int) -> list[dict]:
    """The questions dsmath's trainer takes for `steps` steps (its seeded stream), in order: `RLTrainer.prompts_at`
    needs only the problems and the seed of a trainer, so no model is built for it."""
    from types import SimpleNamespace

    from dsmath.rl.trainer import RLTrainer

    return RLTrainer.prompts_at(SimpleNamespace(problems=list(train), seed=seed), 0, steps * cfg.prompts_per_step)


# ----------------------------------------------------------------------------------------------------------------
# the two sides (each in its own process)


def run_dsmath(args) -> dict:
    import torch

    import dsmath.rl.trainer as trainer_mod
    from dsmath.modeling.model import load_dir
    from dsmath.rl.scoring import Scorer

    params, cfg, train, _ = shared_setup(args)
    policy, tok = load_dir(args.model)
    from dsmath.runtime.precision import DTYPES

    trainer = trainer_mod.RLTrainer(cfg, policy, tok, train, Scorer("accuracy", args.mode, params.rewards,
                                                                    params.sandbox), args.seed,
                                    dtype=DTYPES[args.dtype])
    phases = Phases()
    time_backward_and_optimizer(phases)

    def forward_phase(model, *a, **k):
        return "reference" if model is trainer.ref else "policy_forward" if torch.is_grad_enabled() else "old_policy"

    trainer_mod.bucketed_logprobs = phases.wrap(trainer_mod.bucketed_logprobs, forward_phase)
    trainer_mod.shared_prefix_logprobs = phases.wrap(trainer_mod.shared_prefix_logprobs, forward_phase)
    trainer.rollout = phases.wrap(trainer.rollout, "generate")
    trainer.scorer = phases.wrap(trainer.scorer, "reward")
    rewards = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        m = trainer.step()
        phases.lap(time.perf_counter() - t0)
        rewards.append(m["rl/reward_mean"])
    return summary(phases, args.side, args,
                   {"reward_mean": rewards, "completion_tokens_mean": m["rl/response_len_mean"],
                    "engine": {k: getattr(cfg, k) for k in ENGINE_SWITCHES}})


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dsmath.modeling import prompts

    params, cfg, train, reward = shared_setup(args)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    questions = step_questions(cfg, train, args.seed, args.steps)
    data = Dataset.from_list([{"prompt": prompts.format_prompt(q["question"], args.mode, tok), "answer": q["answer"]}
                              for q in questions])
    phases = Phases()
    time_backward_and_optimizer(phases)

    def accuracy(prompts, completions, answer, **kwargs):
        return reward(list(completions), list(answer))

    class StepTimer(TrainerCallback):  # the Trainer's own hooks around a step and around its optimizer step
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_pre_optimizer_step(self, *a, **k):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, *a, **k):
            if not phases.now.get("optimizer"):  # when torch's global step hooks did not see accelerate's wrapper
                phases.now["optimizer"] = time.perf_counter() - self.t_opt

        def on_step_end(self, *a, **k):
            phases.lap(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=args.questions * args.group, num_generations=args.group,
            gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, max_steps=args.steps,
            max_completion_length=args.new_tokens, temperature=1.0, top_p=1.0, top_k=0, beta=args.beta,
            loss_type="grpo", scale_rewards="group", epsilon=cfg.clip_eps, learning_rate=cfg.lr,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=cfg.weight_decay,
            max_grad_norm=cfg.max_grad_norm, use_cpu=True, bf16=args.dtype == "bfloat16", fp16=False, report_to="none",
            logging_steps=1,
            save_strategy="no", shuffle_dataset=False, seed=args.seed, dataloader_num_workers=0, disable_dropout=True,
            log_completions=False,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=accuracy, args=config, train_dataset=data,
                              processing_class=tok, callbacks=[StepTimer()])

        def forward_phase(model, *a, **k):
            return ("reference" if model is trainer.ref_model else "policy_forward" if torch.is_grad_enabled()
                    else "old_policy")

        trainer._get_per_token_logps_and_entropies = phases.wrap(trainer._get_per_token_logps_and_entropies,
                                                                 forward_phase)
        trainer._generate_single_turn = phases.wrap(trainer._generate_single_turn, "generate")
        trainer._calculate_rewards = phases.wrap(trainer._calculate_rewards, "reward")
        trainer.train()
        logged = [h for h in trainer.state.log_history if "reward" in h]
    import trl

    return summary(phases, "trl", args, {"trl_version": trl.__version__,
                                         "reward_mean": [h["reward"] for h in logged],
                                         "completion_tokens_mean": logged[-1].get("completions/mean_length")})


# ----------------------------------------------------------------------------------------------------------------
# orchestration


def trl_python(version: str) -> Path:
    """The TRL environment's interpreter, made on first use (sees the project's packages; TRL without its deps)."""
    py = TRL_ENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TRL_ENV)], check=True)
        purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        project = sysconfig.get_paths()["purelib"]
        Path(purelib, "dsmath_project.pth").write_text(f"import site; site.addsitedir({project!r})\n")
    have = subprocess.run([str(py), "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
    if have.stdout.strip() != version:
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", f"trl=={version}"], check=True)
    return py


def measure(side: str, args, python: Path) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [str(python), __file__, "--side", side, "--result", f.name, "--model", args.model, "--mode", args.mode,
               "--questions", str(args.questions), "--group", str(args.group), "--new-tokens", str(args.new_tokens),
               "--beta", str(args.beta), "--steps", str(args.steps), "--seed", str(args.seed),
               "--threads", str(args.threads), "--train-buckets", str(args.train_buckets), "--dtype", args.dtype]
        env = os.environ | {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(args.threads),
                            "TOKENIZERS_PARALLELISM": "false"}
        subprocess.run(cmd + (["--skip-zero-advantage"] if side == "dsmath-skip" else []), check=True, env=env,
                       cwd=ROOT)
        return json.loads(Path(f.name).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "sft"))
    ap.add_argument("--mode", default="cot", choices=["cot", "pot"])
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="compute precision of both sides (dsmath: autocast; TRL: bf16=True), weights float32")
    ap.add_argument("--trl", default="1.16.0", help="the TRL version to install into benchmarks/.venv-trl")
    ap.add_argument("--skip-zero-advantage", action="store_true",
                    help="as a worker: dsmath with rl.skip_zero_advantage; as the driver: add that side too")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vs_trl.json"))
    ap.add_argument("--train-buckets", type=int, default=0,
                    help="also dsmath with rl.train_buckets = N (length-bucketed training forwards); 0: not run")
    ap.add_argument("--defaults", action="store_true",
                    help="also dsmath with params.yaml's engine switches (rl.train_buckets, rl.share_prompts)")
    ap.add_argument("--side", choices=["dsmath", "dsmath-skip", "dsmath-buckets", "dsmath-default", "trl"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:  # a worker
        run = run_trl if args.side == "trl" else run_dsmath
        Path(args.result).write_text(json.dumps(run(args)))
        return
    trl_py = trl_python(args.trl)
    sides = {"dsmath": Path(sys.executable), "trl": trl_py} | (
        {"dsmath-skip": Path(sys.executable)} if args.skip_zero_advantage else {}) | (
        {"dsmath-buckets": Path(sys.executable)} if args.train_buckets > 1 else {}) | (
        {"dsmath-default": Path(sys.executable)} if args.defaults else {})
    runs = [measure(side, args, py) for _ in range(args.repeats) for side, py in sides.items()]
    by_side = {s: [r for r in runs if r["side"] == s] for s in sides}
    med = {s: statistics.median(r["s_per_step_median"] for r in rs) for s, rs in by_side.items()}
    result = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("side", "result", "out")},
        "ratio_steps_per_s_vs_trl": {s: med["trl"] / med[s] for s in sides if s != "trl"},
        "s_per_step_median": med, "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'side':<15}{'s/step':>8}  " + "  ".join(f"{p[:8]:>8}" for p in (*PHASES, "other"))
          + f"{'RSS MB':>9}{'GFLOP/s':>9}")
    for r in runs:
        ph = r["phases_mean_s"]
        print(f"{r['side']:<15}{r['s_per_step_median']:>8.2f}  " + "  ".join(f"{ph[p]:>8.2f}" for p in
              (*PHASES, "other")) + f"{r['peak_rss_mb']:>9.0f}{r['matmul_gflops']:>9.0f}")
    for s, x in result["ratio_steps_per_s_vs_trl"].items():
        print(f"{s}: {x:.2f}x TRL's steps/s")


if __name__ == "__main__":
    main()
