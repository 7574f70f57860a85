"""Prefect flow: the study (configs/study.yaml), one task per variant running its seeds, then the report.

The same runs as `make study` (:mod:`dsmath.study.runner`: each variant's seeds one DVC experiment in the workspace,
resumable, MLflow parent and children), launched and watched from the Prefect UI with the study file, the variants
and the seeds as flow parameters:

    .venv/bin/python -m flows.study                       # the whole study, ephemeral Prefect
    .venv/bin/python -m flows.study --variants grpo ppo   # some variants
    .venv/bin/python -m flows.study --serve               # a deployment: run it (with parameters) from the UI
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from dsmath.runtime import tracking
from dsmath.study import runner
from dsmath.study.report import build_study_report
from dsmath.study.spec import load_study


def _profile() -> str:
    """The params file the variants overlay: the copy saved before the study's first run (params.yaml itself holds
    the running experiment's overrides)."""
    saved = runner.STATE / "saved" / "params.yaml"
    return str(saved) if saved.exists() else "params.yaml"


@task(task_run_name="{variant}")
def run_variant(study_file: str, variant: str, seeds: list[int], parent_id: str, machine: dict) -> list[dict]:
    """The seeds of one variant (one DVC experiment for those not run before); returns their headline rows."""
    log = get_run_logger()
    study = load_study(study_file, _profile())
    parent, dvc = tracking.StageRun(parent_id), runner.dvc_bin()
    rows = []
    for r in runner.run_variant(study, variant, seeds, parent, dvc, log.info, machine):
        mode = r["mode"]
        rows.append({"variant": variant, "seed": r["seed"], "mode": mode,
                     "greedy": r["eval"].get(f"synthetic/{mode}/greedy"), "s_per_step": r["rl"].get("s_per_step"),
                     "wall_s": r["wall_s"], "dvc_exp": r["exp_name"]})
    create_table_artifact(rows, key=f"study-{variant}".lower().replace("_", "-"),
                          description=f"study {study.name}: {variant}")
    return rows


@task(task_run_name="write_report")
def write_report(study_file: str, parent_id: str) -> str:
    study = load_study(study_file, _profile())
    out = build_study_report(study, tracking.StageRun(parent_id))
    text = Path(out["report"]).read_text()
    create_markdown_artifact(text, key="study-report", description=f"study {study.name}")
    return out["report"]


@flow(name="dsmath-study", log_prints=True)
def dsmath_study(study_file: str = "configs/study.yaml", variants: list[str] | None = None,
                 seeds: list[int] | None = None) -> str:
    """The study's variants (all, or `variants`) x seeds (all, or `seeds`), then reports/study.md."""
    if (runner.STATE / "saved").exists():  # a killed study left its overrides in params.yaml
        runner.restore_params_file()
    study = load_study(study_file)
    runs = study.runs(variants, seeds)
    with runner.study_session(study) as (study, parent, machine, _):
        states = {}
        for variant in dict.fromkeys(v for v, _ in runs):  # one task per variant, in the file's order; a failed
            states[variant] = run_variant(study_file, variant, [s for v, s in runs if v == variant],  # one does
                                          parent.run_id, machine, return_state=True)      # not stop the others
        report = write_report(study_file, parent.run_id)
        if failed := [v for v, st in states.items() if not st.is_completed()]:
            raise runner.StudyRunFailed(f"variants failed: {', '.join(failed)} (a rerun retries them)")
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", default="configs/study.yaml")
    parser.add_argument("--variants", nargs="*", default=None)
    parser.add_argument("--seeds", nargs="*", type=int, default=None)
    parser.add_argument("--serve", action="store_true", help="serve a deployment, runnable from the Prefect UI")
    args = parser.parse_args()
    if args.serve:
        dsmath_study.serve(name="dsmath-study", tags=["dsmath", "study"],
                           parameters={"study_file": args.study, "variants": args.variants, "seeds": args.seeds})
    else:
        dsmath_study(args.study, args.variants, args.seeds)


if __name__ == "__main__":
    main()
