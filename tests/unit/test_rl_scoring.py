"""From rollout tensors to rewards: token character spans (multi-byte characters), decoding over tool-shaped masks,
and process rewards placed at completion positions of a scripted tool rollout, through `process_advantages`."""

from __future__ import annotations

import pytest
import torch

from dsmath.generation.rollout import decode_completions, tool_output_block
from dsmath.modeling.tokenizer import train_tokenizer
from dsmath.rl import scoring
from dsmath.rl.advantages import process_advantages

# a tool completion (docs/formats.md): reasoning, a program, the interpreter's output block, more reasoning
BEFORE = "First, 3 × 4 = 12.\nLet me compute the rest with Python.\n```python\nprint('12 * 5 =', 12 * 5)\n```"
OUTPUT = tool_output_block(BEFORE, "12 * 5 = 60")  # inserted by the interpreter: loss_mask 0
AFTER = "So 60 - 6 = 54.\nThen 54 ÷ 9 = 7.\nThe answer is \\boxed{54}."
POLICY_STEPS = [("First, 3 × 4 = 12.", 1.0), ("So 60 - 6 = 54.", 1.0), ("Then 54 ÷ 9 = 7.", -1.0),
                ("The answer is \\boxed{54}.", 1.0)]  # fmt: skip
COT = "2 + 2 = 5.\nThe answer is \\boxed{54}."


def plain(text: str) -> str:
    """The same text with ASCII operators (isolates the position fix from the multi-byte decoding fix)."""
    return text.replace("×", "*").replace("÷", "/")


OPERATORS = {"unicode": lambda text: text, "ascii": plain}


# × and ÷ occur in one text (below BPE's min_frequency 2): their two UTF-8 bytes stay two tokens, as rare characters do
TEXTS = [BEFORE + OUTPUT + AFTER, plain(BEFORE + OUTPUT + AFTER)] + [COT] * 10 + [
    f"What is {a} * {b}? {a} * {b} = {a * b}. {a * b} / {b} = {a}." for a in range(1, 12) for b in range(1, 6)]
PAD = 3  # padding after each row's EOS


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, vocab_size=300)


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def batch(tok, segments: list[list[tuple[str, bool]]]):
    """Rows of (text, chosen by the policy) segments, each ended by EOS -> (ids, completion_mask, loss_mask), (N, T)
    right-padded (PAD pads at least), as `Rollout` lays them out; output segments are tokenised on their own."""
    rows = []
    for segs in segments:
        ids, policy = [], []
        for text, chosen in segs:
            piece = encode(tok, text)
            ids += piece
            policy += [chosen] * len(piece)
        rows.append((ids + [tok.eos_token_id], policy + [True]))
    t = max(len(ids) for ids, _ in rows) + PAD
    completion_ids = torch.full((len(rows), t), tok.pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros(len(rows), t, dtype=torch.long)
    loss_mask = torch.zeros(len(rows), t, dtype=torch.long)
    for i, (ids, policy) in enumerate(rows):
        completion_ids[i, : len(ids)] = torch.tensor(ids)
        completion_mask[i, : len(ids)] = 1
        loss_mask[i, : len(ids)] = torch.tensor(policy, dtype=torch.long)
    return completion_ids, completion_mask, loss_mask


def tool_batch(tok, ops=OPERATORS["unicode"]):
    """Row 0: the tool completion with its output hole; row 1: a shorter chain of thought (more padding)."""
    return batch(tok, [[(ops(BEFORE), True), (OUTPUT, False), (ops(AFTER), True)], [(COT, True)]])


def last_token_of(tok, ids: list[int], text: str, line: str) -> int:
    """Completion position of the token that completes `line` in `text` (the decoded ids), by prefix decoding."""
    end = text.index(line) + len(line)
    return next(i for i in range(len(ids)) if tok.decode(ids[: i + 1], skip_special_tokens=True).startswith(text[:end]))


# ----------------------------------------------------------------------------------------------------------------
# token spans


def test_byte_level_bpe_splits_multibyte_characters(tok):
    ids = encode(tok, "3 × 4 = 12")
    assert any("\ufffd" in tok.decode([i]) for i in ids)  # per-token decoding cannot see the operator


def test_token_spans_decode_once_and_give_multibyte_characters_to_the_completing_token(tok):
    ids = encode(tok, "So 3 × 4 = 12.\n12 ÷ 4 = 3") + [tok.eos_token_id, tok.pad_token_id]
    text, spans = scoring.token_spans(tok, ids)
    assert text == "So 3 × 4 = 12.\n12 ÷ 4 = 3" == tok.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids) and spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # contiguous
    for k in range(len(ids)):  # each token's span ends where the decoded prefix stops being incomplete
        prefix = tok.decode(ids[: k + 1], skip_special_tokens=True)
        if not prefix.endswith("\ufffd"):
            assert text[: spans[k][1]] == prefix
    for ch in "×÷":  # split over two tokens: the character belongs to the second, where its bytes complete
        k = next(k for k, (start, end) in enumerate(spans) if start <= text.index(ch) < end)
        assert spans[k][0] == text.index(ch) and tok.decode(ids[:k]).endswith("\ufffd")
    assert spans[-2:] == [(len(text), len(text))] * 2  # EOS and pad: special tokens, no text
    assert scoring._spans_of_prefixes(tok, ids, text) == spans  # the generic fallback agrees


