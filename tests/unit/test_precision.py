"""`common.dtype: auto`: which precision each stage computes in, from the device and the CPU's flags."""

from __future__ import annotations

import pytest
import torch

from dsmath.config import load_params
from dsmath.runtime import precision

CPUINFO_ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu vme sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni
processor\t: 1
flags\t\t: fpu vme sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni
"""
CPUINFO_ICELAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n"
CPUINFO_SAPPHIRE = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
CPUINFO_GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize("text, native", [(CPUINFO_ZEN4, True), (CPUINFO_ICELAKE, False), (CPUINFO_SAPPHIRE, True),
                                          (CPUINFO_GRAVITON3, True), ("", False)])
def test_native_bf16_from_cpuinfo(text, native):
    assert precision.native_bf16(precision.parse_cpu_flags(text)) is native


def test_parse_cpu_flags_reads_the_first_cpu_line():
    assert precision.parse_cpu_flags(CPUINFO_ICELAKE) == {"fpu", "sse2", "avx2", "avx512f", "avx512bw",
                                                          "avx512_vnni"}


def choose(dtype, stage, device, auto=("base", "pretrain", "sft", "rl", "evaluate"), cpu_bf16=False, cuda_bf16=False):
    return precision.choose(dtype, stage, device, auto, cpu_bf16=cpu_bf16, cuda_bf16=cuda_bf16)


def test_explicit_dtypes_are_taken_as_written_on_any_machine():
    for dtype in ("float32", "bfloat16", "float16"):
        for device in ("cpu", "cuda", "mps"):
            assert choose(dtype, "rl", device, cpu_bf16=True, cuda_bf16=True) == dtype


def test_auto_on_a_cpu_without_native_bf16_is_float32_in_every_stage():
    for stage in precision.STAGES:
        assert choose("auto", stage, "cpu", cpu_bf16=False) == "float32"


def test_auto_on_a_native_bf16_cpu_is_bf16_in_the_listed_stages_only():
    auto = ("pretrain", "rl")
    picked = {s: choose("auto", s, "cpu", auto=auto, cpu_bf16=True) for s in precision.STAGES}
    assert picked == {"base": "float32", "pretrain": "bfloat16", "sft": "float32", "rl": "bfloat16",
                      "evaluate": "float32"}


def test_auto_on_gpus_and_mps():
    assert choose("auto", "sft", "cuda", auto=(), cuda_bf16=True) == "bfloat16"  # every stage on a bf16 GPU
    assert choose("auto", "sft", "cuda", cuda_bf16=False) == "float32"  # (pre-Ampere: no bf16)
    assert choose("auto", "sft", "mps", cpu_bf16=True) == "float32"


def test_stage_dtype_reads_the_machine(monkeypatch):
    common = load_params("params.yaml").common
    auto = common.model_copy(update={"dtype": "auto"})
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    assert precision.stage_dtype(auto, "sft", "cpu") == "float32"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert precision.stage_dtype(auto, "sft", "cpu") == "bfloat16"
    assert precision.stage_torch_dtype(auto, "pretrain", "cpu") is torch.bfloat16
    everywhere = auto.model_copy(update={"auto_bf16": list(precision.STAGES)})
    assert precision.stage_torch_dtype(everywhere, "evaluate@sft", "cpu") is torch.bfloat16
    assert precision.stage_dtype(common, "sft", "cpu") == "float32"  # the default: float32 everywhere


def test_params_refuse_an_unknown_stage_in_auto_bf16(tmp_path):
    import yaml

    raw = yaml.safe_load(open("params.yaml"))
    raw["common"]["auto_bf16"] = ["sft", "report"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match="auto_bf16"):
        load_params(tmp_path / "p.yaml")
