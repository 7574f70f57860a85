"""The study's statistics, checked against numbers computed by hand: seed-blocked differences and their SE (seeds x
problems), the verdict rule, the MDE and the seeds it needs, the large-k pass@k finding, ScaleRL's fit and its
bootstrap."""

from __future__ import annotations

import math

import pytest
from study_records import record as _record

from dsmath.study import stats
from dsmath.study.spec import Finding


def test_paired_difference_by_hand():
    a = {1: _record([1, 1, 0, 1], [0, 1, 0, 0], 2.0), 2: _record([1, 0, 0, 1], [0, 1, 0, 0], 2.2)}
    b = {1: _record([0, 1, 0, 1], [0, 1, 0, 0], 3.0), 2: _record([0, 0, 1, 1], [0, 1, 0, 0], 3.4)}
    d = stats.paired_difference(a, b, "greedy", "tool")
    # blocked on the seed: d_s = 0.75 - 0.5 = 0.25 and 0.5 - 0.5 = 0; sd 0.25 / sqrt(2) = 0.176777, the seeds' SE
    # sd / sqrt(2) = 0.125 on 1 df
    assert d["diff"] == pytest.approx(0.125) and d["sd_seeds"] == pytest.approx(0.1767767)
    assert d["seed_se"] == pytest.approx(0.125)
    # seeds x problems: per-problem d = (1, 0, 0, 0) and (1, 0, -1, 0); grand mean 0.125, seed means (.25, 0),
    # problem means (1, 0, -.5, 0). MS_seed = 4 (.125^2 + .125^2) / 1 = .125; MS_problem = 2 (.875^2 + .125^2 +
    # .625^2 + .125^2) / 3 = .791667; residuals (-.125, -.125, .375, -.125 | .125, .125, -.375, .125): MS_res =
    # .375 / 3 = .125. The seed component does not show (MS_seed = MS_res): SE^2 = MS_problem / (2 x 4) = .098958,
    # SE .314576 on 3 df (the SE over the 4 problems of the seed-mean differences: sd(1, 0, -.5, 0) / 2)
    assert d["se"] == pytest.approx(0.314576, abs=1e-6) and d["df"] == pytest.approx(3.0)
    assert d["se_kind"] == "seeds x problems"
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
    # a claimed advantage that is neither shown nor refuted, but bounded: |d| + 2 SE inside the margin -> equivalent
    assert stats.verdict(0.004, 0.004, margin=0.02) == "equivalent"  # 0.004 + 0.008 = 0.012 <= 0.02
    assert stats.verdict(-0.005, 0.004, margin=0.02) == "equivalent"  # the other way round: 0.013
    assert stats.verdict(0.01, 0.006, margin=0.02) == "inconclusive"  # 0.022: too uncertain to bound
    assert stats.verdict(0.004, 0.004, margin=None) == "inconclusive"  # costs: no margin
    assert stats.verdict(0.004, 0.004, df=2, margin=0.02) == "inconclusive"  # t_.975,2 = 4.30: 0.0212


def test_a_finding_is_blocked_on_the_seed_of_its_two_arms_alone():
    # greedy per seed: x (1.0, .75), y (.5, .5): d_s = (.5, .25), mean .375, sd .176777, seeds' SE .125 on 1 df.
    # Per problem d = (0, 0, 1, 1) and (1, 1, 0, -1): MS_seed = .125, MS_problem = 2 (3 x .125^2 + .375^2) / 3 = .125,
    # residuals (-.625, -.625, .375, .875 | .625, .625, -.375, -.875): MS_res = 3.375 / 3 = 1.125. Neither component
    # shows: SE^2 = MS_res / (2 x 4) = .140625, SE .375 on (2 - 1)(4 - 1) = 3 df
    results = {"x": {1: _record([1, 1, 1, 1], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)},
               "y": {1: _record([1, 1, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([0, 0, 1, 1], [0, 0, 0, 0], 1.0)},
               "z": {1: _record([1, 0, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)}}
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results)
    assert row["diff"] == pytest.approx(0.375) and row["seed_se"] == pytest.approx(0.125)
    assert row["se"] == pytest.approx(0.375) and row["df"] == pytest.approx(3.0)
    assert row["mde"] == pytest.approx((3.1824 + 0.9785) * 0.375, abs=1e-3)  # t_.975,3 + t_.80,3
    assert row["verdict"] == "inconclusive"  # 1 SE (3 SE of the seeds alone, below their t_.975,1 bar too)
    noisy_z = results | {"z": {1: _record([0, 0, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 1], [0] * 4, 1.0)}}
    assert stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), noisy_z)["se"] == row["se"]  # no pooling
    vs_sft = stats.finding_row(Finding(claim="c", source="s", a="x", b="sft"), results)
    # d = (1, 1, 1, 1) and (1, 1, 1, 0): MS_seed = MS_problem = MS_res = .125: SE sqrt(.125 / 8) = .125 on 3 df
    assert vs_sft["diff"] == pytest.approx(0.875) and vs_sft["se"] == pytest.approx(0.125)
    assert vs_sft["df"] == pytest.approx(3.0)
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
    # seed sd 1.7 points (v_seed .0003), flip noise v_res .05, 1,000 problems, target MDE 3 points: n = 5 gives
    # E[MS_seed] = 1000 x .0003 + .05 = .35 > E[MS_res] = E[MS_problem] = .05: SE sqrt(.35 / 5000) = .008367 on 4 df,
    # MDE (2.7764 + 0.9410) x .008367 = .031103 > .03; n = 6: sqrt(.35 / 6000) = .007638 on 5 df, x (2.5706 +
    # 0.9195) = .026656
    assert stats.seeds_needed(0.0003, 0.0, 0.05, 1000, 0.03) == 6
    assert stats.planned_mde(0.0003, 0.0, 0.05, 5, 1000) == pytest.approx(0.031103, abs=1e-5)
    # the problems' share cannot be seeded away: v_problem .01 over 100 problems is an SE of .01 by itself
    assert stats.seeds_needed(0.0, 0.01, 0.05, 100, 0.02) is None
    assert stats.seeds_needed(0.0, 0.0, 0.0, 100, 0.01) == 2


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


