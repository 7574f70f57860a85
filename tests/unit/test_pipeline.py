"""Pipeline plumbing: stage order from the graph, parent/child MLflow runs, batched metrics."""

import networkx as nx

from dsmath.config import parse_params
from dsmath.orchestration import pipeline
from dsmath.runtime import tracking


def test_stage_order_dependencies_first_deterministic():
    g = nx.DiGraph()  # a -> b: a depends on b
    g.add_edges_from([("sft", "pretrain"), ("pretrain", "base"), ("base", "tokenizer"), ("tokenizer", "corpus"),
                      ("base", "corpus"), ("evaluate@sft", "sft"), ("rl", "sft"), ("evaluate@rl", "rl"),
                      ("report", "evaluate@sft"), ("report", "evaluate@rl")])
    order = pipeline.stage_order(g)
    assert order == ["corpus", "tokenizer", "base", "pretrain", "sft", "evaluate@sft", "rl", "evaluate@rl", "report"]
    assert pipeline.upstream(g, "report") == ["evaluate@rl", "evaluate@sft"]


def test_repo_graph_has_the_corpus_stage():
    assert "corpus" in pipeline.stage_graph().nodes


def test_parent_and_child_runs_with_batched_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    params = parse_params({"common": {"tracking": {"experiment": "t", "uri": f"sqlite:///{tmp_path}/m.db",
                                                   "artifacts": str(tmp_path / "art")}}})
    with pipeline.pipeline_run(params) as parent_id:
        for stage in ("corpus", "sft"):
            with tracking.stage_run(stage, params, {"x": {"y": 1}}) as run:
                for step in range(1500):  # > one log_batch call
                    run.log_metrics({f"{stage}/loss": 1.0 / (step + 1)}, step=step)
    children = pipeline.child_runs(parent_id)
    assert list(children) == ["corpus", "sft"]
    assert children["sft"].data.params["x.y"] == "1"
    history = tracking.StageRun(children["sft"].info.run_id).client.get_metric_history(
        children["sft"].info.run_id, "sft/loss")
    assert len(history) == 1500 and history[-1].step == 1499
    assert tracking.PARENT_ENV not in __import__("os").environ


def test_metric_names_are_made_mlflow_legal(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    params = parse_params({"common": {"tracking": {"experiment": "t", "uri": f"sqlite:///{tmp_path}/m.db",
                                                   "artifacts": str(tmp_path / "art")}}})
    with tracking.stage_run("evaluate@sft", params) as run:
        run.log_metrics({"eval/synthetic/cot/maj@8": 0.5})
    got = tracking.StageRun(run.run_id).client.get_run(run.run_id).data.metrics
    assert got == {"eval/synthetic/cot/maj_at_8": 0.5}
    assert tracking.metric_key("a/pass@16") == "a/pass_at_16"


def test_stage_times_come_from_finished_child_runs_in_start_order():
    from types import SimpleNamespace as NS

    from dsmath.orchestration.pipeline import stage_time_table, stage_times

    runs = {"sft": NS(info=NS(start_time=5_000, end_time=65_000)),  # ms since the epoch, as MLflow stores them
            "base": NS(info=NS(start_time=1_000, end_time=4_000)),
            "rl@1": NS(info=NS(start_time=70_000, end_time=None))}  # killed: no end time, not a wall time
    times = stage_times(runs)
    assert times == [{"stage": "base", "seconds": 3.0}, {"stage": "sft", "seconds": 60.0}]
    table = stage_time_table({"stages": times, "wall_s": 90.0, "matmul_gflops": 250.0, "cpu": "x"})
    assert "250 GFLOP/s" in table and "sft" in table and "1.0" in table and "95%" in table and "1.5" in table
