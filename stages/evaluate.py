"""DVC stage `evaluate@<model>`: greedy / maj@k / pass@k of one model of the chain on every dataset and mode (for rl:
every seed's model, and their mean as the stage's metrics)."""

from __future__ import annotations

from dsmath.config import CHAIN, Params
from dsmath.evaluation.run import run_evaluation
from dsmath.runtime import distributed, tracking
from dsmath.runtime.stage import run_stage, write_metrics


def main(params: Params, model_name: str) -> None:
    if model_name not in CHAIN:
        raise SystemExit(f"error: model must be one of {', '.join(CHAIN)} (got {model_name!r})")
    world = distributed.setup(params.common.device)  # several ranks under torchrun / accelerate launch
    sections = {"evaluate": params.evaluate.model_dump(), "sandbox": params.sandbox.model_dump()}
    with tracking.main_process_run(world.is_main, f"evaluate@{model_name}", params, sections) as run:
        metrics, rows, curves = run_evaluation(params, model_name, world)
        if not world.is_main:
            return
        path = write_metrics(params, f"eval/{model_name}", metrics)
        run.log_metrics({f"eval/{k}": v for k, v in metrics.items()})
        run.log_artifact(path)
        run.log_table([{k: v for k, v in r.items() if k not in ("sample_answers", "sample_correct")}
                       for r in rows], "completions.json")
        if curves:
            run.log_table(curves, "pass_maj_at_k.json")


if __name__ == "__main__":
    run_stage(main, multiprocess=True, threads=lambda p: p.evaluate.threads)
