"""The base and continual-pretraining stages as library functions: params in, trained model and metrics out.

DeepSeekMath starts from DeepSeek-Coder-Base and continues pretraining on math. `base` trains the "coder base"
from scratch on the code corpus (or passes a pretrained model through); `pretrain` continues it on the math corpus
and reports held-out math perplexity before and after. Stage entry points only save and publish the `Outcome`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsmath.core import codedeps
from dsmath.data.io import read_jsonl
from dsmath.modeling import model as models
from dsmath.train import causal, checkpoint
from dsmath.train.loop import LogFn


@dataclass
class Outcome:
    """What a training stage produced: model + tokenizer to save, loss history, metrics, sample rows."""

    model: Any
    tokenizer: Any
    history: list[dict] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)


def stage_dirs(params, stage: str) -> tuple[Path, Path]:
    """(model output folder, checkpoint folder) of a stage: models/<stage>, checkpoints/<stage>."""
    paths = params.common.paths
    return Path(paths.models) / stage, Path(paths.checkpoints) / stage


def run_fingerprint(params, stage: str, sections: dict[str, Any], inputs: list[Path]) -> str:
    """Identity of a training run for resuming: seed, device settings, the sections it reads, its input files and the
    code it runs (the stage's import closure), so a checkpoint of other code is never resumed: after a code change
    the stage trains from step 0."""
    common = {"seed": params.common.seed, "device": params.common.device, "threads": params.common.num_threads,
              "code": codedeps.stage_code_hash(stage, f"dsmath.train.{'sft' if stage == 'sft' else 'recipes'}")}
    return checkpoint.fingerprint(common | sections, inputs)


def base(params, accelerator, log: LogFn) -> Outcome:
    """Code pretraining from scratch with our tokenizer, or a pretrained model passed through unchanged."""
    paths, section, seed = params.common.paths, params.base, params.common.seed
    tok_dir, code_file = stage_dirs(params, "tokenizer")[0], Path(paths.corpus) / "code.jsonl"
    if params.model.source == "pretrained":
        model, tokenizer = models.load_pretrained(params.model)
        metrics = {"params": models.param_count(model), "steps": 0}
        if accelerator.is_main_process:
            corpus = causal.prepare_corpus(read_jsonl(code_file), tokenizer, section, seed)
            metrics |= causal.heldout_metrics(model, corpus, section.train.micro_batch_size, "heldout_code")
        return Outcome(model, tokenizer, metrics=metrics)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    corpus = causal.prepare_corpus(read_jsonl(code_file), tokenizer, section, seed)
    model = models.build_scratch(params.model, tokenizer, seed)
    fp = run_fingerprint(
        params, "base", {"model": params.model.model_dump(), "base": section.model_dump()}, [tok_dir, code_file]
    )
    model, state = causal.train_causal(
        model, corpus, section, seed, accelerator, stage_dirs(params, "base")[1], fp, log, "base"
    )
    metrics = causal.loop_metrics(state)
    if accelerator.is_main_process:
        metrics |= causal.speed_metrics(model, state, section.train.seq_len)
        metrics |= causal.heldout_metrics(model, corpus, section.train.micro_batch_size, "heldout_code")
    return Outcome(model, tokenizer, state.history, metrics)


def pretrain(params, accelerator, log: LogFn) -> Outcome:
    """Continual pretraining of models/base on the math corpus; held-out math perplexity before and after."""
    paths, section, seed = params.common.paths, params.pretrain, params.common.seed
    base_dir, math_file = stage_dirs(params, "base")[0], Path(paths.corpus) / "math.jsonl"
    model, tokenizer = models.load_dir(base_dir)
    corpus = causal.prepare_corpus(read_jsonl(math_file), tokenizer, section, seed)
    batch = section.train.micro_batch_size
    before = causal.heldout_metrics(model, corpus, batch, "heldout_before") if accelerator.is_main_process else {}
    fp = run_fingerprint(params, "pretrain", {"pretrain": section.model_dump()}, [base_dir, math_file])
    model, state = causal.train_causal(
        model, corpus, section, seed, accelerator, stage_dirs(params, "pretrain")[1], fp, log, "pretrain"
    )
    metrics = causal.loop_metrics(state) | before
    if accelerator.is_main_process:
        metrics |= causal.speed_metrics(model, state, section.train.seq_len)
        metrics |= causal.heldout_metrics(model, corpus, batch, "heldout_after")
    return Outcome(model, tokenizer, state.history, metrics)
