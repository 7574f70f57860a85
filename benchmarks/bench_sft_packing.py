"""SFT throughput with padded against packed micro-batches (`sft.pack`), side by side in one process.

The SFT stage's own examples (the synthetic train split, tokenised and styled exactly as :mod:`dsmath.train.sft`
does) through the real loop (:func:`dsmath.train.loop.train`: accelerate, AdamW, schedule, clipping) with the
default profile's `sft.train` batch, from the same initial weights both ways:

- padded: each step's examples right-padded to the longest (today's default);
- packed: the same examples, first-fit-decreasing into rows of `sft.train.seq_len`, position ids restarting per
  example so attention stays within it (:func:`dsmath.train.data.pack_batch`).

Both train on the same rows in the same order with the same targets, so their loss curves must agree up to
floating-point order: the table gives the largest relative difference of the logged losses next to the speed.
Real tokens/s (padding excluded), MFU against the fp32 2048^2 matmul measured between the runs, and the padding
share of each layout. The runs alternate (padded, packed, padded, ...) so background load hits both alike.

Needs the tokenizer and the synthetic data (`dvc repro tokenizer`); the weights are the math-pretrained model when
`models/pretrain` exists, else a fresh model of the profile's shape (speed does not depend on the weights).

    .venv/bin/python benchmarks/bench_sft_packing.py --steps 20 --repeats 2
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
from dsmath.modeling.model import build_scratch, load_dir, train_flops_per_token
from dsmath.train import data
from dsmath.train.flops import matmul_flops_per_s
from dsmath.train.loop import make_accelerator, train
from dsmath.train.sft import examples_for


def initial_weights(params, tok, seed: int) -> tuple[dict, str]:
    """The math-pretrained model's weights when `models/pretrain` exists, else a fresh model's of the profile."""
    pretrained = Path(params.common.paths.models) / "pretrain"
    if (pretrained / "config.json").exists():
        return load_dir(pretrained)[0].state_dict(), str(pretrained)
    return build_scratch(params.model, tok, seed).state_dict(), "fresh (the profile's shape)"


def padding_share(examples, steps_rows: list[list[int]], pack: bool, seq_len: int) -> float:
    """Pad positions / all positions over the given steps' batches."""
    pad = total = 0
    for rows in steps_rows:
        ex = [examples[i] for i in rows]
        b = data.pack_batch(ex, 0, seq_len) if pack else data.pad_batch(ex, 0)
        total += b["input_ids"].numel()
        pad += b["input_ids"].numel() - int(b["attention_mask"].sum())
    return pad / max(total, 1)


def run(params, examples, model_state: dict, model_factory, steps: int, pack: bool, seed: int) -> dict:
    loop = params.sft.train.model_copy(update={"max_steps": steps, "checkpoint_every": 0, "log_every": 1})
    seq = loop.seq_len
    make = (lambda rows: data.pack_batch([examples[i] for i in rows], 0, seq)) if pack else \
        (lambda rows: data.pad_batch([examples[i] for i in rows], 0))
    model = model_factory()
    model.load_state_dict(model_state)
    t0 = time.perf_counter()
    _, state = train(model, loop, make, len(examples), seed, make_accelerator("cpu"),
                     lengths=[len(ids) for ids, _ in examples])
    wall = time.perf_counter() - t0
    return {"pack": pack, "tokens_per_s": state.tokens / state.train_seconds, "train_s": state.train_seconds,
            "wall_s": wall, "losses": [r["loss"] for r in state.history]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="benchmarks/results/sft_packing.json")
    args = ap.parse_args()
    params = load_params(args.params)
    torch.set_num_threads(params.common.num_threads or torch.get_num_threads())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(Path(params.common.paths.models) / "tokenizer")
    records = read_jsonl(Path(params.common.paths.synthetic) / "train.jsonl")
    examples = examples_for(records, params.sft.mix, tok, params.sft.train.seq_len, params.common.seed)
    state, source = initial_weights(params, tok, args.seed)
    factory = lambda: build_scratch(params.model, tok, args.seed)  # noqa: E731  (weights loaded from `state`)
    model = factory()
    schedule = data.StepSchedule(len(examples), params.sft.train.global_batch_size,
                                 params.sft.train.micro_batch_size, args.seed)
    step_rows = [schedule.rows(s) for s in range(args.steps)]
    mean_len = statistics.fmean(len(examples[i][0]) for rows in step_rows for i in rows)
    fpt = train_flops_per_token(model, int(mean_len))
    runs = []
    for r in range(args.repeats):
        for pack in (False, True):
            peak = matmul_flops_per_s()
            out = run(params, examples, state, factory, args.steps, pack, args.seed)
            out |= {"repeat": r, "matmul_gflops": peak / 1e9, "mfu": out["tokens_per_s"] * fpt / peak}
            runs.append(out)
            print(f"repeat {r} {'packed' if pack else 'padded'}: {out['tokens_per_s']:7.0f} tok/s, MFU "
                  f"{out['mfu']:.1%} (matmul {peak / 1e9:.0f} GFLOP/s), {out['train_s']:.1f} s for {args.steps} steps")
    med = {p: {k: statistics.median(x[k] for x in runs if x["pack"] == p) for k in ("tokens_per_s", "mfu",
                                                                                    "matmul_gflops")}
           for p in (False, True)}
    pad_l, pack_l = runs[0]["losses"], runs[1]["losses"]
    summary = {
        "settings": {"params_file": args.params, "steps": args.steps, "repeats": args.repeats, "seed": args.seed,
                     "batch": params.sft.train.global_batch_size, "micro_batch": params.sft.train.micro_batch_size,
                     "seq_len": params.sft.train.seq_len, "threads": torch.get_num_threads(), "weights": source,
                     "mean_example_tokens": mean_len, "flops_per_token": fpt},
        "padding_share": {"padded": padding_share(examples, step_rows, False, params.sft.train.seq_len),
                          "packed": padding_share(examples, step_rows, True, params.sft.train.seq_len)},
        "median": {"padded": med[False], "packed": med[True]},
        "speedup_tokens_per_s": med[True]["tokens_per_s"] / med[False]["tokens_per_s"],
        "max_rel_loss_diff": max(abs(a - b) / abs(a) for a, b in zip(pad_l, pack_l, strict=True)),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("padding_share", "median", "speedup_tokens_per_s",
                                              "max_rel_loss_diff")}, indent=1))


if __name__ == "__main__":
    main()
