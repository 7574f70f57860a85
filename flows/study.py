"""Prefect flow: the study (configs/study.yaml): the shared chain once per variant, then one task per variant x seed,
`jobs` at a time, then the report.

The same runs as `make study` (:mod:`dsmath.study.runner`: each run in a workspace of its own, resumable, MLflow parent
and children), launched and watched from the Prefect UI with the study file, the variants, the seeds and the number of
runs at once as flow parameters:

    .venv/bin/python -m flows.study                       # the whole study, ephemeral Prefect
    .venv/bin/python -m flows.study --variants grpo ppo   # some variants
    .venv/bin/python -m flows.study --jobs 2              # two runs at once, each with half the cores
    .venv/bin/python -m flows.study --serve               # a deployment: run it (with parameters) from the UI
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from dsmath.runtime import tracking
from dsmath.study import runner
from dsmath.study.report import build_study_report
from dsmath.study.spec import load_study


@task(task_run_name="chain-{variant}", cache_policy=NO_CACHE)
def build_chain(job: runner.Runner, variant: str) -> None:
    """The shared chain of `variant` and of every variant with the same chain params (up to date: nothing runs)."""
    job.build_chain(variant)


@task(task_run_name="{variant}-{seed}", cache_policy=NO_CACHE)
def run_one(job: runner.Runner, variant: str, seed: int) -> dict:
    """One variant x seed in its workspace; returns its headline row (its record is in the results folder)."""
    r = job.run(variant, seed)
    mode = r["mode"]
    return {"variant": variant, "seed": seed, "mode": mode, "greedy": r["eval"].get(f"synthetic/{mode}/greedy"),
            "s_per_step": r["rl"].get("s_per_step"), "wall_s": r["wall_s"], "threads": r["threads"]}


@task(task_run_name="write_report")
def write_report(study_file: str, parent_id: str) -> str:
    study = load_study(study_file)
    out = build_study_report(study, tracking.StageRun(parent_id))
    text = Path(out["report"]).read_text()
    create_markdown_artifact(text, key="study-report", description=f"study {study.name}")
    return out["report"]


@flow(name="dsmath-study", log_prints=True)
def dsmath_study(study_file: str = "configs/study.yaml", variants: list[str] | None = None,
                 seeds: list[int] | None = None, jobs: int | None = None) -> str:
    """The study's variants (all, or `variants`) x seeds (all, or `seeds`), `jobs` at a time, then reports/study.md."""
    study = load_study(study_file)
    runs = study.runs(variants, seeds)
    jobs = jobs or study.jobs
    log = get_run_logger()
    with runner.study_session(study, jobs, log.info) as job:
        todo = [(v, s) for v, s in runs if runner.current_record(study, v, s) is None]
        for v, s in runs:
            if (v, s) not in todo:
                log.info(f"study {study.name}: {v} seed {s} done before, kept")
        chains = {v: job.chain_name(v) for v in dict.fromkeys(v for v, _ in todo)}
        built: dict[str, bool] = {}
        for v, name in chains.items():  # each distinct chain once, one at a time, before any run
            if name not in built:
                built[name] = build_chain(job, v, return_state=True).is_completed()
        chained = {v: built[name] for v, name in chains.items()}
        with ThreadPoolTaskRunner(max_workers=jobs) as pool:
            futures = {(v, s): pool.submit(run_one, {"job": job, "variant": v, "seed": s})
                       for v, s in todo if chained[v]}
            states = {key: fut.wait() or fut.state for key, fut in futures.items()}
        rows = [st.result() for st in states.values() if st.is_completed()]
        if rows:
            create_table_artifact(rows, key=f"study-{study.name}-runs".lower().replace("_", "-"),
                                  description=f"study {study.name}: the runs of this flow run")
        report = write_report(study_file, job.parent.run_id)
        failed = [f"{v} (chain)" for v, ok in chained.items() if not ok]
        failed += [f"{v} seed {s}" for (v, s), st in states.items() if not st.is_completed()]
        if failed:
            raise runner.StudyRunFailed(f"runs failed: {', '.join(failed)} (a rerun retries them)")
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", default="configs/study.yaml")
    parser.add_argument("--variants", nargs="*", default=None)
    parser.add_argument("--seeds", nargs="*", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None, help="runs at once (default: the study file's jobs)")
    parser.add_argument("--serve", action="store_true", help="serve a deployment, runnable from the Prefect UI")
    args = parser.parse_args()
    if args.serve:
        dsmath_study.serve(name="dsmath-study", tags=["dsmath", "study"],
                           parameters={"study_file": args.study, "variants": args.variants, "seeds": args.seeds,
                                       "jobs": args.jobs})
    else:
        dsmath_study(args.study, args.variants, args.seeds, args.jobs)


if __name__ == "__main__":
    main()
