"""Pipeline plumbing shared by `make repro` and the Prefect flow: the DVC stage graph, one stage run, the parent run.

The DVC graph is the single source of the stage order (`dvc.repo.Repo(".").index.graph`); nothing here declares a
dependency. `python -m dsmath.orchestration.pipeline` is what `make repro` calls: it opens the MLflow parent run of this
pipeline execution, passes its id to every stage through the environment, and runs `dvc repro`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from dsmath.config import load_params
from dsmath.runtime import provenance, tracking


def stage_graph(repo_root: str | os.PathLike = "."):
    """The DVC stage graph as a networkx DiGraph of stage names; an edge a -> b means a depends on b."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(repo_root)) as repo:
        g = repo.index.graph
        named = nx.DiGraph()
        named.add_nodes_from(s.addressing for s in g.nodes)
        named.add_edges_from((a.addressing, b.addressing) for a, b in g.edges)
    return named


def stage_order(graph) -> list[str]:
    """Stages in dependency order (dependencies first), ties broken by name so the order is deterministic."""
    import networkx as nx

    return list(nx.lexicographical_topological_sort(graph.reverse(copy=True)))


def stage_params(repo_root: str | os.PathLike = ".") -> dict[str, list[str]]:
    """{stage: the params keys its dvc.yaml entry declares} (e.g. rl -> ['common.seed', 'rl', ...])."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(repo_root)) as repo:
        return {s.addressing: [p for d in s.deps if isinstance(d, ParamsDependency) for p in d.params]
                for s in repo.index.stages}


class InvalidParams(RuntimeError):
    """params.yaml is invalid; the message names the stages that read the offending keys."""


def validate(repo_root: str | os.PathLike = ".", params_file: str | os.PathLike | None = None):
    """Load params.yaml before any stage runs (DVC deletes a stage's outputs before running it, so a stage that
    fails on bad params would leave nothing behind). Raises InvalidParams naming the stages that read each bad key."""
    from dsmath.config import ParamsError

    try:
        return load_params(params_file or Path(repo_root) / "params.yaml")
    except ParamsError as err:
        declared = stage_params(repo_root)
        problems = []
        for problem in str(err).split("; "):
            key = problem.split(":", 1)[0]
            readers = [s for s, keys in declared.items()
                       if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)]
            problems.append(f"stage {', '.join(readers) or '(none)'}: {problem}")
        raise InvalidParams("invalid params: " + "; ".join(problems)) from None


def stage_metrics_files(repo_root: str | os.PathLike = ".") -> dict[str, list[str]]:
    """{stage: the metrics files its dvc.yaml entry declares}, read from the DVC index (dvc.yaml is the one source of
    paths: `evaluate@rl` -> ['metrics/eval/rl.json']); [] for a stage without metrics. Stage names are DVC's
    addressing, as in :func:`stage_graph`; paths are relative to the repository root (absolute if declared
    outside it), in their declared order."""
    from dvc.repo import Repo

    with Repo(str(repo_root)) as repo:
        root = Path(repo.root_dir)
        return {s.addressing: [_relative(Path(o.fs_path), root) for o in s.outs if o.metric]
                for s in repo.index.stages}


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def upstream(graph, stage: str) -> list[str]:
    """The stages `stage` depends on directly."""
    return sorted(graph.successors(stage))


def repro_stage(stage: str, on_line: Callable[[str], None] = print, cwd: str | os.PathLike = ".",
                dvc: str | None = None) -> tuple[int, list[str]]:
    """Run `dvc repro -s <stage>` (only this stage), streaming its output lines; returns (exit code, lines)."""
    cmd = [dvc or str(Path(sys.executable).with_name("dvc")), "repro", "-s", stage]
    lines: list[str] = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            on_line(line)
    return proc.returncode, lines


@contextlib.contextmanager
def pipeline_run(params, run_name: str = "pipeline", tags: dict | None = None) -> Iterator[str]:
    """Open the parent MLflow run of one pipeline execution; stages started meanwhile become its children."""
    mlflow = tracking._mlflow()
    exp_id = tracking.setup(params.common.tracking)
    all_tags = {"dsmath.kind": "pipeline", **provenance.git_tags(), **(tags or {})}
    with mlflow.start_run(experiment_id=exp_id, run_name=run_name, tags=all_tags) as run:
        previous = os.environ.get(tracking.PARENT_ENV)
        os.environ[tracking.PARENT_ENV] = run.info.run_id
        try:
            yield run.info.run_id
        finally:
            if previous is None:
                os.environ.pop(tracking.PARENT_ENV, None)
            else:
                os.environ[tracking.PARENT_ENV] = previous


def child_runs(parent_id: str) -> dict[str, object]:
    """{stage name: MLflow run} of the children of a parent run (latest run per stage)."""
    mlflow = tracking._mlflow()
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
                              order_by=["attributes.start_time ASC"])
    return {r.data.tags.get("dsmath.stage", r.info.run_name): r for r in runs}


STAGE_TIMES = "stage_times.json"  # in common.paths.metrics: the stages the latest `make repro` ran, and their times


def stage_times(runs: dict[str, object]) -> list[dict]:
    """[{stage, seconds}] of the finished child runs of one pipeline execution, in the order they started (from the
    runs' MLflow start and end times; a stage DVC skipped as up to date has no run, a killed one no end time)."""
    done = [(r.info.start_time, stage, (r.info.end_time - r.info.start_time) / 1000.0) for stage, r in runs.items()
            if r.info.end_time is not None and r.info.start_time is not None]
    return [{"stage": stage, "seconds": round(sec, 1)} for _, stage, sec in sorted(done)]


def stage_time_table(record: dict) -> str:
    """The stage wall-time table `make repro` prints (and keeps in metrics/stage_times.json)."""
    lines = [f"stage wall times ({record['matmul_gflops']:.0f} GFLOP/s fp32 2048^2 matmul, {record['cpu']}):",
             f"  {'stage':<18}{'min':>8}{'share':>8}"]
    total = sum(r["seconds"] for r in record["stages"]) or 1.0
    for r in record["stages"]:
        lines.append(f"  {r['stage']:<18}{r['seconds'] / 60:>8.1f}{r['seconds'] / total:>8.0%}")
    lines.append(f"  {'stages':<18}{total / 60:>8.1f}")
    lines.append(f"  {'make repro':<18}{record['wall_s'] / 60:>8.1f}   (wall time, DVC and start-up included)")
    return "\n".join(lines)


def write_stage_times(params, parent_id: str, wall_s: float) -> dict | None:
    """Write metrics/stage_times.json for the stages this execution ran (none ran: the file is left as it was) and
    return the record; the machine's matmul rate goes next to the times (machines here differ by ~2x)."""
    import json

    from dsmath.train.flops import matmul_flops_per_s

    stages = stage_times(child_runs(parent_id))
    if not stages:
        return None
    record = {"stages": stages, "wall_s": round(wall_s, 1), "matmul_gflops": round(matmul_flops_per_s() / 1e9, 1),
              "cpu": provenance.cpu_name(), "git_commit": provenance.git_tags().get("git.commit", "unknown")}
    path = Path(params.common.paths.metrics) / STAGE_TIMES
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    """`make repro`: `dvc repro [args]` inside a parent MLflow run, then the table of the stages' wall times."""
    import time

    args = sys.argv[1:] if argv is None else argv
    try:
        params = validate()
    except InvalidParams as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    dvc = str(Path(sys.executable).with_name("dvc"))
    t0 = time.perf_counter()
    with pipeline_run(params, run_name="dvc repro") as parent_id:
        code = subprocess.call([dvc, "repro", *args])
        tracking.tag_children_from_lock(parent_id)
    if (record := write_stage_times(params, parent_id, time.perf_counter() - t0)) is not None:
        print(stage_time_table(record))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
