"""aarch64 NEON from any host: the micro kernel is chosen for NEON's 32 128-bit registers and the chain compiles
for aarch64-linux-gnu (checked by its assembly; it runs where such a machine exists)."""
import pytest

pytest.importorskip("tvm")

from chain_fuser import hw  # noqa: E402
from chain_fuser.kernel import cross_compile  # noqa: E402
from chain_fuser.spec import ConvChain, GemmChain  # noqa: E402

from shared_ir.hardware import HardwareError, load_preset  # noqa: E402
from shared_ir.hostinfo import vector_registers  # noqa: E402


def test_the_neon_description_gives_neon_micro_kernels_that_fit_its_registers():
    dev = hw.resolve_device("neoverse_n1")
    assert hw.isa(dev) == "neon" and hw.vector_lanes(dev) == 4
    ks = hw.micro_kernels(dev)
    assert ks and all(k.name.startswith("neon_") and k.registers <= vector_registers("neon") - 1 for k in ks)
    # 32 registers take taller blocks than AVX2's 16 at the same width
    assert max(k.mr for k in ks if k.nr == 8) > 6


@pytest.mark.parametrize("spec", [GemmChain(1, 64, 64, 64, 128, glue="relu", name="neon_gemm"),
                                  GemmChain(2, 50, 64, 64, 70, glue="softmax", scale=0.125, bt=True, name="neon_attn"),
                                  ConvChain(1, 16, 8, 8, 32, 3, 3, 16, 1, 1, glue="relu", name="neon_conv")])
def test_a_fused_chain_cross_compiles_to_neon_fmla(spec):
    plan, mod = cross_compile(spec, "neoverse_n1")
    asm = mod.inspect_source("asm")
    assert plan.micro.name.startswith("neon_")
    assert asm.count("\tfmla\tv") >= plan.micro.mr  # NEON vector FMAs, at least one per accumulator row
    assert "ymm" not in asm and "zmm" not in asm


def test_an_isa_that_contradicts_the_vector_width_is_rejected():
    import yaml

    from shared_ir.hardware import load_hardware, preset_dir

    d = yaml.safe_load(open(preset_dir() / "neoverse_n1.yaml"))
    d["host"]["compute"]["vector_width_bits"] = 256
    with pytest.raises(HardwareError, match="isa.*neon vectors are 128 bits"):
        load_hardware(d)
    assert load_preset("neoverse_n1").host.compute.isa == "neon"
