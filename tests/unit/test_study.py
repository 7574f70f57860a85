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
    for v in ("rft", "online_rft", "grpo", "grpo_process", "grpo_iterative", "ppo", "no_math_pretrain", "r1_zero",
              "grpo_tool", "random_reward", "format_only", "dr_grpo", "rloo", "grpo_mu2", "gspo", "dapo"):
        assert v in study.variants, v
    assert len(study.runs()) == len(study.variants) * len(study.seeds)
    p = variant_params(study, "r1_zero", 1235, ROOT / "params.yaml")
    assert (p.rl.init, p.rl.mode, p.common.rl_seeds) == ("pretrain", "cot", [1235])
    for v in ("gspo", "dapo"):  # the successors' off-policy arms differ from their mu-2 reference alone
        assert variant_params(study, v, 1234, ROOT / "params.yaml").rl.mu == 2
        assert study.variants["grpo_mu2"].overrides.items() <= study.variants[v].overrides.items()
    assert {(f.a, f.b) for f in study.findings if f.a in ("gspo", "dapo")} == {("gspo", "grpo_mu2"),
                                                                             ("dapo", "grpo_mu2")}
    assert not variant_params(study, "dapo", 1234, ROOT / "params.yaml").rl.dynamic_sampling  # equal samples
    assert any(f.metric == "passk@k" for f in study.findings)  # Fig. 7 at k = 64
    assert variant_params(study, "grpo", 1234, ROOT / "params.yaml").evaluate.passk_samples >= 64
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
    # blocked on the seed: d_s = 0.75 - 0.5 = 0.25 and 0.5 - 0.5 = 0; sd 0.25 / sqrt(2) = 0.176777, SE sd / sqrt(2)
    assert d["diff"] == pytest.approx(0.125) and d["sd_seeds"] == pytest.approx(0.1767767)
    assert d["se"] == pytest.approx(0.125) and d["df"] == 1 and d["se_kind"] == "seeds"
    # one seed's problem noise, beside it (not added): seed 1 per-problem diffs (1, 0, 0, 0): var 0.25, SE 0.25;
    # seed 2 (1, 0, -1, 0): var 2/3, SE sqrt(1/6); root mean square sqrt((1/16 + 1/6) / 2) = 0.338502
    assert d["paired_se"] == pytest.approx(0.338502, abs=1e-6) and d["n_problems"] == 4
    cost = stats.paired_difference(a, b, "s_per_step", "tool")  # d_s = -1.0, -1.2: SE 0.1
    assert cost["diff"] == pytest.approx(-1.1) and cost["paired_se"] is None and cost["se"] == pytest.approx(0.1)
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
    # few seeds: the bar is Student's t_{0.975, df}, not 2 (df 1: 12.706; df 6: 2.447)
    assert stats.verdict(0.05, 0.02, df=1) == "inconclusive" and stats.verdict(0.26, 0.02, df=1) == "holds"
    assert stats.verdict(0.048, 0.02, df=6) == "inconclusive" and stats.verdict(0.05, 0.02, df=6) == "holds"
    assert stats.verdict(0.05, 0.02, df=1000) == "holds"


def test_a_finding_is_blocked_on_the_seed_of_its_two_arms_alone():
    # greedy per seed: x (1.0, .75), y (.5, .5): d_s = (.5, .25), mean .375, sd .176777, SE .125 on 1 df
    results = {"x": {1: _record([1, 1, 1, 1], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)},
               "y": {1: _record([1, 1, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([0, 0, 1, 1], [0, 0, 0, 0], 1.0)},
               "z": {1: _record([1, 0, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)}}
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results)
    assert row["diff"] == pytest.approx(0.375) and row["se"] == pytest.approx(0.125) and row["df"] == 1
    assert row["mde"] == pytest.approx((12.7062 + 1.3764) * 0.125, abs=1e-3)  # t_.975,1 + t_.80,1
    assert row["verdict"] == "inconclusive"  # 3 SE, but below t_.975,1 x 0.125 = 1.59 (2 seeds: df 1)
    noisy_z = results | {"z": {1: _record([0, 0, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 1], [0] * 4, 1.0)}}
    assert stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), noisy_z)["se"] == row["se"]  # no pooling
    vs_sft = stats.finding_row(Finding(claim="c", source="s", a="x", b="sft"), results)
    assert vs_sft["diff"] == pytest.approx(0.875) and vs_sft["se"] == pytest.approx(0.125)  # d_s = (1, .75)
    cost = stats.finding_row(Finding(claim="c", source="s", a="x", b="y", metric="s_per_step"), results)
    assert cost["se"] == pytest.approx(0.0) and cost["paired_se"] is None  # costs: the pair's own d_s


