"""Plans for a chain: the micro kernel, then order and tiles per cache level (outer to inner, inner tiles no larger
than outer ones), ranked by the model's predicted time. The top K plans differ at the fusion level, and one of them
uses the runner-up micro kernel."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from shared_ir.hostinfo import fma_pipes

from . import hw, micro_rates
from .errors import InfeasiblePlanError, UnsupportedChainError
from .model import ChainNest, LevelPlan, MicroKernel, Plan, search_level
from .spec import ConvChain, GemmChain, chain_nest

CANDIDATES_PER_PLAN = 4  # level plans searched per plan wanted: duplicates (same realised kernel) are dropped

LOADS_PER_CYCLE = 2
MR_CHOICES = (4, 5, 6, 7, 8, 12, 14)
"""Register-block heights offered. 5 and 7 exist for odd row extents (Inception's 35 columns: unfused 3×3→3×3 at
1.95 ms with 7×32 or 5×32 vs 2.11 ms with 12×32, one interleaved run)."""


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


def gemm_dims(spec) -> dict[str, tuple[str, str]]:
    """For each compute op: (its row dim, its vectorised column dim) in chain-dim names."""
    if isinstance(spec, GemmChain):
        return {"gemm1": ("m", "l"), "gemm2": ("m", "n")}
    return {"conv1": ("q", "k1"), "conv2": ("q", "k2")}


def block_work(spec, mk: MicroKernel, T: dict[str, int] | None = None) -> list[tuple[float, int, int]]:
    """The micro kernel's work as (multiply-adds, register block width, reduction run length) per compute op and
    block width: ``nr`` wide blocks over the padded extents, and a GEMM chain's narrower last blocks where its
    columns end inside a panel (``codegen.kernel_shape``: ``Lv``, ``Nv``; the padded rows ``Mp`` are computed too).
    GEMM 2 of a fused kernel reduces over the l tile ``T["l"]`` per segment; without tiles, over all of ``Lv``."""
    if isinstance(spec, GemmChain):
        from .codegen import kernel_shape

        ks = kernel_shape(spec, mk)
        rows, K, Lv = spec.batch * ks.Mp, spec.K, ks.Lv
        tl = min(Lv, T["l"]) if T and "l" in T else Lv
        work = [(rows * (Lv - ks.l_tail) * K, mk.nr, K), (rows * (ks.Nv - ks.n_tail) * Lv, mk.nr, tl),
                (rows * ks.l_tail * K, ks.l_tail, K), (rows * ks.n_tail * Lv, ks.n_tail, tl)]
        return [(float(m), w, r) for m, w, r in work if m > 0]
    Wp = _pad(spec.W, mk.mr)
    K1p, K2p = _pad(spec.K1, mk.nr), _pad(spec.K2, mk.nr)
    pos = spec.N * spec.H * Wp
    red1, red2 = spec.C * spec.R1 * spec.S1, K1p * spec.R2 * spec.S2
    return [(float(pos * K1p * red1), mk.nr, red1), (float(pos * K2p * red2), mk.nr, red2)]


def padded_flops(spec, mk: MicroKernel) -> float:
    """2 × the multiply-adds the kernel's micro kernel executes (:func:`block_work`)."""
    return 2.0 * sum(m for m, _, _ in block_work(spec, mk))


def register_dv(spec, mk: MicroKernel) -> float:
    """Bytes loaded from L1 into registers: per k step of an mr×w block, mr broadcasts and w/lanes vectors."""
    return sum(m * (1.0 / w + 1.0 / mk.mr) * 4 for m, w, _ in block_work(spec, mk))


def register_loads(spec, mk: MicroKernel) -> float:
    """Load instructions of the micro kernel: per k step mr broadcasts + w/lanes vector loads."""
    return sum(m / (mk.mr * w) * (mk.mr + w / mk.vector_lanes) for m, w, _ in block_work(spec, mk))


def register_time(spec, mk: MicroKernel, device) -> float:
    """Time the L1 load ports need for the micro kernel's loads (two loads per cycle per core)."""
    f = hw.clock_hz(device)
    return register_loads(spec, mk) / (LOADS_PER_CYCLE * f * hw.cores(device))


