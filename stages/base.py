"""DVC stage `base`: the "coder base" (code pretraining from scratch), or a pretrained model passed through."""

from __future__ import annotations

from dsmath.config import Params
from dsmath.runtime.stage import run_stage
from dsmath.train import lifecycle, recipes


def main(params: Params) -> None:
    sections = {"common.seed": params.common.seed, "model": params.model.model_dump()}
    sections["base"] = params.base.model_dump()
    lifecycle.run_training_stage(params, "base", recipes.base, sections)


if __name__ == "__main__":
    run_stage(main, multiprocess=True)
