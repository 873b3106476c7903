"""Plans for a chain: the micro kernel, then order and tiles per cache level (outer to inner, inner tiles no larger
than outer ones), ranked by the model's predicted time. The top K plans differ at the fusion level."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from . import hw
from .errors import InfeasiblePlanError, UnsupportedChainError
from .model import ChainNest, LevelPlan, MicroKernel, Plan, search_level
from .spec import ConvChain, GemmChain, chain_nest

FMA_LATENCY_ACCUMULATORS = 8  # 2 FMA pipes × 4-cycle latency: fewer independent accumulators stall
LOADS_PER_CYCLE = 2
MR_CHOICES = (4, 6, 8, 12, 14)


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


def gemm_dims(spec) -> dict[str, tuple[str, str]]:
    """For each compute op: (its row dim, its vectorised column dim) in chain-dim names."""
    if isinstance(spec, GemmChain):
        return {"gemm1": ("m", "l"), "gemm2": ("m", "n")}
    return {"conv1": ("q", "k1"), "conv2": ("q", "k2")}


def padded_flops(spec, mk: MicroKernel) -> float:
    if isinstance(spec, GemmChain):
        Mp = _pad(spec.M, mk.mr)
        Lp, Np = _pad(spec.L, mk.nr), _pad(spec.N, mk.nr)
        return 2.0 * spec.batch * Mp * Lp * (spec.K + Np)
    Wp = _pad(spec.W, mk.mr)
    K1p, K2p = _pad(spec.K1, mk.nr), _pad(spec.K2, mk.nr)
    return 2.0 * spec.N * spec.H * Wp * (K1p * spec.C * spec.R1 * spec.S1 + K2p * K1p * spec.R2 * spec.S2)


def register_dv(spec, mk: MicroKernel) -> float:
    """Bytes loaded from L1 into registers: per k step of an mr×nr block, mr broadcasts and nr/lanes vectors."""
    macs = padded_flops(spec, mk) / 2
    return macs * (1.0 / mk.nr + 1.0 / mk.mr) * 4


def register_loads(spec, mk: MicroKernel) -> float:
    """Load instructions of the micro kernel: per k step mr broadcasts + nr/lanes vector loads."""
    macs = padded_flops(spec, mk) / 2
    nv = mk.nr // mk.vector_lanes
    return macs / (mk.mr * mk.nr) * (mk.mr + nv)


def register_time(spec, mk: MicroKernel, device) -> float:
    """Time the L1 load ports need for the micro kernel's loads (two loads per cycle per core)."""
    f = float(device.compute.frequency_hz)
    return register_loads(spec, mk) / (LOADS_PER_CYCLE * f * hw.cores(device))


def micro_cycles(spec, mk: MicroKernel, device) -> float:
    """Core cycles of the micro kernel over the whole chain: per k step of an mr×nr block, mr·nr/lanes FMAs and
    mr + nr/lanes loads, two of each per cycle, slowed when fewer than 8 accumulators hide the FMA latency.
    Padding (odd sizes rounded up to mr and nr) is counted as work."""
    macs = padded_flops(spec, mk) / 2
    nv = mk.nr // mk.vector_lanes
    steps = macs / (mk.mr * mk.nr)
    fma = steps * mk.mr * nv
    loads = steps * (mk.mr + nv)
    acc = mk.mr * nv
    return max(fma / 2 * max(1.0, FMA_LATENCY_ACCUMULATORS / acc), loads / LOADS_PER_CYCLE)


def choose_micro(spec, device, peak: float) -> tuple[MicroKernel, list[tuple[float, MicroKernel]]]:
    """The micro kernel with the fewest modelled cycles (:func:`micro_cycles`): padded work, FMA and load issue,
    latency stalls. Both terms are in the same unit (cycles), so the choice does not depend on a measured peak."""
    scored = []
    for mk in hw.micro_kernels(device):
        if mk.mr not in MR_CHOICES:
            continue
        acc = mk.mr * mk.nr // mk.vector_lanes
        scored.append((micro_cycles(spec, mk, device) * (1 - 1e-3 * min(acc, 24) / 24), mk))  # ties: more acc
    scored.sort(key=lambda x: x[0])
    return scored[0][1], scored


def granularity(spec, mk: MicroKernel) -> dict[str, int]:
    if isinstance(spec, GemmChain):
        return {"m": mk.mr, "l": mk.nr, "n": mk.nr, "k": 1}
    return {"q": mk.mr, "k1": mk.nr, "k2": mk.nr}


def order_constraint(spec):
    """Orders the kernel templates can realise. GEMM chains and attention: every order (attention with l in the
    fused prefix is the online-softmax template: per l block the scores, their max and sum and a partial output,
    rescaled and combined at the end; with l outside it, whole rows of scores per row block). Conv chains keep
    the intermediate's channels inside the spatial tile (conv2 needs all of them)."""
    if isinstance(spec, GemmChain):
        return None

    def conv_ok(order):
        # k1 (conv1's output channels = conv2's reduction) stays inside the fused spatial tile
        first = next((d for d in order if d not in ("p", "q")), None)
        return first != "k1"
    return conv_ok


