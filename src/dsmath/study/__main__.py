"""`python -m dsmath.study [run|report|list|health] [--study configs/study.yaml] [--variants a b] [--seeds 1234]
[--jobs N]`.

`run` (what `make study` calls) runs every variant x seed not run yet, each in a workspace of its own, `--jobs` at a
time, then writes the report; `report` rewrites the report from the run records alone; `list` prints each variant's
seeds and the `dvc exp run` that reproduces those to run by hand in the project; `health` gives records made
without a health curve the one their RL run logged to the MLflow store (:mod:`dsmath.study.health`).
"""

from __future__ import annotations

import argparse
import sys

from dsmath.config import ParamsError


def main(argv: list[str] | None = None) -> int:
    from dsmath.study import runner
    from dsmath.study.report import build_study_report
    from dsmath.study.spec import load_study

    parser = argparse.ArgumentParser(prog="python -m dsmath.study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "report", "list", "health"])
    parser.add_argument("--study", default="configs/study.yaml", help="the study file")
    parser.add_argument("--variants", nargs="*", default=None, help="run only these variants")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="run only these seeds")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs at once on this machine, each with cores / jobs threads (default: the study "
                             "file's jobs, else 1)")
    args = parser.parse_args(argv)
    try:
        study = load_study(args.study)
        study.runs(args.variants, args.seeds)  # unknown variants fail here
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "list":  # per variant: its seeds' state, and the one `dvc exp run` of the seeds to run
        for variant, seeds in study.variant_runs(args.variants, args.seeds):
            todo = [s for s in seeds if runner.current_record(study, variant, s) is None]
            state = ", ".join(f"{s} {'to run' if s in todo else 'done'}" for s in seeds)
            cmd = runner.exp_command(study.exp_name(variant, todo), study.exp_overrides(variant, todo),
                                     study.targets, "dvc") if todo else []
            print(f"{variant:<22}{state:<28} {' '.join(cmd)}")
        return 0
    if args.command == "health":
        from dsmath.study.health import backfill

        print(f"filled {backfill(study, variants=args.variants, seeds=args.seeds)} record(s)")
        return 0
    if args.command == "report":
        out = build_study_report(study)
        print(f"wrote {out['report']}")
        return 0
    try:
        runner.run_study(study, args.variants, args.seeds, jobs=args.jobs or study.jobs)
    except runner.StudyRunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {study.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
