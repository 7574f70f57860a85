"""Tool-integrated rollouts: the text splice as pure functions, and the sampling loop with a scripted model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig

from dsmath.generation.rollout import (
    ToolMode,
    closed_code_block,
    sample,
    tool_output_block,
)

PAD, EOS = 0, 1
ENGINES = ["fast", "hf"]

# ----------------------------------------------------------------------------------------------------------------
# tool-integrated mode: the text splice as pure functions


def test_closed_code_block():
    assert closed_code_block("Let me think.") is None
    assert closed_code_block("Let me compute.\n```python\nprint(6 * 7)\n") is None  # still open
    assert closed_code_block("Let me compute.\n```python\nprint(6 * 7)\n```") == "print(6 * 7)"
    assert closed_code_block("```python\nx = 1\nprint(x)\n```\n") == "x = 1\nprint(x)"  # fence token with newline
    # two blocks: the last one counts
    assert closed_code_block("```python\na\n```\nthen\n```python\nb\n```") == "b"
    assert closed_code_block("```python\na\n```\nthen\n```python\nb") is None


def test_tool_output_block():
    # docs/formats.md: ```python ... ``` then \n```output\n31\n```\n then the answer line
    assert tool_output_block("```python\nprint(31)\n```", "31\n") == "\n```output\n31\n```\n"
    assert tool_output_block("```python\nprint(31)\n```\n", "31") == "```output\n31\n```\n"


# ----------------------------------------------------------------------------------------------------------------
# tool-integrated mode: the loop, with a scripted "model" and a character tokenizer

CHARS = ["<pad>", "<eos>"] + list("\n `abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789()*+-=.,:")


class CharTokenizer:
    """One token per character, and "<eos>" (id 1) as a special token; id 0 is pad."""

    def __call__(self, text, add_special_tokens=False):
        ids = []
        for k, part in enumerate(text.split("<eos>")):
            ids += ([EOS] if k else []) + [CHARS.index(c) for c in part]
        return {"input_ids": ids}

    def decode(self, ids):
        return "".join(CHARS[i] for i in ids if i > 1)

    def batch_decode(self, seqs):
        return [self.decode(s) for s in seqs]


class ScriptedLM(torch.nn.Module):
    """Emits a fixed script per row: at position p (position id) the next token is script[p + 1].

    The scripts contain the tool-output blocks exactly as the sampler must splice them; if the splice went wrong
    the script and the rollout would disagree. Rows are identified at prefill (the test disables compaction).
    """

    def __init__(self, scripts: list[list[int]]):
        super().__init__()
        self.scripts = scripts
        self.config = LlamaConfig(vocab_size=len(CHARS), hidden_size=8, num_hidden_layers=1, num_attention_heads=1)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[int] = []

    @property
    def device(self):
        return self.dummy.device

    def forward(self, input_ids, attention_mask, position_ids, cache=None, use_cache=True, logits_to_keep=0):
        nxt = [[s[min(int(p) + 1, len(s) - 1)] for p in row] for s, row in zip(self.scripts, position_ids, strict=True)]
        logits = torch.full((*input_ids.shape, len(CHARS)), -30.0)
        logits.scatter_(-1, torch.tensor(nxt)[..., None], 30.0)
        self.seen.append(input_ids.shape[1])
        return SimpleNamespace(logits=logits[:, -1:] if logits_to_keep else logits, cache=cache)


@pytest.mark.parametrize("output", ["42", "4<eos>2"])  # an EOS inside tool output must not end the row
def test_tool_mode_splices_output_and_masks_it(output):
    tok = CharTokenizer()
    prompts_text = ["Q1:", "Question 2:", "Q3:"]
    block = f"\n```output\n{output}\n```\n"
    completions = [
        "Let me compute.\n```python\nprint(6*7)\n```" + block + "The answer is 42.",  # one call
        "No code here.",  # no call
        "```python\nprint(6*7)\n```" + block + "Again.\n```python\nprint(1)\n```\nDone.",  # 2nd block: over the cap
    ]
    expected = [tok(c)["input_ids"] + [EOS] for c in completions]
    scripts = [tok(p)["input_ids"] + e for p, e in zip(prompts_text, expected, strict=True)]
    calls: list[list[str]] = []

    def tool_fn(codes):
        calls.append(codes)
        return [output + "\n" for _ in codes]

    r = sample(ScriptedLM(scripts), [tok(p)["input_ids"] for p in prompts_text], max_new_tokens=80, eos_token_id=EOS,
               pad_token_id=PAD, temperature=0.0, tool=ToolMode(tool_fn, tok, max_calls=1), compact_frac=1.0)

    assert [row[m.bool()].tolist() for row, m in zip(r.completion_ids, r.completion_mask, strict=True)] == expected
    assert r.finished.all() and r.tool_calls.tolist() == [1, 0, 1]
    assert sorted(c for batch in calls for c in batch) == ["print(6*7)", "print(6*7)"]
    block_len = len(tok(block)["input_ids"])
    for i, text in enumerate(completions):
        start = len(tok(text[: text.find(block)])["input_ids"]) if block in text else None
        loss = [1] * len(expected[i])
        if start is not None:
            loss[start: start + block_len] = [0] * block_len
        n = len(loss)
        assert r.loss_mask[i, :n].tolist() == loss
        assert (r.logprobs[i, :n][torch.tensor(loss) == 0] == 0).all()
