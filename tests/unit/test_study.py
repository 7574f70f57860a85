"""The study's pure parts: the study file (overlays in dotted keys, validated), the override grammar handed to DVC,
and the report's statistics and verdicts, checked against numbers computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dsmath.config import ParamsError
from dsmath.study import report as sr
from dsmath.study import stats
from dsmath.study.runner import exp_command, hydra_value
from dsmath.study.spec import Finding, apply, dotted_to_nested, load_study, variant_params

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(text)
    return p


def test_the_default_study_declares_every_comparison_and_validates():
    study = load_study(ROOT / "configs" / "study.yaml", ROOT / "params.yaml")
    assert len(study.seeds) >= 2
    for v in ("rft", "online_rft", "grpo", "grpo_process", "grpo_cot", "grpo_process_cot", "grpo_iterative", "ppo",
              "no_math_pretrain", "r1_zero", "dr_grpo", "dapo", "gspo", "rloo"):
        assert v in study.variants, v
    assert len(study.runs()) == len(study.variants) * len(study.seeds)
    p = variant_params(study, "r1_zero", 1235, ROOT / "params.yaml")
    assert (p.rl.init, p.rl.mode, p.common.rl_seeds) == ("pretrain", "cot", [1235])
    assert p.rl.steps == study.shared["rl.steps"]
    ref = variant_params(study, "grpo", 1234, ROOT / "params.yaml")
    assert ref.rl.algorithm == "grpo" and ref.sft.init == "pretrain"
    assert variant_params(study, "no_math_pretrain", 1234, ROOT / "params.yaml").sft.init == "base"


def test_a_variant_differs_from_the_reference_only_in_its_own_keys():
    study = load_study(ROOT / "configs" / "study.yaml", ROOT / "params.yaml")
    ref = variant_params(study, "grpo", 1234, ROOT / "params.yaml").model_dump()
    dapo = variant_params(study, "dapo", 1234, ROOT / "params.yaml").model_dump()
    changed = {f"rl.{k}" for k in ref["rl"] if ref["rl"][k] != dapo["rl"][k]}
    assert changed == set(study.variants["dapo"].overrides)
    assert {k: v for k, v in ref.items() if k != "rl"} == {k: v for k, v in dapo.items() if k != "rl"}


def test_overrides_are_dotted_keys_merged_onto_the_profile_and_typos_are_refused():
    raw = {"rl": {"beta": 0.04, "ppo": {"lam": 0.95}}, "common": {"rl_seeds": [1, 2]}}
    assert dotted_to_nested({"rl.beta": 0, "rl.ppo.lam": 1.0}) == {"rl": {"beta": 0, "ppo": {"lam": 1.0}}}
    out = apply(raw, {"rl.ppo.lam": 1.0, "common.rl_seeds": [7]})
    assert out == {"rl": {"beta": 0.04, "ppo": {"lam": 1.0}}, "common": {"rl_seeds": [7]}}
    assert raw["rl"]["ppo"]["lam"] == 0.95  # the profile is not modified
    with pytest.raises(ParamsError, match="rl.betta: no such param"):
        apply(raw, {"rl.betta": 0})


def test_a_bad_variant_fails_at_load_naming_it(tmp_path):
    text = "name: t\nseeds: [1]\nvariants:\n  ok: {overrides: {}}\n  bad: {overrides: {rl.algorithm: sac}}\n"
    with pytest.raises(ParamsError, match="variant bad: rl.algorithm"):
        load_study(_write(tmp_path, text), ROOT / "params.yaml")
    text = "name: t\nseeds: [1]\nvariants: {a: {}}\nfindings: [{claim: x, source: y, a: a, b: nope}]\n"
    with pytest.raises(ParamsError, match="names no variant 'nope'"):
        load_study(_write(tmp_path, text), ROOT / "params.yaml")


def test_run_order_keys_and_names():
    study = load_study(ROOT / "configs" / "study-smoke.yaml", ROOT / "configs" / "smoke.yaml")
    assert study.runs() == [("grpo", 1234), ("grpo", 1235), ("online_rft", 1234), ("online_rft", 1235)]
    assert study.runs(["online_rft"], [1235]) == [("online_rft", 1235)]
    assert study.variant_runs() == [("grpo", [1234, 1235]), ("online_rft", [1234, 1235])]
    assert study.variant_runs(seeds=[1235]) == [("grpo", [1235]), ("online_rft", [1235])]
    assert study.overrides("online_rft", 1234) == {"rl.steps": 4, "rl.algorithm": "online_rft",
                                                   "common.rl_seeds": [1234]}
    assert study.exp_overrides("grpo", [1234, 1235]) == {"rl.steps": 4, "common.rl_seeds": [1234, 1235]}
    assert study.run_key("grpo", 1234) != study.run_key("online_rft", 1234)
    assert study.run_key("grpo", 1234) != study.run_key("grpo", 1235)
    assert study.exp_name("online_rft", [1234]) == "smoke-online_rft-1234"
    assert study.exp_name("grpo", [1234, 1235]) == "smoke-grpo-1234-1235"
    with pytest.raises(ParamsError, match="no variant ppo"):
        study.runs(["ppo"])


def test_override_values_in_dvcs_grammar():
    assert hydra_value(None) == "null" and hydra_value(True) == "true" and hydra_value(0.28) == "0.28"
    assert hydra_value(1e-4) == "0.0001" and hydra_value(5e-5) == "5e-05"
    assert hydra_value([1234]) == "[1234]" and hydra_value(["cot", "tool"]) == "[cot,tool]"
    assert hydra_value("seq-mean-token-sum-norm") == "seq-mean-token-sum-norm"
    assert hydra_value("true") == "'true'" and hydra_value("a b") == "'a b'"
    assert exp_command("n", {"rl.beta": 0, "rl.mode": "cot"}, ["evaluate@rl"], "dvc") == [
        "dvc", "exp", "run", "-n", "n", "-S", "rl.beta=0", "-S", "rl.mode=cot", "evaluate@rl"]


def _record(greedy: list[int], sft: list[int], s_per_step: float, maj: list[int] | None = None) -> dict:
    ids = [f"p{i}" for i in range(len(greedy))]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    rl_table = {"id": ids, "greedy": greedy} | ({"maj": maj, "pass": maj} if maj else {})
    ev = {"synthetic/tool/greedy": mean(greedy)} | ({"synthetic/tool/maj@8": mean(maj),
                                                     "synthetic/tool/pass@8": mean(maj)} if maj else {})
    sft_ev = {"synthetic/tool/greedy": mean(sft)} | ({"synthetic/tool/maj@8": mean(sft),
                                                     "synthetic/tool/pass@8": mean(sft)} if maj else {})
    sft_table = {"id": ids, "greedy": sft} | ({"maj": sft, "pass": sft} if maj else {})
    return {"mode": "tool", "eval": ev, "sft_eval": sft_ev,
            "rl": {"s_per_step": s_per_step, "peak_rss_mb": 100.0, "trainer_state_mb": 5.0},
            "problems": {"rl": {"tool": rl_table}, "sft": {"tool": sft_table}}, "curve": []}


def test_paired_difference_by_hand():
    a = {1: _record([1, 1, 0, 1], [0, 1, 0, 0], 2.0), 2: _record([1, 0, 0, 1], [0, 1, 0, 0], 2.2)}
    b = {1: _record([0, 1, 0, 1], [0, 1, 0, 0], 3.0), 2: _record([0, 0, 1, 1], [0, 1, 0, 0], 3.4)}
    d = stats.paired_difference(a, b, "greedy", "tool")
    # per seed: 0.75 - 0.5 = 0.25 and 0.5 - 0.5 = 0; per problem seed means a (1, .5, 0, 1), b (0, .5, .5, 1)
    assert d["diff"] == pytest.approx(0.125) and d["sd_seeds"] == pytest.approx(math.sqrt(2 * 0.125 ** 2))
    diffs = [1.0, 0.0, -0.5, 0.0]
    m = sum(diffs) / 4
    se = math.sqrt(sum((x - m) ** 2 for x in diffs) / 3 / 4)
    assert d["paired_se"] == pytest.approx(se) and d["n_problems"] == 4
    assert stats.total_se(d) == pytest.approx(math.sqrt(se ** 2 + d["sd_seeds"] ** 2 / 2))
    cost = stats.paired_difference(a, b, "s_per_step", "tool")
    assert cost["diff"] == pytest.approx(-1.1) and cost["paired_se"] is None
    gain = stats.paired_difference(a, {}, "greedy", "tool", b_model="sft")  # against each run's own SFT model
    assert gain["diff"] == pytest.approx((0.5 + 0.25) / 2)


def test_verdict_rule():
    assert stats.verdict(0.05, 0.02) == "holds" and stats.verdict(0.03, 0.02) == "inconclusive"
    assert stats.verdict(-0.05, 0.02) == "does not hold" and stats.verdict(None, 0.02) == "inconclusive"
    assert stats.verdict(-1.0, 0.1, lower_is_better=True) == "holds"
    # no difference claimed: shown only when the whole 2-SE interval lies within the margin
    assert stats.verdict(0.05, 0.02, expect="same") == "does not hold"
    assert stats.verdict(0.005, 0.005, expect="same", margin=0.02) == "holds"  # |d| + 2 SE = 0.015
    assert stats.verdict(0.01, 0.02, expect="same", margin=0.02) == "inconclusive"  # 0.05: too uncertain to tell


def test_seed_se_pools_every_variant_of_the_mode():
    # greedy per seed: x (1.0, .75) var 1/32; y (.5, .5) var 0; z (.25, .75) var 1/8; pooled over 3 df: 5/96
    results = {"x": {1: _record([1, 1, 1, 1], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)},
               "y": {1: _record([1, 1, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([0, 0, 1, 1], [0, 0, 0, 0], 1.0)},
               "z": {1: _record([1, 0, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)}}
    pooled, df = stats.pooled_seed_sd(results, "greedy", "tool")
    assert df == 3 and pooled == pytest.approx(math.sqrt(5 / 96))
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results)
    assert row["diff"] == pytest.approx(0.375) and row["seed_se"] == pytest.approx(math.sqrt(5 / 96))  # sqrt(1/2+1/2)
    assert row["se"] == pytest.approx(math.sqrt(row["paired_se"] ** 2 + 5 / 96))
    vs_sft = stats.finding_row(Finding(claim="c", source="s", a="x", b="sft"), results)
    assert vs_sft["seed_se"] == pytest.approx(math.sqrt(5 / 96 / 2))  # the SFT model is one fixed model
    cost = stats.finding_row(Finding(claim="c", source="s", a="x", b="y", metric="s_per_step"), results)
    assert cost["seed_se"] is None and cost["se"] == pytest.approx(0.0)  # costs: the pair's own sd


def test_report_tables_are_the_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\n"
            "variants:\n  grpo: {overrides: {}}\n  ppo: {overrides: {rl.algorithm: ppo}}\n"
            "findings:\n  - {claim: GRPO beats PPO, source: s, a: grpo, b: ppo}\n"
            "  - {claim: GRPO is faster, source: s, a: grpo, b: ppo, metric: s_per_step, lower_is_better: true}\n")
    study = load_study(_write(tmp_path, text), ROOT / "params.yaml")
    recs = {("grpo", 1): _record([1, 1, 1, 1], [0, 1, 0, 0], 2.0, maj=[1, 1, 0, 1]),
            ("grpo", 2): _record([1, 1, 1, 0], [0, 1, 0, 0], 2.2, maj=[1, 1, 0, 1]),
            ("ppo", 1): _record([0, 1, 0, 1], [0, 1, 0, 0], 3.0, maj=[0, 1, 0, 1]),
            ("ppo", 2): _record([0, 0, 1, 1], [0, 1, 0, 0], 3.4, maj=[0, 1, 0, 1])}
    recs[("grpo", 1)]["curve"] = [{"step": 0, "val_greedy_acc": 0.5}, {"step": 1, "reward_mean": 0.3},
                                  {"step": 10, "val_greedy_acc": 0.6}]
    recs[("grpo", 2)]["curve"] = [{"step": 0, "val_greedy_acc": 0.5}, {"step": 10, "val_greedy_acc": 0.7}]
    for (v, s), r in recs.items():
        path = study.result_path(v, s)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r | {"key": study.run_key(v, s), "variant": v, "seed": s, "wall_s": 60.0,
                                        "matmul_gflops": 250.0}))
    out = sr.build_study_report(study)
    md = Path(out["report"]).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| grpo ("))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == f"{87.5:.1f} ± {100 * math.sqrt(2 * 0.125 ** 2):.1f}"  # greedy 1.0 and 0.75
    assert cells[4] == "75.0 ± 0.0" and cells[7] == "2.10"
    assert cells[6].startswith("+62.5")  # gain over SFT 0.25: (1 + .75) / 2 - .25
    verdicts = {f["claim"]: f["verdict"] for f in out["findings"]}
    assert verdicts == {"GRPO beats PPO": "inconclusive", "GRPO is faster": "holds"}
    assert (tmp_path / "out" / "study" / "maj_pass_at_k.png").exists()
    assert "4 runs" in md and "250 GFLOP/s" in md
    dvc_plot = (tmp_path / "out" / "study" / "val_curves" / "grpo.csv").read_text().split()
    assert dvc_plot[0] == "step,val_greedy_acc" and dvc_plot[1] == "0,0.5"
    assert dvc_plot[2].startswith("10,") and float(dvc_plot[2].split(",")[1]) == pytest.approx(0.65)
    assert not (tmp_path / "out" / "study" / "val_curves" / "ppo.csv").exists()  # no curve recorded


def test_findings_compare_like_with_like():
    f = Finding(claim="c", source="s", a="x", b="sft", metric="maj@k")
    results = {"x": {1: _record([1, 0], [0, 0], 1.0, maj=[1, 1])}}
    row = stats.finding_row(f, results)  # maj@k: the largest k sampled (8), against x's own SFT model
    assert row["mode"] == "tool" and row["n_seeds"] == 1 and row["diff"] == pytest.approx(1.0)
    assert row["paired_se"] == 0.0 and row["verdict"] == "holds"  # every problem moved from wrong to right
