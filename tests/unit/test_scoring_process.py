"""Process rewards in the RL batch: steps judged against each row's reference quantities, the terminal (outcome) step
on the last policy token, and the per-token advantages `process_advantages` makes of them, worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from dsmath.generation.rollout import tool_output_block
from dsmath.modeling.tokenizer import train_tokenizer
from dsmath.rl import scoring
from dsmath.rl.advantages import process_advantages
from dsmath.rl.batch import Batch
from dsmath.rl.scoring import Scores

PROBLEM = {"question": "Sam has 20 apples. Sam finds 4 more apples. He puts them into packs of 12. How many packs?",
           "answer": "2", "quantities": ["24", "2"]}
TWO_STEPS = "After getting 4 more: 20 + 4 = 24.\nPacks of 12: 24 / 12 = 2."
WRONG_ANSWER = TWO_STEPS + "\nThe answer is \\boxed{3}."
WRONG_SETUP = "Sam gives away 4: 20 - 4 = 16.\nPacks of 12: 16 / 12 = 4/3.\nThe answer is \\boxed{4/3}."
CODE = "Let me use Python.\n```python\napples = 20\ntotal = apples + 4\nwrong = total * 12\npacks = total // 12\n" \
       "print(packs)\n```"
OUTPUT = tool_output_block(CODE, "2")
ANSWER = "The answer is \\boxed{2}."
PAD = 2


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([TWO_STEPS, WRONG_ANSWER, WRONG_SETUP, CODE + OUTPUT + ANSWER] * 5, vocab_size=300)


def batch(tok, rows: list[tuple[list[tuple[str, bool]], bool]]):
    """Rows of ((text, chosen by the policy) segments, ends with EOS) -> (ids, completion_mask, loss_mask) (N, T)."""
    built = []
    for segments, eos in rows:
        ids, policy = [], []
        for text, chosen in segments:
            piece = tok(text, add_special_tokens=False)["input_ids"]
            ids, policy = ids + piece, policy + [int(chosen)] * len(piece)
        built.append((ids + [tok.eos_token_id] * eos, policy + [1] * eos))
    t = max(len(ids) for ids, _ in built) + PAD
    completion_ids = torch.full((len(built), t), tok.pad_token_id, dtype=torch.long)
    completion_mask, loss_mask = torch.zeros(len(built), t, dtype=torch.long), torch.zeros(len(built), t,
                                                                                          dtype=torch.long)
    for i, (ids, policy) in enumerate(built):
        completion_ids[i, : len(ids)] = torch.tensor(ids)
        completion_mask[i, : len(ids)] = 1
        loss_mask[i, : len(ids)] = torch.tensor(policy)
    return completion_ids, completion_mask, loss_mask


def scores(accuracy: list[float], fmt: list[float]) -> Scores:
    acc = torch.tensor(accuracy)
    return Scores([""] * len(accuracy), acc.clone(), acc, torch.tensor(fmt))


def token_ending(tok, ids: torch.Tensor, text: str, line: str) -> int:
    """Completion position of the token holding the last character of `line` in `text` (decoded from `ids`)."""
    decoded, spans = scoring.token_spans(tok, ids.tolist())
    assert decoded == text
    end = text.index(line) + len(line)
    return next(k for k, (a, b) in enumerate(spans) if a < end <= b)


def test_a_cut_off_output_scores_no_better_than_a_wrong_answer_in_rewards_and_advantages(tok):
    # one group of G = 2: row 0 stops after two right steps (cut off: no answer line, no EOS), row 1 adds a wrong
    # answer line and EOS. Steps: row 0 [+1, +1, terminal -1.1 (wrong, not well formed)], row 1 [+1, +1, terminal
    # -0.9 (wrong, well formed)]; the answer line itself is neutral.
    ids, mask, loss = batch(tok, [([(TWO_STEPS, True)], False), ([(WRONG_ANSWER, True)], True)])
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, mask, ["2", "2"], loss_mask=loss,
                                                    quantities=[["24", "2"]] * 2, scores=scores([0, 0], [0, 1]),
                                                    mode="cot", weights=(1.0, 0.1))
    assert torch.allclose(rewards, torch.tensor([[1.0, 1.0, -1.1], [1.0, 1.0, -0.9]]))
    assert step_mask.all()
    last = mask.sum(dim=1) - 1
    assert ends[:, 2].tolist() == last.tolist()  # the terminal: row 0's last token, row 1's EOS
    assert ends[0, :2].tolist() == [token_ending(tok, ids[0, : last[0] + 1], TWO_STEPS, line)
                                    for line in TWO_STEPS.split("\n")]
    # by hand: the 6 step rewards have mean (4 - 2) / 6 = 1/3; squared deviations 4 x (2/3)^2 + (1.1 + 1/3)^2 +
    # (0.9 + 1/3)^2 = 16/9 + (43/30)^2 + (37/30)^2 = 4818/900, sample variance / 5, so std = sqrt(4818 / 4500).
    # Token 0 of a row gets the sum of its normalised steps: (0.9 - 3 * 1/3) / std and (1.1 - 1) / std.
    std = math.sqrt(4818 / 4500)
    adv = process_advantages(rewards, ends, step_mask, group_size=2, seq_len=ids.shape[1])
    assert adv[:, 0].tolist() == pytest.approx([-0.1 / std, 0.1 / std], abs=1e-5)
    assert adv[0, 0] < adv[1, 0]


def test_a_wrong_setup_is_penalised_at_the_end_of_its_first_line(tok):
    ids, mask, loss = batch(tok, [([(WRONG_SETUP, True)], True), ([(TWO_STEPS + "\n" + ANSWER, True)], True)])
    rewards, ends, _ = scoring.step_rewards(tok, ids, mask, ["2", "2"], loss_mask=loss, quantities=[["24", "2"]] * 2,
                                            scores=scores([0, 1], [1, 1]), weights=(1.0, 0.1))
    assert torch.allclose(rewards, torch.tensor([[-1.0, -1.0, -0.9], [1.0, 1.0, 1.1]]))
    n0 = int(mask[0].sum())
    assert ends[0, 0] == token_ending(tok, ids[0, :n0], WRONG_SETUP, "Sam gives away 4: 20 - 4 = 16.")
    adv = process_advantages(rewards, ends, torch.ones_like(rewards, dtype=torch.bool), 2, ids.shape[1])
    # by hand: mean (-2.9 + 3.1) / 6 = 1/30; deviations (-31, -31, -28, 29, 29, 32) / 30, squares 5412/900, so
    # std = sqrt(5412 / 4500); the wrong line's normalised reward (-1 - 1/30) / std is in the advantage of every
    # token up to its last one and of none after it
    std, first_end = math.sqrt(5412 / 4500), int(ends[0, 0])
    assert float(adv[0, first_end] - adv[0, first_end + 1]) == pytest.approx((-1 - 1 / 30) / std, abs=1e-5)
    assert adv[0, 0] < 0 < adv[1, 0]  # the wrong row is pushed down from its first token


def test_tool_program_steps_land_on_policy_tokens_and_output_lines_get_nothing(tok):
    ids, mask, loss = batch(tok, [([(CODE, True), (OUTPUT, False), (ANSWER, True)], True)])
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, mask, ["2"], loss_mask=loss, quantities=[["24", "2"]],
                                                    scores=scores([1], [1]), mode="tool", weights=(1.0, 0.1))
    # "apples = 20" is given (neutral, no step), then total +1, wrong -1, packs +1, and the terminal +1.1
    assert torch.allclose(rewards, torch.tensor([[1.0, -1.0, 1.0, 1.1]])) and step_mask.all()
    text = CODE + OUTPUT + ANSWER
    n = int(mask[0].sum())
    expected = [token_ending(tok, ids[0, :n], text, line) for line in
                ("total = apples + 4", "wrong = total * 12", "packs = total // 12")]
    assert ends[0].tolist() == [*expected, n - 1]
    assert all(loss[0, e] == 1 for e in ends[0].tolist())


def test_rows_without_quantities_are_checked_for_truth_only(tok):
    ids, mask, loss = batch(tok, [([(WRONG_SETUP, True)], True)])
    rewards, _, _ = scoring.step_rewards(tok, ids, mask, ["2"], loss_mask=loss, quantities=[[]],
                                         scores=scores([0], [1]))  # default weights: params rewards (1.0, 0.1)
    assert torch.allclose(rewards, torch.tensor([[1.0, 1.0, -0.9]]))
    with pytest.raises(ValueError, match="scores"):
        scoring.step_rewards(tok, ids, mask, ["2"], loss_mask=loss, quantities=[[]])
    with pytest.raises(ValueError, match="quantity lists"):
        scoring.step_rewards(tok, ids, mask, ["2"], quantities=[[], []], scores=scores([0], [1]))


def test_batch_quantities_are_group_major():
    gsm8k = {"question": "q", "answer": "72", "solution": "48/2 = <<48/2=24>>24\n#### 72"}
    b = Batch([PROBLEM, gsm8k, {"question": "q", "answer": "5"}], None, ["2"] * 2 + ["72"] * 2 + ["5"] * 2,
              scores([0] * 6, [0] * 6))
    assert b.quantities() == [["24", "2"]] * 2 + [["24", "72"]] * 2 + [[]] * 2
