"""The tiny models, fixtures and prompts the sampler and scoring tests share (test_rollout.py, test_logprobs.py:
import the fixtures `model` and `gpt2` by name)."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from dsmath.generation.rollout import Rollout, sample

PAD, EOS = 0, 1


def tiny_llama(seed: int = 0, **overrides) -> LlamaForCausalLM:
    """A 2-layer GQA Llama with random (not identity) norm gains, so the fast engine's weight folding is exercised."""
    cfg = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=EOS,
               bos_token_id=None, tie_word_embeddings=True, initializer_range=0.2)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def tiny_gpt2() -> GPT2LMHeadModel:
    """Learned absolute positions: unlike RoPE (shift-invariant), wrong position ids under padding show up here."""
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=128, pad_token_id=PAD,
                     eos_token_id=EOS, bos_token_id=None, initializer_range=0.3)
    return GPT2LMHeadModel(cfg).eval()


def prompts_of(lengths, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 96, (n,), generator=g).tolist() for n in lengths]


def greedy(model, prompts, engine, n=12, **kw) -> Rollout:
    return sample(model, prompts, max_new_tokens=n, eos_token_id=kw.pop("eos", []), pad_token_id=PAD,
                  temperature=0.0, engine=engine, **kw)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama()


@pytest.fixture(scope="module")
def gpt2() -> GPT2LMHeadModel:
    return tiny_gpt2()
