"""The study end to end on the smoke project (tests/conftest.py's `repo`): configs/study-smoke.yaml (two variants, two
seeds) run two at once, killed mid-variant and resumed through the Prefect flow; then grpo's two seeds on a Prefect
work pool of two workers, one killed as if its machine died, which must record what the local study recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from smoke_project import SEEDS, mlflow_at, project_env, run_in

from dsmath.runtime.tracking import metric_key

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _study_table(report: str) -> dict[str, list[str]]:
    """{variant: its row's cells} of the report's variants table."""
    out = {}
    for line in report.splitlines():
        if line.startswith("| ") and " (" in line.split("|")[1] and not line.startswith("| variant"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0].split(" (")[0]] = cells
    return out


@pytest.fixture(scope="module")
def study(repo):
    """`python -m dsmath.study run --jobs 2` (what `make study JOBS=2` calls) killed during the RL stages of its
    second variant, then the study resumed through the Prefect flow. Returns what the tests below inspect."""
    import signal

    before = {p: (repo / p).read_bytes() for p in ("params.yaml", "dvc.lock")}
    records = repo / "study" / "smoke" / "runs"
    cmd = [sys.executable, "-m", "dsmath.study", "run", "--study", "configs/study-smoke.yaml", "--jobs", "2"]
    proc = subprocess.Popen(cmd, cwd=repo, env=project_env(repo), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    seen, second = [], False
    for line in proc.stdout:
        seen.append(line)
        second = second or "study smoke: online_rft seed" in line
        if second and "Running stage 'rl@" in line:
            time.sleep(3)  # inside an RL stage of the second variant
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    killed = {"log": "".join(seen), "records": sorted(p.parent.name for p in records.rglob("seed-*.json")),
              "params": {p: (repo / p).read_bytes() for p in before},
              "workspaces": sorted(p.name for p in (repo / ".dvc" / "tmp" / "study" / "runs").iterdir())}
    first = records / "grpo" / "seed-1234.json"
    first_stat = first.stat().st_mtime_ns if first.exists() else None
    resumed = run_in(repo, sys.executable, str(Path(__file__).with_name("run_study_in_harness.py")),
                   "configs/study-smoke.yaml", timeout=900)
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    return {"killed": killed, "resumed": resumed.stdout + resumed.stderr, "flow": result, "before": before,
            "first_mtime": first_stat, "first_mtime_after": first.stat().st_mtime_ns}


def test_study_runs_two_at_once_in_workspaces_and_a_killed_study_resumes_without_redoing_runs(repo, study):
    log = study["killed"]["log"]
    assert "[smoke-grpo-1234] " in log and "[smoke-grpo-1235] " in log  # grpo's two seeds ran side by side
    assert "Running stage 'sft'" not in log and "Running stage 'base'" not in log  # the chain: the project's
    # one chain for both variants (rl.algorithm is no param of its stages); the SFT evaluation ran once in it (its
    # params hold common.rl_seeds, here the study's first seed); the runs take it from there
    chain, *runs = study["killed"]["workspaces"]
    assert chain.startswith("smoke-chain-") and runs == ["smoke-online_rft-1234", "smoke-online_rft-1235"]
    assert log.count("Running stage 'evaluate@sft'") == 1 and f"[{chain}] Running stage 'evaluate@sft'" in log
    assert study["killed"]["records"] == ["grpo", "grpo"]  # killed during online_rft: only grpo's seeds had finished
    assert study["killed"]["params"] == study["before"]  # the project's params.yaml and dvc.lock: never written
    assert study["flow"]["state"] == "COMPLETED"
    assert study["flow"]["runs"] == sorted(["chain-online_rft", "online_rft-1234", "online_rft-1235",
                                            "write_report"])  # one task per run still to do
    assert "grpo seed 1234 done before, kept" in study["resumed"]
    assert "grpo seed 1235 done before, kept" in study["resumed"]
    assert study["first_mtime"] == study["first_mtime_after"]  # grpo's record was not rewritten
    for seed in SEEDS:  # online_rft's RL stages only
        assert study["resumed"].count(f"Running stage 'rl@{seed}'") == 1
    assert "Running stage 'sft'" not in study["resumed"]
    for p, content in study["before"].items():
        assert (repo / p).read_bytes() == content, p
    left = [p.name for p in (repo / ".dvc" / "tmp" / "study" / "runs").iterdir()]
    assert left == [chain]  # finished runs' workspaces removed; the chain kept for the next study


def test_study_report_equals_the_run_records_and_mlflow(repo, study):
    import statistics

    records = {(v, s): json.loads((repo / "study" / "smoke" / "runs" / v / f"seed-{s}.json").read_text())
               for v in ("grpo", "online_rft") for s in SEEDS}
    report = (repo / "reports" / "study-smoke.md").read_text()
    table = _study_table(report)
    assert sorted(table) == ["grpo", "online_rft"]
    mlflow = mlflow_at(repo)
    parent = mlflow.search_runs(experiment_names=["dsmath"], output_format="list",
                                filter_string="tags.`dsmath.kind` = 'study' and tags.`dsmath.study` = 'smoke'")
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    children = mlflow.search_runs(experiment_names=["dsmath"], output_format="list",
                                  filter_string=f"tags.mlflow.parentRunId = '{parent[0].info.run_id}'")
    finished = {(r.data.tags["dsmath.variant"], int(r.data.tags["dsmath.seed"])): r for r in children
                if r.data.tags.get("dsmath.kind") == "study-run" and r.info.status == "FINISHED"}  # a variant x seed
    chain = [r.data.tags.get("dsmath.stage") for r in children if "dsmath.kind" not in r.data.tags]
    assert chain == ["evaluate@sft"]  # the one chain stage that ran nests under the study's parent
    assert sorted(finished) == sorted(records)
    killed = sorted((r.data.tags.get("dsmath.kind"), r.data.tags.get("dsmath.variant"), r.info.status)
                    for r in children if r.info.status != "FINISHED")
    assert killed == [("study-run", "online_rft", "KILLED")] * 2  # the killed attempt's runs

    def cell(values: list[float]) -> str:  # the report's mean +- sd over seeds, in percent
        return f"{100 * statistics.fmean(values):.1f} ± {100 * statistics.stdev(values):.1f}"

    for variant in ("grpo", "online_rft"):
        runs = [records[variant, s] for s in SEEDS]
        mode = runs[0]["mode"]
        k = max(int(x.rsplit("@", 1)[1]) for x in runs[0]["eval"] if x.startswith(f"synthetic/{mode}/maj@"))
        cells = table[variant]
        assert cells[3] == str(len(SEEDS))
        for col, metric in ((4, "greedy"), (5, f"maj@{k}"), (6, f"pass@{k}")):
            assert cells[col] == cell([r["eval"][f"synthetic/{mode}/{metric}"] for r in runs]), (variant, metric)
        for seed, r in zip(SEEDS, runs, strict=True):
            greedy = r["eval"][f"synthetic/{mode}/greedy"]
            assert r["rl"]["steps"] == 4 and r["run_name"] == f"smoke-{variant}-{seed}"
            assert sum(r["problems"]["rl"][mode]["greedy"]) / len(r["problems"]["rl"][mode]["greedy"]) == greedy
            child = finished[variant, seed]
            assert child.data.tags["dsmath.run_name"] == f"smoke-{variant}-{seed}"
            assert child.data.metrics[metric_key(f"eval/synthetic/{mode}/greedy")] == pytest.approx(greedy)
            assert child.data.metrics[metric_key("rl_summary/steps")] == 4
            assert child.data.params["overrides.rl.steps"] == "4"
            stages = mlflow.search_runs(experiment_names=["dsmath"], output_format="list",  # the run's stage runs
                                        filter_string=f"tags.mlflow.parentRunId = '{child.info.run_id}'")
            assert {f"rl@{seed}", "evaluate@rl"} <= {s.data.tags.get("dsmath.stage") for s in stages}
            # its health curve: every RL step, from the stage run(s) of its attempts (online_rft's joins the killed one)
            assert r["mlflow_run_id"] == child.info.run_id and [h["step"] for h in r["health"]] == [1, 2, 3, 4]
            assert all({"kl", "entropy", "zero_std_groups", "response_len_mean"} <= set(h) for h in r["health"])
            assert [h["kl"] for h in r["health"]] == pytest.approx([c["kl"] for c in r["curve"] if "kl" in c])
    assert records["grpo", 1234]["threads"] == 2 and records["grpo", 1234]["jobs"] == 2  # jobs sets no param
    assert records["online_rft", 1234]["jobs"] == 1  # resumed one at a time by the flow
    artifacts = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(parent[0].info.run_id, "study")}
    assert "study/study-smoke.md" in artifacts and "study/methods.png" in artifacts
    assert "study/response_length.png" in artifacts  # the RL curves hold the mean response length
    findings = [line for line in report.splitlines() if line.startswith("| GRPO beats Online RFT")]
    assert len(findings) == 1 and any(v in findings[0] for v in ("holds", "does not hold", "inconclusive"))
    assert "## Health of the RL runs" in report and "| grpo | 2 |" in report.split("## Health of the RL runs")[1]
    longest = max(h["response_len_max"] for s in SEEDS for h in records["grpo", s]["health"])
    cap = yaml.safe_load((repo / "params.yaml").read_text())["rl"]["max_new_tokens"]
    health_row = next(line for line in report.split("## Health of the RL runs")[1].splitlines()
                      if line.startswith("| grpo | 2 |"))
    # truncated: the logged share of responses cut by the cap, mean of the seeds' steps (4 steps: start = end window)
    steps = [h for s in SEEDS for h in records["grpo", s]["health"]]
    rate = 100 * sum(h["truncated_rate"] for h in steps) / len(steps)
    assert f"| {rate:.1f} -> {rate:.1f} % |" in health_row
    assert rate == 0 or longest >= cap  # a cut response is one that reached the cap


# ----------------------------------------------------------------------------------------------------------------
# the study on a Prefect work pool: one machine as if it were several (a Prefect server, an MLflow server, two
# workers in two clones of the project, a DVC remote in a directory), one worker killed mid-run


def _untimed(m: dict) -> dict:  # wall times, rates and peak memory vary from run to run
    return {k: v for k, v in m.items() if not k.endswith(("_s", "_per_s")) and k not in ("s_per_step", "peak_rss_mb")}


@pytest.fixture(scope="module")
def cluster(repo, study, tmp_path_factory):
    """grpo's two seeds of the smoke study (results study/cluster) submitted by the study flow to a work pool with
    two workers, each in its own clone of the project (its own DVC cache: everything travels through the remote
    and the MLflow server); worker a's whole process tree killed (a machine dying) 3 s into its RL stage."""
    from loopback import Service, mlflow_server, prefect_server, worker

    root = tmp_path_factory.mktemp("cluster")
    logs = root / "logs"
    logs.mkdir()
    env = {k: v for k, v in project_env(repo).items() if k not in ("PREFECT_HOME", "PYTHONPATH")}
    machines = [root / "machine-a", root / "machine-b"]
    for m in machines:  # a clone at the committed state: another machine's checkout
        run_in(repo, "git", "clone", "-q", str(repo), str(m))
    (repo / "configs" / "study-cluster.yaml").write_text(  # not committed: the driver sends its text
        "name: smoke\nseeds: [1234, 1235]\ntargets: [evaluate@sft, evaluate@rl]\nresults: study/cluster\n"
        "report: reports/study-cluster.md\nshared:\n  rl.steps: 4\nvariants:\n  grpo: {overrides: {}}\n"
        f"cluster:\n  remote: {root / 'dvc-remote'}\n  silent_s: 75\n")
    before = {p: (repo / p).read_bytes() for p in ("params.yaml", "dvc.lock")}
    services, uri_before = [], os.environ.get("MLFLOW_TRACKING_URI")
    try:
        prefect, api = prefect_server(root, env, logs)
        services.append(prefect)
        mlflow, tracking = mlflow_server(root, env, logs)
        services.append(mlflow)
        env |= {"PREFECT_API_URL": api, "MLFLOW_TRACKING_URI": tracking}
        workers = [worker(m, "loopback", env, logs) for m in machines]
        services += workers
        driver = Service([sys.executable, "-m", "flows.study", "--study", "configs/study-cluster.yaml",
                          "--pool", "loopback"], repo, env | {"PYTHONPATH": str(repo),
                                                               "PREFECT_HOME": str(repo / ".prefect")},
                         logs / "driver.log")
        services.append(driver)
        run_logs, killed, deadline = machines[0] / "study" / "cluster" / "logs", None, time.time() + 1200
        while driver.proc.poll() is None and time.time() < deadline:
            time.sleep(1)
            if killed is None and run_logs.exists() and any("Running stage 'rl@" in f.read_text()
                                                            for f in run_logs.glob("*.log")):
                time.sleep(3)
                killed = workers[0].kill_tree()
        driver.proc.wait(timeout=60)
        flow_runs = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{api}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"})).read())
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=tracking)  # not mlflow.set_tracking_uri: it exports the URI to the
        # environment of this process, and the tests after this one would log to a server that is gone
        runs = client.search_runs([client.get_experiment_by_name("dsmath").experiment_id])
        artifacts = {r.info.run_id: sorted(a.path for a in client.list_artifacts(r.info.run_id))
                     for r in runs if r.data.tags.get("dsmath.kind") == "study-run" and r.info.status == "FINISHED"}
        locks = {}
        for r in runs:
            if r.info.run_id in artifacts:
                (root / r.info.run_id).mkdir()
                path = client.download_artifacts(r.info.run_id, "dvc.lock", str(root / r.info.run_id))
                locks[r.data.tags["dsmath.seed"]] = yaml.safe_load(Path(path).read_text())
    finally:
        for s in services:
            s.stop()
        if os.environ.get("MLFLOW_TRACKING_URI") != uri_before:  # nothing of this cluster may outlive it
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            if uri_before is not None:
                os.environ["MLFLOW_TRACKING_URI"] = uri_before
    return {"rc": driver.proc.returncode, "driver": "".join(driver.lines), "killed": killed, "machines": machines,
            "flow_runs": flow_runs, "mlflow": runs, "artifacts": artifacts, "locks": locks,
            "remote": root / "dvc-remote", "before": before, "after": {p: (repo / p).read_bytes() for p in before}}