def test_seed_blocked_se_and_mde_by_hand():
    r = stats.seed_blocked([0.02, 0.04, 0.03])  # mean 0.03, sd 0.01, SE 0.01 / sqrt(3) = 0.005774 on 2 df
    assert r["diff"] == pytest.approx(0.03) and r["sd"] == pytest.approx(0.01)
    assert r["se"] == pytest.approx(0.005774, abs=1e-6) and r["df"] == 2
    assert stats.mde(r["se"], r["df"]) == pytest.approx((4.3027 + 1.0607) * 0.005774, abs=1e-4)  # 0.03097
    assert stats.mde(r["se"], r["df"]) == pytest.approx(0.03097, abs=1e-5)
    assert stats.mde(0.01) == pytest.approx((1.95996 + 0.84162) * 0.01, abs=1e-6)  # no df: the normal
    assert stats.mde(0.01, float("inf")) == pytest.approx(stats.mde(0.01))
    assert stats.mde(None) is None and stats.seed_blocked([0.02])["se"] is None


def test_seeds_needed_by_hand():
    # sd of d_s 1.6 points, target MDE 2 points: n = 7 gives (2.4469 + 0.9057) x 0.016 / sqrt(7) = 0.020275 > 0.02,
    # n = 8 gives (2.3646 + 0.8960) x 0.016 / sqrt(8) = 0.018445
    assert stats.seeds_needed(0.016, 0.02) == 8
    assert stats.mde(0.016 / math.sqrt(7), 6) == pytest.approx(0.020275, abs=1e-5)
    # a large target: n = 2 already gives (12.7062 + 1.3764) x 0.01 / sqrt(2) = 0.09958
    assert stats.seeds_needed(0.01, 0.1) == 2 and stats.seeds_needed(0.01, 0.099) == 3
    assert stats.seeds_needed(0.0, 0.01) == 2 and stats.seeds_needed(1.0, 1e-6, max_n=50) is None


def test_one_seed_falls_back_to_the_paired_se_over_problems():
    a = {1: _record([1, 1, 0, 1], [0, 1, 0, 0], 2.0)}
    b = {1: _record([0, 1, 0, 1], [0, 1, 0, 0], 3.0), 2: _record([0, 0, 1, 1], [0, 1, 0, 0], 3.4)}
    row = stats.finding_row(Finding(claim="c", source="s", a="a", b="b"), {"a": a, "b": b})
    # one common seed: per-problem diffs (1, 0, 0, 0): SE sqrt(0.25 / 4) = 0.25, df None (the normal)
    assert row["n_seeds"] == 1 and row["se_kind"] == "problems (1 seed)" and row["df"] is None
    assert row["se"] == pytest.approx(0.25) and row["paired_se"] == pytest.approx(0.25)
    assert row["mde"] == pytest.approx((1.95996 + 0.84162) * 0.25, abs=1e-5)
    cost = stats.finding_row(Finding(claim="c", source="s", a="a", b="b", metric="s_per_step"), {"a": a, "b": b})
    assert cost["se"] is None and cost["mde"] is None and cost["verdict"] == "inconclusive"


