"""DVC stage `pretrain`: continual pretraining of the base model on the math corpus, perplexity before/after."""

from __future__ import annotations

from dsmath.config import Params
from dsmath.runtime.stage import run_stage
from dsmath.train import lifecycle, recipes


def main(params: Params) -> None:
    sections = {"common.seed": params.common.seed, "pretrain": params.pretrain.model_dump()}
    lifecycle.run_training_stage(params, "pretrain", recipes.pretrain, sections)


if __name__ == "__main__":
    run_stage(main, multiprocess=True)
