"""Training data: packed causal-LM blocks, SFT examples, and the deterministic step -> rows schedule.

The schedule is a pure function of (step, seed): the rows of optimizer step ``s`` are positions
``s*B .. s*B+B-1`` of the concatenation of per-epoch permutations. Each process takes its contiguous share, so
1 and N processes see the same global batch, and the data position of a checkpoint is just its step.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import torch

from dsmath.modeling import prompts

IGNORE = -100  # label of a position that carries no loss


def split_heldout(docs: Sequence[dict], n_heldout: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, heldout): a seeded shuffle of `docs`, the first `n_heldout` held out (at most half the docs)."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    k = min(n_heldout, len(docs) // 2)
    return [docs[i] for i in order[k:]], [docs[i] for i in order[:k]]


def pack_docs(texts: Iterable[str], tokenizer, seq_len: int, max_blocks: int, chunk: int = 256) -> torch.Tensor:
    """Concatenate documents, each followed by EOS, and cut into blocks.

    Tokenises lazily, `chunk` documents at a time, stopping once `max_blocks` blocks are filled (the tail that
    does not fill a block is dropped). Returns int64 ``(N, seq_len)`` with ``N <= max_blocks``.
    """
    need = max_blocks * seq_len
    stream: list[int] = []
    buf: list[str] = []

    def flush() -> None:
        for ids in tokenizer(buf, add_special_tokens=False)["input_ids"]:
            stream.extend(ids)
            stream.append(tokenizer.eos_token_id)
        buf.clear()

    for text in texts:
        buf.append(text)
        if len(buf) == chunk:
            flush()
            if len(stream) >= need:
                break
    if buf and len(stream) < need:
        flush()
    n = min(len(stream) // seq_len, max_blocks)
    if n == 0:
        raise ValueError(f"corpus too small: {len(stream)} tokens, one block needs seq_len={seq_len}")
    return torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)


def causal_batch(blocks: torch.Tensor) -> dict[str, torch.Tensor]:
    """Packed blocks (B, T) -> model inputs; every token is a target (documents are separated by EOS)."""
    return {"input_ids": blocks, "labels": blocks}


# ----------------------------------------------------------------------------------------------------------------
# SFT


def assign_modes(n: int, mix: Mapping[str, float], seed: int) -> list[str]:
    """A solution style per problem, drawn with probabilities proportional to `mix` ({'cot': .6, ...})."""
    modes = [m for m in prompts.MODES if mix.get(m, 0) > 0]
    weights = [mix[m] for m in modes]
    return random.Random(seed).choices(modes, weights=weights, k=n)


def sft_examples(
    records: Sequence[dict], modes: Sequence[str], tokenizer, max_len: int
) -> list[tuple[list[int], list[int]]]:
    """Token ids and labels of one SFT example per (record, mode); examples longer than `max_len` are dropped."""
    pairs = list(zip(records, modes, strict=True))
    texts = [prompts.format_prompt(rec["question"], mode, tokenizer) for rec, mode in pairs]
    examples = prompts.sft_ids_batch(texts, [rec[mode] for rec, mode in pairs], tokenizer)
    return [(ids, labels) for ids, labels in examples if len(ids) <= max_len]


def pad_batch(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a list of (ids, labels) to the longest: input_ids, attention_mask, labels, each (B, T_max).

    Right padding keeps every real token before every pad, so a causal model needs no padding mask for training.
    """
    t = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), t), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), t), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), t), dtype=torch.long)
    for i, (x, y) in enumerate(examples):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def pack_batch(examples: Sequence[tuple[list[int], list[int]]], pad_id: int, capacity: int) -> dict[str, torch.Tensor]:
    """Pack (ids, labels) examples into rows of at most `capacity` tokens: input_ids, position_ids, labels,
    attention_mask (1 on real tokens; for counting only), each (R, T) with R <= len(examples), T <= capacity.

    First-fit decreasing by length (ties by order: deterministic). Position ids restart at 0 with every example,
    which is what makes a causal model attend only within each example (HF detects packed rows from their position
    ids when no attention mask is given, the flash-attention convention) and see the positions it would alone. Each
    example's first label is IGNORE, so no example's last token is trained to predict the next example's first:
    the targets (and, up to floating-point order, the loss and its gradient) are exactly those of `pad_batch`.
    """
    rows: list[list[int]] = []  # example indices per row
    room: list[int] = []
    for i in sorted(range(len(examples)), key=lambda i: (-len(examples[i][0]), i)):
        n = len(examples[i][0])
        if n > capacity:
            raise ValueError(f"an example of {n} tokens does not fit a packed row of {capacity}")
        row = next((r for r, free in enumerate(room) if free >= n), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= n
    t = max(capacity - free for free in room)
    ids = torch.full((len(rows), t), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), t), IGNORE, dtype=torch.long)
    pos = torch.zeros((len(rows), t), dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            x, y = examples[i]
            n = len(x)
            ids[r, at : at + n] = torch.tensor(x)
            labels[r, at + 1 : at + n] = torch.tensor(y[1:n])
            pos[r, at : at + n] = torch.arange(n)
            mask[r, at : at + n] = 1
            at += n
        pos[r, at:] = torch.arange(t - at) + (pos[r, at - 1] + 1 if at else 0)  # pads continue the last example
    return {"input_ids": ids, "position_ids": pos, "labels": labels, "attention_mask": mask}


# ----------------------------------------------------------------------------------------------------------------
# the schedule


class StepSchedule:
    """Which rows each process trains on at each step; a pure function of (step, seed), so resumable by step."""

    def __init__(self, n_rows: int, global_batch: int, micro_batch: int, seed: int):
        if n_rows < 1:
            raise ValueError("no training rows")
        self.n, self.global_batch, self.micro_batch, self.seed = n_rows, global_batch, micro_batch, seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms = {epoch: torch.randperm(self.n, generator=g).tolist()}  # keep one epoch in memory
        return self._perms[epoch]

    def rows(self, step: int) -> list[int]:
        """The global batch of `step`: `global_batch` row indices."""
        start = step * self.global_batch
        return [self._perm(p // self.n)[p % self.n] for p in range(start, start + self.global_batch)]

    def micro_batches(self, step: int, rank: int, world: int, lengths: Sequence[int] | None = None) -> list[list[int]]:
        """This process's share of `step`, cut into micro-batches (per-process batch = global / world).

        With `lengths` (per row), the share is sorted by length first, so each padded micro-batch holds rows of
        similar length (less padding; the step's gradient is a sum over rows, so it does not change).
        """
        if self.global_batch % world:
            raise ValueError(f"global_batch_size={self.global_batch} is not divisible by {world} processes")
        per = self.global_batch // world
        micro = min(self.micro_batch, per)
        if per % micro:
            raise ValueError(f"micro_batch_size={micro} does not divide the per-process batch {per}")
        mine = self.rows(step)[rank * per : (rank + 1) * per]
        if lengths is not None:
            mine = sorted(mine, key=lambda r: (lengths[r], r))
        return [mine[i : i + micro] for i in range(0, per, micro)]


def at_levels(records: list[dict], levels: list[int], what: str) -> list[dict]:
    """The synthetic records at `levels` (all when empty), in order; a selection that leaves none is refused, naming
    the param `what` and the levels the records have (a params mistake, not an empty run)."""
    chosen = [r for r in records if not levels or r["level"] in levels]
    if not chosen:
        have = sorted({r["level"] for r in records})
        raise ValueError(f"{what} {sorted(levels)} selects none of the train split's problems (its levels: {have})")
    return chosen