class SentencePieceLike:
    """A tokenizer that is not byte-level ("▁" marks a space): token_spans must fall back to prefix decoding."""

    vocab = ["<eos>", "▁3", "▁×", "▁4", "▁=", "▁12"]
    all_special_ids = [0]

    def convert_ids_to_tokens(self, ids):
        return [self.vocab[i] for i in ids]

    def decode(self, ids, skip_special_tokens=False):
        pieces = [self.vocab[i] for i in ids if not (skip_special_tokens and i in self.all_special_ids)]
        return "".join(pieces).replace("▁", " ").lstrip(" ")

    def batch_decode(self, seqs, skip_special_tokens=False):
        return [self.decode(s, skip_special_tokens) for s in seqs]


def test_token_spans_fall_back_for_other_tokenizers():
    text, spans = scoring.token_spans(SentencePieceLike(), [1, 2, 3, 4, 5, 0])
    assert text == "3 × 4 = 12"
    assert spans == [(0, 1), (1, 3), (3, 5), (5, 7), (7, 10), (10, 10)]


# ----------------------------------------------------------------------------------------------------------------
# decoding and step rewards over tool-shaped masks


def test_decode_completions_over_tool_shaped_masks(tok):
    ids, completion_mask, loss_mask = tool_batch(tok)
    assert (loss_mask[0] == 0).any() and loss_mask[0, -PAD - 1 :].tolist() == [1, 0, 0, 0]  # hole, EOS, padding
    assert decode_completions(tok, ids, completion_mask) == [BEFORE + OUTPUT + AFTER, COT]
    assert decode_completions(tok, ids, loss_mask) == [BEFORE + AFTER, COT]  # the policy's tokens only


def test_step_rewards_check_multiplication_and_division_signs(tok):
    ids, completion_mask, loss_mask = batch(tok, [[("3 × 4 = 12\n12 ÷ 4 = 2", True)]])
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, completion_mask, ["0"], loss_mask=loss_mask)
    assert rewards.tolist() == [[1.0, -1.0]] and step_mask.tolist() == [[True, True]]
    text = "3 × 4 = 12\n12 ÷ 4 = 2"
    row = ids[0, completion_mask[0].bool()].tolist()
    assert ends.tolist() == [[last_token_of(tok, row, text, "3 × 4 = 12"), last_token_of(tok, row, text, "12 ÷ 4 = 2")]]


