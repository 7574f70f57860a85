"""Rule-based rewards for RL and evaluation: answer extraction, equivalence, format checks, step verification.

    extract_answer(text) -> str | None                 the last \\boxed{} / #### N / "The answer is N"
    own_text(text, mode) -> str                         tool mode: the text without the interpreter's ```output blocks
    is_equivalent(pred, gold) -> bool                   fast normalised/numeric compare, then math-verify (time-limited)
    accuracy_reward, format_reward, pot_accuracy_reward (completions (B,), golds (B,)) -> (B,)
    build_reward(name, mode, rewards, sandbox, seed)    registry: accuracy|format|combined|random  x  cot|pot|tool
    random_reward(completions, golds, p, seed, offset)  (B,) seeded coin flips independent of the output (control)
    reference_quantities(problem) -> list[str]          the values a right solution computes (+ gold); [] if unknown
    gsm8k_quantities(solution) -> list[str]             the results of GSM8K's <<expr=result>> annotations
    solution_steps(text, quantities, mode, outcome)     per-step process rewards judged against the solution's values,
                                                        ending with the terminal (outcome) step; character positions
    terminal_reward(accuracy, format, aw, fw) -> float  the terminal step's reward: +-aw (right) +- fw (well formed)
    verify_steps(text, gold=None) -> list[StepResult]   truth-only per-line checks, the answer line against gold
    program_assignments(code) -> list[Assignment]       a program's assignments, statically evaluated (never run)

Written arithmetic (``47 + 36 = 40 + 30 + 7 + 6 = 70 + 13 = 83``) is read in one place, :mod:`dsmath.rewards.chains`.

Model-written programs run through :mod:`dsmath.sandbox.pool`.
"""

from dsmath.rewards.equivalence import are_equivalent, is_equivalent
from dsmath.rewards.extract import code_blocks, extract_answer, fenced_blocks, last_boxed, strip_output_blocks
from dsmath.rewards.functions import (
    MODES,
    REWARDS,
    RandomReward,
    RewardFn,
    accuracy_reward,
    build_reward,
    combined_reward,
    format_reward,
    own_text,
    pot_accuracy_reward,
    program_answer,
    random_reward,
)
from dsmath.rewards.normalize import normalize_answer, parse_number
from dsmath.rewards.programs import program_assignments
from dsmath.rewards.solution import (
    QuantityPool,
    canonical_number,
    gsm8k_quantities,
    reference_quantities,
    solution_steps,
)
from dsmath.rewards.steps import (
    NEUTRAL_STEP_REWARD,
    RIGHT_STEP_REWARD,
    WRONG_STEP_REWARD,
    StepResult,
    check_step,
    terminal_reward,
    token_ends,
    verify_steps,
)

__all__ = [
    "MODES",
    "NEUTRAL_STEP_REWARD",
    "QuantityPool",
    "REWARDS",
    "RandomReward",
    "RIGHT_STEP_REWARD",
    "RewardFn",
    "StepResult",
    "WRONG_STEP_REWARD",
    "accuracy_reward",
    "are_equivalent",
    "build_reward",
    "canonical_number",
    "check_step",
    "code_blocks",
    "combined_reward",
    "extract_answer",
    "fenced_blocks",
    "format_reward",
    "gsm8k_quantities",
    "is_equivalent",
    "last_boxed",
    "normalize_answer",
    "own_text",
    "parse_number",
    "pot_accuracy_reward",
    "random_reward",
    "program_answer",
    "program_assignments",
    "reference_quantities",
    "solution_steps",
    "strip_output_blocks",
    "terminal_reward",
    "token_ends",
    "verify_steps",
]
