"""Rollouts for GRPO and evaluation: batched sampling that records per-token log-probs.

:func:`sample` decodes N prompts at once (left-padded, KV cache, temperature / top-p, stop at EOS or
``max_new_tokens``) on the fastest engine of :mod:`dsmath.generation.engines` that supports the model, and returns a
:class:`Rollout`; :mod:`dsmath.generation.logprobs` scores given completions (reference model, training forward).
With a :class:`ToolMode`, a row that closes a ```` ```python ```` block is paused, the code runs through the caller's
``tool_fn``, and the row continues after the appended ```` ```output ```` block (docs/formats.md, ``tool``).

Log-prob convention (what ``Rollout.logprobs`` holds, and what ``logprobs.sequence_logprobs`` computes):
``log_softmax(logits / temperature)[token]`` over the full vocabulary, *before* top-p truncation; temperature 1 when
decoding greedily. This is pi_old of the GRPO ratio (DeepSeekMath eq. 3) provided the trainer scores pi_theta with
``sequence_logprobs`` at the same temperature (as verl and TRL do): the ratio then compares one and the same
distribution family. Top-p is left out because the training forward cannot reproduce the truncation differentiably;
a sampled token always lies inside the nucleus, so its full-vocabulary log-prob is finite.

pi_old comes from the sampling pass itself, not from a second scoring pass: the sampler's cached decoding computes the
same function as a full forward (checked to 1e-4 in tests/unit/test_logprobs.py), so a scoring pass would cost one more
forward over every completion for the same numbers. Rescore with ``sequence_logprobs`` when sampling runs in a
different precision or on a different engine than training (e.g. bf16 kernels), where the two drift apart.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from dsmath.generation.engines import make_engine
from dsmath.generation.sampling import RowNoise, sample_next

CODE_OPEN, FENCE = "```python", "```"


@dataclass
class Rollout:
    """N sampled completions. P: longest prompt, T: longest completion (<= max_new_tokens).

    prompt_ids, prompt_mask: (N, P) left-padded; completion_ids: (N, T) right-padded with pad_token_id;
    completion_mask: (N, T) 1 on every generated or tool-inserted token up to and including EOS;
    loss_mask: (N, T) completion_mask without tool-output tokens (the tokens the policy chose);
    logprobs: (N, T) log-probs of the sampled tokens (module docstring), 0 where loss_mask is 0;
    finished: (N,) True where the row stopped at EOS (False: cut by max_new_tokens); tool_calls: (N,) calls made.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    loss_mask: torch.Tensor
    logprobs: torch.Tensor
    finished: torch.Tensor
    tool_calls: torch.Tensor

    def select(self, rows: torch.Tensor | Sequence[int]) -> Rollout:
        """The rollout of the given rows only (same widths P and T)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.prompt_ids.device)
        return Rollout(*(getattr(self, f.name)[idx] for f in fields(self)))

    @property
    def input_ids(self) -> torch.Tensor:
        """(N, P + T) prompt then completion, as ``logprobs.sequence_logprobs`` takes them."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """(N, P + T) 1 on real tokens."""
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


@dataclass(frozen=True)
class ToolMode:
    """Tool-integrated decoding: ``tool_fn(codes) -> outputs`` runs a batch of programs (one string each).

    tokenizer: decodes a row's text to find closed code blocks and encodes the output block;
    max_calls: tool calls per row (later code blocks get no output); max_output_chars: output text kept per call.
    """

    tool_fn: Callable[[list[str]], list[str]]
    tokenizer: Any
    max_calls: int = 4
    max_output_chars: int = 1000


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int,
             device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids, mask), both (N, P) with P the longest prompt, padding on the left."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts: need at least one prompt, each with at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def unique_prompts(prompt_ids: torch.Tensor,
                   prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct rows of a left-padded prompt batch (N, P): (ids (U, P), mask (U, P), inverse (N,)) with
    ``ids[inverse] == prompt_ids``; the rows of a GRPO group share one prompt, so U is N / G there."""
    both = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    uniq, inverse = torch.unique(both, dim=0, return_inverse=True)
    p = prompt_ids.shape[1]
    return uniq[:, :p], uniq[:, p:].to(prompt_mask.dtype), inverse


def concat_rollouts(parts: Sequence[Rollout], pad_token_id: int) -> Rollout:
    """Rows of several rollouts in one: prompts re-padded on the left to the widest P, completions (and their masks
    and log-probs) on the right to the widest T. Each row's tokens, masks and log-probs are unchanged."""
    if not parts:
        raise ValueError("concat_rollouts: need at least one rollout")
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.completion_ids.shape[1] for r in parts)

    def pad(x: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
        extra = width - x.shape[1]
        return torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value) if extra else x

    return Rollout(
        torch.cat([pad(r.prompt_ids, p, pad_token_id, True) for r in parts]),
        torch.cat([pad(r.prompt_mask, p, 0, True) for r in parts]),
        torch.cat([pad(r.completion_ids, t, pad_token_id, False) for r in parts]),
        torch.cat([pad(r.completion_mask, t, 0, False) for r in parts]),
        torch.cat([pad(r.loss_mask, t, 0, False) for r in parts]),
        torch.cat([pad(r.logprobs, t, 0.0, False) for r in parts]),
        torch.cat([r.finished for r in parts]),
        torch.cat([r.tool_calls for r in parts]),
    )


