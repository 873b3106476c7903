"""Per-(layer, accelerator) cost model: MAESTRO's analytical model for the NVDLA, ShiDianNao, Eyeriss and TPU dataflows.

``nvdla``, ``shidiannao``, ``eyeriss`` and ``tpu`` accelerators are costed by :mod:`soc_mapper.maestro_model`, a
port of MAESTRO's cost analysis (``maestro-project/maestro``) run on the dataflow of that style (KC-P weight
stationary, YX-P output stationary, row stationary, and for the TPU a weight-stationary systolic array on the
layer's GEMM, convs lowered by im2col; see :func:`soc_mapper.maestro_model.dataflow`): cycles come from MAESTRO's
iteration cases (max of NoC ingress/egress and compute per case, the top level bounded by the off-chip refill of
its tile), energy = MACs × MAC energy + L1 accesses × the PE buffer's energy per byte + L2 accesses × the global
buffer's (int8: one byte per access). ``soc_mapper/data/maestro_reference.json`` holds MAESTRO's own outputs on zoo
layers under all four styles and ``tests/test_soc_mapper/test_maestro_reference.py`` checks this model against
them.

MAESTRO's hardware (:func:`soc_mapper.maestro_model.hw_of`): the accelerator's PE array; the NoC (L2 → PEs) and
the off-chip link (→ L2) both at the global buffer's read bandwidth (32 GB/s = 160 int8 elements per cycle on the
presets). Why: the ``soc_small`` / ``soc_large`` presets describe no DRAM or system memory (each device's outermost
level is its 4 MiB global buffer) and no NoC of their own; the only bandwidths they give are that buffer's read
bandwidth, the topology's intra-accelerator bandwidth (the same 32 GB/s, "intra-accelerator bandwidth of the
reference") and the mesh links between accelerators (0.8 / 3.2 GB/s), whose transfers the simulator already
charges per edge, so using them as the off-chip link would charge the activations twice.

Other dataflows keep a closed form: ``systolic`` (GEMM M across PE rows, N across 128-wide columns, K streamed;
convs lowered to GEMM; cycles = max(compute, buffer traffic / bandwidth)) and, for any other style, ideal
parallelism over the non-reduction points (an upper bound on speed).
:func:`compute_cycles` also gives the PEs a layer occupies on every style (the spatial footprint of its mapping,
which spatial sharing of an accelerator budgets): NVDLA K across clusters × C across 64 PEs, ShiDianNao output
rows × columns, Eyeriss filter rows × output rows per set × sets over K, TPU the GEMM's reduction down the rows ×
its outputs N across the columns.
Power = static share of the accelerator's power + dynamic energy / latency.

Why not fusion_perf: it models one accelerator's memory hierarchy for fused chains of operators (a
Timeloop/TileFlow-style tile search); the mapper needs thousands of single-layer estimates per SoC for fixed
dataflows, and the reference used MAESTRO's fixed dataflows, not searched mappings. Costs are cached per
(layer shape, accelerator).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import maestro_model
from .errors import UnsupportedLayerError
from .soc import Accelerator, SoC
from .workload import Layer, Workload

STATIC_POWER_FRACTION = 0.2
"""Share of an accelerator's power drawn while any task runs on it, whatever the task's PE use (leakage, clock)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _conv_form(l: Layer) -> tuple[int, int, int, int, int, int, int, int]:
    d = l.dims
    if l.is_conv:
        return d["B"], d["G"], d["K"], d["C"], d["P"], d["Q"], d["R"], d["S"]
    # GEMM as a 1×1 conv: batch loops fold into B, rows M become output pixels
    return d["B"], 1, d["N"], d["K"], d["M"], 1, 1, 1


def _gemm_form(l: Layer) -> tuple[int, int, int, int]:
    d = l.dims
    if l.is_conv:
        return d["G"], d["B"] * d["P"] * d["Q"], d["K"], d["C"] * d["R"] * d["S"]
    return d["B"], d["M"], d["N"], d["K"]


