"""DVC stage `report`: the paper-style table and figures; registers the RL model as champion when it wins."""

from __future__ import annotations

from dsmath import tracking
from dsmath.config import Params
from dsmath.report import build_report
from dsmath.stage import run_stage, write_metrics


def main(params: Params) -> None:
    with tracking.stage_run("report", params, {"evaluate.primary_metric": params.evaluate.primary_metric}) as run:
        result = build_report(params, params.common.paths.reports)
        run.log_artifact(f"{params.common.paths.reports}/report.md", "report")
        for path in result["figures"].values():
            run.log_artifact(path, "report")
        promoted = tracking.promote_champion(params, result["primary"].get("rl"))
        summary = {f"{m}/{result['primary_metric']}": v for m, v in result["primary"].items() if v is not None}
        summary |= {"sft_rl_paired_se": result["sft_rl_paired_se"], "rl_promoted_champion": int(promoted)}
        write_metrics(params, "report", summary)
        run.log_metrics({f"report/{k}": v for k, v in summary.items() if v is not None})


if __name__ == "__main__":
    run_stage(main)
