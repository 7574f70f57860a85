"""DVC stage `rl`: GRPO (or PPO / online RFT / RFT, by `rl.algorithm`) from the SFT model."""

from __future__ import annotations

from dsmath import tracking
from dsmath.config import Params
from dsmath.rl.run import train_rl
from dsmath.stage import run_stage, write_metrics


def main(params: Params) -> None:
    sections = {"rl": params.rl.model_dump(), "rewards": params.rewards.model_dump(), "seed": params.common.seed}
    with tracking.stage_run("rl", params, sections) as run:
        metrics = train_rl(params, run)
        path = write_metrics(params, "rl", metrics)
        run.log_artifact(path)
        run.log_model(metrics["model_dir"], name="model")


if __name__ == "__main__":
    run_stage(main)
