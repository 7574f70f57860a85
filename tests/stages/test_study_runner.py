"""The study runner around a stand-in `dvc repro`: each variant x seed runs in a workspace of its own (the project's
params.yaml never touched), the shared chain once before the runs, N runs at once with the same params whatever N,
a record and an MLflow child per run, kept records not run again (the real runs are in tests/e2e)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from conftest import smoke_params

from dsmath.study import runner, workspace
from dsmath.study.spec import load_study

STUDY = """name: two
seeds: [1234, 1235]
targets: [evaluate@sft, evaluate@rl]
results: study/two
shared: {rl.steps: 3}
variants:
  grpo: {overrides: {}}
  online_rft: {overrides: {rl.algorithm: online_rft}}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project in tmp_path (a git checkout: params.yaml = the smoke profile with relative output paths, a study
    file), and `Runner.repro` replaced by a function that writes, in the workspace, what the stages would."""
    monkeypatch.chdir(tmp_path)
    raw = smoke_params(tmp_path)
    paths = raw["common"]["paths"]
    for key in paths:
        if key not in ("raw", "extra_math"):
            paths[key] = Path(paths[key]).name  # relative, as in params.yaml
    Path("params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    Path("study.yaml").write_text(STUDY)
    Path("dvc.yaml").write_text((Path(__file__).resolve().parents[2] / "dvc.yaml").read_text())
    Path(".gitignore").write_text("mlflow.db\nmlartifacts/\n")
    subprocess.run(["git", "init", "-q"], check=True)
    calls, lock = [], threading.Lock()
    barrier = threading.Barrier(2, timeout=20)

    def fake_repro(self, ws, targets, name, parent_id):
        p = yaml.safe_load((ws / "params.yaml").read_text())
        seeds = p["common"]["rl_seeds"]
        with lock:
            calls.append({"name": name, "ws": ws, "targets": list(targets), "seeds": seeds,
                          "threads": p["rl"]["threads"],
                          "algorithm": p["rl"]["algorithm"], "steps": p["rl"]["steps"], "parent": parent_id,
                          "jobs": self.jobs})
        if "evaluate@sft" in targets:  # the chain: the SFT evaluation and a lock naming its outputs
            (ws / "eval" / "sft").mkdir(parents=True, exist_ok=True)
            (ws / "metrics" / "eval").mkdir(parents=True, exist_ok=True)
            (ws / "eval" / "sft" / "predictions.jsonl").write_text("")
            (ws / "metrics" / "eval" / "sft.json").write_text(json.dumps({"synthetic/cot/greedy": 0.2}))
            (ws / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"evaluate@sft": {
                "cmd": "e", "deps": [], "outs": [{"path": "eval/sft"}, {"path": "metrics/eval/sft.json"}]}}}))
        if "evaluate@rl" not in targets:
            return
        if self.jobs > 1:
            barrier.wait()  # both runs of a two-job study are in here at once
        for seed in seeds:
            acc = (seed - 1000) / 1000 + (0.01 if p["rl"]["algorithm"] == "online_rft" else 0)
            (ws / "eval" / "rl" / f"seed-{seed}").mkdir(parents=True, exist_ok=True)
            (ws / "eval" / "rl" / f"seed-{seed}" / "metrics.json").write_text(
                json.dumps({"synthetic/cot/greedy": acc}))
            (ws / "metrics" / "rl").mkdir(parents=True, exist_ok=True)
            (ws / "metrics" / "rl" / f"seed-{seed}.json").write_text(json.dumps({"seed": seed, "steps": 3}))
            (ws / "plots" / "rl").mkdir(parents=True, exist_ok=True)
            (ws / "plots" / "rl" / f"seed-{seed}.csv").write_text("step,reward_mean\n1,0.5\n")

    monkeypatch.setattr(runner.Runner, "repro", fake_repro)
    return load_study("study.yaml"), calls, raw


def _children(params, parent_id: str) -> list:
    import mlflow

    return mlflow.search_runs(experiment_names=[params.common.tracking.experiment], output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")


def test_each_run_has_its_own_workspace_record_and_mlflow_child_and_params_yaml_is_untouched(project):
    from dsmath.config import parse_params
    from dsmath.runtime import tracking

    study, calls, raw = project
    before = Path("params.yaml").read_bytes()
    params = parse_params(raw)
    parent = runner.open_parent(study, params)
    seen = []
    job = runner.Runner(study, parent, on_line=seen.append)
    records, failed = job.run_all([("grpo", 1234), ("grpo", 1235)])
    assert not failed and [r["seed"] for r in records] == [1234, 1235]
    # the chain once (in a workspace of its own), then one run per seed in its own workspace, one seed each
    chain = job.chain_name("grpo")
    assert chain.startswith("two-chain-") and chain == job.chain_name("online_rft")  # rl.algorithm: not a chain param
    assert [(c["name"], c["targets"], c["seeds"]) for c in calls] == [
        (chain, ["sft", "evaluate@sft"], [1234]),
        ("two-grpo-1234", ["evaluate@rl"], [1234]),  # the SFT evaluation comes from the chain's workspace
        ("two-grpo-1235", ["evaluate@rl"], [1235])]
    assert [c["ws"] for c in calls] == [Path.cwd() / workspace.ROOT / n for n in
                                        (chain, "two-grpo-1234", "two-grpo-1235")]
    assert all(c["steps"] == 3 for c in calls)  # the study's shared overrides
    assert Path("params.yaml").read_bytes() == before
    assert [p.name for p in workspace.ROOT.iterdir()] == [chain]  # runs' workspaces removed; the chain kept
    for r, seed in zip(records, (1234, 1235), strict=True):
        on_disk = json.loads(study.result_path("grpo", seed).read_text())
        assert on_disk == r and r["key"] == study.run_key("grpo", seed)
        assert r["eval"]["synthetic/cot/greedy"] == pytest.approx((seed - 1000) / 1000)
        assert r["run_name"] == f"two-grpo-{seed}" and r["overrides"]["common.rl_seeds"] == [seed]
        assert r["sft_eval"] == {"synthetic/cot/greedy": 0.2} and r["threads"] == params.common.num_threads

    # a kept record is not run again
    study.result_path("online_rft", 1234).parent.mkdir(parents=True)
    kept = records[0] | {"variant": "online_rft", "key": study.run_key("online_rft", 1234)}
    study.result_path("online_rft", 1234).write_text(json.dumps(kept))
    again, _ = job.run_all([("online_rft", 1234), ("online_rft", 1235)])
    assert [c["name"] for c in calls[3:]] == [chain, "two-online_rft-1235"]  # the same chain, up to date
    assert again[0] == kept and again[1]["run_name"] == "two-online_rft-1235"
    assert "study two: online_rft seed 1234 done before, kept" in seen
    assert job.run_all([("grpo", 1234), ("grpo", 1235)])[0] == records and len(calls) == 5

    tracking.close_run(parent)
    children = _children(params, parent.run_id)
    runs = {(r.data.tags["dsmath.variant"], r.data.tags["dsmath.seed"]): r for r in children
            if r.data.tags["dsmath.kind"] == "study-run"}
    assert sorted(runs) == [("grpo", "1234"), ("grpo", "1235"), ("online_rft", "1235")]
    run_calls = [c for c in calls if "evaluate@rl" in c["targets"]]
    for c in run_calls:  # each run's stage runs nest under its own child
        variant, seed = c["name"].split("-")[1], str(c["seeds"][0])
        assert c["parent"] == runs[variant, seed].info.run_id
    assert all(r.info.status == "FINISHED" for r in runs.values())


def test_two_jobs_run_at_once_with_the_params_of_one_and_a_failed_run_keeps_its_workspace(project, monkeypatch):
    study, calls, raw = project
    job = runner.Runner(study, None, jobs=2, on_line=lambda line: None)
    records, failed = job.run_all([("grpo", 1234), ("grpo", 1235)])  # the fake waits until both runs are in
    assert not failed and len(records) == 2 and {r["jobs"] for r in records} == {2}
    assert {c["threads"] for c in calls} == {0}  # jobs sets no param: rl.threads is the profile's (0: common's)
    assert {r["key"] for r in records} == {study.run_key("grpo", 1234), study.run_key("grpo", 1235)}

    def failing(self, ws, targets, name, parent_id):  # the chain builds, the run fails
        if "evaluate@rl" in targets:
            raise runner.StudyRunFailed(f"{name}: dvc repro failed (exit 1)")

    monkeypatch.setattr(runner.Runner, "repro", failing)
    records, failed = runner.Runner(study, None, on_line=lambda line: None).run_all([("online_rft", 1234)])
    assert records == [] and failed == ["two-online_rft-1234: dvc repro failed (exit 1)"]
    assert sorted(p.name for p in workspace.ROOT.iterdir()) == sorted([job.chain_name("grpo"), "two-online_rft-1234"])
    assert (workspace.ROOT / "two-online_rft-1234" / "params.yaml").exists()  # kept for the retry


def test_a_workspace_holds_the_projects_files_its_own_params_and_the_projects_cache(project):
    study, _, raw = project
    Path("src").mkdir()
    Path("src/code.py").write_text("x = 1\n")  # untracked but not ignored: the user's work is in the run
    Path("mlflow.db").write_text("")  # ignored: not copied
    ws = workspace.prepare(Path.cwd(), "two-grpo-1234", yaml.safe_load(Path("params.yaml").read_text()),
                           study.overrides("online_rft", 1234), Path("/somewhere/cache"))
    assert (ws / "src" / "code.py").read_text() == "x = 1\n" and not (ws / "mlflow.db").exists()
    p = yaml.safe_load((ws / "params.yaml").read_text())
    assert p["rl"]["algorithm"] == "online_rft" and p["rl"]["steps"] == 3 and p["common"]["rl_seeds"] == [1234]
    assert p["common"]["tracking"]["uri"] == raw["common"]["tracking"]["uri"]  # already absolute: unchanged
    conf = (ws / ".dvc" / "config.local").read_text()
    assert "no_scm = true" in conf and "dir = /somewhere/cache" in conf
    # a killed run's workspace keeps its lock and outputs; the code is brought up to date
    (ws / "dvc.lock").write_text("schema: '2.0'\n")
    (ws / "metrics").mkdir()
    (ws / "metrics" / "sft.json").write_text("{}")
    Path("metrics").mkdir()
    Path("metrics/sft.json").write_text('{"project": 1}')
    Path("dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    Path("src/code.py").write_text("x = 2\n")
    workspace.prepare(Path.cwd(), "two-grpo-1234", yaml.safe_load(Path("params.yaml").read_text()),
                      study.overrides("online_rft", 1234), Path("/somewhere/cache"))
    assert (ws / "src" / "code.py").read_text() == "x = 2\n"
    assert (ws / "dvc.lock").read_text() == "schema: '2.0'\n" and (ws / "metrics" / "sft.json").read_text() == "{}"


def test_relative_tracking_is_made_the_projects(tmp_path):
    raw = {"common": {"tracking": {"uri": "sqlite:///mlflow.db", "artifacts": "mlartifacts", "experiment": "x"}}}
    out = workspace.absolute_tracking(raw, tmp_path)["common"]["tracking"]
    assert out == {"uri": f"sqlite:///{tmp_path.resolve()}/mlflow.db", "artifacts": str(tmp_path.resolve() /
                                                                                       "mlartifacts"),
                   "experiment": "x"}
    server = {"common": {"tracking": {"uri": "http://127.0.0.1:5000", "artifacts": "/abs", "experiment": "x"}}}
    assert workspace.absolute_tracking(server, tmp_path) == server


def test_a_new_workspace_takes_the_chains_outputs_linked_and_its_checkpoints_copied(tmp_path):
    """seed_outputs gives a workspace the outputs of the chain stages and everything upstream (not the RL stages')
    and the origin's dvc.lock: outputs hard-linked, checkpoints copied (a resumed training writes into them)."""
    origin, dest = tmp_path / "origin", tmp_path / "dest"
    lock = {"schema": "2.0", "stages": {
        "corpus": {"cmd": "c", "deps": [{"path": "data/raw"}], "outs": [{"path": "data/corpus"}]},
        "sft": {"cmd": "s", "deps": [{"path": "data/corpus/math.jsonl"}],
                "outs": [{"path": "models/sft"}, {"path": "checkpoints/sft"}, {"path": "metrics/sft.json"}]},
        "evaluate@sft": {"cmd": "e", "deps": [{"path": "models/sft"}], "outs": [{"path": "eval/sft"}]},
        "rl@1234": {"cmd": "r", "deps": [{"path": "models/sft"}], "outs": [{"path": "models/rl/seed-1234"}]}}}
    for rel in ("data/corpus/math.jsonl", "models/sft/model.safetensors", "checkpoints/sft/step-1/opt.bin",
                "metrics/sft.json", "eval/sft/predictions.jsonl", "models/rl/seed-1234/model.safetensors"):
        (origin / rel).parent.mkdir(parents=True, exist_ok=True)
        (origin / rel).write_text(rel)
    (origin / "dvc.lock").write_text(yaml.safe_dump(lock))
    (dest / "metrics").mkdir(parents=True)
    (dest / "metrics" / "sft.json").write_text("the project's tracked copy")
    graph = workspace.lock_graph(origin / "dvc.lock")
    assert workspace.upstream(graph, ["evaluate@sft"]) == ["corpus", "evaluate@sft", "sft"]
    assert workspace.seed_outputs(origin, dest, ["sft", "evaluate@sft"], "checkpoints") == ["corpus", "evaluate@sft",
                                                                                          "sft"]
    assert (dest / "dvc.lock").read_text() == (origin / "dvc.lock").read_text()
    assert not (dest / "models" / "rl").exists()
    for rel in ("data/corpus/math.jsonl", "models/sft/model.safetensors", "metrics/sft.json",
                "eval/sft/predictions.jsonl"):
        assert (dest / rel).read_text() == rel and (dest / rel).stat().st_ino == (origin / rel).stat().st_ino, rel
    ckpt = "checkpoints/sft/step-1/opt.bin"
    assert (dest / ckpt).read_text() == ckpt and (dest / ckpt).stat().st_ino != (origin / ckpt).stat().st_ino


def test_a_runs_mlflow_store_is_the_projects_even_when_the_environment_names_it_relatively(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")  # what mlflow.set_tracking_uri exports
    env = workspace.run_env("abc")
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert env["DSMATH_PARENT_RUN_ID"] == "abc"


def test_variants_share_a_chain_exactly_when_its_stages_get_the_same_params(project):
    study, _, _ = project
    Path("other.yaml").write_text(STUDY.replace("online_rft: {overrides: {rl.algorithm: online_rft}}",
                                                "online_rft: {overrides: {rl.algorithm: online_rft}}\n"
                                                "  no_pretrain: {overrides: {sft.init: base}}\n"
                                                "  lr: {overrides: {sft.train.optim.lr: 0.001}}"))
    job = runner.Runner(load_study("other.yaml"), on_line=lambda line: None)
    names = {v: job.chain_name(v) for v in ("grpo", "online_rft", "no_pretrain", "lr")}
    assert names["grpo"] == names["online_rft"]
    assert len({names["grpo"], names["no_pretrain"], names["lr"]}) == 3


# ----------------------------------------------------------------------------------------------------------------
# what travels to another machine (the loopback cluster itself runs in tests/e2e)


def test_a_workspace_of_a_pool_study_has_the_studys_remote_as_its_default(project):
    study, _, _ = project
    job = runner.Runner(study, None, on_line=lambda line: None, remote="shared/remote")
    assert job.remote == str(Path("shared/remote").resolve())  # a directory: absolute, the same for every machine
    ws = job.workspace("grpo", 1234)
    conf = (ws / ".dvc" / "config.local").read_text()
    assert f'remote "{workspace.REMOTE}"' in conf  # DVC's own section name
    assert f"url = {job.remote}" in conf and f"remote = {workspace.REMOTE}" in conf
    assert runner.Runner(study, None, remote="s3://bucket/dvc").remote == "s3://bucket/dvc"  # a URL: as it is


def test_a_chain_bundle_brings_the_chains_lock_and_uncached_outputs_to_a_fresh_workspace(project):
    """The bundle holds the lock entries of the chain's stages (and their upstream: not the RL stages') and the
    content of their `cache: false` outputs (metrics, plots), which no DVC remote carries."""
    from dsmath.study import remote

    study, _, _ = project
    job = runner.Runner(study, None, on_line=lambda line: None)
    ws = job.build_chain("grpo")  # the fake writes eval/sft, metrics/eval/sft.json and a lock naming them
    lock = yaml.safe_load((ws / "dvc.lock").read_text())
    lock["stages"]["rl@1234"] = {"cmd": "r", "deps": [{"path": "models/sft"}], "outs": [{"path": "models/rl"}]}
    lock["stages"]["sft"] = {"cmd": "s", "deps": [], "outs": [{"path": "models/sft"},
                                                             {"path": "metrics/sft.json"}]}
    lock["stages"]["evaluate@sft"]["deps"] = [{"path": "models/sft"}]
    (ws / "dvc.lock").write_text(yaml.safe_dump(lock))
    (ws / "metrics" / "sft.json").write_text('{"loss": 1.5}')
    assert remote.uncached_outputs(ws, ["sft", "evaluate@sft"]) == ["metrics/eval/sft.json", "metrics/sft.json",
                                                                    "plots/sft.csv"]
    bundle = json.loads(json.dumps(remote.chain_bundle(ws, study.chain)))  # as it travels (JSON)
    assert bundle["stages"] == ["evaluate@sft", "sft"] and sorted(bundle["lock"]["stages"]) == bundle["stages"]
    assert bundle["files"] == {"metrics/eval/sft.json": json.dumps({"synthetic/cot/greedy": 0.2}),
                               "metrics/sft.json": '{"loss": 1.5}'}  # plots/sft.csv: not written by the fake
    assert bundle["binary"] == {}
    other = job.workspace("grpo", 1235)  # a run's workspace, here seeded from the chain; a worker's starts empty
    (other / "metrics" / "sft.json").unlink()
    remote.unpack_bundle(bundle, other)
    assert (other / "metrics" / "sft.json").read_text() == '{"loss": 1.5}'
    assert yaml.safe_load((other / "dvc.lock").read_text()) == bundle["lock"]


def test_a_worker_refuses_a_run_whose_key_is_not_the_drivers(project):
    """A worker whose checkout differs from the driver's (code or params.yaml) would run something else under the
    study's name: it stops before any work, naming both keys."""
    from dsmath.study import remote

    study, calls, _ = project
    with pytest.raises(runner.StudyRunFailed, match="run key .* is not the driver's 0123"):
        remote.run_here(Path("study.yaml").read_text(), "grpo", 1234, parent_id="p", child_id="c", chain="x",
                        key="0123", remote=None)
    assert calls == []


def test_a_pool_study_refuses_to_start_without_the_services_its_machines_share(project, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dsmath.orchestration import cluster

    study, _, _ = project
    job = runner.Runner(study, None, on_line=lambda line: None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with temporary_settings(updates={PREFECT_API_URL: None}), \
            pytest.raises(runner.StudyRunFailed, match="PREFECT_API_URL"):
        cluster.check_shared(job)  # an ephemeral Prefect: no worker elsewhere would see the runs
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        with pytest.raises(runner.StudyRunFailed, match="MLflow tracking server .* not sqlite:///"):
            cluster.check_shared(job)  # the profile's SQLite store: on this machine only
        monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
        with pytest.raises(runner.StudyRunFailed, match="needs a DVC remote"):
            cluster.check_shared(job)  # no study remote, and the project has no default one
        job.remote = "/mnt/shared/remote"
        cluster.check_shared(job)