def test_a_study_on_a_work_pool_survives_a_dead_worker_and_records_what_a_local_run_records(repo, study, cluster):
    assert cluster["rc"] == 0, cluster["driver"][-3000:]
    assert cluster["killed"] and any("stages.rl" in p for p in cluster["killed"])  # killed inside its RL stage
    assert cluster["after"] == cluster["before"]  # the driver's params.yaml and dvc.lock: never written
    # Prefect: a run per seed submitted; the killed one marked CRASHED by the heartbeat automation, submitted again
    states = sorted((r["name"], r["state_type"]) for r in cluster["flow_runs"] if r["name"].startswith("smoke-grpo"))
    crashed = [name for name, state in states if state == "CRASHED"]
    assert len(crashed) == 1 and len(states) == 3 and sum(s == "COMPLETED" for _, s in states) == 2, states
    assert "no heartbeat for 75 s" in cluster["driver"] and "submitted again (attempt 2)" in cluster["driver"]
    # spread over both machines: a ran (and died with) one run; b ran its own and the resubmitted one
    a, b = (sorted(p.stem for p in (m / "study" / "cluster" / "logs").glob("*.log")) for m in cluster["machines"])
    assert len(a) == 1 and b == ["smoke-grpo-1234", "smoke-grpo-1235"] and a[0] == crashed[0].rsplit("-", 1)[0]
    for m in cluster["machines"]:
        assert "Running stage 'sft'" not in "".join(f.read_text() for f in (m / "study" / "cluster" / "logs")
                                                    .glob("*.log"))  # the chain came from the remote
    # the records are what the local study recorded for the same runs (same params, code and seed)
    for seed in SEEDS:
        remote = json.loads((repo / "study" / "cluster" / "runs" / "grpo" / f"seed-{seed}.json").read_text())
        local = json.loads((repo / "study" / "smoke" / "runs" / "grpo" / f"seed-{seed}.json").read_text())
        assert remote["key"] == local["key"] and remote["pool"] == "loopback" and remote["host"]
        assert remote["curve"] == local["curve"] and remote["problems"] == local["problems"]
        assert remote["health"] == local["health"] and len(remote["health"]) == 4
        for key in ("rl", "eval", "sft_eval"):
            assert _untimed(remote[key]) == _untimed(local[key]), (seed, key)
    # MLflow (the server): the killed attempt's child KILLED; each finished child holds the record and its dvc.lock,
    # whose RL model lies in the DVC remote
    children = [r for r in cluster["mlflow"] if r.data.tags.get("dsmath.kind") == "study-run"]
    assert sorted(r.info.status for r in children) == ["FINISHED", "FINISHED", "KILLED"]
    assert all(paths == ["dvc.lock", "record.json"] for paths in cluster["artifacts"].values())
    for seed, lock in cluster["locks"].items():
        md5 = next(o["md5"] for o in lock["stages"][f"rl@{seed}"]["outs"] if o["path"].startswith("models/rl"))
        assert (cluster["remote"] / "files" / "md5" / md5[:2] / md5[2:]).exists(), seed
    assert (repo / "reports" / "study-cluster.md").exists()
