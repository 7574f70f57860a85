"""The study's pure parts: the study file (overlays in dotted keys, validated), the override grammar handed to DVC,
and the report's statistics and verdicts, checked against numbers computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from study_records import record as _record

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
              "grpo_tool", "random_reward", "format_only", "dr_grpo", "rloo", "grpo_mu2", "gspo", "dapo", "r1"):
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


def test_a_variant_key_the_study_does_not_know_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "name: t\nseeds: [1]\nresults: res\nvariants:\n  grpo: {overides: {rl.lr: 1.0e-5}}\n"
    with pytest.raises(ParamsError, match=r"variant grpo: unknown keys overides \(allowed: label, overrides\)"):
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


def test_planned_mde_from_a_pilot_and_its_validation(tmp_path):
    results = {"x": {1: _record([1, 1, 1, 1], [0, 0, 0, 0], 1.0), 2: _record([1, 1, 1, 0], [0, 0, 0, 0], 1.0)},
               "y": {1: _record([1, 1, 0, 0], [0, 0, 0, 0], 1.0), 2: _record([0, 0, 1, 1], [0, 0, 0, 0], 1.0)}}
    # the pilot's components from its runs: per problem d = (0, 0, 1, 1), (1, 1, 0, -1): MS_seed = MS_problem = .125
    # below MS_res 1.125 (test_study_stats): v_seed = v_problem = 0, v_res = 1.125
    pilot = stats.pilot_components(results["x"], results["y"], "tool")
    assert (pilot["v_seed"], pilot["v_problem"]) == (0.0, 0.0) and pilot["v_res"] == pytest.approx(1.125)
    assert pilot["seeds"] == [1, 2] and pilot["n_problems"] == 4
    row = stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results, pilot=pilot)
    # planned for 2 seeds x 4 problems: every expected mean square 1.125, none shows: SE sqrt(1.125 / 8) = .375 on
    # 3 df, MDE (3.1824 + 0.9785) x .375 = 1.5603 (the measured one: the pilot is these runs)
    assert row["planned_mde"] == pytest.approx(1.5603, abs=1e-3) and row["planned_mde"] == pytest.approx(row["mde"])
    # a seed component: v_seed .0004, v_res .05, 2 seeds x 4 problems: E[MS_seed] = 4 x .0004 + .05 = .0516 >
    # E[MS_res] = .05 = E[MS_problem]: SE sqrt(.0516 / 8) = .080312 on 1 df, MDE (12.7062 + 1.3764) x .080312
    seedy = {"v_seed": 0.0004, "v_problem": 0.0, "v_res": 0.05}
    assert stats.finding_row(Finding(claim="c", source="s", a="x", b="y"), results, pilot=seedy)["planned_mde"] \
        == pytest.approx(1.13099, abs=1e-4)
    cost = stats.finding_row(Finding(claim="c", source="s", a="x", b="y", metric="s_per_step"), results,
                             pilot=pilot)
    assert cost["planned_mde"] is None  # the pilot's components are of accuracies
    base = "name: t\nseeds: [1, 2]\nvariants: {a: {}, b: {}}\n"
    assert load_study(_write(tmp_path, base + "pilot: {a: a, b: b}\n"), ROOT / "params.yaml").pilot == ("a", "b")
    assert load_study(_write(tmp_path, base), ROOT / "params.yaml").pilot is None
    for bad in ("1.6", "{a: a}", "{a: a, b: nope}", "[a, b]"):
        with pytest.raises(ParamsError, match="pilot must be"):
            load_study(_write(tmp_path, base + f"pilot: {bad}\n"), ROOT / "params.yaml")


def table_line(md: str, start: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(start))


def test_report_tables_are_the_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\npilot: {a: grpo, b: ppo}\n"
            "variants:\n  grpo: {overrides: {}}\n  ppo: {overrides: {rl.algorithm: ppo}}\n"
            "findings:\n  - {claim: GRPO beats PPO, source: s, a: grpo, b: ppo}\n"
            "  - {claim: GRPO is faster, source: s, a: grpo, b: ppo, metric: s_per_step, lower_is_better: true}\n"
            "  - {claim: RL keeps pass@64, source: s, a: grpo, b: sft, metric: passk@k, expect: same}\n")
    study = load_study(_write(tmp_path, text), ROOT / "params.yaml")
    recs = {("grpo", 1): _record([1, 1, 1, 1], [0, 1, 0, 0], 2.0, maj=[1, 1, 0, 1]),
            ("grpo", 2): _record([1, 1, 1, 0], [0, 1, 0, 0], 2.2, maj=[1, 1, 0, 1]),
            ("ppo", 1): _record([0, 1, 0, 1], [0, 1, 0, 0], 3.0, maj=[0, 1, 0, 1]),
            ("ppo", 2): _record([0, 0, 1, 1], [0, 1, 0, 0], 3.4, maj=[0, 1, 0, 1])}
    for seed, rl64 in ((1, 0.90), (2, 0.86)):  # d_s = -.02, -.06 against the SFT model's .92: SE .02 (seeds)
        recs[("grpo", seed)]["eval"]["synthetic/tool/passk@64"] = rl64
        recs[("grpo", seed)]["sft_eval"]["synthetic/tool/passk@64"] = 0.92
        recs[("grpo", seed)]["sft_eval"]["synthetic/tool/passk_problems"] = 50.0
    recs[("grpo", 1)]["curve"] = [{"step": 0, "val_greedy_acc": 0.5}, {"step": 1, "reward_mean": 0.3,
                                                                         "response_len_mean": 40.0},
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
    assert cells[3] == "2"  # seeds
    assert cells[4] == f"{87.5:.1f} ± {100 * math.sqrt(2 * 0.125 ** 2):.1f}"  # greedy 1.0 and 0.75
    assert cells[5] == "75.0 ± 0.0" and cells[8] == "2.10"
    assert cells[7].startswith("+62.5")  # gain over SFT 0.25: (1 + .75) / 2 - .25
    assert "The rule's 2 SE widen to Student's t_{0.975,df} SE where that is larger (kind *seeds* with 2 seeds: " \
        "12.71 SE)" in md
    verdicts = {f["claim"]: f["verdict"] for f in out["findings"]}
    # blocked on the seed: greedy d_s = 1 - .5 and .75 - .5, mean .375; per problem d = (1, 0, 1, 0) and
    # (1, 1, 0, -1): MS_seed .125 < MS_res .458333 (no seed component), MS_problem .791667: SE sqrt(.791667 / 8) =
    # .314576 on 3 df (test_study_stats has the arithmetic), MDE (3.1824 + 0.9785) x .314576 = 1.3089
    assert verdicts == {"GRPO beats PPO": "inconclusive", "GRPO is faster": "inconclusive",
                        "RL keeps pass@64": "inconclusive"}
    keeps = next(line for line in md.splitlines() if line.startswith("| RL keeps pass@64"))
    # no per-problem results: the seeds' SE .02 and the SFT model's one draw, at most .92 x .08 / 50 = .001472:
    # SE sqrt(.0004 + .001472) = .043267 on (.001872)^2 / (.0004^2 / 1) = 21.9 df
    assert "4.33 (seeds + SFT draw (bound), df 21.9)" in keeps and "; its test problems held fixed)" in keeps
    assert "held fixed" not in table_line(md, "| GRPO is faster")  # a cost has no test problems
    beats = next(line for line in md.splitlines() if line.startswith("| GRPO beats PPO"))
    assert "**inconclusive** (MDE 130.9 points)" in beats and "31.46 (seeds x problems, df 3)" in beats
    assert "| 130.89 | 130.89 |" in beats  # MDE and the planned MDE: the pilot (grpo vs ppo) is these runs
    assert "MDE 0.17 s/step" not in md and "MDE" in md
    # the pilot's components: v_seed 0, v_problem (.791667 - .458333) / 2 = .166667, v_res .458333; the problems'
    # share .166667 / 4 alone is an SE of .2: no number of seeds reaches an MDE of 2 points
    assert "2 seeds x 4 problems give an MDE of 130.9 points" in md and "needs more than 1,000 seeds" in md
    assert "seed 0.00, problem 1666.7, residual 4583" in md
    finding = next(f for f in out["findings"] if f["claim"] == "GRPO beats PPO")
    assert finding["mde"] == pytest.approx(1.3089, abs=1e-3) and finding["se_kind"] == "seeds x problems"
    fits_line = next(line for line in md.splitlines() if line.startswith("| grpo | 2 |"))
    assert "2 points (< 4): no fit" in fits_line  # steps 0 and 10 only
    records_line = next(line for line in md.splitlines() if line.startswith("| grpo | 1, 2 |"))
    assert records_line.endswith("| current |") and "0 of 4 records are stale" in md
    assert (tmp_path / "out" / "study" / "maj_pass_at_k.png").exists()
    assert (tmp_path / "out" / "study" / "response_length.png").exists()  # grpo seed 1 logged a length
    assert "![mean response length vs RL step](study/response_length.png)" in md
    assert "4 runs" in md and "250 GFLOP/s" in md
    # cost: 4 runs of 60 s at params.yaml's threads (none recorded: 1), one at a time -> 4 min on one machine
    assert "4 runs: 0.1 CPU-hours" in md and "| 1 | 0.1 |" in md and "| 4 | 0.0 |" in md
    dvc_plot = (tmp_path / "out" / "study" / "val_curves" / "grpo.csv").read_text().split()
    assert dvc_plot[0] == "step,val_greedy_acc" and dvc_plot[1] == "0,0.5"
    assert dvc_plot[2].startswith("10,") and float(dvc_plot[2].split(",")[1]) == pytest.approx(0.65)
    assert not (tmp_path / "out" / "study" / "val_curves" / "ppo.csv").exists()  # no curve recorded


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


def test_the_report_flags_records_from_different_sft_models(tmp_path, monkeypatch):
    from dsmath.study import workspace

    lock = tmp_path / "dvc.lock"
    lock.write_text("schema: '2.0'\nstages:\n  sft:\n    outs:\n    - path: models/sft\n      hash: md5\n"
                    "      md5: 0123456789abcdef.dir\n")
    assert workspace.out_hash(lock, "models/sft") == "0123456789abcdef.dir"
    assert workspace.out_hash(lock, "models/rl") is None and workspace.out_hash(tmp_path / "no.lock", "x") is None
    monkeypatch.chdir(tmp_path)
    text = ("name: t\nseeds: [1, 2]\nresults: res\nreport: out/study.md\nvariants:\n  grpo: {overrides: {}}\n"
            "  rft: {overrides: {rl.algorithm: rft}}\n  nomath: {overrides: {sft.init: base}}\n")
    study = load_study(_write(tmp_path, text), ROOT / "params.yaml")

    def write(variant, seed, model):
        extra = {"key": study.run_key(variant, seed), "settings_key": study.settings_key(variant, seed),
                 "code_key": study.code_key(variant, seed), "variant": variant, "seed": seed} | (
                     {"sft_model": model} if model else {})
        path = study.result_path(variant, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_record([1, 1, 0, 0], [0, 1, 0, 0], 1.0) | extra))

    # grpo and rft share the SFT stage's params; nomath has its own SFT model; a record without the hash is unknown
    for variant, seed, model in (("grpo", 1, "aaaaaaaa11"), ("grpo", 2, None), ("rft", 1, "aaaaaaaa11"),
                                 ("nomath", 1, "cccccccc33")):
        write(variant, seed, model)
    rows = {r["variant"]: r for r in sr.code_status(study, sr.load_results(study))}
    assert rows["grpo"]["sft_models"] == ["?", "aaaaaaaa"] and rows["grpo"]["sft_chain"] == rows["rft"]["sft_chain"]
    assert rows["nomath"]["sft_chain"] != rows["grpo"]["sft_chain"]
    assert not any("sft_mixed" in r for r in rows.values())  # one model per SFT chain so far
    write("rft", 2, "bbbbbbbb22")  # rft's seed 2 ran from a chain built again (another machine)
    rows = {r["variant"]: r for r in sr.code_status(study, sr.load_results(study))}
    assert rows["grpo"]["sft_mixed"] == rows["rft"]["sft_mixed"] == ["grpo", "rft"]
    assert "sft_mixed" not in rows["nomath"]
    md = Path(sr.build_study_report(study)["report"]).read_text()
    assert "**Records from different SFT models** among grpo, rft" in md and "| aaaaaaaa, bbbbbbbb |" in md


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


def test_cost_is_cpu_hours_and_wall_time_per_machine_count():
    from dsmath.study.markdown import cost_section

    runs = [{"wall_s": 3600.0, "threads": 1, "jobs": 2}, {"wall_s": 3600.0, "threads": 1, "jobs": 2},
            {"wall_s": 1800.0, "threads": 2, "jobs": 1}, {"variant": "no time recorded"}]
    text = "\n".join(cost_section(runs, workers=(1, 3)))
    # CPU-hours 1 x 1 + 1 x 1 + 0.5 x 2 = 3.0; one machine: two 1 h runs side by side (1 h) then the 2-thread run
    # alone (0.5 h) = 1.5 h; three machines 0.5 h
    assert "3 runs: 3.0 CPU-hours" in text and "50.0 min per run" in text and "1/2 run(s) at a time" in text
    assert "| 1 | 1.5 |" in text and "| 3 | 0.5 |" in text
    assert cost_section([{"variant": "x"}]) == []


def test_problem_table_reads_the_pass_at_k_subsets_counts(tmp_path):
    from dsmath.study.runner import problem_table

    rows = [{"dataset": "synthetic", "mode": "cot", "id": "a", "gold": "1", "greedy_correct": True,
             "sample_answers": ["1", "2", "1"], "sample_correct": [True, False, True], "passk_right": 5,
             "passk_samples": 64},
            {"dataset": "synthetic", "mode": "cot", "id": "b", "gold": "3", "greedy_correct": False,
             "sample_answers": ["2", "2", None], "sample_correct": [False, False, False]},
            {"dataset": "gsm8k_test", "mode": "cot", "id": "g", "gold": "3", "greedy_correct": True}]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = problem_table(path, 1.0)["cot"]
    assert table["id"] == ["a", "b"] and table["greedy"] == [1, 0] and table["maj"] == [1, 0]
    assert table["pass"] == [1, 0]
    assert table["passk"] == {"id": ["a"], "right": [5], "samples": [64]}  # only the subset's problems
