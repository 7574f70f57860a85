"""DVC stage `rl@<seed>`: GRPO (or PPO / online RFT / RFT, by `rl.algorithm`) from the SFT model, one run per seed
of `common.rl_seeds` (the data and the SFT model are the same for every seed)."""

from __future__ import annotations

from dsmath.config import Params, seed_dir
from dsmath.rl.run import train_rl
from dsmath.runtime import distributed, tracking
from dsmath.runtime.stage import run_stage, write_metrics


def main(params: Params, seed: str) -> None:
    if not seed.isdigit() or int(seed) not in params.common.rl_seeds:
        raise SystemExit(f"error: seed must be one of common.rl_seeds {params.common.rl_seeds} (got {seed!r})")
    seed_value = int(seed)
    world = distributed.setup(params.common.device)  # several ranks under torchrun / accelerate launch
    sections = {"rl": params.rl.model_dump(), "rewards": params.rewards.model_dump(), "rl_seed": seed_value}
    with tracking.main_process_run(world.is_main, f"rl@{seed_value}", params, sections) as run:
        metrics = train_rl(params, run, seed_value, world)
        if not world.is_main:
            return
        path = write_metrics(params, f"rl/{seed_dir(seed_value)}", metrics)
        run.set_tags({"dsmath.rl_seed": seed_value})
        run.log_artifact(path)
        run.log_model(metrics["model_dir"], name="model")


if __name__ == "__main__":
    run_stage(main, multiprocess=True, threads=lambda p: p.rl.threads)
