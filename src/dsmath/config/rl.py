"""Params sections `rewards`, `sandbox` (limits for model-written programs) and `rl` (GRPO and the algorithms of
DeepSeekMath's unified paradigm)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from dsmath.config.base import NonNegInt, PosInt, Section

# ----------------------------------------------------------------------------------------------------------------
# rewards and the sandbox that runs model-written programs (dsmath.rewards, dsmath.sandbox.pool)


class Rewards(Section):
    """Rule-based rewards (DeepSeekMath sec. 4.1, R1 sec. 2.2.2): r = accuracy_weight * acc + format_weight * fmt."""

    accuracy_weight: Annotated[float, Field(ge=0)] = 1.0  # final answer equivalent to the gold (0/1)
    format_weight: Annotated[float, Field(ge=0)] = 0.1  # answer line / code and output fences well formed (0/1)
    equivalence_timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0  # math-verify call cut off after this
    random_p: Annotated[float, Field(ge=0, le=1)] = 0.5  # rl.reward random: P(reward 1), independent of the output

    @model_validator(mode="after")
    def _some_weight(self) -> Rewards:
        if self.accuracy_weight + self.format_weight <= 0:
            raise ValueError("accuracy_weight: accuracy_weight + format_weight must be > 0 (got 0)")
        return self


class Sandbox(Section):
    """Limits for one model-written Python program (program-of-thought / tool-integrated reasoning)."""

    timeout_s: Annotated[float, Field(gt=0, le=600)] = 3.0  # wall clock; CPU limit is ceil(timeout_s) + 1 s
    memory_mb: Annotated[int, Field(ge=64)] = 512  # address-space limit (RLIMIT_AS)
    max_output_bytes: Annotated[int, Field(ge=256)] = 65536  # stdout (and stderr) cap; the program is killed beyond
    workers: PosInt = 2  # programs run in parallel by a batch


# ----------------------------------------------------------------------------------------------------------------
# rl: GRPO (DeepSeekMath sec. 4) and the algorithms of its unified paradigm (sec. 5.2.1) in one engine


class Ppo(Section):
    """PPO baseline (DeepSeekMath eq. 1-2): critic of the policy's size, GAE, per-token KL penalty in the reward."""

    gamma: Annotated[float, Field(gt=0, le=1)] = 1.0
    lam: Annotated[float, Field(ge=0, le=1)] = 0.95
    kl_coef: Annotated[float, Field(ge=0)] = 0.05
    value_clip: Annotated[float, Field(gt=0)] = 0.2
    critic_lr: Annotated[float, Field(gt=0)] = 1e-4


class Rejection(Section):
    """DeepSeek-R1's rejection-sampling stage (R1 sec. 2.3.3) inside one RL run: after `at_step` RL steps, sample
    the policy `samples` times on each of the stream's next `prompts` questions (at rl.temperature), keep up to
    `keep_per_prompt` right outputs per question, fine-tune the policy on them (`epochs` passes in batches of
    `batch_size`, AdamW at `lr`), then RL goes on from that model, which is also its new reference, with a fresh
    optimiser (R1's second RL stage). 0 = off."""

    at_step: NonNegInt = 0
    prompts: PosInt = 256
    samples: PosInt = 4
    keep_per_prompt: PosInt = 2
    epochs: PosInt = 2
    batch_size: PosInt = 32
    lr: Annotated[float, Field(gt=0)] = 5e-5


