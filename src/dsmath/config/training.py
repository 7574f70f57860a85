"""Params sections of the model and the supervised stages: tokenizer -> base (code) -> pretrain (math) -> sft
(CoT / PoT / tool-integrated solutions)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dsmath.config.base import NonNegFloat, NonNegInt, PosFloat, PosInt, Prob, Section


class Tokenizer(Section):
    """Byte-level BPE trained on the corpus, digits one per token; a pretrained model keeps its own tokenizer."""

    vocab_size: Annotated[int, Field(ge=300)] = 1536  # 256 byte tokens + 4 specials + merges
    min_frequency: PosInt = 2
    max_chars: PosInt = 20_000_000  # corpus text (code + math) the BPE trainer reads
    eval_docs: PosInt = 200  # documents of each corpus used to report compression (chars per token)


class Model(Section):
    """The network: a Llama built from these sizes (`source: scratch`), or any pretrained causal LM."""

    source: Literal["scratch", "pretrained"] = "scratch"
    hidden_size: PosInt = 160
    num_layers: PosInt = 4
    num_heads: PosInt = 4
    num_kv_heads: PosInt = 4
    intermediate_size: PosInt = 432
    max_position_embeddings: PosInt = 512
    rope_theta: PosFloat = 10000.0
    tie_embeddings: bool = True
    init_std: PosFloat = 0.02
    name_or_path: str = ""  # pretrained: hub id, local folder, or "pkg:<python package>" (that package's folder)
    gguf_file: str = ""  # pretrained: a GGUF file inside name_or_path (dequantised to float32 on load)

    @model_validator(mode="after")
    def _shapes(self) -> Model:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads: must divide hidden_size={self.hidden_size} (got {self.num_heads})")
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"num_heads: hidden_size / num_heads (the head dim) must be even for rotary embeddings "
                             f"(got {self.hidden_size} / {self.num_heads} = {self.hidden_size // self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads} (got {self.num_kv_heads})")
        if self.source == "pretrained" and not self.name_or_path:
            raise ValueError("name_or_path: required when source is 'pretrained'")
        return self


class Optim(Section):
    """AdamW with linear warmup then cosine decay to `lr * min_lr_ratio`, global-norm gradient clipping."""

    lr: PosFloat = 1e-3
    min_lr_ratio: Prob = 0.1
    warmup_steps: NonNegInt = 20
    weight_decay: NonNegFloat = 0.1  # applied to matrices only (not norms, not biases)
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    eps: PosFloat = 1e-8
    grad_clip: PosFloat = 1.0


class Loop(Section):
    """One training run (base, pretrain, sft): steps, batch, checkpoints. Batch sizes count sequences."""

    max_steps: PosInt = 100
    global_batch_size: PosInt = 32  # per optimizer step, summed over processes (same data for any world size)
    micro_batch_size: PosInt = 32  # per forward pass and process; gradient accumulation makes up the rest
    seq_len: PosInt = 256  # packed block length (pretraining) or longest example kept (SFT)
    checkpoint_every: NonNegInt = 50  # steps; 0 = no checkpoints
    keep_checkpoints: PosInt = 1
    log_every: PosInt = 10  # steps between step-metric records (loss, lr, grad norm, tokens/s)
    optim: Optim = Optim()

    @model_validator(mode="after")
    def _batch(self) -> Loop:
        if self.global_batch_size % self.micro_batch_size:
            need = f"must divide global_batch_size={self.global_batch_size}"
            raise ValueError(f"micro_batch_size: {need} (got {self.micro_batch_size})")
        return self


class Base(Section):
    """The "coder base": pretraining from scratch on the code corpus; pass-through for a pretrained model."""

    train: Loop = Loop(optim=Optim(lr=3e-3, warmup_steps=15))
    heldout_docs: PosInt = 20  # documents of each corpus kept out of training, for perplexity
    eval_tokens: PosInt = 32768  # held-out tokens scored per corpus


class Pretrain(Section):
    """Continual pretraining on the math corpus (DeepSeekMath sec. 2.2, at laptop scale)."""

    train: Loop = Loop(max_steps=2000, checkpoint_every=250, optim=Optim(lr=3e-3, warmup_steps=10))
    heldout_docs: PosInt = 300
    eval_tokens: PosInt = 65536


class Mix(Section):
    """Share of SFT examples in each solution style (normalised; each training problem gets one style)."""

    cot: NonNegFloat = 0.6
    pot: NonNegFloat = 0.2
    tool: NonNegFloat = 0.2

    @model_validator(mode="after")
    def _positive(self) -> Mix:
        if self.cot + self.pot + self.tool <= 0:
            raise ValueError(f"cot: the shares cot + pot + tool must sum to > 0 "
                             f"(got {self.cot} + {self.pot} + {self.tool})")
        return self


class Probe(Section):
    """End-of-SFT accuracy probe on held-out test problems: greedy accuracy, pass@k and maj@k per mode."""

    n_problems: PosInt = 500
    mode: Literal["cot", "pot", "tool"] = "cot"  # the headline greedy_acc / pass_at_k
    modes: list[Literal["cot", "pot", "tool"]] = ["cot", "pot", "tool"]  # also reported as <mode>/...
    k: PosInt = 8
    temperature: PosFloat = 1.0
    max_new_tokens: PosInt = 208
    max_tool_calls: PosInt = 2
    batch_size: PosInt = 256  # sequences per sampler call


class Sft(Section):
    """Supervised fine-tuning on CoT / PoT / tool-integrated solutions, loss on the response only."""

    init: Literal["pretrain", "base"] = "pretrain"  # the model SFT starts from (base: no math pretraining, sec. 5.1)
    train: Loop = Loop(max_steps=550, global_batch_size=64, micro_batch_size=64, seq_len=320, checkpoint_every=100,
                       optim=Optim(lr=5e-3))
    pack: bool = True  # pack each micro-batch's examples into rows of train.seq_len (attention within each example)
    mix: Mix = Mix()
    max_examples: NonNegInt = 0  # training problems used; 0 = all
    levels: list[Annotated[int, Field(ge=1, le=5)]] = [1, 2]  # synthetic levels whose train problems SFT uses; [] = all
    val_examples: PosInt = 500  # held-out problems (val split) for the held-out loss
    probe: Probe = Probe()
