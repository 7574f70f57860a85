"""README's results block is generated from metrics/ and equals the committed metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsmath.config import load_params, parse_params
from dsmath.reporting import readme

ROOT = Path(__file__).resolve().parents[2]


def test_committed_readme_block_equals_the_committed_metrics(monkeypatch):
    monkeypatch.chdir(ROOT)
    block = readme.results_block(load_params(ROOT / "params.yaml"))
    text = (ROOT / "README.md").read_text()
    assert readme.replace_block(text, block) == text, \
        "run `python -m dsmath.reporting.readme` after a default make repro"


def test_block_numbers_come_from_the_metrics_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = tmp_path / "metrics"
    (m / "eval").mkdir(parents=True)
    (m / "rl").mkdir()
    ev = {"sft": {"synthetic/tool/greedy": 0.5, "synthetic/tool/n": 40.0, "synthetic/cot/greedy": 0.1},
          "rl": {"synthetic/tool/greedy": 0.625, "synthetic/tool/n": 40.0, "synthetic/cot/greedy": 0.125}}
    for name, values in ev.items():
        (m / "eval" / f"{name}.json").write_text(json.dumps(values))
    (m / "report.json").write_text(json.dumps({
        "sft_rl_gain": 0.125, "sft_rl_gain_sd_seeds": 0.05, "sft_rl_paired_se": 0.0213,
        "sft/synthetic/tool/greedy": 0.5, "rl/synthetic/tool/greedy": 0.625,
        "seed-1/synthetic/tool/greedy": 0.6, "seed-2/synthetic/tool/greedy": 0.65}))
    for s, wall in ((1, 60.0), (2, 120.0)):
        (m / "rl" / f"seed-{s}.json").write_text(json.dumps({"wall_s": wall, "s_per_step": wall / 30}))
    (m / "sft.json").write_text(json.dumps({"wall_seconds": 90.0, "matmul_gflops": 300.0}))
    params = parse_params({"common": {"rl_seeds": [1, 2]},
                           "evaluate": {"modes": ["cot", "tool"], "sampled_modes": ["tool"],
                                        "primary_metric": "synthetic/tool/greedy"}})
    block = readme.results_block(params)
    assert block.startswith(readme.BEGIN) and block.endswith(readme.END)
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert rows[0] == "| model | synthetic cot greedy | synthetic tool greedy |"
    assert rows[1] == "| sft (+ SFT (instruct)) | 10.0 | 50.0 |" and rows[2] == "| rl (+ GRPO (RL)) | 12.5 | 62.5 |"
    assert "50.0 -> 62.5 (seeds: 60.0, 65.0), a gain of **+12.5 points**, sd across seeds 5.0" in block
    assert "paired standard error over problems 2.1." in block and "40 held-out synthetic test problems" in block
    assert "fp32 matmul ran at 300 GFLOP/s: sft 1.5 min, rl 1.5 min per seed (3.00 s/step)." in block
    with pytest.raises(ValueError, match="markers"):
        readme.replace_block("no markers here", block)