class Rl(Section):
    init: Literal["sft", "pretrain"] = "sft"  # the model RL starts from (pretrain: no SFT, DeepSeek-R1-Zero)
    algorithm: str = "grpo"  # an RL choice: a name in its registry (dsmath.rl.registry.ALGORITHMS), see _registered
    mode: Literal["cot", "pot", "tool"] = "cot"
    reward: Literal["accuracy", "format", "combined", "random"] = "combined"
    advantage: str = "outcome"  # grpo's advantage estimator (ADVANTAGES): outcome, process (step rewards), rloo, ...
    steps: PosInt = 300
    prompts_per_step: PosInt = 16
    group_size: Annotated[int, Field(ge=2)] = 8
    mu: PosInt = 1  # optimisation passes over each rollout batch (paper: 1)
    minibatches: PosInt = 1  # optimiser steps per pass
    threads: NonNegInt = 0  # torch threads of the RL stage; 0 = common.num_threads (a study may run runs side by side)
    lr: Annotated[float, Field(gt=0)] = 1e-4
    warmup_steps: NonNegInt = 10
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    max_grad_norm: Annotated[float, Field(gt=0)] = 1.0
    max_skipped_share: Annotated[float, Field(ge=0, le=1)] = 0.1  # of optimiser updates (non-finite): more fails
    clip_eps: Annotated[float, Field(gt=0, lt=1)] = 0.2
    clip_eps_high: Annotated[float, Field(gt=0)] | None = None
    importance_ratio: str = "token"  # the loss variant (LOSSES): token (PPO / GRPO), sequence (GSPO), ...
    overlong_buffer: NonNegInt = 0  # DAPO soft overlong punishment over the last N tokens of the budget (0 = off)
    overlong_penalty: Annotated[float, Field(ge=0)] = 1.0  # reward penalty at (and beyond) max_new_tokens
    beta: Annotated[float, Field(ge=0)] = 0.04
    kl: str = "k3"  # the KL estimator (KL_ESTIMATORS)
    aggregation: str = "seq-mean-token-mean"  # of the per-token losses (AGGREGATIONS)
    scale_rewards: bool = True
    skip_zero_advantage: bool = False  # leave zero-advantage rows out of the update (drops their KL term)
    dynamic_sampling: bool = False  # DAPO: resample until prompts_per_step groups have reward spread
    dynamic_sampling_rounds: PosInt = 4  # most sampling rounds of prompts_per_step questions per step
    temperature: Annotated[float, Field(gt=0)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    max_new_tokens: PosInt = 208
    max_tool_calls: PosInt = 2
    ref_reset_every: NonNegInt = 0  # iterative GRPO (sec. 4.2): reference := policy every N steps (0 = never)
    prompt_levels: list[Annotated[int, Field(ge=1, le=5)]] = []
    engine: Literal["auto", "fast", "hf"] = "auto"
    train_buckets: PosInt = 4  # reference and policy forwards over rows grouped by length, each cut to its padding
    share_prompts: bool = True  # each distinct prompt runs once in those forwards (its KV shared by its group)
    checkpoint_every: PosInt = 25
    eval_every: NonNegInt = 25
    eval_problems: PosInt = 200
    samples_every: PosInt = 25
    ppo: Ppo = Ppo()
    rejection: Rejection = Rejection()

    @field_validator("algorithm", "advantage", "importance_ratio", "kl", "aggregation", mode="before")
    @classmethod
    def _registered(cls, value, info: ValidationInfo):
        """An RL choice is a name of its registry (`dsmath.rl.registry.REGISTRIES`, by key), so that adding a variant
        there adds it here. Read lazily: the registry module imports nothing of dsmath (no cycle, no torch), and
        config imports nothing of rl when it is imported."""
        from dsmath.rl.registry import REGISTRIES

        names = [repr(n) for n in REGISTRIES[info.field_name]]
        if not (isinstance(value, str) and value in REGISTRIES[info.field_name]):
            choices = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
            raise ValueError(f"must be one of {choices}")  # worded as for the other choices (a Literal)
        return value

    @model_validator(mode="after")
    def _combinations(self) -> Rl:
        if self.advantage != "outcome" and self.algorithm != "grpo":
            raise ValueError(f"advantage: {self.advantage} is a GRPO advantage rule (got algorithm {self.algorithm})")
        if self.rejection.at_step and self.rejection.at_step >= self.steps:
            raise ValueError(f"rejection.at_step: must be < steps {self.steps} (got {self.rejection.at_step}; 0 = off)")
        if self.overlong_buffer >= self.max_new_tokens:
            raise ValueError(f"overlong_buffer: must be < max_new_tokens {self.max_new_tokens} "
                             f"(got {self.overlong_buffer})")
        if self.dynamic_sampling and self.algorithm not in ("grpo", "online_rft"):
            raise ValueError(f"dynamic_sampling: needs a group-relative algorithm, grpo or online_rft "
                             f"(got {self.algorithm})")
        return self
