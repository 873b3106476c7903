"""Roofline helper: compute vs memory time of real IR ops on the hardware presets."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from shared_ir import Graph, Tensor, TensorRole, ops
from shared_ir.hardware import HardwareError, load_preset
from shared_ir.roofline import peak_flops, roofline, roofline_table


def _matmul(n: int, dtype: str = "float32", name: str = "mm"):
    a = Tensor(f"{name}_a", (n, n), dtype, TensorRole.input)
    b = Tensor(f"{name}_b", (n, n), dtype, TensorRole.weight)
    return ops.matmul(name, a, b, f"{name}_c")


@pytest.fixture(scope="module")
def gpu():
    return load_preset("rtx4090_workstation").device("gpu")


def test_times_are_flops_over_peak_and_bytes_over_bandwidth(gpu):
    op = _matmul(256)
    r = roofline(op, gpu)
    assert r.flops == 2 * 256**3 and r.bytes == 3 * 256 * 256 * 4 == op.total_bytes
    assert r.compute_s == pytest.approx(r.flops / gpu.peak_flops)
    assert r.memory_s == pytest.approx(r.bytes / 1008e9)  # read and write bandwidth equal on GDDR6X
    assert r.time_s == max(r.compute_s, r.memory_s) and r.level == "gddr6x"
    assert r.arithmetic_intensity == pytest.approx(r.flops / r.bytes)
    assert r.ridge_intensity == pytest.approx(gpu.peak_flops / 1008e9)
    assert r.attained_flops <= gpu.peak_flops * (1 + 1e-12)
    d = r.as_dict()
    assert d["bound"] == r.bound and d["time_s"] == r.time_s


def test_bound_switches_from_memory_to_compute_as_intensity_grows(gpu):
    rows = [roofline(_matmul(n), gpu) for n in (4, 16, 64, 256, 1024, 4096)]
    intensities = [r.arithmetic_intensity for r in rows]
    assert intensities == sorted(intensities)
    bounds = [r.bound for r in rows]
    assert bounds[0] == "memory" and bounds[-1] == "compute"
    switch = bounds.index("compute")
    assert all(b == "compute" for b in bounds[switch:])  # exactly one switch
    for r in rows:  # and it happens at the ridge point
        assert (r.bound == "compute") == (r.arithmetic_intensity >= r.ridge_intensity)


def test_stand_in_op_and_elementwise():
    dev = load_preset("systolic_16x16").primary
    light = roofline(SimpleNamespace(flops=10, total_bytes=10_000), dev)
    heavy = roofline(SimpleNamespace(flops=10**9, total_bytes=10_000), dev)
    assert light.bound == "memory" and heavy.bound == "compute"
    relu = ops.unary("relu", Tensor("x", (64, 64)), "relu", "y")
    assert roofline(relu, dev).bound == "memory"  # 1 FLOP per 8 bytes is far below any ridge
    empty = roofline(SimpleNamespace(flops=0, total_bytes=0), dev)
    assert empty.time_s == 0 and empty.arithmetic_intensity == 0.0
    assert math.isinf(roofline(SimpleNamespace(flops=5, total_bytes=0), dev).arithmetic_intensity)


def test_separate_write_bandwidth():
    edge = load_preset("edge_accel").primary  # DRAM: 25 words/cycle read, 10 write
    op = _matmul(64)
    r = roofline(op, edge)
    out = op.output_bytes
    assert r.memory_s == pytest.approx((op.total_bytes - out) / 50e9 + out / 20e9)


def test_level_selection(gpu):
    op = _matmul(512)
    dram, l2, l2_idx = roofline(op, gpu), roofline(op, gpu, "l2"), roofline(op, gpu, 1)
    assert l2.memory_s == l2_idx.memory_s < dram.memory_s and l2.level == "l2"
    l1 = roofline(op, gpu, gpu.level("l1"))
    assert l1.read_bandwidth_bytes_per_s == pytest.approx(128 * 322.56e9)  # all 128 SMs' L1s together
    with pytest.raises(HardwareError, match="no level 'l7'"):
        roofline(op, gpu, "l7")
    with pytest.raises(HardwareError, match="no such level"):
        roofline(op, gpu, 9)


def test_dtype_selects_tensor_core_peak(gpu):
    fp32, bf16 = roofline(_matmul(4096), gpu), roofline(_matmul(4096, "bfloat16"), gpu)
    assert fp32.peak_flops == pytest.approx(82.58e12, rel=1e-3)
    assert bf16.peak_flops == 165.2e12 and bf16.compute_s == pytest.approx(fp32.compute_s / 2, rel=0.01)
    assert peak_flops(gpu, "bfloat16") == 165.2e12 and peak_flops(gpu) == gpu.peak_flops


def test_roofline_table_on_a_graph():
    x = Tensor("x", (128, 256), "float32", TensorRole.input)
    w1 = Tensor("w1", (256, 512), "float32", TensorRole.weight)
    w2 = Tensor("w2", (512, 64), "float32", TensorRole.weight)
    mm1 = ops.matmul("mm1", x, w1, "h")
    act = ops.unary("relu", mm1.outputs[0].tensor, "relu", "a")
    sm = ops.softmax("sm", act.outputs[0].tensor, "s")
    mm2 = ops.matmul("mm2", sm.outputs[0].tensor, w2, "y")
    g = Graph([mm2, sm, act, mm1])  # out of order on purpose
    soc = load_preset("soc_small")
    rows = roofline_table(g, soc.device("nvdla0"))
    assert [r["op"] for r in rows] == ["mm1", "relu", "sm", "mm2"]
    assert set(rows[0]) >= {"op", "kind", "macs", "bytes", "intensity", "time_s", "bound"}
    assert rows[0]["macs"] == 128 * 256 * 512 and rows[0]["kind"] == "matmul"
    assert [r["supported"] for r in rows] == [True, False, False, True]  # NVDLA: conv/linear/matmul only
    assert rows[1]["bound"] == "memory"
    # a System works too (its primary device) and gives the same numbers
    assert roofline_table(g, soc) == rows
