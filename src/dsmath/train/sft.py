"""Supervised fine-tuning on a mixture of CoT, PoT and tool-integrated solutions (DeepSeekMath sec. 3.1).

Each training problem contributes one example in a style drawn with the params' mix ratio; the prompt is
:func:`dsmath.modeling.prompts.format_prompt` and the loss covers the response (+ EOS) only. At the end: held-out loss
on the val split, then a greedy / pass@k accuracy probe per solution mode on held-out validation problems
(:mod:`dsmath.train.probe`).
"""

from __future__ import annotations

from pathlib import Path

from dsmath.data.io import read_jsonl
from dsmath.modeling import model as models
from dsmath.runtime import distributed, precision
from dsmath.train import causal, data, evaluate, probe, recipes
from dsmath.train.loop import LogFn, train


def sft_records(records: list[dict], levels: list[int], max_examples: int) -> list[dict]:
    """The train problems SFT learns from: those at `levels` (all when empty), the first `max_examples` (all when 0).
    A selection that leaves nothing is refused (a params mistake, not an empty run)."""
    chosen = data.at_levels(records, levels, "sft.levels")
    return chosen[:max_examples] if max_examples else chosen


def examples_for(records: list[dict], mix, tokenizer, max_len: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """SFT (input_ids, labels) pairs, one per record, style drawn from `mix` (a params Mix section) with `seed`."""
    modes = data.assign_modes(len(records), mix.model_dump(), seed)
    return data.sft_examples(records, modes, tokenizer, max_len)


def heldout_loss(model, examples, pad_id: int, batch_size: int) -> dict[str, float]:
    """Mean response NLL per token on held-out examples."""
    batches = [data.pad_batch(examples[i : i + batch_size], pad_id) for i in range(0, len(examples), batch_size)]
    nll, n = evaluate.heldout_nll(model, batches, desc="val loss")
    return {"heldout_loss": nll, "heldout_tokens": n}


def sft(params, accelerator, log: LogFn) -> recipes.Outcome:
    """Fine-tune models/<sft.init> (the math-pretrained model by default) on the synthetic train split; held-out loss
    and accuracy probe at the end."""
    section, seed = params.sft, params.common.seed
    synthetic = Path(params.common.paths.synthetic)
    start_dir = recipes.stage_dirs(params, section.init)[0]
    model, tokenizer = models.load_dir(start_dir)
    records = sft_records(read_jsonl(synthetic / "train.jsonl"), section.levels, section.max_examples)
    examples = examples_for(records, section.mix, tokenizer, section.train.seq_len, seed)
    pad = tokenizer.pad_token_id
    fp = recipes.run_fingerprint(params, "sft", {"sft": section.model_dump()},
                                 [start_dir, synthetic / "train.jsonl"])
    model, state = train(
        model,
        section.train,
        (lambda rows: data.pack_batch([examples[i] for i in rows], pad, section.train.seq_len)) if section.pack
        else (lambda rows: data.pad_batch([examples[i] for i in rows], pad)),
        len(examples),
        seed,
        accelerator,
        ckpt_dir=recipes.stage_dirs(params, "sft")[1],
        fingerprint=fp,
        log=lambda m, step: log({f"sft/{k}": v for k, v in m.items()}, step),
        desc="sft",
        lengths=[len(ids) for ids, _ in examples],
    )
    metrics = causal.loop_metrics(state) | {"train_examples": len(examples)}
    val = read_jsonl(synthetic / "val.jsonl")  # held-out loss and probe: never the test split
    world = distributed.setup(params.common.device)  # the probe's problems are split over the ranks
    probe_metrics, rows = probe.accuracy_probe(model, tokenizer, val[: section.probe.n_problems], section.probe,
                                              params.sandbox, params.rewards, seed,
                                              precision.stage_torch_dtype(params.common, "sft", world.device), world)
    if not accelerator.is_main_process:
        return recipes.Outcome(model, tokenizer, state.history, metrics)
    mean_len = sum(len(ids) for ids, _ in examples) / len(examples)
    metrics |= causal.speed_metrics(model, state, mean_len)
    metrics |= heldout_loss(
        model,
        examples_for(val[: section.val_examples], section.mix, tokenizer, section.train.seq_len, seed + 1),
        pad,
        section.train.micro_batch_size,
    )
    return recipes.Outcome(model, tokenizer, state.history, metrics | probe_metrics, rows)
