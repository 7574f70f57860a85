"""Rule-based rewards for RL and evaluation: answer extraction, equivalence, format checks, step verification.

    extract_answer(text) -> str | None                 the last \\boxed{} / #### N / "The answer is N"
    own_text(text, mode) -> str                         tool mode: the text without the interpreter's ```output blocks
    is_equivalent(pred, gold) -> bool                   fast normalised/numeric compare, then math-verify (time-limited)
    accuracy_reward, format_reward, pot_accuracy_reward (completions (B,), golds (B,)) -> (B,)
    build_reward(name, mode, rewards, sandbox)          registry: accuracy | format | combined  x  cot | pot | tool
    verify_steps(text, gold=None) -> list[StepResult]   per-step process rewards with character end positions

Model-written programs run through :mod:`dsmath.sandbox.pool`.
"""

from dsmath.rewards.equivalence import are_equivalent, is_equivalent
from dsmath.rewards.extract import code_blocks, extract_answer, fenced_blocks, last_boxed, strip_output_blocks
from dsmath.rewards.functions import (
    MODES,
    REWARDS,
    RewardFn,
    accuracy_reward,
    build_reward,
    combined_reward,
    format_reward,
    own_text,
    pot_accuracy_reward,
    program_answer,
)
from dsmath.rewards.normalize import normalize_answer, parse_number
from dsmath.rewards.steps import (
    NEUTRAL_STEP_REWARD,
    RIGHT_STEP_REWARD,
    WRONG_STEP_REWARD,
    StepResult,
    check_step,
    token_ends,
    verify_steps,
)

__all__ = [
    "MODES",
    "NEUTRAL_STEP_REWARD",
    "REWARDS",
    "RIGHT_STEP_REWARD",
    "RewardFn",
    "StepResult",
    "WRONG_STEP_REWARD",
    "accuracy_reward",
    "are_equivalent",
    "build_reward",
    "check_step",
    "code_blocks",
    "combined_reward",
    "extract_answer",
    "fenced_blocks",
    "format_reward",
    "is_equivalent",
    "last_boxed",
    "normalize_answer",
    "own_text",
    "parse_number",
    "pot_accuracy_reward",
    "program_answer",
    "strip_output_blocks",
    "token_ends",
    "verify_steps",
]
