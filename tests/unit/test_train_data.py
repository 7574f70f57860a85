"""Packing, SFT batches, style mix and the step -> rows schedule (the resume and DDP guarantees rest on it)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from dsmath.train import data


class CharTokenizer:
    """One token per character (ord), EOS = 0: lets the tests write expected ids by hand."""

    eos_token_id = 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[ord(c) for c in t] for t in texts]}


def test_pack_docs_separates_documents_with_eos_and_cuts_blocks():
    blocks = data.pack_docs(["ab", "cde", "f"], CharTokenizer(), seq_len=3, max_blocks=10)
    # stream: a b EOS c d e EOS f EOS  (9 tokens) -> 3 blocks of 3
    a, b, c, d, e, f = (ord(x) for x in "abcdef")
    torch.testing.assert_close(blocks, torch.tensor([[a, b, 0], [c, d, e], [0, f, 0]]))


def test_pack_docs_drops_the_tail_and_stops_at_max_blocks():
    blocks = data.pack_docs(["abcd"] * 100, CharTokenizer(), seq_len=4, max_blocks=3, chunk=2)
    assert blocks.shape == (3, 4)
    assert data.pack_docs(["abcdefg"], CharTokenizer(), seq_len=3, max_blocks=9).shape == (2, 3)  # 8 tokens -> 2


def test_pack_docs_refuses_a_corpus_shorter_than_one_block():
    with pytest.raises(ValueError, match="corpus too small"):
        data.pack_docs(["ab"], CharTokenizer(), seq_len=8, max_blocks=1)


def test_split_heldout_is_seeded_disjoint_and_capped_at_half():
    docs = [{"id": i} for i in range(10)]
    train, held = data.split_heldout(docs, 3, seed=7)
    assert len(held) == 3 and len(train) == 7
    assert {d["id"] for d in train}.isdisjoint(d["id"] for d in held)
    assert data.split_heldout(docs, 3, seed=7) == (train, held)
    assert len(data.split_heldout(docs, 100, seed=7)[1]) == 5


def test_pad_batch_right_pads_and_masks():
    b = data.pad_batch([([5, 6, 7], [-100, 6, 7]), ([8], [8])], pad_id=0)
    torch.testing.assert_close(b["input_ids"], torch.tensor([[5, 6, 7], [8, 0, 0]]))
    torch.testing.assert_close(b["attention_mask"], torch.tensor([[1, 1, 1], [1, 0, 0]]))
    torch.testing.assert_close(b["labels"], torch.tensor([[-100, 6, 7], [8, -100, -100]]))


def test_assign_modes_follows_the_mix_and_skips_zero_shares():
    modes = data.assign_modes(6000, {"cot": 0.5, "pot": 0.0, "tool": 0.25}, seed=1)
    counts = Counter(modes)
    assert "pot" not in counts
    assert abs(counts["cot"] / 6000 - 2 / 3) < 0.03  # 0.5 / (0.5 + 0.25)
    assert modes == data.assign_modes(6000, {"cot": 0.5, "pot": 0.0, "tool": 0.25}, seed=1)


def test_sft_examples_drop_too_long_examples():
    from dsmath.modeling.tokenizer import train_tokenizer

    tok = train_tokenizer(["What is 1 + 1? 1 + 1 = 2. The answer is \\boxed{2}."] * 10, vocab_size=300)
    rec = {"question": "What is 1 + 1?", "cot": "1 + 1 = 2.\nThe answer is \\boxed{2}.", "pot": "print(2)", "tool": "x"}
    ((ids, labels),) = data.sft_examples([rec], ["cot"], tok, max_len=1000)
    assert ids[-1] == tok.eos_token_id and labels[0] == data.IGNORE
    assert data.sft_examples([rec], ["cot"], tok, max_len=len(ids) - 1) == []


def test_schedule_visits_every_row_once_per_epoch_and_is_seeded():
    s = data.StepSchedule(n_rows=12, global_batch=4, micro_batch=4, seed=3)
    epoch = [r for step in range(3) for r in s.rows(step)]
    assert sorted(epoch) == list(range(12))
    assert sorted(r for step in range(3, 6) for r in s.rows(step)) == list(range(12))
    assert [r for step in range(3, 6) for r in s.rows(step)] != epoch  # a new permutation each epoch
    assert data.StepSchedule(12, 4, 4, seed=3).rows(5) == s.rows(5)  # pure function of (step, seed)
    assert data.StepSchedule(12, 4, 4, seed=4).rows(0) != s.rows(0)


def test_processes_share_the_same_global_batch():
    s = data.StepSchedule(n_rows=50, global_batch=8, micro_batch=2, seed=0)
    one = s.micro_batches(4, rank=0, world=1)
    two = [s.micro_batches(4, rank=r, world=2) for r in range(2)]
    assert len(one) == 4 and all(len(m) == 2 for m in one)
    assert [r for m in one for r in m] == [r for rank in two for m in rank for r in m] == s.rows(4)


def test_schedule_refuses_uneven_splits():
    with pytest.raises(ValueError, match="not divisible by 3 processes"):
        data.StepSchedule(10, 8, 2, 0).micro_batches(0, 0, 3)
    with pytest.raises(ValueError, match="does not divide the per-process batch 6"):
        data.StepSchedule(10, 6, 4, 0).micro_batches(0, 0, 1)


def test_lengths_group_similar_rows_without_changing_the_share():
    s = data.StepSchedule(n_rows=16, global_batch=8, micro_batch=2, seed=5)
    lengths = [(7 * r) % 16 for r in range(16)]  # a permutation of 0..15
    plain, grouped = s.micro_batches(2, 1, 2), s.micro_batches(2, 1, 2, lengths)
    assert sorted(r for m in grouped for r in m) == sorted(r for m in plain for r in m)  # same rows for this rank
    flat = [lengths[r] for m in grouped for r in m]
    assert flat == sorted(flat)


# ---------------------------------------------------------------------------------------------------------------
# which problems SFT and RL learn from (sft.levels, sft.max_examples, rl.prompt_levels)

def _problems(levels: list[int]) -> list[dict]:
    return [{"id": f"p{i}", "level": lv} for i, lv in enumerate(levels)]


def test_sft_records_keeps_the_chosen_levels_in_order_then_caps_them():
    from dsmath.train.sft import sft_records

    records = _problems([1, 3, 2, 3, 1, 2])
    assert [r["id"] for r in sft_records(records, [1, 2], 0)] == ["p0", "p2", "p4", "p5"]
    assert [r["id"] for r in sft_records(records, [1, 2], 3)] == ["p0", "p2", "p4"]
    assert sft_records(records, [], 0) == records
    assert [r["id"] for r in sft_records(records, [], 2)] == ["p0", "p1"]


def test_sft_records_refuses_levels_the_world_does_not_have():
    from dsmath.train.sft import sft_records

    with pytest.raises(ValueError, match=r"^sft.levels \[4\] selects none .* \(its levels: \[1, 2\]\)"):
        sft_records(_problems([1, 2, 2]), [4], 0)


def test_rl_problems_takes_prompt_levels_and_refuses_an_empty_selection(tmp_path):
    import json

    from dsmath.config import parse_params
    from dsmath.rl.run import rl_problems

    for split, levels in (("train", [1, 3, 2, 3]), ("val", [1, 2])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _problems(levels)))
    params = parse_params({"common": {"paths": {"synthetic": str(tmp_path)}}, "rl": {"prompt_levels": [3]}})
    train, probe = rl_problems(params)
    assert [r["id"] for r in train] == ["p1", "p3"] and len(probe) == 2
    params = parse_params({"common": {"paths": {"synthetic": str(tmp_path)}}, "rl": {"prompt_levels": [5]}})
    with pytest.raises(ValueError, match=r"^rl.prompt_levels \[5\] selects none .* \(its levels: \[1, 2, 3\]\)"):
        rl_problems(params)