def micro_cycles(spec, mk: MicroKernel, device) -> float:
    """Core cycles of the micro kernel over the whole chain: per k step of an mr×nr block, mr·nr/lanes FMAs and
    mr + nr/lanes loads; loads at two per cycle, FMAs at the device's vector FMA rate (pipes = saturating
    accumulators / latency: 2 per cycle on two-pipe AVX-512 cores, 1 on Zen 4, measured by the peak kernel), slowed
    when fewer accumulators than pipes × latency hide the latency. Padding (odd sizes rounded up to mr and nr; to
    whole vectors where a GEMM chain's last block is narrower) is counted as work, the narrower blocks at their own
    rate (:func:`block_work`).

    Why the measured rate: with two FMAs per cycle assumed, an 8×16 block (9 loads per 8 FMAs) looked load-bound
    and 12 % slower than 8×32 per useful flop; on Zen 4 (one 512-bit FMA per cycle) both are FMA-bound, so padding
    decides: ViT-Huge/14 (N = 80: 8×32 pads it to 96) measured 1.57 ms with 8×16 vs 1.83 ms with 8×32."""
    sat = hw.saturating_accumulators(device)
    pipes = fma_pipes(sat)
    cycles = 0.0
    for macs, w, _ in block_work(spec, mk):
        nv = w / mk.vector_lanes
        steps = macs / (mk.mr * w)
        fma, loads = steps * mk.mr * nv, steps * (mk.mr + nv)
        cycles += max(fma / pipes * max(1.0, sat / (mk.mr * nv)), loads / LOADS_PER_CYCLE)
    # every output block starts from zeroed accumulators and ends with their store (one per cycle), after the
    # FMA chains' latency ramp: per block, not per step, so short reductions favour tall blocks (KN8-4k, K = 8:
    # 14×16 4.3 ms vs 8×16 5.0 ms, one interleaved run)
    acc = mk.mr * mk.nr // mk.vector_lanes
    return cycles + output_blocks(spec, mk) * (acc + ACC_RAMP_CYCLES)