# ----------------------------------------------------------------------------------------------------------------
# sampling


def sample(model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, eos_token_id: int | Sequence[int],
           pad_token_id: int, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
           row_keys: Sequence[int] | None = None, tool: ToolMode | None = None, engine: str = "auto",
           dtype: torch.dtype | None = None, compact_frac: float = 0.25, share_prompts: bool = False) -> Rollout:
    """Sample one completion per prompt (repeat a prompt G times for a GRPO group); returns a :class:`Rollout`.

    temperature 0 decodes greedily; sampling needs a `seed`. A row's draws depend only on (seed, its key in
    `row_keys`, default its index): the same row key and seed give the same completion whatever else is in the
    batch, so a batch split over processes (keys = global row indices) samples what one process would.
    engine: ``auto`` (the fast Llama engine when the model supports it, else ``hf``), ``fast`` or ``hf``;
    dtype: decoding precision (None: the model's). Every tensor lives on the model's device.
    compact_frac: drop finished rows from the batch (and cache) once they make up this fraction of it.
    share_prompts: prefill each distinct prompt once and copy its cache to the rows that repeat it (a GRPO group);
    the same draws up to floating-point order.
    """
    if max_new_tokens < 1 or temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need max_new_tokens >= 1, temperature >= 0, 0 < top_p <= 1 "
                         f"(got {max_new_tokens}, {temperature}, {top_p})")
    if temperature > 0 and seed is None:
        raise ValueError("sampling (temperature > 0) needs a seed")
    device = model.device
    prompt_ids, prompt_mask = left_pad(prompts, pad_token_id, device)
    n = len(prompts)
    noise = None if temperature == 0 else RowNoise(seed, range(n) if row_keys is None else row_keys)
    eos = torch.as_tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id),
                          dtype=torch.long, device=device)
    out = _Outputs(n, max_new_tokens, pad_token_id, device)
    tools = _ToolState(tool, n, model.config.vocab_size, device) if tool is not None else None
    with torch.inference_mode():
        dec = make_engine(model, n, prompt_ids.shape[1] + max_new_tokens, engine, dtype)
        uids, umask, inverse = unique_prompts(prompt_ids, prompt_mask) if share_prompts else (prompt_ids, None, None)
        logits = (dec.prefill(prompt_ids, prompt_mask) if len(uids) == n else dec.prefill(uids, umask, inverse))
        rows = torch.arange(n, device=device)  # batch row -> prompt index (the batch shrinks as rows finish)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        for t in range(max_new_tokens):
            tokens, logps = sample_next(logits, temperature, top_p, None if noise is None else noise.uniform(t, rows))
            tokens, done = _record_step(out, tools, rows, t, tokens, logps, done, eos)
            if t == max_new_tokens - 1 or bool(done.all()):
                break
            n_done = int(done.sum())
            if n_done and n_done >= compact_frac * len(done):
                keep = (~done).nonzero().squeeze(-1)
                dec.keep(keep)
                rows, tokens, done = rows[keep], tokens[keep], done[keep]
            logits = dec.step(tokens)
    return out.rollout(prompt_ids, prompt_mask, tools)


