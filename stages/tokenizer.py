"""DVC stage `tokenizer`: byte-level BPE on the code + math corpus (digits split), or a pretrained model's own."""

from __future__ import annotations

from pathlib import Path

from dsmath.config import Params
from dsmath.data.io import read_jsonl
from dsmath.modeling import model, tokenizer
from dsmath.runtime import tracking
from dsmath.runtime.stage import run_stage, write_metrics


def main(params: Params) -> None:
    paths, cfg = params.common.paths, params.tokenizer
    sections = {"tokenizer": cfg.model_dump(), "model": params.model.model_dump()}
    with tracking.stage_run("tokenizer", params, sections) as run:
        corpora = {
            name: [d["text"] for d in read_jsonl(Path(paths.corpus) / f"{name}.jsonl")] for name in ("code", "math")
        }
        if params.model.source == "pretrained":
            tok = model.load_tokenizer_pretrained(params.model)
        else:
            tok = tokenizer.train_tokenizer(
                tokenizer.interleave(list(corpora.values()), cfg.max_chars), cfg.vocab_size, cfg.min_frequency
            )
        tok.save_pretrained(Path(paths.models) / "tokenizer")
        metrics = {"vocab_size": len(tok)}
        metrics |= {
            f"chars_per_token_{k}": tokenizer.chars_per_token(tok, v[: cfg.eval_docs]) for k, v in corpora.items()
        }
        write_metrics(params, "tokenizer", metrics)
        run.log_metrics({f"tokenizer/{k}": v for k, v in metrics.items()})


if __name__ == "__main__":
    run_stage(main)