def output_blocks(spec, mk: MicroKernel) -> float:
    """mr×nr output blocks of both stages (each one reduction run of the micro kernel)."""
    if isinstance(spec, GemmChain):
        from .codegen import kernel_shape

        ks = kernel_shape(spec, mk)
        return spec.batch * ks.Mp / mk.mr * (-(-ks.Lv // mk.nr) - (-ks.Nv // mk.nr))
    Wp = _pad(spec.W, mk.mr)
    return spec.N * spec.H * Wp / mk.mr * (_pad(spec.K1, mk.nr) + _pad(spec.K2, mk.nr)) / mk.nr


def padded_rows_copy_s(spec, mk: MicroKernel, device) -> float:
    """Seconds of the per-call copy of A into a row-padded scratch buffer, when mr does not divide M (GEMM chains;
    single-threaded: read and write at one core's share of the memory bandwidth). Measured on ViT-Base/14
    (12 × 256 × 64 floats): 6×32's call 0.075 ms above its module alone, 8×32's (no copy) 0.024 ms."""
    if not isinstance(spec, GemmChain) or spec.M % mk.mr == 0:
        return 0.0
    bw = float(device.memory[0].total_read_bandwidth_bytes_per_s)
    return 2.0 * 4.0 * spec.batch * spec.M * spec.K / bw


PANEL_STREAM_OVERLAP = 0.3
"""Share of the weight panels' L2 stream (:func:`panel_stream_s`) that the FMAs do not hide. Fitted on Zen 5
(Darknet-19, YOLO-2, ResNet-50 3×3→1×1, fused, one interleaved run: 4×64 blocks, 16 B of panel per FMA from L2,
×1.08-1.15 slower than 14×32, 4.6 B per FMA, both FMA-bound with 16 and 28 accumulators)."""


def panel_stream_s(spec, mk: MicroKernel, device, T: dict[str, int] | None = None) -> float:
    """Seconds of the weight panels' traffic from L2 into L1: the micro kernel runs every mr-row block of a tile
    against one nr-wide panel (reduction × nr floats); when that panel and the block's rows (reduction × mr) do not
    fit L1 together, each block streams the panel from L2 again: 4/mr bytes per MAC, at the L2→L1 bandwidth
    (:func:`block_work` gives each op's blocks and reduction runs).

    Why: on Zen 5 (two 512-bit FMAs per cycle) a 4-row block needs 32 B per cycle of panel from L2 per core, at the
    limit of what L2 delivers; 14 rows need 9 B. The FMA and load-port model alone saw 4×64 and 14×32 tie on the
    conv chains (reduction 9·C: panels of 150-300 KB), measured ×1.08-1.15 apart."""
    caches = _caches(device)
    if "l1" not in caches:
        return 0.0
    l1_cap, l1_fill = caches["l1"]
    moved = sum(macs * 4.0 / mk.mr for macs, w, red in block_work(spec, mk, T) if 4.0 * red * (w + mk.mr) > l1_cap)
    return moved / l1_fill


def chain_kind(spec) -> str:
    """"conv" or "gemm": the micro kernels' measured rates differ between the two (calibrate.py)."""
    return "conv" if isinstance(spec, ConvChain) else "gemm"


def choose_micro(spec, device, peak: float | None = None) -> tuple[MicroKernel, list[tuple[float, MicroKernel]]]:
    """The micro kernel with the least modelled time: :func:`micro_cycles` (padded work, FMA and load issue,
    latency stalls, per-block accumulator cost) at the peak's cycle rate, plus the padded-rows copy
    (:func:`padded_rows_copy_s`). Ranked list as ``(seconds, kernel)``."""
    peak = peak or hw.peak_flops(device)
    pipes = fma_pipes(hw.saturating_accumulators(device))
    scored = []
    for mk in hw.micro_kernels(device):
        if mk.mr not in MR_CHOICES:
            continue
        acc = mk.mr * mk.nr // mk.vector_lanes
        # core-cycles → seconds: one cycle of all cores issues pipes × lanes FMAs (2 flops each) per core
        f = micro_rates.factor(device, mk, chain_kind(spec))
        if f is not None:  # measured on this machine: the kernel's own rate over the padded work
            compute = padded_flops(spec, mk) / peak * f
        else:
            compute = micro_cycles(spec, mk, device) * pipes * mk.vector_lanes * 2 / peak
        t = compute + padded_rows_copy_s(spec, mk, device) + PANEL_STREAM_OVERLAP * panel_stream_s(spec, mk, device)
        scored.append((t * (1 - 1e-3 * min(acc, 24) / 24), mk))  # ties: more accumulators
    scored.sort(key=lambda x: x[0])
    return scored[0][1], scored


# --- what the code generator realises, and what that costs beyond the bottleneck -----------------------------------
# Online softmax in block form: per (row, l block) the row max and sum over the block (horizontal vector reductions),
# the block's rescaling factor (an exp), the Tm×N partial output written and read back by the combination.
# Cycles per (row, block), from one measurement (Attention-2k, one thread, Tl = 32 vs 64: 18 ms for 262k extra
# row-blocks at 2.6 GHz ≈ 180 cycles, with the partial outputs' traffic inside); the per-element work (scores,
# exp, P·V) is counted in the flops.
SOFTMAX_BLOCK_CYCLES = 150.0
SPILL_FRACTION = 0.5  # a tile larger than half a cache level shares it with the operand streams: it spills
ACC_RAMP_CYCLES = 4 * 4  # FMA latency × the dependent steps before a refilled accumulator block is back at rate


def realised(spec, lp: LevelPlan, mk: MicroKernel, cores: int = 1) -> tuple[tuple[str, ...], dict[str, int]]:
    """The fused level's order and tiles as the code generator fits them (tiles dividing the padded extents,
    multiples of the micro kernel; conv: only the spatial tiles, channels stay whole, whole rows with a 1×1 second
    conv: :func:`conv.fit_tiles`, over ``cores``). Dims with one block are dropped from the order: plans that differ
    only there compile to the same kernel."""
    if isinstance(spec, GemmChain):
        from .codegen import fit_gemm_tiles, kernel_shape

        ks = kernel_shape(spec, mk)
        ext = {"m": ks.Mp, "l": ks.Lp, "n": ks.Np, "k": ks.K}
        T = fit_gemm_tiles(spec, ks, lp.tiles)
        order = [d for d in lp.order if d in ext]
        order += [d for d in ext if d not in order]
        return tuple(d for d in order if T[d] < ext[d]), T
    from .conv import fit_tiles

    Wp = _pad(spec.W, mk.mr)
    T = fit_tiles(spec, mk.mr, mk.nr, lp.tiles, lp.capacity_bytes, cores)
    return tuple(d for d in ("p", "q") if T[d] < {"p": spec.H, "q": Wp}[d]), T


def _caches(device) -> dict[str, tuple[int, float]]:
    """Per-core capacity and fill bandwidth (all cores) of each cache level, by name."""
    return {lv.name: (lv.capacity_bytes, lv.fill_bandwidth_bytes_per_s) for lv in hw.model_levels(device)}


def operand_restream(nest: ChainNest, lp: LevelPlan, device) -> float:
    """Seconds of operand traffic beyond one pass, for the realised loop nest (the fused level's order and tiles)
    at each cache level below the last-level one: a tensor whose one-batch-element extent fits in half the level
    stays there (one pass); a larger one is moved as the model's DV of the fused tiles says (re-read per outer
    tile). The level model gives each level its own tiles, the generated code has only these."""
    levels = hw.model_levels(device)
    t = 0.0
    tiles = nest.full_tiles(lp.tiles)
    dvs: dict[str, int] = {}
    for u in nest.uses:
        dvs[u.name] = dvs.get(u.name, 0) + nest.dv_tensor(u, lp.order, tiles)
    for lv in levels[1:]:
        for u in nest.uses:
            total = u.access.tensor.nbytes
            per_batch = total
            for d in nest.batch:
                if d in u.dims:
                    per_batch //= max(1, nest.extents[d])
            if per_batch > SPILL_FRACTION * lv.capacity_bytes and dvs[u.name] > total:
                t += (dvs[u.name] - total) / lv.fill_bandwidth_bytes_per_s
    return t


def kernel_overheads(spec, order: tuple[str, ...], T: dict[str, int], mk: MicroKernel, device,
                     peak: float) -> dict[str, float]:
    """Seconds the realised kernel spends on top of its bottleneck (compute or a level's traffic), by cause.

    The level model keeps the intermediate in the fused level and gives every inner level its own best tiles; the
    generated code has one tiling (the fused level's) plus the micro kernel, so:

    * *intermediate spill*: a live intermediate tile larger than (half) an inner cache is written to and read back
      from the next level, once per pass of the consumer over it;
    * *accumulators*: a reduction split into segments (GEMM 1 over k tiles, GEMM 2 over l tiles) loads and stores
      the mr×nr accumulator block once per segment (through the L1 ports);
    * conv: the halo rows/columns of the intermediate are recomputed by every spatial tile;
    * attention in block form: per row and l block a fixed cost (row max/sum, rescaling, the partial output).
    """
    caches = _caches(device)
    n = hw.cores(device)
    f = hw.clock_hz(device)
    l1_cap, l1_fill = caches.get("l1", (1 << 62, math.inf))
    l2_cap, l2_fill = caches.get("l2", (1 << 62, math.inf))
    out: dict[str, float] = {}

    def spill(tile_bytes: float, traffic_bytes: float) -> float:
        t = 0.0
        if tile_bytes > SPILL_FRACTION * l1_cap:
            t += traffic_bytes / l1_fill
        if tile_bytes > SPILL_FRACTION * l2_cap:
            t += traffic_bytes / l2_fill
        return t

    if isinstance(spec, GemmChain):
        from .codegen import _prefix, kernel_shape

        ks = kernel_shape(spec, mk)
        b, Mp, Lp, Np, K = ks.batch, ks.Mp, ks.Lp, ks.Np, ks.K
        full = list(order) + [d for d in ("m", "l", "k", "n") if d not in order]
        prefix = _prefix(full) if order else []
        c_total = 4.0 * b * Mp * Lp
        rows = T["m"] if "m" in prefix else Mp
        n_pass = -(-Np // T["n"])  # GEMM 2's column tiles: each reads the intermediate's tile again
        blocked = spec.glue == "softmax" and "l" in prefix and T["l"] < Lp
        if spec.glue == "softmax" and not blocked:
            # whole score rows per row block, two buffers (scores, probabilities), three passes (max, exp, sum)
            out["intermediate_spill"] = spill(2 * 4.0 * rows * Lp, c_total * (2 + 3 + n_pass))
        elif blocked:
            nb = Lp // T["l"]
            out["intermediate_spill"] = spill(2 * 4.0 * rows * T["l"], c_total * (2 + 2 + n_pass))
            part = 4.0 * b * Mp * nb * Np  # the blocks' partial outputs: written, then read by the combination
            out["softmax_partials"] = spill(4.0 * rows * nb * Np, 2 * part)
            out["softmax_blocks"] = b * Mp * nb * SOFTMAX_BLOCK_CYCLES / (f * n)
        else:
            cols = T["l"] if "l" in prefix else Lp
            copies = 2 if (spec.glue not in ("none", None) or spec.scale != 1.0 or spec.bias1) else 1
            out["intermediate_spill"] = spill(copies * 4.0 * rows * cols, c_total * (copies + n_pass))
        # per extra reduction segment and mr×nr block: the accumulators loaded and stored (≈1.5 cycles per vector:
        # 2 loads, 1 store per cycle) and the FMA chains' latency ramp before the block runs at full rate again
        nv = mk.nr // mk.vector_lanes
        seg_cycles = mk.mr * nv * 1.5 + ACC_RAMP_CYCLES
        # (attention in block form writes a partial output per l block instead: counted in softmax_partials)
        l_segs = 0 if blocked else max(0, -(-Lp // T["l"]) - 1)
        segs = b * (Mp // mk.mr) * ((Lp // mk.nr) * max(0, -(-K // T["k"]) - 1) + (Np // mk.nr) * l_segs)
        out["accumulators"] = segs * seg_cycles / (f * n)
        out["padded_rows"] = padded_rows_copy_s(spec, mk, device)
        out["panel_stream"] = PANEL_STREAM_OVERLAP * panel_stream_s(spec, mk, device, T)
        return out
    # conv chains: spatial tiles Tp × Tq, every channel inside
    Wp = _pad(spec.W, mk.mr)
    K1p, K2p = _pad(spec.K1, mk.nr), _pad(spec.K2, mk.nr)
    hp, hq = spec.R2 - 1, spec.S2 - 1
    tiles = spec.N * -(-spec.H // T["p"]) * -(-Wp // T["q"])
    inter_tile = (T["p"] + hp) * (T["q"] + hq)
    from .conv import _block_rows

    # conv1 runs whole register blocks over its Tq + halo columns: a width no block size divides is rounded up
    mr1 = _block_rows(T["q"] + hq, mk.mr, mk.nr, mk.vector_lanes)
    extra = tiles * (T["p"] + hp) * _pad(T["q"] + hq, mr1) - spec.N * spec.H * Wp  # recomputed halo positions
    out["halo_recompute"] = 2.0 * extra * K1p * spec.C * spec.R1 * spec.S1 / peak
    u_tile = 4.0 * inter_tile * K1p
    out["intermediate_spill"] = spill(u_tile, tiles * u_tile * (2 + K2p // mk.nr))
    in_tile = 4.0 * (T["p"] + hp + spec.R1 - 1) * (T["q"] + hq + spec.S1 - 1) * spec.C
    out["input_restream"] = spill(in_tile, tiles * in_tile * (K1p // mk.nr))
    out["panel_stream"] = PANEL_STREAM_OVERLAP * panel_stream_s(spec, mk, device)
    return out


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
               peak: float | None = None, micro: MicroKernel | None = None) -> list[Plan]:
    """The model's top ``top_k`` plans for ``spec`` on ``device`` (default: the host), best first.

    Each plan fuses at one memory level (its order and tiles are what the kernel realises): by default the best
    plans fused at L2 and, for the rest of the K, the best fused at L1 (an L1-sized fused tile trades more outer
    traffic for a hotter inner loop; the model's time rarely separates them, the measurement does).

    With ``top_k`` ≥ 3 and no ``micro`` given, one of the K is the best plan of the runner-up micro kernel
    (:func:`choose_micro`): the model's times of the best few micro kernels are often within 1 % of each other
    while measured kernels differ by 5-10 % (Bert-Base 8×32 vs 4×64, YOLO-2 14×32 vs 4×32), so the measured
    re-ranking gets two micro kernels to choose from."""
    if not isinstance(spec, (GemmChain, ConvChain)):
        raise UnsupportedChainError(str(spec), "expected a GemmChain or ConvChain spec")
    dev = hw.resolve_device(device)
    peak = peak or hw.peak_flops(dev)
    if micro is not None:
        plans = _plans_for_micro(spec, dev, top_k, fusion_level, peak, micro)
    else:
        ranked = _rank_micro(spec, dev, fusion_level, peak)
        alt = top_k >= 3 and len(ranked) > 1
        plans = _plans_for_micro(spec, dev, top_k - 1 if alt else top_k, fusion_level, peak, ranked[0][0])
        for mk, best in ranked[1:] if alt else ():
            # the runner-up's best plan (as the ranking planned it), and more micro kernels' while the first gave
            # fewer distinct kernels
            want = max(1, top_k - len(plans))
            plans += best if want == 1 and best else _plans_for_micro(spec, dev, want, fusion_level, peak, mk)
            if len(plans) >= top_k:
                break
    names = [lv.name for lv in hw.model_levels(dev)]
    plans.sort(key=lambda p: (p.predicted_s, names.index(p.fusion_level), p.fused.dv_bytes))
    return [replace(p, rank=i) for i, p in enumerate(plans)]


MICRO_SHORTLIST = 4
"""Micro kernels (best of :func:`choose_micro`) whose best whole plan the planner compares."""


def _rank_micro(spec, dev, fusion_level: str | None, peak: float) -> list[tuple[MicroKernel, list[Plan]]]:
    """The :data:`MICRO_SHORTLIST` best micro kernels by :func:`choose_micro`, re-ranked by the predicted time of
    each one's best plan (tiles, halo recompute, spills: what the micro kernel's own cycles do not see); each with
    that best plan (a one-plan list; empty where none was feasible).

    Why: Inception 3×3→3×3 (35 columns): 12×32 has the least micro-kernel time (36 columns, but fewer panel passes
    from L2) while its tiles recompute more halo; measured fused 7×32 0.92 ms, 6×32 0.78 ms, 12×32 1.04 ms
    (Zen 5, interleaved), as the whole plans predict (0.95, 0.82, 0.99 ms)."""
    short = [mk for _, mk in choose_micro(spec, dev, peak)[1][:MICRO_SHORTLIST]]
    scored = []
    for i, mk in enumerate(short):
        try:
            best = _plans_for_micro(spec, dev, 1, fusion_level, peak, mk)
        except InfeasiblePlanError:
            continue
        scored.append((best[0].predicted_s, i, mk, best))
    if not scored:
        return [(mk, []) for mk in short]
    return [(mk, best) for _, _, mk, best in sorted(scored, key=lambda x: x[:2])]


def _plans_for_micro(spec, dev, top_k: int, fusion_level: str | None, peak: float, mk: MicroKernel) -> list[Plan]:
    """The best ``top_k`` plans with one micro kernel (see :func:`plan_chain`)."""
    nest: ChainNest = chain_nest(spec)
    levels = hw.model_levels(dev)
    if not levels:
        raise UnsupportedChainError(spec.name, f"device {dev.name} has no cache level to plan for")
    gran = granularity(spec, mk)
    gran = {d: g for d, g in gran.items() if d in nest.extents}
    ok = order_constraint(spec)
    ncores = hw.cores(dev)
    names = [lv.name for lv in levels]
    if fusion_level is not None:
        if fusion_level not in names:
            raise UnsupportedChainError(spec.name,
                                        f"fusion level {fusion_level!r} not among the device's levels {names}")
        fuse_levels = [fusion_level]
    else:
        fuse_levels = [n for n in ("l2", "l1") if n in names] or [names[-1]]
    quota = {fuse_levels[0]: top_k - top_k // 2 if len(fuse_levels) > 1 else top_k}
    if len(fuse_levels) > 1:
        quota[fuse_levels[1]] = top_k // 2
    # outer levels first; each inner level's tiles are capped by the outer level's best tiles
    flops = padded_flops(spec, mk)
    # the micro kernel's rate as measured on this machine (calibrate.factor: 1.0 where none was measured)
    compute_s = flops / peak * (micro_rates.factor(dev, mk, chain_kind(spec)) or 1.0)
    per_level: dict[str, list[LevelPlan]] = {}
    caps: dict[str, int] | None = None
    last_fuse = max(names.index(f) for f in fuse_levels)
    for idx, lv in enumerate(levels):
        k = max(1, quota.get(lv.name, 0) * CANDIDATES_PER_PLAN)
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
    seen: set = set()
    for fuse in fuse_levels:
        if fuse not in per_level:
            continue
        mine = []
        for alt in per_level[fuse]:
            order_r, T_r = realised(spec, alt, mk, ncores)
            sig = (order_r, tuple(sorted(T_r.items())))
            if sig in seen:
                continue  # the code generator would build the same kernel as a plan already in the list
            seen.add(sig)
            lps = tuple(alt if lv.name == fuse else per_level[lv.name][0] for lv in levels)
            units = alt.parallel_units
            if isinstance(spec, ConvChain):
                # the parallel loop runs over the *realised* spatial tiles (fitted to divide the padded extents):
                # e.g. Inception 35×36 with Tq 24 → 12 gives 3 tiles on 2 cores (2 rounds), not the model's 2
                units = spec.N * -(-spec.H // T_r["p"]) * -(-_pad(spec.W, mk.mr) // T_r["q"])
            eff = units / (math.ceil(units / ncores) * ncores)
            base = max([compute_s / eff, reg_t] + [lp.time_s for lp in lps])
            ov = kernel_overheads(spec, order_r, T_r, mk, dev, peak)
            ov["operand_restream"] = operand_restream(nest, alt, dev)
            ov_s = sum(ov.values())
            mine.append(Plan(spec.name, lps, mk, fuse, int(flops), compute_s, base + ov_s, eff, peak, int(reg_dv),
                             reg_t, overhead_s=ov_s, overheads=ov, signature=sig))
        mine.sort(key=lambda p: (p.predicted_s, p.fused.dv_bytes))
        plans += mine[:quota[fuse]]
    return plans


UNFUSED_MARGIN = 1.10
"""``tune`` also measures the unfused kernel when the model predicts it within this factor of the best fused plan."""


def unfused_competitive(spec, plan: Plan, device: Any = None) -> bool:
    """Whether the unfused kernel (same micro kernel, the intermediate written to and read back from memory) could
    be as fast as ``plan``: its predicted time (compute at full parallel efficiency, or the traffic of the chain's
    operands plus the intermediate twice through DRAM, whichever binds) within ``UNFUSED_MARGIN`` of the plan's.
    True for chains the model finds compute-bound even unfused (the reference's conv and GEMM chains, and here also
    attention and the K = N = 32/64 chains); False where the intermediate's round trip through DRAM would bind
    (K = N = 8/16 chains with 64-128 MiB intermediates): there the unfused kernel is not built or timed."""
    _, dram_s = _unfused_dram(spec, plan, hw.resolve_device(device))
    return max(plan.compute_s, dram_s) <= UNFUSED_MARGIN * plan.predicted_s


def _unfused_dram(spec, plan: Plan, dev) -> tuple[int, float]:
    """(intermediate bytes, seconds of DRAM traffic of the unfused chain: the plan's outer-level operand traffic plus
    the intermediate written and read back)."""
    inter = (spec.batch * spec.M * spec.L if isinstance(spec, GemmChain) else spec.N * spec.K1 * spec.H * spec.W) * 4
    return inter, (plan.levels[0].dv_bytes + 2 * inter) / dev.memory[0].total_read_bandwidth_bytes_per_s


def predict_fusion_gain(spec, device: Any = None) -> dict[str, float]:
    """Predicted time fused vs unfused (the intermediate written to and read back from DRAM) on ``device``."""
    dev = hw.resolve_device(device)
    best = plan_chain(spec, dev, top_k=1)[0]
    inter, dram_s = _unfused_dram(spec, best, dev)
    unfused = max(best.predicted_s, dram_s, best.compute_s / best.parallel_efficiency)
    return {"fused_ms": best.predicted_s * 1e3, "unfused_ms": unfused * 1e3,
            "predicted_gain": unfused / best.predicted_s, "intermediate_mib": inter / 2**20,
            "bottleneck": best.bottleneck}
