"""Prefect flows: the study (configs/study.yaml): the shared chain once per variant, then the variant x seed runs,
here `jobs` at a time or on a work pool's machines, then the report; and `study_run`, one run on a worker.

The same runs as `make study` (:mod:`dsmath.study.runner`: each run in a workspace of its own, resumable, MLflow parent
and children), launched and watched from the Prefect UI with the study file, the variants, the seeds and the number of
runs at once as flow parameters:

    .venv/bin/python -m flows.study                       # the whole study, ephemeral Prefect
    .venv/bin/python -m flows.study --variants grpo ppo   # some variants
    .venv/bin/python -m flows.study --jobs 2              # two runs at once, each with half the cores
    .venv/bin/python -m flows.study --pool dsmath         # one flow run per run on the work pool's workers
    .venv/bin/python -m flows.study --serve               # a deployment: run it (with parameters) from the UI

With a pool (`make study POOL=dsmath`; docs/study.md has the N-machine recipe) the runs go to the pool's workers
(:mod:`dsmath.orchestration.cluster`), the chain through the study's DVC remote, records through the MLflow server.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from dsmath.orchestration import cluster
from dsmath.runtime import tracking
from dsmath.study import remote, runner
from dsmath.study.report import build_study_report
from dsmath.study.spec import load_study


@task(task_run_name="chain-{variant}", cache_policy=NO_CACHE)
def build_chain(job: runner.Runner, variant: str, publish: bool = False) -> str:
    """The shared chain of `variant` and of every variant with the same chain params (up to date: nothing runs);
    with `publish`, pushed to the study's DVC remote and its bundle logged for the workers. Returns its name."""
    ws = job.build_chain(variant)
    return remote.publish_chain(job, variant, ws) if publish else job.chain_name(variant)


@task(task_run_name="{variant}-{seed}", cache_policy=NO_CACHE)
def run_one(job: runner.Runner, variant: str, seed: int) -> dict:
    """One variant x seed in its workspace; returns its headline row (its record is in the results folder)."""
    return headline(job.run(variant, seed))


def headline(r: dict) -> dict:
    """A run record's row in the flow's runs table."""
    mode = r["mode"]
    return {"variant": r["variant"], "seed": r["seed"], "mode": mode,
            "greedy": r["eval"].get(f"synthetic/{mode}/greedy"), "s_per_step": r["rl"].get("s_per_step"),
            "wall_s": r["wall_s"], "threads": r["threads"],
            "host": r.get("host")}


@task(task_run_name="write_report")
def write_report(study_file: str, parent_id: str) -> str:
    study = load_study(study_file)
    out = build_study_report(study, tracking.StageRun(parent_id))
    text = Path(out["report"]).read_text()
    create_markdown_artifact(text, key="study-report", description=f"study {study.name}")
    return out["report"]


@flow(name="dsmath-study", log_prints=True)
def dsmath_study(study_file: str = "configs/study.yaml", variants: list[str] | None = None,
                 seeds: list[int] | None = None, jobs: int | None = None, pool: str | None = None,
                 dvc_remote: str | None = None) -> str:
    """The study's variants (all, or `variants`) x seeds (all, or `seeds`), `jobs` at a time here or, with a `pool`
    (default: the study file's cluster.pool), as flow runs on the pool's workers; then reports/study.md."""
    study = load_study(study_file)
    runs = study.runs(variants, seeds)
    jobs = jobs or study.jobs
    pool = pool or study.cluster.pool
    log = get_run_logger()
    with runner.study_session(study, jobs, log.info, dvc_remote or study.cluster.remote) as job:
        if pool:
            cluster.check_shared(job)
        todo = [(v, s) for v, s in runs if runner.current_record(study, v, s) is None]
        for v, s in runs:
            if (v, s) not in todo:
                log.info(f"study {study.name}: {v} seed {s} done before, kept")
        chains = {v: job.chain_name(v) for v in dict.fromkeys(v for v, _ in todo)}
        built: dict[str, bool] = {}
        for v, name in chains.items():  # each distinct chain once, one at a time, before any run
            if name not in built:
                built[name] = build_chain(job, v, publish=bool(pool), return_state=True).is_completed()
        chained = {v: built[name] for v, name in chains.items()}
        todo = [(v, s) for v, s in todo if chained[v]]
        failed = [f"{v} (chain)" for v, ok in chained.items() if not ok]
        if pool:
            records, lost = cluster.run_on_pool(job, todo, chains, pool, log.info)
            rows = [headline(r) for r in records.values()]
            failed += lost
        else:
            with ThreadPoolTaskRunner(max_workers=jobs) as pool_:
                futures = {(v, s): pool_.submit(run_one, {"job": job, "variant": v, "seed": s}) for v, s in todo}
                states = {key: fut.wait() or fut.state for key, fut in futures.items()}
            rows = [st.result() for st in states.values() if st.is_completed()]
            failed += [f"{v} seed {s}" for (v, s), st in states.items() if not st.is_completed()]
        if rows:
            create_table_artifact(rows, key=f"study-{study.name}-runs".lower().replace("_", "-"),
                                  description=f"study {study.name}: the runs of this flow run")
        report = write_report(study_file, job.parent.run_id)
        if failed:
            raise runner.StudyRunFailed(f"runs failed: {'; '.join(failed)} (a rerun retries them)")
        return report


@flow(name=cluster.FLOW, log_prints=True)
def study_run(study_text: str, variant: str, seed: int, parent_run_id: str, child_run_id: str, chain: str, key: str,
              remote: str | None = None, pool: str | None = None) -> dict:
    """One variant x seed on a worker (submitted by `dsmath-study` with a pool; deployed on it by
    :func:`dsmath.orchestration.cluster.ensure_deployment`): its headline row; its record goes to its MLflow child."""
    from dsmath.study import remote as remote_run

    record = remote_run.run_here(study_text, variant, seed, parent_id=parent_run_id, child_id=child_run_id,
                                 chain=chain, key=key, remote=remote, pool=pool)
    return headline(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", default="configs/study.yaml")
    parser.add_argument("--variants", nargs="*", default=None)
    parser.add_argument("--seeds", nargs="*", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None, help="runs at once (default: the study file's jobs)")
    parser.add_argument("--pool", default=None, help="run the runs on this Prefect work pool's workers (default: "
                        "the study file's cluster.pool; none: here)")
    parser.add_argument("--remote", default=None, help="the DVC remote URL the machines share (default: the study "
                        "file's cluster.remote, else the project's default remote)")
    parser.add_argument("--serve", action="store_true", help="serve a deployment, runnable from the Prefect UI")
    args = parser.parse_args()
    parameters = {"study_file": args.study, "variants": args.variants, "seeds": args.seeds, "jobs": args.jobs,
                  "pool": args.pool, "dvc_remote": args.remote}
    if args.serve:
        dsmath_study.serve(name="dsmath-study", tags=["dsmath", "study"], parameters=parameters)
    else:
        dsmath_study(**parameters)


if __name__ == "__main__":
    main()
