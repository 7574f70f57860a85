"""`common.dtype: auto`: which precision each stage computes in, from the device and the CPU's flags."""

from __future__ import annotations

import pytest
import torch

from dsmath.config import AutoBf16, load_params
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


@pytest.mark.parametrize("text, kind", [(CPUINFO_ZEN4, "avx512_bf16"), (CPUINFO_ICELAKE, None),
                                        (CPUINFO_SAPPHIRE, "amx"), (CPUINFO_GRAVITON3, "arm_bf16"), ("", None)])
def test_native_bf16_kind_from_cpuinfo(text, kind):
    flags = precision.parse_cpu_flags(text)
    assert precision.bf16_kind(flags) == kind  # AMX wins over the AVX-512-BF16 the same CPU has
    assert precision.native_bf16(flags) is (kind is not None)


def test_parse_cpu_flags_reads_the_first_cpu_line():
    assert precision.parse_cpu_flags(CPUINFO_ICELAKE) == {"fpu", "sse2", "avx2", "avx512f", "avx512bw",
                                                          "avx512_vnni"}


EVERY = AutoBf16(amx=list(precision.STAGES), avx512_bf16=list(precision.STAGES), arm_bf16=list(precision.STAGES))


def choose(dtype, stage, device, auto=EVERY, cpu_kind=None, cuda_bf16=False):
    return precision.choose(dtype, stage, device, auto, cpu_kind=cpu_kind, cuda_bf16=cuda_bf16)


def test_explicit_dtypes_are_taken_as_written_on_any_machine():
    for dtype in ("float32", "bfloat16", "float16"):
        for device in ("cpu", "cuda", "mps"):
            assert choose(dtype, "rl", device, cpu_kind="amx", cuda_bf16=True) == dtype


def test_auto_on_a_cpu_without_native_bf16_is_float32_in_every_stage():
    for stage in precision.STAGES:
        assert choose("auto", stage, "cpu", cpu_kind=None) == "float32"


def test_auto_on_a_native_bf16_cpu_is_bf16_in_the_stages_listed_for_its_kind_only():
    auto = AutoBf16(amx=["pretrain", "rl"], avx512_bf16=["sft"], arm_bf16=[])
    picked = {kind: {s for s in precision.STAGES if choose("auto", s, "cpu", auto=auto, cpu_kind=kind) == "bfloat16"}
              for kind in ("amx", "avx512_bf16", "arm_bf16")}
    assert picked == {"amx": {"pretrain", "rl"}, "avx512_bf16": {"sft"}, "arm_bf16": set()}


def test_auto_on_gpus_and_mps():
    none = AutoBf16(amx=[], avx512_bf16=[], arm_bf16=[])
    assert choose("auto", "sft", "cuda", auto=none, cuda_bf16=True) == "bfloat16"  # every stage on a bf16 GPU
    assert choose("auto", "sft", "cuda", cuda_bf16=False) == "float32"  # (pre-Ampere: no bf16)
    assert choose("auto", "sft", "mps", cpu_kind="amx") == "float32"


def test_stage_dtype_reads_the_machine(monkeypatch):
    common = load_params("params.yaml").common
    auto = common.model_copy(update={"dtype": "auto"})
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    assert precision.stage_dtype(auto, "sft", "cpu") == "float32"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    for stage in precision.STAGES:  # rl@1234 and evaluate@sft count as rl and evaluate
        name = {"rl": "rl@1234", "evaluate": "evaluate@sft"}.get(stage, stage)
        expected = torch.bfloat16 if stage in common.auto_bf16.amx else torch.float32
        assert precision.stage_torch_dtype(auto, name, "cpu") is expected
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    only_sft = auto.model_copy(update={"auto_bf16": AutoBf16(amx=[], avx512_bf16=["sft"], arm_bf16=[])})
    assert [precision.stage_dtype(only_sft, s, "cpu") for s in ("sft", "pretrain")] == ["bfloat16", "float32"]
    assert precision.stage_dtype(common, "sft", "cpu") == "float32"  # the default: float32 everywhere


def test_params_refuse_an_unknown_stage_in_auto_bf16(tmp_path):
    import yaml

    raw = yaml.safe_load(open("params.yaml"))
    raw["common"]["auto_bf16"]["amx"] = ["sft", "report"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match="auto_bf16"):
        load_params(tmp_path / "p.yaml")


def test_the_real_model_profile_decodes_in_bf16_on_avx512_bf16_where_the_default_model_does_not(monkeypatch):
    """configs/smollm2.yaml lists rl and evaluate for AVX-512-BF16 (measured faster at 576 wide); the default model
    keeps them float32 there, and the kinds the overlay does not name keep params.yaml's lists."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    default, real = (load_params(p).common for p in ("params.yaml", "configs/smollm2.yaml"))
    default, real = (c.model_copy(update={"dtype": "auto"}) for c in (default, real))
    assert [precision.stage_dtype(real, s, "cpu") for s in ("rl@1234", "evaluate@rl")] == ["bfloat16"] * 2
    assert [precision.stage_dtype(default, s, "cpu") for s in ("rl@1234", "evaluate@rl")] == ["float32"] * 2
    assert real.auto_bf16.amx == default.auto_bf16.amx and real.auto_bf16.arm_bf16 == default.auto_bf16.arm_bf16