@pytest.mark.parametrize("ops", OPERATORS.values(), ids=OPERATORS.keys())
def test_step_rewards_of_a_tool_rollout_are_at_completion_positions(tok, ops):
    ids, completion_mask, loss_mask = tool_batch(tok, ops)
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, completion_mask, ["54", "54"], loss_mask=loss_mask)
    assert rewards.dtype == torch.float32 and ends.dtype == torch.long and step_mask.dtype == torch.bool
    assert rewards.shape == ends.shape == step_mask.shape == (2, 4)
    row, text = ids[0, completion_mask[0].bool()].tolist(), ops(BEFORE) + OUTPUT + ops(AFTER)
    expected = [last_token_of(tok, row, text, ops(line)) for line, _ in POLICY_STEPS]
    assert ends[0].tolist() == expected  # not shifted by the output block's length
    assert rewards[0].tolist() == [r for _, r in POLICY_STEPS]  # the output's "12 * 5 = 60" is not a step
    assert all(loss_mask[0, e] == 1 for e in expected)
    hole = (loss_mask[0] == 0) & (completion_mask[0] == 1)
    first, last = hole.nonzero()[[0, -1]].squeeze(-1).tolist()
    assert sum(e > last for e in expected) == 3 and all(not first <= e <= last for e in expected)
    assert rewards[1, :2].tolist() == [-1.0, 1.0] and step_mask[1].tolist() == [True, True, False, False]


def test_step_rewards_without_loss_mask_take_every_completion_token_as_the_policys(tok):
    ids, completion_mask, loss_mask = tool_batch(tok)
    with_output = scoring.step_rewards(tok, ids, completion_mask, ["54", "54"])
    assert with_output[0][0].tolist() == [1.0, 1.0, 1.0, -1.0, 1.0]  # the output line "12 * 5 = 60" counts here


def test_a_step_ends_on_its_last_policy_token_and_forced_steps_are_dropped(tok):
    # a line whose tail was inserted (loss_mask 0) ends on its last chosen token; a fully inserted line is no step
    ids, completion_mask, loss_mask = batch(tok, [[("1 + 1 = ", True), ("2\n", False), ("2 + 2 = 4\n", False),
                                                   ("3 + 3 = 6", True)]])  # fmt: skip
    rewards, ends, _ = scoring.step_rewards(tok, ids, completion_mask, ["0"], loss_mask=loss_mask)
    chosen = len(encode(tok, "1 + 1 = "))
    assert rewards.tolist() == [[1.0, 1.0]]
    assert ends[0, 0] == chosen - 1 and loss_mask[0, ends[0]].tolist() == [1, 1]


def test_step_rewards_of_empty_rows(tok):
    ids, completion_mask, loss_mask = batch(tok, [[("no steps here", True)], [("", True)]])
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, completion_mask, ["1", "1"], loss_mask=loss_mask)
    assert rewards.shape == (2, 1) and not step_mask.any() and ends.tolist() == [[0], [0]]


@pytest.mark.parametrize("ops", OPERATORS.values(), ids=OPERATORS.keys())
def test_process_advantages_change_exactly_at_the_step_ends_of_a_tool_rollout(tok, ops):
    ids, completion_mask, loss_mask = tool_batch(tok, ops)
    n, t = ids.shape
    rewards, ends, step_mask = scoring.step_rewards(tok, ids, completion_mask, ["54", "54"], loss_mask=loss_mask)
    adv = process_advantages(rewards, ends, step_mask, group_size=2, seq_len=t)
    assert adv.shape == (n, t)
    steps = torch.cat([adv[:, :-1] - adv[:, 1:], adv[:, -1:]], dim=1)  # step reward landing at each token
    for i in range(n):
        own = ends[i, step_mask[i]].tolist()
        assert steps[i].nonzero().squeeze(-1).tolist() == own  # the advantage changes at each step's end token only
        assert (adv[i, max(own) + 1 :] == 0).all()  # EOS and padding after the last step
    row, text = ids[0, completion_mask[0].bool()].tolist(), ops(BEFORE) + OUTPUT + ops(AFTER)
    after_tool = [last_token_of(tok, row, text, ops(line)) for line, _ in POLICY_STEPS[1:]]
    hole = ((loss_mask[0] == 0) & (completion_mask[0] == 1)).nonzero().squeeze(-1)
    assert set(after_tool) <= set(ends[0].tolist()) and min(after_tool) > int(hole.max())
    assert (steps[0, hole] == 0).all()  # no reward inside the output block
    right, wrong = steps[0, after_tool[0]], steps[0, after_tool[1]]  # "60 - 6 = 54" right, "54 ÷ 9 = 7" wrong
    assert right > 0 > wrong
    assert torch.allclose(adv[0, hole], adv[0, int(hole.max()) + 1].expand(len(hole)))  # flat through the hole
