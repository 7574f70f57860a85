"""DVC stage `sft`: CoT / PoT / tool-integrated SFT, held-out loss, greedy and pass@k accuracy probe."""

from __future__ import annotations

from dsmath.config import Params
from dsmath.runtime.stage import run_stage
from dsmath.train import lifecycle, sft


def main(params: Params) -> None:
    sections = {"common.seed": params.common.seed, "sft": params.sft.model_dump()}
    lifecycle.run_training_stage(params, "sft", sft.sft, sections)


if __name__ == "__main__":
    run_stage(main, multiprocess=True)
