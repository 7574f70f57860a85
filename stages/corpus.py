"""DVC stage `corpus`: synthetic splits, code corpus, decontaminated math corpus, math classifier metrics."""

from __future__ import annotations

from pathlib import Path

from dsmath.config import Params
from dsmath.data.corpus import build_corpus
from dsmath.data.io import write_jsonl
from dsmath.data.synthetic import generate_splits, math_text_documents
from dsmath.runtime import tracking
from dsmath.runtime.stage import run_stage, write_metrics


def main(params: Params) -> None:
    paths = params.common.paths
    sections = {"data": params.data.model_dump(), "corpus": params.corpus.model_dump()}
    with tracking.stage_run("corpus", params, sections) as run:
        splits = generate_splits(params.data.synthetic, params.common.seed)
        heldout = {r["key"] for split in ("val", "test") for r in splits[split]}
        synthetic_docs = math_text_documents(splits["train"][: params.corpus.math_synthetic_docs])
        result = build_corpus(synthetic_docs, heldout, paths.raw, paths.extra_math, params.corpus, params.common.seed)

        for split, records in splits.items():
            write_jsonl(records, Path(paths.synthetic) / f"{split}.jsonl")
        write_jsonl(result.code, Path(paths.corpus) / "code.jsonl")
        write_jsonl(result.math, Path(paths.corpus) / "math.jsonl")
        metrics = result.metrics | {f"synthetic_{k}": len(v) for k, v in splits.items()}
        metrics_path = write_metrics(params, "corpus", metrics)

        run.log_metrics({f"corpus/{k}": v for k, v in metrics.items() if isinstance(v, int | float)})
        run.log_artifact(metrics_path)
        run.log_table([{"source": d["source"], "text": d["text"][:500]} for d in result.math[:50]], "math_sample.json")


if __name__ == "__main__":
    run_stage(main)
