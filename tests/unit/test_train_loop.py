"""The accelerate training loop: loss, optimizer, schedule, learning, determinism, accumulation, resume."""

from __future__ import annotations

import math

import pytest
import torch

from dsmath.config import Loop, Model, Optim
from dsmath.modeling.model import build_scratch
from dsmath.train import checkpoint
from dsmath.train.data import causal_batch
from dsmath.train.loop import batch_nll, build_optimizer, build_scheduler, make_accelerator, token_nll, train

VOCAB = 32


class FakeTokenizer:
    pad_token_id, eos_token_id = 0, 1

    def __len__(self):
        return VOCAB


def tiny_model(seed: int = 0):
    cfg = Model(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32)
    return build_scratch(cfg, FakeTokenizer(), seed)


def rows_data(n: int = 64, t: int = 12) -> torch.Tensor:
    """A learnable toy language: each row counts up modulo VOCAB from a random start."""
    start = torch.randint(0, VOCAB, (n, 1), generator=torch.Generator().manual_seed(0))
    return (start + torch.arange(t)) % VOCAB


def run(tmp_path=None, steps=30, micro=8, ckpt_every=0, fail_at_call=None, seed=0, fp="x", keep=1):
    blocks, calls = rows_data(), [0]

    def make_batch(rows):
        calls[0] += 1
        if fail_at_call is not None and calls[0] == fail_at_call:
            raise KeyboardInterrupt("simulated kill")
        return causal_batch(blocks[list(rows)])

    loop = Loop(
        max_steps=steps,
        global_batch_size=8,
        micro_batch_size=micro,
        seq_len=12,
        checkpoint_every=ckpt_every,
        keep_checkpoints=keep,
        log_every=5,
        optim=Optim(lr=1e-2, warmup_steps=3),
    )
    return train(
        tiny_model(seed),
        loop,
        make_batch,
        len(blocks),
        seed,
        make_accelerator("cpu"),
        ckpt_dir=tmp_path,
        fingerprint=fp,
    )


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_token_nll_hand_computed():
    # position 0 predicts label[1] = 1 with logits [0, ln 3]: p = 3/4 -> nll = ln(4/3); position 1 is masked
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 0.0], [0.0, 0.0]]])
    labels = torch.tensor([[0, 1, -100]])
    nll, count = token_nll(logits, torch.eye(2), labels)  # hidden = logits under an identity head
    torch.testing.assert_close(nll, torch.tensor(math.log(4 / 3)))
    assert int(count) == 1


def test_weight_decay_only_on_matrices():
    model = tiny_model()
    decay, no_decay = build_optimizer(model, Optim(weight_decay=0.1)).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])


def test_warmup_then_cosine_to_min_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, Optim(lr=1.0, warmup_steps=2, min_lr_ratio=0.1), max_steps=10)
    lrs = []
    for _ in range(11):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    # warmup 0, 1/2, 1; step 6 is half-way through the cosine: 0.1 + 0.9 * 0.5 = 0.55; step 10 ends at 0.1
    torch.testing.assert_close(
        torch.tensor([lrs[0], lrs[1], lrs[2], lrs[6], lrs[10]]), torch.tensor([0.0, 0.5, 1.0, 0.55, 0.1])
    )


def test_training_lowers_the_loss_and_moves_every_parameter():
    before = dict(tiny_model().named_parameters())
    model, state = run(steps=60)
    assert state.step == 60 and len(state.history) == 12  # one record per 5 steps
    assert state.history[-1]["loss"] < 0.5 * state.history[0]["loss"]
    still = [n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n].detach())]
    assert still == []
    assert state.tokens == 60 * 8 * 12


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = run(steps=10)[0], run(steps=10)[0], run(steps=10, seed=1)[0]
    assert torch.equal(flat(a), flat(b))
    assert not torch.equal(flat(a), flat(c))


def test_gradient_accumulation_matches_one_big_batch():
    big, small = run(steps=10, micro=8)[0], run(steps=10, micro=2)[0]
    torch.testing.assert_close(flat(big), flat(small), rtol=1e-4, atol=1e-5)


def test_interrupted_run_resumes_to_identical_weights(tmp_path):
    reference, ref_state = run(steps=20)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, steps=20, ckpt_every=5, fail_at_call=13)  # dies in step 13, after the step-10 checkpoint
    assert [p.name for p in checkpoint.step_dirs(tmp_path)] == ["step-000010"]
    resumed, state = run(tmp_path, steps=20, ckpt_every=5)
    assert state.resumed_from == 10 and state.step == 20
    assert torch.equal(flat(resumed), flat(reference))
    assert [h["loss"] for h in state.history] == pytest.approx([h["loss"] for h in ref_state.history], rel=1e-6)


