"""TVM code generation for conv→conv chains (stride 1, 'same' padding, optional biases and ReLU between).

Layouts inside the kernel: the input zero-padded (by both convs' halos), weights packed as ``[k/nr, c, r, s, nr]``
(one vector load per reduction step), the intermediate in ``NCHW[nr]c`` (a broadcast per reduction step of conv2),
the output accumulated in ``NCHW[nr]c`` and unpacked to NCHW right after each tile (panel by panel, vector stores along
the rows: ``_unpack_panels``). The micro kernel is the GEMM one: ``mr`` output columns × ``nr`` output channels of
accumulators.

Fusion: the plan's spatial tiles (p rows × q columns) are the fused loop: per tile, conv1 computes the rows and
columns conv2 needs (its halo is recomputed by neighbouring tiles), the ReLU/bias/border mask is applied, and
conv2 runs on it. Channel loops stay inside the tile (conv2 needs every channel of the intermediate).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .codegen import relu
from .model import Plan
from .spec import ConvChain


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


@dataclass(frozen=True)
class ConvKernelShape:
    N: int
    C: int
    H: int
    W: int
    Wp: int
    K1: int
    K1p: int
    K2: int
    K2p: int
    mr: int
    nr: int
    Wt: int
    """Width of the intermediate (conv2's halo included), padded to a multiple of ``mr`` so that the unfused conv1
    runs whole register blocks (no predicated tail block)."""


def conv_kernel_shape(spec: ConvChain, plan: Plan) -> ConvKernelShape:
    mr, nr = plan.micro.mr, plan.micro.nr
    Wp = _pad(spec.W, mr)
    return ConvKernelShape(spec.N, spec.C, spec.H, spec.W, Wp, spec.K1, _pad(spec.K1, nr), spec.K2,
                           _pad(spec.K2, nr), mr, nr, _pad(Wp + 2 * (spec.S2 // 2), mr))


def conv_chain_te(spec: ConvChain, plan: Plan, fused: bool = True):
    """TE of the chain. ``fused=False``: conv1 is computed over the image only (``T`` is H × Wp) and the
    activation stage ``U`` adds conv2's zero halo; fused, conv1's tile covers the halo (recomputed by neighbouring
    tiles, zero outside the image), since its tile is what conv2's tile reads.

    Why the unfused interior: computing conv1 over the halo as well (masked to zero afterwards) was 27-29 % more
    conv1 work on Inception's 35 × 35 (37 × 42 outputs for 35 × 35) and ResNet-50's 56 × 56 3×3→3×3 chains."""
    from tvm import te, tirx

    ks = conv_kernel_shape(spec, plan)
    nr = ks.nr
    N, C, H, W, Wp = ks.N, ks.C, ks.H, ks.W, ks.Wp
    R1, S1, R2, S2 = spec.R1, spec.S1, spec.R2, spec.S2
    h2, w2 = R2 // 2, S2 // 2
    h1, w1 = R1 // 2, S1 // 2
    # the intermediate covers conv2's halo: rows -h2..H+h2, cols -w2..Wp+w2 (outside: zero, as conv2's padding)
    Ht, Wt = H + 2 * h2, ks.Wt
    I = te.placeholder((N, C, H, W), "float32", name="I")
    W1 = te.placeholder((spec.K1, C, R1, S1), "float32", name="W1")
    W2 = te.placeholder((spec.K2, spec.K1, R2, S2), "float32", name="W2")
    args = [I, W1, W2]
    b1 = te.placeholder((spec.K1,), "float32", name="b1") if spec.bias1 else None
    b2 = te.placeholder((spec.K2,), "float32", name="b2") if spec.bias2 else None
    args += [t for t in (b1, b2) if t is not None]
    zero = tirx.const(0.0, "float32")
    oh, ow = h1 + h2, w1 + w2  # total halo of the padded input
    Ip = te.compute((N, C, H + 2 * oh, max(Wp + 2 * ow, Wt + 2 * w1) + S1),
                    lambda n, c, y, x: tirx.if_then_else(
                        tirx.all(y >= oh, y < H + oh, x >= ow, x < W + ow),
                        I[n, c, tirx.max(tirx.min(y - oh, H - 1), 0), tirx.max(tirx.min(x - ow, W - 1), 0)], zero),
                    name="Ip")
    W1p = pack_weights(W1, ks.K1p, C, nr, "W1p")
    W2p = pack_weights(W2, ks.K2p, ks.K1p, nr, "W2p")
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R1), name="r")
    s = te.reduce_axis((0, S1), name="s")
    if fused:
        # T[n, ko, y, x, ki] is conv1's output at row y - h2, column x - w2
        T = te.compute((N, ks.K1p // nr, Ht, Wt, nr),
                       lambda n, ko, y, x, ki: te.sum(Ip[n, c, y + r, x + s] * W1p[ko, c, r, s, ki], axis=[c, r, s]),
                       name="T")

        def t_at(n, ko, y, x, ki):
            return T[n, ko, y, x, ki]
    else:
        # T[n, ko, y, x, ki] is conv1's output at row y, column x (the image only)
        T = te.compute((N, ks.K1p // nr, H, Wp, nr),
                       lambda n, ko, y, x, ki: te.sum(Ip[n, c, y + h2 + r, x + w2 + s] * W1p[ko, c, r, s, ki],
                                                      axis=[c, r, s]), name="T")
        Ht, Wt = H + 2 * h2, Wp + 2 * w2

        def t_at(n, ko, y, x, ki):  # clamped: the halo is masked to zero below, the read stays in bounds
            return T[n, ko, tirx.max(tirx.min(y - h2, H - 1), 0), tirx.max(tirx.min(x - w2, Wp - 1), 0), ki]

    def act(n, ko, y, x, ki):
        v = t_at(n, ko, y, x, ki)
        if b1 is not None:
            v = v + b1[tirx.min(ko * nr + ki, spec.K1 - 1)]
        if spec.glue == "relu":
            v = relu(v)
        inside = [y >= h2, y < H + h2, x >= w2, x < W + w2]
        if ks.K1p != spec.K1:  # padded channels hold inf·0 = NaN when the input has an inf: zero, not NaN
            inside.append(ko * nr + ki < spec.K1)
        return tirx.if_then_else(tirx.all(*inside), v, zero)

    U = te.compute((N, ks.K1p // nr, Ht, Wt, nr), act, name="U")
    c2 = te.reduce_axis((0, ks.K1p), name="c2")
    r2 = te.reduce_axis((0, R2), name="r2")
    s2 = te.reduce_axis((0, S2), name="s2")
    O2 = te.compute((N, ks.K2p // nr, H, Wp, nr),
                    lambda n, ko, y, x, ki: te.sum(U[n, c2 // nr, y + r2, x + s2, c2 % nr] * W2p[ko, c2, r2, s2, ki],
                                                   axis=[c2, r2, s2]), name="O2")

    O = unpacked_output(O2, spec, b2, nr)
    return args + [O], {"Ip": Ip, "W1p": W1p, "W2p": W2p, "T": T, "U": U, "O2": O2, "O": O}, ks


def pack_weights(Wt, Kp: int, Cp: int, nr: int, name: str):
    """Weights ``[K, C, R, S]`` packed as ``[Kp/nr, Cp, R, S, nr]`` (a panel's ``nr`` output channels contiguous: one
    vector load per reduction step), zero in the padding."""
    from tvm import te, tirx

    K, C, R, S = (int(d) for d in Wt.shape)
    zero = tirx.const(0.0, "float32")

    def packed(ko, c, r, s, ki):
        if Cp == C:  # no padded channels: no condition or clamp on them
            return tirx.if_then_else(ko * nr + ki < K, Wt[tirx.min(ko * nr + ki, K - 1), c, r, s], zero)
        return tirx.if_then_else(tirx.all(ko * nr + ki < K, c < C),
                                 Wt[tirx.min(ko * nr + ki, K - 1), tirx.min(c, C - 1), r, s], zero)

    return te.compute((Kp // nr, Cp, R, S, nr), packed, name=name)


def unpacked_output(O2, spec: ConvChain, b2, nr: int):
    """``O[n, k, y, x]`` (NCHW, conv2's bias added) from the blocked ``O2[n, k/nr, y, x, k%nr]``."""
    from tvm import te

    def unpack(n, k, y, x):
        v = O2[n, k // nr, y, x, k % nr]
        return v + b2[k] if b2 is not None else v

    return te.compute((spec.N, spec.K2, spec.H, spec.W), unpack, name="O")


def fit_tiles(spec: ConvChain, mr: int, nr: int, tiles, level_bytes: int, cores: int) -> dict[str, int]:
    """The spatial tiles the code generator realises for a plan's ``tiles`` (rows ``p``, columns ``q``): each
    dividing its padded extent (columns in whole register blocks of ``mr``).

    With a 1×1 second conv (no halo between the two), tiles are whole rows (``q`` = the padded width): the
    output tile is then written as whole rows of the NCHW output, not two part-rows that share cache lines.
    Rows per tile: the plan's tile area in whole rows, at most what keeps both stages' output tiles
    (``K1 + K2`` channels × rows × width) in a quarter of the fusion level, and among those, the largest count
    whose number of tiles divides among the cores. Measured (ResNet-50 3×3→1×1, 256 × 56 × 56 outputs, the plan's
    19 × 28 tile): one thread 3.99 → 3.71 ms with 4 × 56 (2 × 56: 3.79, 1 × 56: 3.74); 2 threads 1.85 → 1.73 ms;
    YOLO-1/2 8.59 → 8.35 ms; Darknet-19 and YOLO-2 (smaller outputs) unchanged within 1 %."""
    from .codegen import _fit_tile

    Wp = _pad(spec.W, mr)
    p = _fit_tile(spec.H, int(tiles.get("p", spec.H)), 1)
    q = _fit_tile(Wp, max(mr, int(tiles.get("q", Wp))), mr)
    if spec.R2 != 1 or spec.S2 != 1 or q == Wp:
        return {"p": p, "q": q}
    return {"p": rows_per_block(spec, _pad(spec.K1, nr), _pad(spec.K2, nr), Wp, level_bytes, cores, p * q // Wp),
            "q": Wp}


def rows_per_block(spec: ConvChain, K1p: int, K2p: int, Wp: int, level_bytes: int, cores: int,
                   most: int | None = None) -> int:
    """Output rows per block of a 1×1 conv2 (at most ``most``): both stages' rows (``K1p + K2p`` channels × ``Wp``)
    in a quarter of ``level_bytes``, and among the counts dividing H, the largest whose block count divides among
    the cores."""
    rows = max(1, min(most or spec.H, level_bytes // 4 // (4 * (K1p + K2p) * Wp)))
    fits = [t for t in range(1, min(rows, spec.H) + 1) if spec.H % t == 0]
    balanced = [t for t in fits if (spec.N * spec.H // t) % max(1, cores) == 0]
    return max(balanced or fits)


def _tiles(spec: ConvChain, plan: Plan, ks: ConvKernelShape) -> dict[str, int]:
    from shared_ir.hostinfo import num_cores

    return fit_tiles(spec, ks.mr, ks.nr, plan.fused.tiles, plan.fused.capacity_bytes, num_cores())


def _conv_micro(sch, blk, mr, nr, lanes, spatial_loops_from: int, local: bool = True):
    """Loops (.., ko, y, x, ki, c, r, s) below the attach point → ko, y, x/mr, c, r, s, x%mr (unroll), ki (vec);
    ``local``: the accumulators in registers per register block (:func:`register_accumulators`), else zeroed in
    the output block first (the reduction's init at ``ko``)."""
    loops = sch.get_loops(blk)[spatial_loops_from:]
    ko, y, x, ki, c, r, s = loops[-7:]
    ext = sch.get(x).extent
    if hasattr(ext, "value"):
        mr = _block_rows(int(ext.value), mr, nr, lanes)
    xo, xi = sch.split(x, [None, mr])
    red = _red_order(c, r, s)
    sch.reorder(ko, y, xo, *red, xi, ki)
    sch.unroll(xi)
    sch.vectorize(ki)
    if local:
        register_accumulators(sch, blk, xo, red[0])
    else:
        sch.decompose_reduction(blk, ko)


def register_accumulators(sch, blk, block_loop, first_red) -> None:
    """The reduction ``blk`` accumulates in a local buffer of one register block (what an iteration of
    ``block_loop`` writes), zeroed before ``first_red`` and stored once after it, instead of in the output.

    Why: zeroing the output block in place (the reduction's init) became a ``memset`` call (LLVM merges the unrolled
    zero stores) that the accumulators were then loaded back from; a local buffer with constant indices (on the
    stack: :func:`~chain_fuser.codegen.build`) is promoted to registers, so the zeroing is register moves and there
    is no reload. Measured on the Winograd kernels (their GEMMs reduce over only 32-128 channels), interleaved,
    2 threads: YOLO-1/2 x1.031, YOLO-2 x1.037, Darknet-19 x1.012, ResNet-50 3x3->1x1 x1.036, 3x3->3x3 x1.024,
    Inception x1.028; the unfused direct kernels x1.00-1.01."""
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, block_loop)
    loops = sch.get_loops(acc)
    sch.unroll(loops[-2])
    sch.vectorize(loops[-1])
    sch.decompose_reduction(blk, first_red)


RED_ORDER = "rsc"
"""Reduction loop order of both convs, outermost first: the window loops outside, the channel loop innermost (one long
loop per window position instead of a 3-step loop under two others). Measured (one thread, CPU time, the same
process; old c,r,s order → r,s,c): ResNet-50 3×3→3×3 fused 7.57 → 4.78 ms, unfused 6.49 → 5.19 ms; YOLO-2 unfused
3.52 → 1.37 ms; Inception 3×3→3×3 fused 4.06 → 3.73 ms; Darknet-19 fused 5.12 → 5.29 ms (the one loss, 3 %). The
same order for both stages (keeping c,r,s for conv1 only was worse on the unfused kernels)."""


def _red_order(c, r, s):
    return [{"c": c, "r": r, "s": s}[d] for d in RED_ORDER]


def _block_rows(extent: int, mr: int, nr: int, lanes: int) -> int:
    """Register-block width for a loop of ``extent`` columns: ``mr`` when it divides the extent, else the largest
    divisor of the extent that still fits the accumulator registers (≥ mr/2), else ``mr`` (a predicated tail).

    Why: in the fused kernel conv1 computes Tq + 2·(S2//2) columns per tile (conv2's halo); split by mr that is a
    partial block with an `if` around every FMA of the unrolled block (conv1 of ResNet-50 3×3→3×3 at 30 columns per
    tile: 3 blocks of 14 = 42 columns of work, predicated; now 3 blocks of 10). Measured speed-up on that shape was
    within noise (LLVM handles the predicated block well enough); the planner's halo cost uses the same rule."""
    if extent % mr == 0:
        return mr
    max_rows = max(mr, min(16, (28 * lanes) // nr))  # ≤ 28 of the 32 vector registers hold accumulators
    best = max((d for d in range(1, min(extent, max_rows) + 1) if extent % d == 0), default=1)
    return best if 2 * best >= mr else mr


def _pack_per_thread(ks: ConvKernelShape, T: dict, spec: ConvChain) -> int:
    """The thread count when each thread should pad its rows of the input and pack both weights for itself, else 0:
    as for GEMM chains (``codegen._pack_per_thread``), a shared packing loop splits the weights between the cores
    and every core then reads all of them, half from the other core's cache."""
    from .codegen import private_packing_threads

    packed_bytes = 4 * (ks.K1p * ks.C * spec.R1 * spec.S1 + ks.K2p * ks.K1p * spec.R2 * spec.S2)  # both weights
    return private_packing_threads(ks.N, ks.N * -(-ks.H // T["p"]) * -(-ks.Wp // T["q"]), packed_bytes)


def schedule_conv_chain(spec: ConvChain, plan: Plan, fused: bool = True):
    from tvm import s_tir, te

    args, st, ks = conv_chain_te(spec, plan, fused)
    sch = s_tir.Schedule(te.create_prim_func(args))
    mr, nr, lanes = plan.micro.mr, plan.micro.nr, plan.micro.vector_lanes
    T = _tiles(spec, plan, ks)
    threads = _pack_per_thread(ks, T, spec) if fused else 0
    for name in ("W1p", "W2p"):
        if threads:
            continue  # packed by each thread for itself, inside its parallel unit (below)
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))  # panels × channels: 3 panels (K = 96) split 2:1 on 2 cores
        loops = sch.get_loops(blk)
        if nr % lanes == 0:
            _, v = sch.split(loops[-1], [None, lanes])
            sch.vectorize(v)
    ip = sch.get_sblock("Ip")
    if not threads:
        loops = sch.get_loops(ip)
        sch.parallel(sch.fuse(loops[0], loops[1]))
    out = sch.get_sblock("O")
    o2 = sch.get_sblock("O2")
    u = sch.get_sblock("U")
    t = sch.get_sblock("T")
    if fused:
        # the output (unpacked NCHW) drives the tiling: n, k, p, q -> n, p/Tp, q/Tq | k, p, q
        n, k, y, x = sch.get_loops(out)
        yo, yi = sch.split(y, [None, T["p"]])
        xo, xi = sch.split(x, [None, T["q"]])
        sch.reorder(n, yo, xo, k, yi, xi)
        par = sch.fuse(n, yo, xo)
        if threads:
            thread, par = sch.split(par, [threads, None])
            sch.parallel(thread)
        else:
            sch.parallel(par)
        if ks.W % T["q"] == 0:  # whole column tiles: no predicate on x
            _unpack_panels(sch, k, yi, xi, T["q"], spec.K2, nr)
        sch.compute_at(o2, par, preserve_unit_loops=True)
        # accumulators zeroed in the output block (not in registers, :func:`register_accumulators`): with register
        # blocks for both convs of a fused tile, measured x0.53-0.83 on the chains with a 1x1 conv2 (each alone x1.00)
        _conv_micro(sch, o2, mr, nr, lanes, 1, local=False)
        sch.compute_at(u, par, preserve_unit_loops=True)
        uloops = sch.get_loops(u)
        if nr % lanes == 0:
            _, v = sch.split(uloops[-1], [None, lanes])
            sch.vectorize(v)
        sch.compute_at(t, par, preserve_unit_loops=True)
        _conv_micro(sch, t, mr, nr, lanes, 1, local=False)
        if threads:
            # each thread: its rows of the padded input (with the halo), then both convs' packed weights
            for name in ("W1p", "W2p", "Ip"):
                blk = sch.get_sblock(name)
                sch.compute_at(blk, thread, preserve_unit_loops=True)
                if name != "Ip" and nr % lanes == 0:
                    _, v = sch.split(sch.get_loops(blk)[-1], [None, lanes])
                    sch.vectorize(v)
        finish_unpack(sch)
        return sch.mod
    # unfused: each stage at root, parallel over (n, row, output-channel panel), row-major: a core computes every
    # channel of its rows, so conv2 and the unpack read rows its own cache holds (panel-major, conv2 read half of
    # each row's channels from the other core: Inception 2.13 → 1.87 ms, ResNet-50 3×3→3×3 2.24 → 2.21 ms, YOLO-1/2
    # 4.19 → 4.05 ms, 2 threads, interleaved)
    for blk in (t, o2):
        loops = sch.get_loops(blk)
        n, ko, y, x, ki, c, r, s = loops
        xo, xi = sch.split(x, [None, mr])
        red = _red_order(c, r, s)
        sch.reorder(n, y, ko, xo, *red, xi, ki)
        par = sch.fuse(n, y, ko)
        sch.parallel(par)
        sch.unroll(xi)
        sch.vectorize(ki)
        register_accumulators(sch, blk, xo, red[0])
    n, ko, y, x, ki = sch.get_loops(u)
    sch.reorder(n, y, ko)
    sch.parallel(sch.fuse(n, y, ko))
    if nr % lanes == 0:
        _, v = sch.split(ki, [None, lanes])
        sch.vectorize(v)
    n, k, y, x = sch.get_loops(out)
    panels = _unpack_panels(sch, k, y, x, ks.W, spec.K2, nr)
    if panels:
        sch.reorder(n, panels[1], panels[0])
        sch.parallel(sch.fuse(n, panels[1], panels[0]))
    else:
        sch.parallel(sch.fuse(n, k))
    finish_unpack(sch)
    return sch.mod


def _unpack_panels(sch, k, y, x, width: int, K: int, nr: int):
    """Schedule the unpack ``O2[n, k/nr, y, x, k%nr] → O[n, k, y, x]`` (a transpose of each ``x × nr`` panel) as
    ``k/nr, y, x/vl | k%nr, x%vl``: vector stores along the output's rows, and each panel's ``vl`` columns × ``nr``
    channels read while they are in L1. ``vl`` is 16, 8 or 4 where one divides ``width`` (whole vector registers;
    14-wide vectors were 1-3 % slower on ResNet-50 3×3→1×1), else its largest divisor up to 16. With ``vl`` 8 or 16
    each ``vl × vl`` block is marked for a transpose in registers, done by :func:`finish_unpack` at the end of the
    schedule (:func:`transpose_intrin`: ``vl`` vector loads, a shuffle network, ``vl`` vector stores; conv2's bias
    added there); else ``k%nr`` is unrolled and ``x%vl`` vectorised, which LLVM builds from scalar inserts. Returns
    the (panel, row) loops, or None when ``K`` is not a whole number of panels (left as it is).

    Why: the unpack ran channel by channel over whole tiles, a scalar load and store per element (reads 128 bytes
    apart). Measured (2 threads, ResNet-50 3×3→1×1, 256 × 56 × 56 outputs): the unpack alone 0.32 → 0.076 ms
    (a contiguous copy of the same bytes: 0.053 ms); the fused kernel 2.25 → 1.96 ms, interleaved in one process.
    The register transpose then took the unpack of 256 × 16 × 56 outputs from 0.044 to 0.033 ms (2 threads; in
    the Winograd kernel of that chain the unpack had been 9.7 % of one core's time); whole kernels, interleaved in
    one process, two runs: ResNet-50 3×3→1×1 Winograd ×1.016-1.021, direct fused ×1.020-1.029, the other conv
    chains ×0.99-1.03 (Inception's 35-wide rows keep the vector code)."""
    if K % nr:
        return None
    vl = next((v for v in (16, 8, 4) if width % v == 0), max(v for v in range(1, 17) if width % v == 0))
    ko, ki = sch.split(k, [None, nr])
    xo, xv = sch.split(x, [None, vl])
    if vl in TRANSPOSE_WIDTHS and nr % vl == 0:
        kb, kv = sch.split(ki, [None, vl])
        sch.reorder(ko, y, xo, kb, kv, xv)
        # tensorized last (finish_unpack): a tensorized consumer here made a later compute_at of conv2 fail
        sch.annotate(kv, _TRANSPOSE_MARK, vl)
        return ko, y
    sch.reorder(ko, y, xo, ki, xv)
    sch.unroll(ki)
    if vl > 1:
        sch.vectorize(xv)
    return ko, y


_TRANSPOSE_MARK = "chain_fuser_transpose"


def finish_unpack(sch, block: str = "O"):
    """The last step of a conv schedule: the register transpose of the unpack's ``vl × vl`` blocks, where
    :func:`_unpack_panels` marked one; where it does not match (the tensorize fails), the same loops as vector
    code (``k%nr`` unrolled, ``x%vl`` vectorised)."""
    from tvm import s_tir
    from tvm.error import InternalError

    loops = sch.get_loops(sch.get_sblock(block))
    marked = [i for i, lp in enumerate(loops) if _TRANSPOSE_MARK in sch.get(lp).annotations]
    if not marked:
        return
    i = marked[0]
    kb, kv, xv = loops[i - 1], loops[i], loops[i + 1]
    vl = int(sch.get(kv).annotations[_TRANSPOSE_MARK])
    sch.unannotate(kv, _TRANSPOSE_MARK)
    for bias in (False, True):  # the block's body tells which one matches
        try:
            sch.tensorize(kv, transpose_intrin(vl, bias))
            return
        except (s_tir.ScheduleError, InternalError):
            # TVM reports some mismatches as an internal check, not a ScheduleError (the staged Winograd schedule
            # of a 3x3 conv2 with 8-wide blocks); either leaves the schedule as it was
            continue
    sch.unroll(kb)
    sch.unroll(kv)
    sch.vectorize(xv)


TRANSPOSE_WIDTHS = (8, 16)
"""Block sizes of the register transpose (:func:`transpose_intrin`): one 256- or 512-bit vector of floats."""


@functools.cache
def transpose_intrin(v: int, bias: bool = False, pack: bool = False) -> str:
    """Register (once) and name the tensor intrinsic ``B[k, 0, x] = A[x, k] (+ C[k])`` over a ``v × v`` block of
    floats: ``v`` vector loads of ``A``'s rows, ``log2 v`` rounds of ``v`` two-vector shuffles (row ``i`` with row
    ``i + v/2``, interleaving their low and then their high halves: after ``log2 v`` rounds row ``j`` holds column
    ``j``), ``v`` vector stores (``B``'s middle axis: the rows between, e.g. ``y`` in ``[k, y, x]``). The shuffles
    are nested expressions, not bound variables: a vector bound inside a block became a workspace allocation per
    parallel task (2.6× slower than the copy it replaces). ``pack``: the other way round, ``B[k, x] = A[x, 0, k]``
    (rows of an NCHW input, ``y`` between, into a channels-last block: the Winograd kernel's input layout)."""
    import tvm
    from tvm import s_tir

    assert v in TRANSPOSE_WIDTHS, v
    assert not (bias and pack)
    name = f"chain_fuser.transpose{v}" + ("_bias" if bias else "") + ("_pack" if pack else "")
    lo = [j for i in range(v // 2) for j in (i, v + i)]
    hi = [j for i in range(v // 2, v) for j in (i, v + i)]
    at = "[{i}, 0, 0]" if pack else "[{i}, 0]"
    rows = [f"A.vload({at.format(i=i)}, 'float32x{v}')" for i in range(v)]
    for _ in range(v.bit_length() - 1):
        rows = [f"T.Shuffle([{rows[i]}, {rows[i + v // 2]}], {idx})" for i in range(v // 2) for idx in (lo, hi)]
    c_param = ", c: T.handle" if bias else ""
    c_buf = [f"    C = T.match_buffer(c, ({v},), 'float32', offset_factor=1)"] if bias else []
    c_read = f", C[0:{v}]" if bias else ""
    a_shape, b_shape = (f"({v}, 1, {v})", f"({v}, {v})") if pack else (f"({v}, {v})", f"({v}, 1, {v})")
    a_all, b_all = (f"A[0:{v}, 0:1, 0:{v}]", f"B[0:{v}, 0:{v}]") if pack else (f"A[0:{v}, 0:{v}]",
                                                                              f"B[0:{v}, 0:1, 0:{v}]")

    def func(body: list[str], strided: bool) -> str:
        two, three = ", strides=(sb, 1)" if pack else ", strides=(sa, 1)", ", strides=(sa, sy, 1)" if pack else \
            ", strides=(sb, sy, 1)"
        strides = ([three, two] if pack else [two, three]) if strided else ["", ""]
        return "\n".join([
            "@T.prim_func(s_tir=True)",
            f"def f(a: T.handle, b: T.handle{c_param}) -> None:",
            *(["    sa = T.int32()", "    sb = T.int32()", "    sy = T.int32()"] if strided else []),
            f"    A = T.match_buffer(a, {a_shape}, 'float32'{strides[0]}, offset_factor=1)",
            f"    B = T.match_buffer(b, {b_shape}, 'float32'{strides[1]}, offset_factor=1)",
            *c_buf,
            "    with T.sblock('root'):",
            f"        T.reads({a_all}{c_read})",
            f"        T.writes({b_all})",
            *body])

    add = " + C[vk]" if bias else ""
    store = "B[vk, vx] = A[vx, 0, vk]" if pack else f"B[vk, 0, vx] = A[vx, vk]{add}"
    desc = func([f"        for k, x in T.grid({v}, {v}):",
                 "            with T.sblock('O'):",
                 "                vk, vx = T.axis.remap('SS', [k, x])",
                 f"                {store}"], False)
    dst = "B[{j}, T.ramp(0, 1, {v})]" if pack else "B[{j}, 0, T.ramp(0, 1, {v})]"
    impl = func([f"        {dst.format(j=j, v=v)} = {rows[j]}"
                 + (f" + T.broadcast(C[{j}], {v})" if bias else "") for j in range(v)], True)
    s_tir.TensorIntrin.register(name, tvm.script.from_source(desc), tvm.script.from_source(impl), override=True)
    return name


def conv_call(info: dict, tensors, out=None):
    """A conv chain kernel's call on torch tensors (``info``: :meth:`FusedKernel._call_info`)."""
    ins = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    res = out if out is not None else info["torch"].empty(*info["out_shape"], dtype=info["f32"])
    info["fn"](*ins, res)
    return res
