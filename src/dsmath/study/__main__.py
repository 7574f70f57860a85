"""`python -m dsmath.study [run|report|list] [--study configs/study.yaml] [--variants a b] [--seeds 1234]`.

`run` (what `make study` calls) runs every variant x seed not run yet as a DVC experiment, then writes the report;
`report` rewrites the report from the run records alone; `list` prints the runs and the `dvc exp run` of each.
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
    parser.add_argument("command", nargs="?", default="run", choices=["run", "report", "list"])
    parser.add_argument("--study", default="configs/study.yaml", help="the study file")
    parser.add_argument("--variants", nargs="*", default=None, help="run only these variants")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="run only these seeds")
    args = parser.parse_args(argv)
    if (runner.STATE / "saved").exists():  # a killed study left its overrides in params.yaml
        runner.restore_params_file()
    try:
        study = load_study(args.study)
        runs = study.runs(args.variants, args.seeds)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "list":
        for variant, seed in runs:
            done = "done" if study.result_path(variant, seed).exists() else "to run"
            name, overrides = study.exp_name(variant, seed), study.overrides(variant, seed)
            cmd = runner.exp_command(name, overrides, study.targets, "dvc")
            print(f"{variant:<22}{seed:>6}  {done:<7} {' '.join(cmd)}")
        return 0
    if args.command == "report":
        out = build_study_report(study)
        print(f"wrote {out['report']}")
        return 0
    try:
        runner.run_study(study, args.variants, args.seeds)
    except runner.StudyRunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {study.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
