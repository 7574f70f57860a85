"""dsmath: a reproducible DeepSeekMath pipeline (corpus -> base -> math pretraining -> SFT -> GRPO -> eval)."""

__version__ = "0.1.0"