def plan_chain(spec, device: Any = None, top_k: int = 4, fusion_level: str | None = None,
               peak: float | None = None) -> list[Plan]:
    """The model's top ``top_k`` plans for ``spec`` on ``device`` (default: the host), best first.

    Each plan fuses at one memory level (its order and tiles are what the kernel realises): by default the best
    plans fused at L2 and, for the rest of the K, the best fused at L1 (an L1-sized fused tile trades more outer
    traffic for a hotter inner loop; the model's time rarely separates them, the measurement does)."""
    if not isinstance(spec, (GemmChain, ConvChain)):
        raise UnsupportedChainError(str(spec), "expected a GemmChain or ConvChain spec")
    dev = hw.resolve_device(device)
    nest: ChainNest = chain_nest(spec)
    peak = peak or hw.peak_flops(dev)
    levels = hw.model_levels(dev)
    if not levels:
        raise UnsupportedChainError(spec.name, f"device {dev.name} has no cache level to plan for")
    mk, _ = choose_micro(spec, dev, peak)
    gran = granularity(spec, mk)
    gran = {d: g for d, g in gran.items() if d in nest.extents}
    ok = order_constraint(spec)
    ncores = hw.cores(dev)
    names = [lv.name for lv in levels]
    if fusion_level is not None:
        if fusion_level not in names:
            raise UnsupportedChainError(spec.name, f"fusion level {fusion_level!r} not among the device's levels {names}")
        fuse_levels = [fusion_level]
    else:
        fuse_levels = [n for n in ("l2", "l1") if n in names] or [names[-1]]
    quota = {fuse_levels[0]: top_k - top_k // 2 if len(fuse_levels) > 1 else top_k}
    if len(fuse_levels) > 1:
        quota[fuse_levels[1]] = top_k // 2
    # outer levels first; each inner level's tiles are capped by the outer level's best tiles
    flops = padded_flops(spec, mk)
    compute_s = flops / peak
    per_level: dict[str, list[LevelPlan]] = {}
    caps: dict[str, int] | None = None
    last_fuse = max(names.index(f) for f in fuse_levels)
    for idx, lv in enumerate(levels):
        k = max(1, quota.get(lv.name, 1))
        use_ok = ok if idx <= last_fuse else None  # inside every fusion level: sub-tiles, no template constraint
        try:
            res = search_level(nest, lv.capacity_bytes, lv.fill_bandwidth_bytes_per_s, top=k, granularity=gran,
                               cap_tiles=caps, order_ok=use_ok, cores=ncores, level=lv.name, compute_s=compute_s)
        except InfeasiblePlanError:
            if lv.name in fuse_levels and use_ok is not None:
                # no order meets the template's constraint (degenerate extents): the kernel realises its own
                try:
                    res = search_level(nest, lv.capacity_bytes, lv.fill_bandwidth_bytes_per_s, top=k,
                                       granularity=gran, cap_tiles=caps, order_ok=None, cores=ncores, level=lv.name,
                                       compute_s=compute_s)
                except InfeasiblePlanError:
                    if lv.name == fuse_levels[0]:
                        raise
                    continue
            elif lv.name == fuse_levels[0]:
                raise
            else:
                continue  # this level cannot hold even the smallest tiles: it plays no part
        per_level[lv.name] = res
        caps = {d: res[0].tiles[d] for d in nest.loops}
    levels = [lv for lv in levels if lv.name in per_level]
    reg_dv = register_dv(spec, mk)
    reg_t = register_time(spec, mk, dev)
    plans = []
    for fuse in fuse_levels:
        if fuse not in per_level:
            continue
        for alt in per_level[fuse][:quota[fuse]]:
            lps = tuple(alt if lv.name == fuse else per_level[lv.name][0] for lv in levels)
            units = alt.parallel_units
            eff = units / (math.ceil(units / ncores) * ncores)
            pred = max([compute_s / eff, reg_t] + [lp.time_s for lp in lps])
            plans.append(Plan(spec.name, lps, mk, fuse, int(flops), compute_s, pred, eff, peak, int(reg_dv), reg_t))
    plans.sort(key=lambda p: (p.predicted_s, names.index(p.fusion_level), p.fused.dv_bytes))
    return [replace(p, rank=i) for i, p in enumerate(plans)]


def predict_fusion_gain(spec, device: Any = None) -> dict[str, float]:
    """Predicted time fused vs unfused (the intermediate written to and read back from DRAM) on ``device``."""
    dev = hw.resolve_device(device)
    best = plan_chain(spec, dev, top_k=1)[0]
    inter = (spec.batch * spec.M * spec.L if isinstance(spec, GemmChain) else spec.N * spec.K1 * spec.H * spec.W) * 4
    dram = dev.memory[0].total_read_bandwidth_bytes_per_s
    unfused_dram = best.levels[0].dv_bytes + 2 * inter
    unfused = max(best.predicted_s, unfused_dram / dram, best.compute_s / best.parallel_efficiency)
    return {"fused_ms": best.predicted_s * 1e3, "unfused_ms": unfused * 1e3,
            "predicted_gain": unfused / best.predicted_s, "intermediate_mib": inter / 2**20,
            "bottleneck": best.bottleneck}