def test_crossed_se_cases_by_hand():
    # a seed effect and no problem effect: d = (1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 1, 0); grand 1/3, seed means
    # (.5, 0, .5), problem means (2/3, 1/3, 1/3, 0): MS_seed = 4 (1/36 + 4/36 + 1/36) / 2 = 1/3, MS_problem = 3 (1/9
    # + 0 + 0 + 1/9) / 3 = 2/9 = MS_res: the problem component does not show -> the seeds' SE, sqrt(1/3 / 12) = 1/6
    # (= sd(.5, 0, .5) / sqrt(3)) on 2 df
    r = stats.crossed([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]])
    assert r["diff"] == pytest.approx(1 / 3) and r["ms_seed"] == pytest.approx(1 / 3)
    assert r["ms_problem"] == pytest.approx(2 / 9) and r["ms_res"] == pytest.approx(2 / 9)
    assert r["se"] == pytest.approx(1 / 6) and r["df"] == pytest.approx(2.0)
    # both components show: d = (1, 1, 0), (1, 1, 0), (0, 0, -1) is additive (seed effect + problem effect), so the
    # residuals are 0; grand 1/3, seed and problem means (2/3, 2/3, -1/3): MS_seed = MS_problem = 3 (1/9 + 1/9 + 4/9)
    # / 2 = 1, MS_res = 0. SE^2 = (1 + 1 - 0) / 9, SE .471405; Satterthwaite df = 2^2 / (1/2 + 1/2) = 4
    r = stats.crossed([[1, 1, 0], [1, 1, 0], [0, 0, -1]])
    assert r["ms_seed"] == pytest.approx(1.0) and r["ms_problem"] == pytest.approx(1.0)
    assert r["ms_res"] == pytest.approx(0.0, abs=1e-12)
    assert r["se"] == pytest.approx(math.sqrt(2 / 9)) and r["df"] == pytest.approx(4.0)


def test_passk_with_per_problem_results_gets_the_two_way_se():
    """With the evaluate stage's per-problem pass@k counts (right samples of n per problem of the subset), passk@k
    is judged like greedy: the unbiased pass@k of each problem, the seeds x problems model (the SFT model's one draw
    in the problem component). By hand, n = 4, k = 2: pass@2 = 1 - C(4 - c, 2) / C(4, 2), i.e. c = 0, 1, 2, 4 ->
    0, 1/2, 5/6, 1; RL seed 1 right (4, 1, 0) -> (1, 1/2, 0), seed 2 (2, 0, 1) -> (5/6, 0, 1/2); SFT (4, 0, 0) ->
    (1, 0, 0): d = (0, 1/2, 0) and (-1/6, 0, 1/2), mean 5/36."""
    results = {"x": {}}
    for seed, right in ((1, [4, 1, 0]), (2, [2, 0, 1])):
        rec = _record([1, 0, 1], [0, 0, 1], 1.0, maj=[1, 1, 0])
        rec["eval"] |= {"synthetic/tool/passk@1": 0.3, "synthetic/tool/passk@2": 0.5}
        rec["sft_eval"] |= {"synthetic/tool/passk@2": 1 / 3, "synthetic/tool/passk_problems": 3.0}
        ids = ["p0", "p1", "p2"]
        rec["problems"]["rl"]["tool"]["passk"] = {"id": ids, "right": right, "samples": [4, 4, 4]}
        rec["problems"]["sft"]["tool"]["passk"] = {"id": ids, "right": [4, 0, 0], "samples": [4, 4, 4]}
        results["x"][seed] = rec
    assert stats.per_problem(results["x"][2], "passk@k", "tool") == pytest.approx({"p0": 5 / 6, "p1": 0.0,
                                                                                  "p2": 0.5})
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="sft", metric="passk@k", expect="same"), results)
    assert row["se_kind"] == "seeds x problems" and row["n_problems"] == 3
    assert row["diff_common"] == pytest.approx(5 / 36)
    assert row["se"] == pytest.approx(stats.crossed([[0, 0.5, 0], [-1 / 6, 0, 0.5]])["se"])
