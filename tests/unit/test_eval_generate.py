"""The evaluation's generation path end to end, checked on content: a model forced to answer each question with a
known text goes through the real Generator (prompt format, tokenizer, sampler, decoding) and `evaluate_split`, and
the texts, lengths and accuracies that come out are exactly those of the known answers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig

from dsmath.config import Evaluate, Rewards, Sandbox
from dsmath.evaluation.evaluate import Generator, evaluate_split

PAD, EOS = 0, 1


class AsciiTokenizer:
    """One token per character (id = code point + 2); 0 = pad, 1 = EOS. No chat template: the plain Q/A prompt."""

    pad_token_id, eos_token_id = PAD, EOS
    vocab_size = 130

    def __call__(self, text, add_special_tokens=False):
        assert all(ord(c) < 128 for c in text)
        return {"input_ids": [ord(c) + 2 for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i - 2) if i > 1 else ("" if skip_special_tokens else "<s>") for i in ids)


class ForcedLM(torch.nn.Module):
    """A causal LM that answers a prompt with ANSWERS[question] then EOS, whatever the batch layout: the answer of
    each row is looked up from the prompt at prefill; at position id p the next token is that row's script[p + 1]
    (scores 30 against -30: greedy and sampling both follow it)."""

    def __init__(self, tok: AsciiTokenizer, answers: dict[str, str]):
        super().__init__()
        self.tok, self.answers = tok, answers
        self.config = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=8, num_hidden_layers=1,
                                  num_attention_heads=1, num_key_value_heads=1)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    @property
    def device(self):
        return self.dummy.device

    def _script(self, row_ids: torch.Tensor, row_mask: torch.Tensor) -> list[int]:
        prompt = row_ids[row_mask.bool()].tolist()
        text = self.tok.decode(prompt)
        (question,) = [q for q in self.answers if f"Question: {q}\n" in text]
        return prompt + self.tok(self.answers[question])["input_ids"] + [EOS]

    def forward(self, input_ids, attention_mask, position_ids, cache=None, use_cache=True, logits_to_keep=0):
        if not isinstance(cache, ScriptCache):  # prefill: the whole (left-padded) prompts
            cache = ScriptCache([self._script(ids, m) for ids, m in zip(input_ids, attention_mask, strict=True)])
        nxt = [[s[min(int(p) + 1, len(s) - 1)] for p in row] for s, row in zip(cache.scripts, position_ids,
                                                                                 strict=True)]
        logits = torch.full((*input_ids.shape, self.config.vocab_size), -30.0)
        logits.scatter_(-1, torch.tensor(nxt)[..., None], 30.0)
        return SimpleNamespace(logits=logits[:, -1:] if logits_to_keep else logits, cache=cache)


class ScriptCache:
    """ForcedLM's "KV cache": each batch row's script, following the decoder's row selections (the sampler prefills
    each distinct prompt once, then copies its cache row to the rows that share it, and drops finished rows)."""

    def __init__(self, scripts: list[list[int]]):
        self.scripts = scripts

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        self.scripts = [self.scripts[i] for i in rows.tolist()]


@pytest.mark.parametrize("share_prompts", [False, True])
def test_generator_and_metrics_follow_the_forced_answers(share_prompts):
    """With evaluate.share_prompts a problem's sampled rows share one prefill of its prompt: each still follows it."""
    # equal lengths: every row finishes at the same step, so no row is dropped from the batch mid-way
    answers = {"What is 40 + 2?": "40 + 2 = 42.\nThe answer is \\boxed{42}.",
               "What is 20 - 3?": "20 - 3 = 17.\nThe answer is \\boxed{17}.",
               "What is 2 + 2?": "2 + 2 = 5.\nThe answer is \\boxed{5} !!!"}  # wrong, and a malformed line
    golds = {"What is 40 + 2?": "42", "What is 20 - 3?": "17", "What is 2 + 2?": "4"}
    assert len({len(a) for a in answers.values()}) == 1
    records = [{"id": f"p{i}", "question": q, "answer": golds[q]} for i, q in enumerate(answers)]
    tok = AsciiTokenizer()
    cfg = Evaluate(n_samples=2, k=[1, 2], max_new_tokens=64, modes=["cot"], share_prompts=share_prompts,
                   sampled_modes=["cot"], primary_metric="synthetic/cot/greedy")
    gen = Generator(ForcedLM(tok, answers), tok, cfg, Sandbox(), seed=0)

    texts, lengths = gen(list(answers), "cot", 0.0)
    assert texts == list(answers.values())
    assert lengths == [len(a) + 1 for a in answers.values()]  # + the EOS

    metrics, rows = evaluate_split(gen, records, "cot", cfg, Sandbox(), Rewards(), sampled=True)
    assert [r["greedy"] for r in rows] == list(answers.values())
    assert [r["greedy_answer"] for r in rows] == ["42", "17", "5"]
    assert [r["greedy_correct"] for r in rows] == [True, True, False]
    assert metrics["greedy"] == 2 / 3
    assert metrics["format_error_rate"] == pytest.approx(1 / 3)  # "... \boxed{5} !!!" is not a well-formed answer line
    assert metrics["mean_length"] == len(answers["What is 40 + 2?"]) + 1
    # the equations of the greedy completions: 40 + 2 = 42 and 20 - 3 = 17 hold, 2 + 2 = 5 does not
    assert (metrics["equation_acc"], metrics["link_acc"], metrics["n_equations"]) == (2 / 3, 2 / 3, 3.0)
    assert metrics["equations/add/2/acc"] == 1.0 and metrics["equations/add/1/acc"] == 0.0
    # sampling at temperature 1 follows the forced text too: both samples of each problem are its answer
    assert [r["sample_answers"] for r in rows] == [["42", "42"], ["17", "17"], ["5", "5"]]
    assert metrics["pass@1"] == metrics["pass@2"] == metrics["maj@2"] == 2 / 3
