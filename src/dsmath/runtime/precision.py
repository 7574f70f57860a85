"""The compute precision of a stage: params ``common.dtype``, and what ``auto`` picks on this machine.

``float32`` / ``bfloat16`` / ``float16`` are taken as written. ``auto`` computes in bfloat16 where the device does it
natively and in float32 elsewhere:

- a CUDA GPU with bf16 (``torch.cuda.is_bf16_supported()``): bfloat16 in every stage;
- a CPU with bf16 instructions: bfloat16 in the stages ``common.auto_bf16`` lists for its kind (those measured faster
  in bf16 on such a CPU), float32 in the others. The kinds, by the CPU's flags: ``amx`` (Intel AMX tiles,
  ``amx_bf16``), ``avx512_bf16`` (AVX-512-BF16 without AMX: AMD Zen 4 and later), ``arm_bf16`` (Arm FEAT_BF16);
- anything else (a CPU that would emulate bf16, Apple's MPS): float32, the same computation as ``dtype: float32``.

Weights and optimiser state stay float32 in every precision (autocast forwards; accelerate's mixed precision).
The choice of a stage is tagged on its MLflow run (``dsmath.dtype``) and written in its metrics (``bf16``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import get_args

import torch

from dsmath.config.data import TorchStage

STAGES: tuple[str, ...] = get_args(TorchStage)  # the torch stages, as params name them (``rl@1234`` is rl)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# the kinds of native-bf16 CPU, each with the flag that marks it, in order of precedence (an AMX CPU has AVX-512-BF16)
BF16_KINDS: tuple[tuple[str, str], ...] = (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("arm_bf16", "bf16"))
NATIVE_BF16_FLAGS = frozenset(flag for _, flag in BF16_KINDS)


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of a /proc/cpuinfo text (x86 ``flags``, Arm ``Features``; the first CPU's line)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (empty where /proc/cpuinfo does not exist: macOS, Windows)."""
    try:
        return parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


def bf16_kind(flags: Iterable[str]) -> str | None:
    """The kind of native-bf16 CPU these flags describe (``amx``, ``avx512_bf16``, ``arm_bf16``), or None for a CPU
    that would emulate bf16."""
    flags = frozenset(flags)
    return next((kind for kind, flag in BF16_KINDS if flag in flags), None)


def native_bf16(flags: Iterable[str]) -> bool:
    """Whether a CPU with these flags computes bf16 matrix products natively (else it would emulate them)."""
    return bf16_kind(flags) is not None


def choose(dtype: str, stage: str, device_type: str, auto_bf16, *, cpu_kind: str | None, cuda_bf16: bool) -> str:
    """The precision of `stage` (base, pretrain, sft, rl, evaluate) for params `dtype` on a `device_type` device,
    `auto_bf16` being params ``common.auto_bf16`` and `cpu_kind` the CPU's :func:`bf16_kind`: pure (the machine's facts
    are arguments); :func:`stage_dtype` passes this machine's."""
    if dtype != "auto":
        return dtype
    if device_type == "cuda":
        return "bfloat16" if cuda_bf16 else "float32"
    if device_type == "cpu" and cpu_kind is not None and stage in getattr(auto_bf16, cpu_kind):
        return "bfloat16"
    return "float32"


def stage_dtype(common, stage: str, device: torch.device | str | None = None) -> str:
    """The precision name of `stage` (``rl@1234`` counts as ``rl``) under params `common` on `device` (default: the
    device ``common.device`` resolves to)."""
    from dsmath.runtime.distributed import resolve_device

    device = torch.device(device) if device is not None else resolve_device(common.device)
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return choose(common.dtype, stage.split("@")[0], device.type, common.auto_bf16,
                  cpu_kind=bf16_kind(cpu_flags()), cuda_bf16=cuda_bf16)


def stage_torch_dtype(common, stage: str, device: torch.device | str | None = None) -> torch.dtype:
    """:func:`stage_dtype` as a torch dtype."""
    return DTYPES[stage_dtype(common, stage, device)]
