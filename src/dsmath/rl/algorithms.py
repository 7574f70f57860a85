"""The RL methods of DeepSeekMath's unified paradigm (sec. 5.2.1) as data: each algorithm is a data source, an
advantage estimator (the gradient coefficient) and loss settings. Registered by name in
:data:`dsmath.rl.registry.ALGORITHMS` (params ``rl.algorithm``); the engine that runs them is
:class:`dsmath.rl.trainer.RLTrainer`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsmath.rl import advantages
from dsmath.rl.advantages import Estimator, Signals
from dsmath.rl.registry import ADVANTAGES


@dataclass(frozen=True)
class Algorithm:
    advantages: Estimator  # (Signals, rl section) -> ((N, T) advantages, extras)
    kl_in_loss: bool  # beta * KL(pi_theta || pi_ref) in the loss (GRPO); PPO has it in the reward, RFT has none
    ratio: bool  # clipped ratio pi_theta / pi_old; False: the plain log-likelihood gradient (ratio fixed at 1)
    sample_from_reference: bool = False  # offline RFT: outputs of the frozen SFT model
    critic: bool = False  # a learned value model (PPO): the estimator may read Signals.values


def by_rl_advantage(x: Signals, cfg) -> tuple[torch.Tensor, dict]:
    """GRPO's estimator: the group-relative one that ``rl.advantage`` names (outcome, process, rloo, ...)."""
    return ADVANTAGES[cfg.advantage](x, cfg)


GRPO = Algorithm(by_rl_advantage, kl_in_loss=True, ratio=True)
PPO = Algorithm(advantages.gae_whitened, kl_in_loss=False, ratio=True, critic=True)
ONLINE_RFT = Algorithm(advantages.correct_only, kl_in_loss=False, ratio=False)
RFT = Algorithm(advantages.correct_only, kl_in_loss=False, ratio=False, sample_from_reference=True)