def test_planned_mde_from_a_pilot_and_its_validation(tmp_path):
    results = {"x": {1: _record([1, 1, 1, 1], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)},
               "y": {1: _record([1, 1, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([0, 0, 1, 1], [0, 0, 0, 0], 1.0)}}
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results, pilot_sd=1.6)
    assert row["planned_mde"] == pytest.approx((12.7062 + 1.3764) * 0.016 / math.sqrt(2), abs=1e-4)  # 0.15933
    cost = stats.finding_row(Finding(claim="c", source="s", a="x", b="y", metric="s_per_step"), results,
                             pilot_sd=1.6)
    assert cost["planned_mde"] is None  # the pilot's sd is of accuracies
    base = "name: t\nseeds: [1, 2]\nvariants: {a: {}}\n"
    assert load_study(_write(tmp_path, base + "pilot_sd: 1.6\n"), ROOT / "params.yaml").pilot_sd == 1.6
    assert load_study(_write(tmp_path, base), ROOT / "params.yaml").pilot_sd is None
    for bad in ("0", "-1", "abc", "true", "200"):
        with pytest.raises(ParamsError, match="pilot_sd must be"):
            load_study(_write(tmp_path, base + f"pilot_sd: {bad}\n"), ROOT / "params.yaml")


def test_report_tables_are_the_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\npilot_sd: 1.6\n"
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
    # blocked on the seed: greedy d_s = 1 - .5 and .75 - .5, mean .375, SE .125 (3 SE, but 2 seeds give df 1 and a
    # bar of t_.975,1 = 12.7 SE; the paired SE over problems is no longer added on top), MDE (12.7062 + 1.3764) x .125
    # = 1.7603 on 1 df
    assert verdicts == {"GRPO beats PPO": "inconclusive", "GRPO is faster": "inconclusive"}
    beats = next(line for line in md.splitlines() if line.startswith("| GRPO beats PPO"))
    assert "**inconclusive** (MDE 176.0 points)" in beats and "12.50 (seeds, df 1)" in beats
    assert "| 176.03 | 15.93 |" in beats  # MDE and the pilot's planned MDE (1.6 points, 2 seeds), in points
    assert "MDE 0.17 s/step" not in md and "MDE" in md
    assert "2 seeds give an MDE of 15.9 points" in md  # pilot_sd 1.6
    finding = next(f for f in out["findings"] if f["claim"] == "GRPO beats PPO")
    assert finding["mde"] == pytest.approx(1.7603, abs=1e-3) and finding["se_kind"] == "seeds"
    fits_line = next(line for line in md.splitlines() if line.startswith("| grpo | 2 |"))
    assert "2 points (< 4): no fit" in fits_line  # steps 0 and 10 only
    records_line = next(line for line in md.splitlines() if line.startswith("| grpo | 1, 2 |"))
    assert records_line.endswith("| current |") and "0 of 4 records are stale" in md
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


def test_passk_at_large_k_is_its_own_finding_metric_blocked_on_the_seed():
    """Fig. 7 at k = 64: `passk@k` reads the subset's pass@k at its largest k (not the n_samples' pass@8); no
    per-problem table holds it, so its SE is the seeds' alone. By hand: RL passk@64 (0.90, 0.86), the SFT models'
    (0.92, 0.92): d_s = (-0.02, -0.06), mean -0.04, sd 0.028284, SE 0.02 on 1 df."""
    results = {"x": {}}
    for seed, rl64 in ((1, 0.90), (2, 0.86)):
        rec = _record([1, 0], [0, 0], 1.0, maj=[1, 1])
        rec["eval"] |= {"synthetic/tool/passk@1": 0.6, "synthetic/tool/passk@16": 0.8, "synthetic/tool/passk@64": rl64}
        rec["sft_eval"] |= {"synthetic/tool/passk@1": 0.5, "synthetic/tool/passk@64": 0.92}
        results["x"][seed] = rec
    assert stats.metric_of(results["x"][1], "passk@k", "tool") == 0.90
    assert stats.metric_of(results["x"][1], "pass@k", "tool") == 1.0  # the n_samples' pass@8, unchanged
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="sft", metric="passk@k", expect="same"), results)
    assert row["diff"] == pytest.approx(-0.04) and row["se"] == pytest.approx(0.02) and row["df"] == 1
    assert row["paired_se"] is None and row["se_kind"] == "seeds"


def test_the_scalerl_fit_recovers_a_known_curve():
    from dsmath.study import fits

    a, b, c_mid, r0 = 0.72, 1.3, 900.0, 0.40
    compute = [0.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0]
    acc = [fits.sigmoid(c, a, b, c_mid, r0) for c in compute]
    assert acc[0] == pytest.approx(r0)  # R(0) = R0: the start value
    # by hand at C = C_mid: R0 + (A - R0) / 2 = 0.56
    assert fits.sigmoid(c_mid, a, b, c_mid, r0) == pytest.approx(0.56)
    fit = fits.fit_curve(compute, acc, r0=r0)
    assert fit["A"] == pytest.approx(a, abs=1e-3) and fit["B"] == pytest.approx(b, abs=1e-3)
    assert fit["C_mid"] == pytest.approx(c_mid, rel=1e-3) and fit["rmse"] < 1e-6
    seeds = fits.fit_seeds([dict(zip(compute, acc, strict=True))] * 3)
    assert seeds["R0"] == pytest.approx(r0) and seeds["A"] == pytest.approx(a, abs=1e-3)
    assert seeds["A_ci"][0] == pytest.approx(a, abs=1e-3) and seeds["A_ci"][1] == pytest.approx(a, abs=1e-3)
    short = fits.fit_seeds([{0.0: 0.4, 64.0: 0.5, 128.0: 0.55}])
    assert short["A"] is None and short["note"] == "3 points (< 4): no fit"
    assert fits.fit_seeds([{64.0: 0.5, 128.0: 0.55, 256.0: 0.6, 512.0: 0.6}])["note"].startswith("no start value")
    assert fits.run_curve([{"step": 0.0, "val_greedy_acc": 0.5}, {"step": 1.0, "reward_mean": 0.2},
                           {"step": 10.0, "val_greedy_acc": 0.6}], 64) == {0.0: 0.5, 640.0: 0.6}


