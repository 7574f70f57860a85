"""Bad raw data stops a stage with one message naming the file (and line): never a bare JSON traceback, never a
benchmark silently read as empty (decontamination skipped, an accuracy of 0.0 over n = 0)."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, smoke_params, subprocess_env, write_params

from dsmath.config import parse_params
from dsmath.data.benchmarks import load_benchmark
from dsmath.data.corpus import build_corpus, read_snapshot, read_text_docs
from dsmath.data.io import read_jsonl
from dsmath.evaluation.run import eval_datasets

REAL_RAW = ROOT / "data" / "raw"
FILES = {"gsm8k_train": "gsm8k/train.jsonl", "gsm8k_test": "gsm8k/test.jsonl", "math500": "math500/test.jsonl",
         "svamp": "svamp/test.jsonl"}
GOOD = {"gsm8k_test": {"question": "How many?", "answer": "2 + 2 = 4\n#### 4"},
        "math500": {"problem": "Compute 2+2.", "solution": "It is 4.", "answer": "4", "unique_id": "test/x/1.json"},
        "svamp": {"ID": "chal-1", "Body": "Tom has 2 apples.", "Question": "How many?", "Answer": 2.0}}
GARBLED = '{"question": "How many?", "answer": "4" "oops"}'


def mirror_raw(dst: Path) -> Path:
    """`dst` holding links to every file of the real data/raw (a test then replaces the file it breaks)."""
    for src in REAL_RAW.rglob("*"):
        if src.is_file():
            (dst / src.relative_to(REAL_RAW)).parent.mkdir(parents=True, exist_ok=True)
            (dst / src.relative_to(REAL_RAW)).symlink_to(src)
    return dst


def put(raw: Path, name: str, text: str) -> Path:
    path = raw / FILES[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


# ---------------------------------------------------------------------------------------------------------------
# one line that is not a record: file and line number, whichever reader meets it


@pytest.mark.parametrize("name", ["gsm8k_test", "math500", "svamp"])
def test_garbled_benchmark_line_names_file_and_line(tmp_path, name):
    path = put(tmp_path, name, lines(GOOD[name], GOOD[name], "", GARBLED, GOOD[name]))  # line 3 blank
    with pytest.raises(ValueError, match=rf"^{path}:4: not valid JSON \(") as err:
        load_benchmark(name, tmp_path)
    assert type(err.value).__name__ == "DataError"


def test_every_jsonl_reader_names_file_and_line(tmp_path):
    path = tmp_path / "any.jsonl"
    path.write_text(lines({"text": "a"}, GARBLED))
    with pytest.raises(ValueError, match=rf"^{path}:2: not valid JSON \("):
        read_jsonl(path)
    with pytest.raises(ValueError, match=rf"^{path}:2: not valid JSON \("):
        read_text_docs(path, "extra")
    snap = tmp_path / "snap.jsonl.xz"
    snap.write_bytes(lzma.compress(lines({"path": "a.py", "text": "x"}, GARBLED).encode()))
    with pytest.raises(ValueError, match=rf"^{snap}:2: not valid JSON \("):
        read_snapshot(snap, "path")


@pytest.mark.parametrize(("line", "why"), [("[1, 2]", "not a JSON object"), ("17", "not a JSON object"),
                                           (b'{"question": "\xff"}', "not valid UTF-8")])
def test_lines_that_are_not_records(tmp_path, line, why):
    path = tmp_path / "x.jsonl"
    path.write_bytes(json.dumps(GOOD["gsm8k_test"]).encode() + b"\n" + (line if isinstance(line, bytes)
                                                                         else line.encode()) + b"\n")
    with pytest.raises(ValueError, match=rf"^{path}:2: {why}"):
        read_jsonl(path)


@pytest.mark.parametrize(("name", "field", "value"), [
    ("gsm8k_test", "answer", ...), ("gsm8k_test", "question", None), ("math500", "problem", ...),
    ("math500", "answer", 4), ("svamp", "Answer", ...), ("svamp", "Body", ["x"])])
def test_record_missing_a_field_the_loader_needs(tmp_path, name, field, value):
    bad = {k: v for k, v in GOOD[name].items() if k != field} | ({} if value is ... else {field: value})
    path = put(tmp_path, name, lines(GOOD[name], bad))
    with pytest.raises(ValueError, match=rf"^{path}:2: .*'{field}'"):
        load_benchmark(name, tmp_path)


def test_extra_math_jsonl_needs_text(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(lines({"text": "ok"}, {"body": "no text field"}))
    with pytest.raises(ValueError, match=rf"^{path}:2: .*'text'"):
        read_text_docs(path, "extra-mine")


def test_good_files_read_as_before(tmp_path):
    for name in GOOD:
        put(tmp_path, name, lines(GOOD[name], "", "   ", GOOD[name]))
        assert len(load_benchmark(name, tmp_path)) == 2
    assert len(load_benchmark("gsm8k_test", REAL_RAW)) == 1319


# ---------------------------------------------------------------------------------------------------------------
# an empty benchmark that params ask for: refused, naming the file and the params key


def _eval_params(raw: Path, synthetic: Path, **sizes) -> object:
    datasets = {"synthetic": 5, "gsm8k_test": 0, "svamp": 0, "math500": 0} | sizes
    return parse_params({"common": {"paths": {"raw": str(raw), "synthetic": str(synthetic)}},
                         "evaluate": {"datasets": datasets}})


@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_empty_benchmark_to_evaluate_is_refused(tmp_path, text):
    raw, syn = tmp_path / "raw", tmp_path / "syn"
    raw.mkdir()
    syn.mkdir()
    (syn / "test.jsonl").write_text(lines({"question": "1+1", "answer": "2"}))
    path = put(raw, "gsm8k_test", text)
    with pytest.raises(ValueError, match=rf"^{path}: .*evaluate\.datasets\.gsm8k_test"):
        eval_datasets(_eval_params(raw, syn, gsm8k_test=5))
    assert eval_datasets(_eval_params(raw, syn, gsm8k_test=0)).keys() == {"synthetic"}  # not asked for: not read


def test_missing_benchmark_to_evaluate_is_refused(tmp_path):
    (tmp_path / "test.jsonl").write_text(lines({"question": "1+1", "answer": "2"}))
    path = tmp_path / "svamp" / "test.jsonl"
    with pytest.raises(ValueError, match=rf"^{path}: no such file; .*evaluate\.datasets\.svamp"):
        eval_datasets(_eval_params(tmp_path, tmp_path, svamp=3))


def test_empty_synthetic_test_split_to_evaluate_is_refused(tmp_path):
    (tmp_path / "test.jsonl").write_text("")
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'test.jsonl'}: .*evaluate\.datasets\.synthetic"):
        eval_datasets(_eval_params(tmp_path, tmp_path))


@pytest.mark.parametrize(("name", "key"), [("gsm8k_test", "corpus.decontamination.benchmarks"),
                                           ("svamp", "corpus.decontamination.benchmarks"),
                                           ("gsm8k_train", "corpus.include_gsm8k_train")])
def test_empty_benchmark_for_the_corpus_is_refused(tmp_path, name, key):
    raw = mirror_raw(tmp_path / "raw")
    path = put(raw, name, "\n")
    cfg = parse_params({}).corpus
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^{path}: .*{key}"):
        build_corpus([], set(), raw, tmp_path, cfg, 0)
    assert time.perf_counter() - t0 < 5  # refused before the classifier is trained


# ---------------------------------------------------------------------------------------------------------------
# the stages: a non-zero exit whose last line names the file (no output written)


def _stage(tmp: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "stages" / script), "--params", "params.yaml", *args],
                          cwd=tmp, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    return done, time.perf_counter() - t0


def test_corpus_stage_refuses_an_empty_decontamination_benchmark(tmp_path):
    mirror_raw(tmp_path / "data" / "raw")
    put(tmp_path / "data" / "raw", "gsm8k_test", "")
    raw = smoke_params(tmp_path)
    raw["common"]["paths"]["raw"] = "data/raw"
    write_params(tmp_path, raw)
    done, _ = _stage(tmp_path, "corpus.py")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "data/raw/gsm8k/test.jsonl: " in last and "corpus.decontamination.benchmarks" in last, done.stderr
    assert not (tmp_path / "data" / "corpus").exists()


def test_evaluate_stage_refuses_a_garbled_benchmark_line(tmp_path):
    mirror_raw(tmp_path / "data" / "raw")
    good = (REAL_RAW / FILES["gsm8k_test"]).read_text().splitlines(keepends=True)
    put(tmp_path / "data" / "raw", "gsm8k_test", "".join(good[:16]) + GARBLED + "\n" + "".join(good[17:]))
    raw = smoke_params(tmp_path, **{"evaluate.datasets.gsm8k_test": 5})
    raw["common"]["paths"]["raw"] = "data/raw"
    (tmp_path / "data" / "synthetic").mkdir(parents=True)
    (tmp_path / "data" / "synthetic" / "test.jsonl").write_text(lines({"question": "1+1", "answer": "2"}))
    write_params(tmp_path, raw)
    done, _ = _stage(tmp_path, "evaluate.py", "sft")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "data/raw/gsm8k/test.jsonl:17: not valid JSON (" in last, done.stderr


def test_empty_synthetic_validation_split_is_refused(tmp_path):
    from dsmath.evaluation.run import validation_metrics

    (tmp_path / "val.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'val.jsonl'}: .*evaluate\.val_problems"):
        validation_metrics(None, None, _eval_params(tmp_path, tmp_path), last_number=False, sampling=False)