def test_checkpoint_of_other_params_is_discarded(tmp_path):
    run(tmp_path, steps=10, ckpt_every=5, fp="params-A")
    (tmp_path / ".tmp-step-000015").mkdir()  # leftover of a write killed half-way
    _, state = run(tmp_path, steps=10, ckpt_every=5, fp="params-B")
    assert state.resumed_from == 0
    assert not (tmp_path / ".tmp-step-000015").exists()
    assert checkpoint.latest(tmp_path, "params-A:world=1") is None


def test_right_padding_needs_no_attention_mask():
    from dsmath.train.data import pad_batch

    model = tiny_model().eval()
    a, b = [5, 6, 7, 8, 9, 10], [11, 12, 13]
    batch = pad_batch([(a, a), (b, b)], pad_id=0)
    with torch.no_grad():
        padded, n = batch_nll(model, batch)
        alone = [batch_nll(model, {"input_ids": torch.tensor([x]), "labels": torch.tensor([x])})[0] for x in (a, b)]
    assert int(n) == 5 + 2
    torch.testing.assert_close(padded, alone[0] + alone[1])


def test_pack_batch_layout_by_hand():
    from dsmath.train.data import IGNORE, pack_batch

    a, b, c = ([5, 6, 7, 8], [IGNORE, IGNORE, 7, 8]), ([9, 10], [IGNORE, 10]), ([11, 12, 13], [IGNORE, 12, 13])
    batch = pack_batch([a, b, c], pad_id=0, capacity=6)
    # first-fit decreasing: a (4) opens row 0, c (3) opens row 1, b (2) fits row 0's last two slots
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 4, 5]]
    assert batch["labels"].tolist() == [[IGNORE, IGNORE, 7, 8, IGNORE, 10], [IGNORE, 12, 13, IGNORE, IGNORE, IGNORE]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    with pytest.raises(ValueError, match="does not fit"):
        pack_batch([a], pad_id=0, capacity=3)


def _sft_examples(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Examples of 3-11 tokens: a 2-4 token 'prompt' (no loss) and a counting 'response' (loss)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p, r = int(torch.randint(2, 5, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        ids = torch.randint(2, VOCAB, (p + r,), generator=g).tolist()
        out.append((ids, [-100] * p + ids[p:]))
    return out


def test_packed_batch_has_the_loss_and_gradient_of_the_padded_one():
    """Attention stays within each packed example and positions restart: the same summed NLL over the same
    targets, and the same gradient, as the right-padded batch (up to floating-point order)."""
    from dsmath.train.data import pack_batch, pad_batch

    examples = _sft_examples(12)
    padded, packed = pad_batch(examples, pad_id=0), pack_batch(examples, pad_id=0, capacity=16)
    assert packed["input_ids"].shape[0] < len(examples)  # it did pack
    assert int(packed["attention_mask"].sum()) == int(padded["attention_mask"].sum())
    results = []
    for batch in (padded, packed):
        model = tiny_model()
        nll, n = batch_nll(model, batch)
        nll.backward()
        results.append((nll.detach(), int(n), flat_grad(model)))
    assert results[0][1] == results[1][1]
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][2], results[0][2], rtol=1e-4, atol=1e-6)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_packed_training_follows_the_padded_run():
    """The loop trains on packed micro-batches (position ids passed on): weights end where the padded run's do."""
    from dsmath.train.data import pack_batch, pad_batch

    examples = _sft_examples(64, seed=1)
    loop = Loop(max_steps=6, global_batch_size=16, micro_batch_size=8, seq_len=24, checkpoint_every=0, log_every=3,
                optim=Optim(lr=1e-2, warmup_steps=2))
    ends = []
    for make in (lambda rows: pad_batch([examples[i] for i in rows], 0),
                 lambda rows: pack_batch([examples[i] for i in rows], 0, 24)):
        model, state = train(tiny_model(), loop, make, len(examples), 0, make_accelerator("cpu"))
        ends.append((flat(model), [r["loss"] for r in state.history]))
    torch.testing.assert_close(ends[1][0], ends[0][0], rtol=1e-4, atol=1e-5)
    assert ends[1][1] == pytest.approx(ends[0][1], rel=1e-5)