def test_the_bootstrap_over_seeds_brackets_the_truth():
    from dsmath.study import fits

    a, b, c_mid, r0 = 0.65, 1.0, 600.0, 0.50
    compute = [0.0, 200.0, 400.0, 800.0, 1600.0, 3200.0]
    truth = [fits.sigmoid(c, a, b, c_mid, r0) for c in compute]
    # four seeds scattered around the truth (their mean is the truth): +-1 point, in opposite signs per step
    signs = [(1, -1, 1, -1, 1), (-1, 1, -1, 1, -1), (1, 1, -1, -1, 1), (-1, -1, 1, 1, -1)]
    curves = [{0.0: r0} | {c: y + 0.01 * s for c, y, s in zip(compute[1:], truth[1:], sg, strict=True)}
              for sg in signs]
    out = fits.fit_seeds(curves)
    assert out["A"] == pytest.approx(a, abs=1e-3) and out["B"] == pytest.approx(b, abs=1e-3)  # the mean curve
    assert out["boot_ok"] == fits.BOOTSTRAP_RESAMPLES
    lo, hi = out["A_ci"]
    assert lo < a < hi and hi - lo > 0.005
    lo, hi = out["B_ci"]
    assert lo < b < hi
    assert fits.fit_seeds(curves) == out  # a fixed bootstrap seed: the same intervals every time