def compute_cycles(l: Layer, a: Accelerator) -> tuple[float, int]:
    """(closed-form compute cycles, PEs occupied) of a layer on one accelerator's dataflow (the latency of
    ``systolic`` and unknown styles; MAESTRO's styles take only the PEs from here)."""
    rows, cols, npe = a.pe_rows, a.pe_cols, a.num_pes
    df = a.dataflow
    if df == "nvdla":
        B, G, K, C, P, Q, R, S = _conv_form(l)
        csize = min(64, npe)
        clusters = max(1, npe // csize)
        pes = min(K, clusters) * min(C, csize)
        tiles = _cdiv(K, clusters) * _cdiv(C, csize)
        cycles = B * G * tiles * P * Q * R * S + tiles * int(math.log2(csize) + 1)  # adder-tree drain per tile
        return cycles, pes
    if df == "shidiannao":
        B, G, K, C, P, Q, R, S = _conv_form(l)
        pes = min(P, rows) * min(Q, cols)
        tiles = _cdiv(P, rows) * _cdiv(Q, cols)
        cycles = B * G * K * C * R * S * tiles + tiles * (rows + cols)  # shift in the input window per tile
        return cycles, pes
    if df == "tpu":  # weight stationary: the reduction down the rows, the outputs N across the columns
        Bt, M, N, K = _gemm_form(l)
        pes = min(K, rows) * min(N, cols)
        tiles = _cdiv(K, rows) * _cdiv(N, cols)
        cycles = Bt * tiles * (M + rows + cols)  # stream the rows of M through each weight tile, fill and drain
        return cycles, pes
    if df == "systolic":
        Bt, M, N, K = _gemm_form(l)
        pes = min(M, rows) * min(N, cols)
        tiles = _cdiv(M, rows) * _cdiv(N, cols)
        cycles = Bt * tiles * (K + rows + cols)  # systolic fill and drain per tile
        return cycles, pes
    if df == "eyeriss":
        B, G, K, C, P, Q, R, S = _conv_form(l)
        set_pes = min(R, rows) * min(P, cols)
        sets = max(1, min(npe // set_pes, K * G))
        pes = set_pes * sets
        cycles = B * _cdiv(K * G, sets) * C * Q * S * _cdiv(R, rows) * _cdiv(P, cols) + (rows + cols)
        return cycles, pes
    # generic: ideal over the output points
    red = l.dims["C"] * l.dims["R"] * l.dims["S"] if l.is_conv else l.dims["K"]
    par = max(1, l.macs // max(1, red))
    pes = min(npe, par)
    return _cdiv(l.macs, pes), pes


def supports(l: Layer, a: Accelerator) -> bool:
    """The hardware description decides (compute.op_kinds; empty = all)."""
    return not a.op_kinds or l.op_kind in a.op_kinds


@dataclass
class CostTable:
    """Costs of every (layer, accelerator) pair as [L, A] arrays; ``np.inf`` latency where unsupported."""

    latency: np.ndarray
    """Seconds, weights streamed from outside the accelerator's buffer."""
    latency_pinned: np.ndarray
    """Seconds, weights already resident in the buffer (H2H's weight locality)."""
    pes: np.ndarray
    """PEs the layer occupies (int)."""
    power: np.ndarray
    """Watts while it runs."""
    supported: np.ndarray
    """bool."""
    power_static: np.ndarray | None = None
    """Watts of ``power`` that are the accelerator's static share (the rest is dynamic), for energy breakdowns."""
    mac_share: np.ndarray | None = None
    """Fraction of the dynamic power spent on MACs (the rest on buffer traffic)."""

    @property
    def energy(self) -> np.ndarray:
        return np.where(self.supported, self.power * np.where(self.supported, self.latency, 0.0), 0.0)

    def min_latency(self) -> np.ndarray:
        return self.latency.min(axis=1)


class ModelCost(NamedTuple):
    """One layer on one accelerator, before power is derived."""

    latency_s: float
    pes: int
    """PEs occupied (:func:`compute_cycles`)."""
    mac_pj: float
    """Dynamic energy of the MACs, pJ."""
    buffer_pj: float
    """Dynamic energy of the buffer accesses (L1 and L2 for MAESTRO's styles), pJ."""


def maestro_cost(l: Layer, a: Accelerator, pinned: bool = False) -> maestro_model.MaestroCost:
    """MAESTRO's cycles and accesses of ``l`` under ``a``'s dataflow (cached per shape and hardware)."""
    hw = maestro_model.hw_of(a)
    return maestro_model.style_cost(maestro_model.problem_of(l, a.dataflow), a.dataflow, hw["rows"], hw["cols"],
                                    hw["num_pes"], hw["noc_bw"], hw["offchip_bw"], pinned)


def layer_model(l: Layer, a: Accelerator, pinned: bool = False) -> ModelCost:
    """Latency, PEs and dynamic energy of one layer: MAESTRO's model for its styles, else the closed form
    (latency = max(compute, buffer traffic / buffer bandwidth)). ``pinned``: weights already in the buffer (a
    layer without weights, e.g. a batched matmul whose second operand is an activation, has nothing to pin)."""
    cycles, pes = compute_cycles(l, a)
    pinned = pinned and l.weight_bytes > 0
    if a.dataflow in maestro_model.STYLES:
        r = maestro_cost(l, a, pinned)
        buf = r.l1_accesses * a.l1_energy_pj_per_byte + r.l2_accesses * a.buffer_energy_pj_per_byte
        return ModelCost(r.cycles / a.frequency_hz, pes, r.macs * a.mac_energy_pj, buf)
    nbytes = l.in_bytes + l.out_bytes + (0 if pinned else l.weight_bytes)
    lat = max(cycles / a.frequency_hz, nbytes / a.buffer_bandwidth_bytes_per_s)
    return ModelCost(lat, pes, l.macs * a.mac_energy_pj, nbytes * a.buffer_energy_pj_per_byte)


def layer_cost(l: Layer, a: Accelerator, pinned: bool = False) -> tuple[float, int, float]:
    """(latency s, PEs used, power W) of one layer on one accelerator."""
    return layer_cost_parts(l, a, pinned)[:3]


def layer_cost_parts(l: Layer, a: Accelerator, pinned: bool = False) -> tuple[float, int, float, float, float]:
    """(latency s, PEs used, power W, static power W, MAC share of the dynamic power) of one layer."""
    lat, pes, mac_pj, buf_pj = layer_model(l, a, pinned)
    static = STATIC_POWER_FRACTION * a.power_w
    if a.mac_energy_pj > 0:
        mac_j = mac_pj * 1e-12
        dyn_j = mac_j + buf_pj * 1e-12
        power = static + dyn_j / lat
        share = mac_j / dyn_j if dyn_j > 0 else 1.0
    else:  # power-only description: scale the dynamic part with the share of PEs used
        power = a.power_w * (STATIC_POWER_FRACTION + (1 - STATIC_POWER_FRACTION) * pes / a.num_pes)
        share = 1.0
    return lat, pes, power, static, share


def cost_table(w: Workload, soc: SoC) -> CostTable:
    """Cost of every pair; raises :class:`UnsupportedLayerError` naming the first layer nothing can run."""
    L, A = len(w.layers), soc.n
    lat = np.full((L, A), np.inf)
    latp = np.full((L, A), np.inf)
    pes = np.zeros((L, A), dtype=np.int64)
    pw = np.zeros((L, A))
    sup = np.zeros((L, A), dtype=bool)
    pst = np.zeros((L, A))
    msh = np.zeros((L, A))
    cache: dict[tuple, tuple] = {}
    for i, l in enumerate(w.layers):
        key0 = (l.op_kind, tuple(sorted(l.dims.items())), l.stride, l.in_bytes, l.weight_bytes, l.out_bytes)
        for j, a in enumerate(soc.accs):
            if not supports(l, a):
                continue
            key = key0 + (j,)
            if key not in cache:  # copies of a model repeat the same shapes
                cache[key] = (layer_cost_parts(l, a), layer_cost(l, a, pinned=True))
            (t, p, pwr, ps, ms), (tp, _, _) = cache[key]
            lat[i, j], latp[i, j], pes[i, j], pw[i, j], sup[i, j] = t, tp, p, pwr, True
            pst[i, j], msh[i, j] = ps, ms
        if not sup[i].any():
            raise UnsupportedLayerError(l.name, l.op_kind, [a.name for a in soc.accs])
    return CostTable(lat, latp, pes, pw, sup, pst, msh)
