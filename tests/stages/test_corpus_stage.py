"""The corpus stage on the smoke profile: outputs, decontamination counts in metrics, MLflow run, determinism."""

from __future__ import annotations

import json

from conftest import ROOT, smoke_params, write_params

from dsmath.data.io import read_jsonl
from dsmath.runtime.stage import run_stage
from stages import corpus


def test_corpus_stage_outputs_decontamination_and_determinism(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    gsm_question = json.loads((ROOT / "data/raw/gsm8k/test.jsonl").read_text().splitlines()[0])["question"]
    extra = tmp_path / "extra"
    extra.mkdir()
    docs = [
        {"text": gsm_question},  # a verbatim GSM8K test question
        {"text": "Q: " + " ".join(gsm_question.split()[:12]) + " ... and something else entirely."},  # shares 10-gram
        {"text": "A clean document: 7 * 8 = 56, so the total is 56 marbles."},
    ]
    (extra / "mine.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    raw = smoke_params(tmp_path, **{"corpus.extra_math_files": ["mine.jsonl"]})
    raw["common"]["paths"]["extra_math"] = str(extra)
    run_stage(corpus.main, ["--params", str(write_params(tmp_path, raw))])
    metrics = json.loads((tmp_path / "metrics" / "corpus.json").read_text())

    math = read_jsonl(tmp_path / "data/corpus/math.jsonl")
    extra_kept = [d["text"] for d in math if d["source"] == "extra-mine"]
    assert extra_kept == [docs[2]["text"]]
    assert metrics["math_docs_by_source"]["extra-mine"] == 1
    # the smoke corpus holds GSM8K train too (its own near-duplicates of test are removed as well): >= our 2
    assert metrics["removed_gsm8k_test"] >= 2
    code = read_jsonl(tmp_path / "data/corpus/code.jsonl")
    assert len(code) == metrics["code_docs"] > 0
    for split in ("train", "val", "test"):
        assert len(read_jsonl(tmp_path / f"data/synthetic/{split}.jsonl")) == metrics[f"synthetic_{split}"]
    assert 0.9 <= metrics["classifier_precision"] <= 1.0 and metrics["classifier_recall"] >= 0.9

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["dsmath-test"], output_format="list")
    assert [r.info.run_name for r in runs] == ["corpus"]
    assert runs[0].data.metrics["corpus/math_docs"] == metrics["math_docs"]
    assert runs[0].data.tags["dsmath.stage"] == "corpus" and "git.commit" in runs[0].data.tags

    # same params, same seed -> byte-identical outputs
    again = tmp_path / "again"
    again.mkdir()
    raw["common"]["paths"] = {k: (v if k in ("raw", "extra_math") else v.replace(str(tmp_path), str(again)))
                              for k, v in raw["common"]["paths"].items()}
    run_stage(corpus.main, ["--params", str(write_params(again, raw))])
    for rel in ("data/corpus/math.jsonl", "data/corpus/code.jsonl", "data/synthetic/train.jsonl",
                "data/synthetic/test.jsonl"):
        assert (tmp_path / rel).read_bytes() == (again / rel).read_bytes(), rel