def decode_completions(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """(N, T) ids and mask -> N strings (special tokens such as EOS dropped)."""
    return [tokenizer.decode(ids[m.bool()].tolist(), skip_special_tokens=True)
            for ids, m in zip(completion_ids.cpu(), mask.cpu(), strict=True)]


def _record_step(out: _Outputs, tools: _ToolState | None, rows, t: int, tokens, logps, done, eos):
    """Step t's bookkeeping for the batch (all (n,)): tool-output tokens replace sampled ones, live rows are
    written, rows that sampled EOS finish, closed code blocks run. Returns the tokens to feed and the new done."""
    forced = torch.zeros_like(done)
    if tools is not None:
        tokens, logps, forced = tools.force(rows, tokens, logps)
    live = ~done
    out.write(rows, t, tokens, logps, forced, live)
    stopped = torch.isin(tokens, eos) & ~forced & live
    out.finished[rows[stopped]] = True
    if tools is not None:
        tools.after_step(rows, t, tokens, live & ~stopped & ~forced, out)
    return tokens, done | stopped


class _Outputs:
    """Per-prompt output buffers (N, max_new_tokens), written one step at a time for the rows still running."""

    def __init__(self, n: int, t: int, pad_token_id: int, device):
        self.ids = torch.full((n, t), pad_token_id, dtype=torch.long, device=device)
        self.mask = torch.zeros(n, t, dtype=torch.long, device=device)
        self.loss_mask = torch.zeros(n, t, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(n, t, dtype=torch.float32, device=device)
        self.finished = torch.zeros(n, dtype=torch.bool, device=device)

    def write(self, rows, t, tokens, logps, forced, live) -> None:
        """Step t's token of every live batch row; rows, tokens, logps, forced, live: (n,)."""
        r = rows[live]
        self.ids[r, t] = tokens[live]
        self.mask[r, t] = 1
        self.loss_mask[r, t] = (~forced[live]).long()
        self.logprobs[r, t] = torch.where(forced[live], 0.0, logps[live].float())

    def rollout(self, prompt_ids, prompt_mask, tools) -> Rollout:
        t = max(int(self.mask.sum(-1).max()), 0)
        calls = torch.tensor(tools.calls if tools is not None else [0] * len(self.ids), dtype=torch.long)
        return Rollout(prompt_ids, prompt_mask, self.ids[:, :t], self.mask[:, :t], self.loss_mask[:, :t],
                       self.logprobs[:, :t], self.finished, calls.to(self.ids.device))


# ----------------------------------------------------------------------------------------------------------------
# tool-integrated mode: text-level splice (pure) and the per-row state machine


def closed_code_block(text: str) -> str | None:
    """The program of the last ```` ```python ```` block of `text` once its closing fence is there, else None."""
    start = text.rfind(CODE_OPEN)
    if start < 0:
        return None
    body = start + len(CODE_OPEN)
    close = text.find(FENCE, body)
    return None if close < 0 else text[body:close].strip("\n")


def tool_output_block(preceding: str, output: str) -> str:
    """The ```` ```output ```` block appended after a closed code block (docs/formats.md, ``tool``).

    ``"\\n```output\\n{output}\\n```\\n"``, without the leading newline when `preceding` already ends with one.
    """
    lead = "" if preceding.endswith("\n") else "\n"
    return f"{lead}```output\n{output.strip()}\n```\n"


_BACKTICKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {vocab size: table}


def _backtick_table(tokenizer, vocab_size: int) -> torch.Tensor:
    """(vocab_size,) bool: which token ids decode to text containing a backtick (cached per tokenizer)."""
    per_tok = _BACKTICKS.setdefault(tokenizer, {})
    if vocab_size not in per_tok:
        known = min(vocab_size, len(tokenizer)) if hasattr(tokenizer, "__len__") else vocab_size
        pieces = tokenizer.batch_decode([[i] for i in range(known)]) + [""] * (vocab_size - known)
        per_tok[vocab_size] = torch.tensor(["`" in s for s in pieces], dtype=torch.bool)
    return per_tok[vocab_size]


class _ToolState:
    """Which rows owe forced (tool-output) tokens, where each row's unscanned text starts, and calls made."""

    def __init__(self, mode: ToolMode, n: int, vocab_size: int, device):
        self.mode = mode
        self.queue: list[list[int]] = [[] for _ in range(n)]
        self.segment = [0] * n  # completion index after the last output block: text before it is never rescanned
        self.calls = [0] * n
        # a block can only close on a token that contains a backtick: the cheap test that gates decoding
        self.backtick = _backtick_table(mode.tokenizer, vocab_size).to(device)

    def force(self, rows, tokens, logps):
        """Replace the sampled token of every row with queued output tokens by the next of them; (n,) each."""
        forced = torch.zeros_like(tokens, dtype=torch.bool)
        if not any(self.queue):
            return tokens, logps, forced
        tokens = tokens.clone()
        for i, r in enumerate(rows.tolist()):
            if self.queue[r]:
                tokens[i] = self.queue[r].pop(0)
                forced[i] = True
        return tokens, logps, forced

    def after_step(self, rows, t: int, tokens, live, out: _Outputs) -> None:
        """After step t: run the code of every live row whose sampled token closed a python block, queue outputs."""
        candidates = (live & self.backtick[tokens]).nonzero().squeeze(-1).tolist()
        found: list[tuple[int, str, str]] = []  # (prompt index, text so far, code)
        for i in candidates:
            r = int(rows[i])
            if self.calls[r] >= self.mode.max_calls:
                continue
            text = self.mode.tokenizer.decode(out.ids[r, self.segment[r]: t + 1].tolist())
            code = closed_code_block(text)
            if code is not None:
                found.append((r, text, code))
        if not found:
            return
        outputs = self.mode.tool_fn([code for _, _, code in found])
        for (r, text, _), output in zip(found, outputs, strict=True):
            block = tool_output_block(text, str(output)[: self.mode.max_output_chars])
            self.queue[r] = list(self.mode.tokenizer(block, add_special_tokens=False)["input_ids"])
            self.segment[r] = t + 1 + len(self.queue[r])
            self.calls[r] += 1