def _code_tree(root: Path) -> None:
    files = {
        "dvc.yaml": ("stages:\n"
                     "  prep:\n    cmd: x\n    deps: [src/pkg/prep.py, data/raw]\n"
                     "    outs: ['${common.paths.models}/prep']\n"
                     "  train:\n    foreach: ${common.rl_seeds}\n    do:\n      cmd: x\n"
                     "      deps: [src/pkg/train, '${common.paths.models}/prep']\n"
                     "      outs: ['${common.paths.models}/model-${item}']\n"
                     "  unrelated:\n    cmd: x\n    deps: [src/pkg/other.py, stages/other.py]\n"
                     "    outs: [elsewhere]\n"),
        "src/pkg/prep.py": "A = 1\n", "src/pkg/train/__init__.py": "", "src/pkg/train/loop.py": "B = 2\n",
        "src/pkg/other.py": "C = 3\n", "stages/other.py": "D = 4\n", "data/raw/x.txt": "data\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_code_key_hashes_the_code_of_the_stages_the_targets_reach(tmp_path):
    from dsmath.study import codekey

    _code_tree(tmp_path)
    params = {"common": {"paths": {"models": "out"}, "rl_seeds": [1, 2]}}
    stages = codekey._parse((tmp_path / "dvc.yaml").read_text())
    assert codekey.reached_stages(stages, ["train@2"], params) == ["prep", "train@2"]  # through out/prep
    assert codekey.reached_stages(stages, ["train"], params) == ["prep", "train@1", "train@2"]
    key = codekey.study_code_hash(["train@1"], params, tmp_path)
    assert key == codekey.study_code_hash(["train@1"], params, tmp_path)  # deterministic
    for rel in ("src/pkg/other.py", "stages/other.py", "data/raw/x.txt"):  # code of another stage, or data
        (tmp_path / rel).write_text((tmp_path / rel).read_text() + "# edited\n")
        assert codekey.study_code_hash(["train@1"], params, tmp_path) == key, rel
    (tmp_path / "src/pkg/train/__pycache__").mkdir()
    (tmp_path / "src/pkg/train/__pycache__/loop.cpython-312.pyc").write_bytes(b"\0")
    assert codekey.study_code_hash(["train@1"], params, tmp_path) == key  # bytecode is not code
    for rel in ("src/pkg/prep.py", "src/pkg/train/loop.py"):  # a file of a folder dep, a dep upstream
        before = codekey.study_code_hash(["train@1"], params, tmp_path)
        data = bytearray((tmp_path / rel).read_bytes())
        data[0] ^= 1  # one byte
        (tmp_path / rel).write_bytes(bytes(data))
        assert codekey.study_code_hash(["train@1"], params, tmp_path) != before, rel
    (tmp_path / "src/pkg/train/new.py").write_text("")  # a new file in a folder dep
    assert codekey.study_code_hash(["train@1"], params, tmp_path) != before


def test_a_runs_key_holds_its_code_and_the_real_graph_follows_sft_init(tmp_path):
    import dataclasses

    from dsmath.core import codedeps
    from dsmath.study import codekey

    study = load_study(ROOT / "configs" / "study-smoke.yaml", ROOT / "configs" / "smoke.yaml")
    _code_tree(tmp_path)
    local = dataclasses.replace(study, targets=["train@1234"], code_root=str(tmp_path))
    key, settings = local.run_key("grpo", 1234), local.settings_key("grpo", 1234)
    (tmp_path / "src/pkg/prep.py").write_text("A = 2\n")
    edited = local.run_key("grpo", 1234)
    assert edited != key and local.settings_key("grpo", 1234) == settings
    (tmp_path / "src/pkg/other.py").write_text("C = 4\n")  # code of a stage the target does not reach
    assert local.run_key("grpo", 1234) == edited
    # the project's dvc.yaml: evaluate@rl reaches rl@<seed>, sft and, through sft.init, pretrain or base only
    stages = codekey._parse((codedeps.ROOT / "dvc.yaml").read_text())
    params = variant_params(study, "grpo", 1234, ROOT / "configs" / "smoke.yaml").model_dump()
    reached = codekey.reached_stages(stages, ["evaluate@sft", "evaluate@rl"], params)
    assert {"rl@1234", "sft", "pretrain", "base", "tokenizer", "corpus"} <= set(reached)
    assert "rl@1235" not in reached and "report" not in reached
    params["sft"]["init"] = "base"
    assert "pretrain" not in codekey.reached_stages(stages, ["evaluate@sft"], params)


def test_the_report_keeps_stale_records_and_names_their_commits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\nvariants:\n  grpo: {overrides: {}}\n"
    study = load_study(_write(tmp_path, text), ROOT / "params.yaml")
    old = {"key": study.settings_key("grpo", 1), "git_commit": "aaaaaaa1"}  # a record from before code keys
    new = {"key": study.run_key("grpo", 2), "settings_key": study.settings_key("grpo", 2),
           "code_key": study.code_key("grpo", 2), "git_commit": "bbbbbbb2"}
    for seed, extra in ((1, old), (2, new)):
        path = study.result_path("grpo", seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_record([1, 1, 0, 0], [0, 1, 0, 0], 1.0) | extra | {"variant": "grpo",
                                                                                        "seed": seed}))
    results = sr.load_results(study)
    assert sorted(results["grpo"]) == [1, 2]  # the stale record is still reported
    (status,) = sr.code_status(study, results)
    assert status["stale"] == [1] and status["no_key"] == [1] and status["commits"] == ["aaaaaaa", "bbbbbbb"]
    other = dict(new, settings_key="0" * 16, key="1" * 16)  # other settings: not this study's run
    study.result_path("grpo", 2).write_text(json.dumps(_record([1, 1, 0, 0], [0, 1, 0, 0], 1.0) | other))
    assert sorted(sr.load_results(study)["grpo"]) == [1]
    md = Path(sr.build_study_report(study)["report"]).read_text()
    assert "| grpo | 1 | aaaaaaa |" in md and "**stale** (seeds 1: recorded before code keys)" in md


def test_a_study_files_cluster_settings_are_read_and_checked(tmp_path):
    base = "name: c\nseeds: [1]\nvariants:\n  grpo: {overrides: {}}\n"
    params = ROOT / "params.yaml"
    plain = load_study(_write(tmp_path, base), params).cluster
    assert (plain.pool, plain.remote, plain.resubmit, plain.silent_s) == (None, None, 2, 150)  # runs here
    c = load_study(_write(tmp_path, base + "cluster: {pool: dsmath, remote: s3://b/r, resubmit: 0, silent_s: 60}\n"),
                   params).cluster
    assert (c.pool, c.remote, c.resubmit, c.silent_s) == ("dsmath", "s3://b/r", 0, 60)
    for bad, why in (("{pool: p, retries: 3}", "has the keys pool"), ("{resubmit: -1}", "resubmit must be"),
                     ("{silent_s: 30}", "heartbeat every 30 s"), ("[p]", "has the keys")):
        with pytest.raises(ParamsError, match=why):
            load_study(_write(tmp_path, base + f"cluster: {bad}\n"), params)
