"""DVC stage `report`: the paper-style table and figures; registers the RL seed that is best on validation as a new
model version, and makes it the champion when it beats the current one there."""

from __future__ import annotations

from dsmath.config import Params
from dsmath.reporting.paper import build_report
from dsmath.runtime import tracking
from dsmath.runtime.stage import run_stage, write_metrics


def main(params: Params) -> None:
    with tracking.stage_run("report", params, {"evaluate.primary_metric": params.evaluate.primary_metric}) as run:
        result = build_report(params, params.common.paths.reports)
        run.log_artifact(f"{params.common.paths.reports}/report.md", "report")
        for path in result["figures"].values():
            run.log_artifact(path, "report")
        candidate = result["champion_candidate"]
        promoted = False
        if candidate is not None:
            seed = candidate["run"].removeprefix("seed-")
            promoted = tracking.promote_champion(params, candidate["val"], stage=f"rl@{seed}",
                                                 tags={"test_value": candidate["test"], "rl_seed": seed})
        metric = result["primary_metric"]
        summary = {f"{m}/{metric}": v for m, v in result["primary"].items() if v is not None}
        summary |= {"sft_rl_gain": result["sft_rl_gain"], "sft_rl_gain_sd_seeds": result["sft_rl_gain_sd_seeds"],
                    "sft_rl_paired_se": result["sft_rl_paired_se"], "rl_seeds": len(result["seeds"])}
        summary |= {f"{r['run']}/{metric}": r["test"] for r in result["seeds"]}
        summary |= {f"{r['run']}/val/{metric}": r["val"] for r in result["seeds"]}
        summary = {k: v for k, v in summary.items() if v is not None and v == v}
        write_metrics(params, "report", summary)  # a function of the pipeline's inputs only (DVC compares it) ...
        run.log_metrics({f"report/{k}": v for k, v in summary.items()} | {"report/rl_promoted_champion": promoted})
        run.set_tags({"dsmath.rl_promoted_champion": str(promoted).lower()})  # ... the registry's state is MLflow's


if __name__ == "__main__":
    run_stage(main)
