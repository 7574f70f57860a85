"""Real benchmark loaders map each source to one schema."""

from pathlib import Path

import pytest

from dsmath.data.benchmarks import as_dataset, gsm8k_final_answer, load_benchmark

RAW = Path(__file__).resolve().parents[2] / "data" / "raw"


@pytest.mark.parametrize(
    ("name", "n"), [("gsm8k_train", 7473), ("gsm8k_test", 1319), ("math500", 500), ("svamp", 1000)]
)
def test_counts_and_schema(name, n):
    rows = load_benchmark(name, RAW)
    assert len(rows) == n
    assert len({r["id"] for r in rows}) == n
    for r in rows[:20]:
        assert set(r) == {"id", "source", "question", "answer", "solution"}
        assert r["question"] and r["answer"]


def test_answers_are_normalised():
    assert gsm8k_final_answer("so 3 * 400 = 1,200\n#### 1,200") == "1200"
    svamp = load_benchmark("svamp", RAW, limit=1)[0]
    assert svamp["answer"] == "145"
    assert svamp["question"].endswith("How big is each group of bananas?")
    assert load_benchmark("gsm8k_test", RAW, limit=1)[0]["answer"] == "18"
    assert load_benchmark("math500", RAW, limit=1)[0]["answer"] == r"\left( 3, \frac{\pi}{2} \right)"


def test_unknown_benchmark_lists_valid_names():
    with pytest.raises(ValueError, match="gsm8k_test"):
        load_benchmark("gsm9k", RAW)


def test_as_hf_dataset():
    ds = as_dataset(load_benchmark("svamp", RAW, limit=5))
    assert ds.num_rows == 5 and ds[0]["solution"] == ""
