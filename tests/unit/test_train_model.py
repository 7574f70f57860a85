"""Model factory: Llama from params, package-path resolution, save/load round trip, FLOP counting."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from dsmath.config import Model
from dsmath.modeling.model import (
    build_scratch,
    load_dir,
    matmul_params,
    param_count,
    resolve_path,
    save_dir,
    train_flops_per_token,
)
from dsmath.modeling.tokenizer import train_tokenizer

CFG = Model(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, tie_embeddings=True)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(["Sam has 3 apples and 4 pears: 3 + 4 = 7."] * 10, vocab_size=300)


def test_llama_sizes_come_from_params(tok):
    model = build_scratch(CFG, tok, seed=0)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (32, 2, 4, 2)
    assert c.vocab_size == len(tok) and c.eos_token_id == tok.eos_token_id and c.pad_token_id == tok.pad_token_id
    assert model.dtype == torch.float32


def test_parameter_and_matmul_counts_hand_computed(tok):
    model = build_scratch(CFG, tok, seed=0)
    v, h, f, kv = len(tok), 32, 64, 2 * 8  # kv heads * head dim (32 / 4)
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * f  # q, k+v, o, gate/up/down
    assert matmul_params(model) == 2 * per_layer + v * h  # + LM head (tied: counted as a matmul)
    assert param_count(model) == 2 * per_layer + v * h + 2 * 2 * h + h  # + embedding once, 2 norms/layer, final norm
    assert train_flops_per_token(model, seq_len=10) == 6 * matmul_params(model) + 12 * 2 * h * 10


def test_init_depends_on_seed_only(tok):
    a, b, c = (build_scratch(CFG, tok, seed=s) for s in (0, 0, 1))
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_save_dir_loads_with_auto_classes_and_is_byte_identical(tok, tmp_path):
    from transformers import AutoModelForCausalLM

    model = build_scratch(CFG, tok, seed=0)
    for name in ("a", "b"):
        save_dir(model, tok, tmp_path / name)
    digest = [hashlib.sha256(Path(tmp_path / n / "model.safetensors").read_bytes()).hexdigest() for n in "ab"]
    assert digest[0] == digest[1]
    assert not (tmp_path / "a.tmp").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight)
    again, again_tok = load_dir(tmp_path / "a")
    assert again_tok.eos_token_id == tok.eos_token_id and again.config.pad_token_id == tok.pad_token_id


def test_resolve_path_finds_installed_packages_without_importing_them():
    assert resolve_path("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert Path(resolve_path("pkg:dsmath")).joinpath("modeling", "model.py").is_file()
    with pytest.raises(FileNotFoundError, match="no installed package 'not_a_package_xyz'"):
        resolve_path("pkg:not_a_package_xyz")
