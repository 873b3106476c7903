"""Winograd code generation for the first conv of a conv→conv chain (3×3, stride 1, 'same' padding).

``F(m×m, 3×3)`` computes each ``m × m`` output tile from an ``(m+2) × (m+2)`` input tile with ``(m+2)²``
element-wise products per channel pair instead of ``9 m²`` (``m`` = 2: 2.25× fewer; ``m`` = 4: 4× fewer)::

    V = Bᵀ d B   (input tile, per channel)        U = G g Gᵀ   (weights, per channel pair)
    M[e] = Σ_c V[e, c] U[e, c, k]                 (a batched GEMM: one per tile element e)
    Y = Aᵀ M A   (output tile, per output channel)

Stages (one TVM function, each stage at root and parallel):

* ``Ic``: the input zero-padded and transposed to channel blocks of ``vl`` (``[n, c/vl, y, x, c%vl]``), so the input
  transform is vector code over channels.
* ``V[e, p, c]``: the input transform of tile ``p``; ``Uw[e, k/nr, c, k%nr]``: the weight transform, in the micro
  kernel's packed panel layout (one vector load per reduction step). Both transforms are generated from the
  matrices' non-zero entries only (a ``Select`` on the tile element that folds once the element loops are unrolled),
  so no multiplication by 0 or 1 is left in the code.
* ``Mw[e, k/nr, p, k%nr]``: the batched GEMM with the chain's micro kernel (``mr`` tiles × ``nr`` channels of
  accumulators, the reduction over input channels).
* ``T[n, k/nr, y, x, k%nr]``: the output transform, written in the layout the direct conv2 stage reads (NCHW[nr]c),
  then conv2 and the unpack to NCHW exactly as the unfused direct kernel (:mod:`chain_fuser.conv`).

Accuracy: ``m`` = 2 has the error of a direct conv (measured max |error| 1-2e-6 against float64 on unit-scale
inputs, C = 32…128; direct: 1.3-1.9e-6); ``m`` = 4 has 15-25× that (1.7-3.2e-5), which exceeds a 1e-5 absolute
tolerance near zero. So ``m`` = 2 is the default.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as Fr

from .model import Plan
from .spec import ConvChain

WINOGRAD_TILES = (2, 4)

# F(2×2, 3×3) and F(4×4, 3×3) with the points (0, ±1, ±2, ∞) (Lavin & Gray 2016)
_MATRICES = {
    2: {"BT": [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        "G": [[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
        "AT": [[1, 1, 1, 0], [0, 1, -1, -1]]},
    4: {"BT": [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        "G": [[Fr(1, 4), 0, 0], [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)], [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
              [Fr(1, 24), Fr(1, 12), Fr(1, 6)], [Fr(1, 24), Fr(-1, 12), Fr(1, 6)], [0, 0, 1]],
        "AT": [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]},
}


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


def tile_of(algorithm: str) -> int:
    """``m`` of an algorithm name ``winograd<m>``."""
    m = int(algorithm[len("winograd"):]) if algorithm.startswith("winograd") else 0
    if m not in _MATRICES:
        raise ValueError(f"unknown conv algorithm {algorithm!r}: expected 'direct' or one of "
                         f"{[f'winograd{k}' for k in _MATRICES]}")
    return m


def executed_flops(spec: ConvChain, plan: Plan, m: int) -> int:
    """2 × the multiply-adds the Winograd kernel's batched GEMM (padded tiles and channels) and conv2 execute."""
    from shared_ir.hostinfo import num_cores

    from .conv import conv_kernel_shape

    ks, ws = conv_kernel_shape(spec, plan), winograd_shape(spec, plan, m)
    conv2 = 2 * spec.N * spec.H * spec.W * spec.K2 * spec.K1 * spec.R2 * spec.S2
    blocked = block_tile_rows(spec, ks, ws, plan.fused.capacity_bytes, num_cores())[0] > 0
    return 2 * ws.a * ws.a * (ws.P if blocked else ws.Pp) * ws.Cp * ks.K1p + conv2


def supported(spec: ConvChain) -> bool:
    """Winograd applies to conv1 when it is 3×3 (stride 1, 'same' padding: the only convs a ConvChain holds)."""
    return spec.R1 == 3 and spec.S1 == 3


@dataclass(frozen=True)
class WinogradShape:
    m: int
    a: int
    th: int
    tw: int
    P: int
    Pp: int
    Cp: int
    vl: int


def winograd_shape(spec: ConvChain, plan: Plan, m: int) -> WinogradShape:
    vl = plan.micro.vector_lanes
    th, tw = -(-spec.H // m), -(-spec.W // m)
    P = spec.N * th * tw
    return WinogradShape(m, m + 2, th, tw, P, _pad(P, plan.micro.mr), _pad(spec.C, vl), vl)


def _combo(terms):
    """Σ coef·x over the non-zero coefficients, without multiplying by ±1."""
    from tvm import tirx

    out = None
    for coef, x in terms:
        if coef == 0:
            continue
        if coef == 1:
            t = x
        elif coef == -1:
            t = -x
        else:
            t = x * tirx.const(float(coef), "float32")
        out = t if out is None else out + t
    return out if out is not None else tirx.const(0.0, "float32")


def _select(index_conds, values):
    """``values[i]`` where ``index_conds[i]`` holds (the last one as the default): folds to one value once the
    loops in the conditions are unrolled."""
    from tvm import tirx

    expr = values[-1]
    for cond, v in zip(reversed(index_conds[:-1]), reversed(values[:-1])):
        expr = tirx.Select(cond, v, expr)
    return expr


def winograd_chain_te(spec: ConvChain, plan: Plan, m: int = 2):
    """TE of the chain with conv1 by Winograd ``F(m×m, 3×3)`` and conv2 direct (as the unfused direct kernel)."""
    from tvm import te, tirx

    from .conv import conv_kernel_shape

    if not supported(spec):
        raise ValueError(f"{spec.name}: Winograd needs a 3×3 first conv, got {spec.R1}×{spec.S1}")
    if m not in _MATRICES:
        raise ValueError(f"{spec.name}: Winograd tile m must be one of {sorted(_MATRICES)}, got {m}")
    ks = conv_kernel_shape(spec, plan)
    ws = winograd_shape(spec, plan, m)
    nr, vl = ks.nr, ws.vl
    N, C, H, W, Wp = ks.N, ks.C, ks.H, ks.W, ks.Wp
    a, th, tw = ws.a, ws.th, ws.tw
    BT, G, AT = (_MATRICES[m][k] for k in ("BT", "G", "AT"))
    R2, S2 = spec.R2, spec.S2
    h2, w2 = R2 // 2, S2 // 2
    zero = tirx.const(0.0, "float32")
    I = te.placeholder((N, C, H, W), "float32", name="I")
    W1 = te.placeholder((spec.K1, C, 3, 3), "float32", name="W1")
    W2 = te.placeholder((spec.K2, spec.K1, R2, S2), "float32", name="W2")
    args = [I, W1, W2]
    b1 = te.placeholder((spec.K1,), "float32", name="b1") if spec.bias1 else None
    b2 = te.placeholder((spec.K2,), "float32", name="b2") if spec.bias2 else None
    args += [t for t in (b1, b2) if t is not None]

    # input padded by 1 (conv1's halo) and to whole tiles, channels in blocks of vl
    Hi, Wi = th * m + 2, tw * m + 2
    Ic = te.compute((N, ws.Cp // vl, Hi, Wi, vl),
                    lambda n, cb, y, x, cl: tirx.if_then_else(
                        tirx.all(y >= 1, y < H + 1, x >= 1, x < W + 1, cb * vl + cl < C),
                        I[n, tirx.min(cb * vl + cl, C - 1), tirx.max(tirx.min(y - 1, H - 1), 0),
                          tirx.max(tirx.min(x - 1, W - 1), 0)], zero), name="Ic")
    elems = [(i, j) for i in range(a) for j in range(a)]

    def v_of(e, p, c):
        n = p // (th * tw)
        ty = p % (th * tw) // tw
        tx = p % tw
        n = tirx.min(n, N - 1)  # padded tiles (p ≥ P) read tile P-1's inputs; their rows are never used

        def d(r, s):
            return Ic[n, c // vl, ty * m + r, tx * m + s, c % vl]

        vals = [_combo([(BT[i][r] * BT[j][s], d(r, s)) for r in range(a) for s in range(a)]) for i, j in elems]
        return _select([e == k for k in range(len(elems))], vals)

    V = te.compute((a * a, ws.Pp, ws.Cp), v_of, name="V")

    # the weights packed first (as the direct kernel's W1p: output channels contiguous), so that the transform reads
    # whole vectors; transforming straight from [k, c, r, s] (a gather per vector) took 0.22 ms (m = 2) and 0.76 ms
    # (m = 4) of Darknet-19's 1.5-1.8 ms
    W1p = te.compute((ks.K1p // nr, ws.Cp, 3, 3, nr),
                     lambda ko, c, r, s, ki: tirx.if_then_else(
                         tirx.all(ko * nr + ki < spec.K1, c < C),
                         W1[tirx.min(ko * nr + ki, spec.K1 - 1), tirx.min(c, C - 1), r, s], zero), name="W1p")

    def u_of(e, ko, c, ki):
        vals = [_combo([(G[i][r] * G[j][s], W1p[ko, c, r, s, ki]) for r in range(3) for s in range(3)])
                for i, j in elems]
        return _select([e == q for q in range(len(elems))], vals)

    Uw = te.compute((a * a, ks.K1p // nr, ws.Cp, nr), u_of, name="Uw")
    c = te.reduce_axis((0, ws.Cp), name="c")
    Mw = te.compute((a * a, ks.K1p // nr, ws.Pp, nr),
                    lambda e, ko, p, ki: te.sum(V[e, p, c] * Uw[e, ko, c, ki], axis=[c]), name="Mw")

    halo_free = R2 == 1 and S2 == 1

    def activation(v, ko, ki):
        if b1 is not None:
            v = v + b1[tirx.min(ko * nr + ki, spec.K1 - 1)]
        return tirx.max(v, zero) if spec.glue == "relu" else v

    def t_of(n, ko, y, x, ki):
        # conv1's output at (y, x): element (y % m, x % m) of tile (y / m, x / m); columns beyond the image (x ≥ W,
        # up to Wp) read the last tile: masked by the activation stage, or (1×1 conv2) never read by the unpack
        ty, tx = y // m, tirx.min(x // m, tw - 1)
        p = n * th * tw + ty * tw + tx
        conds, vals = [], []
        for u in range(m):
            for v in range(m):
                conds.append(tirx.all(y % m == u, x % m == v))
                vals.append(_combo([(AT[u][i] * AT[v][j], Mw[i * a + j, ko, p, ki]) for i, j in elems]))
        out = _select(conds, vals)
        # a 1×1 conv2 has no halo: the bias and ReLU are applied here and conv2 reads T (no activation pass)
        return activation(out, ko, ki) if halo_free else out

    T = te.compute((N, ks.K1p // nr, th * m, _pad(Wp, m), nr), t_of, name="T")
    Ht, Wt = H + 2 * h2, Wp + 2 * w2

    def act(n, ko, y, x, ki):
        v = activation(T[n, ko, tirx.max(tirx.min(y - h2, H - 1), 0), tirx.max(tirx.min(x - w2, Wp - 1), 0), ki],
                       ko, ki)
        inside = tirx.all(y >= h2, y < H + h2, x >= w2, x < W + w2)
        return tirx.if_then_else(inside, v, zero)

    U = T if halo_free else te.compute((N, ks.K1p // nr, Ht, Wt, nr), act, name="U")
    W2p = te.compute((ks.K2p // nr, ks.K1p, R2, S2, nr),
                     lambda ko, c, r, s, ki: tirx.if_then_else(
                         tirx.all(ko * nr + ki < spec.K2, c < spec.K1),
                         W2[tirx.min(ko * nr + ki, spec.K2 - 1), tirx.min(c, spec.K1 - 1), r, s], zero), name="W2p")
    c2 = te.reduce_axis((0, ks.K1p), name="c2")
    r2 = te.reduce_axis((0, R2), name="r2")
    s2 = te.reduce_axis((0, S2), name="s2")
    O2 = te.compute((N, ks.K2p // nr, H, Wp, nr),
                    lambda n, ko, y, x, ki: te.sum(U[n, c2 // nr, y + r2, x + s2, c2 % nr] * W2p[ko, c2, r2, s2, ki],
                                                   axis=[c2, r2, s2]), name="O2")

    def unpack(n, k, y, x):
        v = O2[n, k // nr, y, x, k % nr]
        return v + b2[k] if b2 is not None else v

    O = te.compute((N, spec.K2, H, W), unpack, name="O")
    stages = {"Ic": Ic, "V": V, "W1p": W1p, "Uw": Uw, "Mw": Mw, "T": T, "U": U, "W2p": W2p, "O2": O2, "O": O}
    return args + [O], ks, ws, stages


def conv2_rows(spec: ConvChain, ks, level_bytes: int, cores: int) -> int:
    """Output rows per block of conv2: both its input and output rows (``K1 + K2`` channels × row width) in a
    quarter of ``level_bytes``, and among those counts (dividing H), the largest whose block count divides among
    the cores."""
    row_bytes = 4 * (ks.K1p + ks.K2p) * ks.Wp
    cap = max(1, level_bytes // 4 // row_bytes)
    fits = [t for t in range(1, min(cap, spec.H) + 1) if spec.H % t == 0]
    balanced = [t for t in fits if (spec.N * spec.H // t) % max(1, cores) == 0]
    return max(balanced or fits)


def schedule_winograd_chain(spec: ConvChain, plan: Plan, m: int = 2, part=None, blocked: bool = True):
    """The scheduled module. ``blocked`` (where :func:`block_tile_rows` finds a block): every stage after the
    transforms of the weights and the input layout runs per block of tile rows, inside one parallel loop (below);
    else each stage over the whole image in turn. ``part`` (a function of the stages returning a subset of
    arguments) builds one part of the staged kernel alone (for measuring each stage's time)."""
    from tvm import s_tir, te

    from .conv import _unpack_panels

    args, ks, ws, stages = winograd_chain_te(spec, plan, m)
    halo_free = spec.R2 == 1 and spec.S2 == 1
    sch = s_tir.Schedule(te.create_prim_func(part(stages, args) if part else args))
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))} if part else None

    def has(name):
        return names is None or name in names

    mr, nr, lanes = plan.micro.mr, plan.micro.nr, plan.micro.vector_lanes
    vl = ws.vl

    def vec(loop, width):
        if width % lanes == 0:
            _, v = sch.split(loop, [None, lanes])
            sch.vectorize(v)

    if part is None and blocked:
        from shared_ir.hostinfo import num_cores

        tr, mr_w = block_tile_rows(spec, ks, ws, plan.fused.capacity_bytes, num_cores())
        if tr:
            return _schedule_blocked(sch, spec, plan, ks, ws, tr, mr_w)
    # input: parallel over (n, channel block), vectors over channels
    if has("Ic"):
        blk = sch.get_sblock("Ic")
        n, cb, y, x, cl = sch.get_loops(blk)
        sch.parallel(sch.fuse(n, cb))
        sch.vectorize(cl)
    # input transform: tiles × channel vectors; every tile element unrolled (the Select folds)
    if has("V"):
        blk = sch.get_sblock("V")
        e, p, c = sch.get_loops(blk)
        co, ci = sch.split(c, [None, vl])
        sch.reorder(p, co, e, ci)
        sch.parallel(p)
        sch.unroll(e)
        sch.vectorize(ci)
    # weight transform: per (panel, channel), every element unrolled, vectors over the panel's channels
    if has("W1p"):
        blk = sch.get_sblock("W1p")
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        vec(sch.get_loops(blk)[-1], nr)
    if has("Uw"):
        blk = sch.get_sblock("Uw")
        e, ko, c, ki = sch.get_loops(blk)
        sch.reorder(ko, c, e, ki)
        sch.parallel(sch.fuse(ko, c))
        sch.unroll(e)
        vec(ki, nr)
    # batched GEMM with the micro kernel: parallel over (element, panel)
    if has("Mw"):
        blk = sch.get_sblock("Mw")
        e, ko, p, ki, c = sch.get_loops(blk)
        po, pi = sch.split(p, [None, mr])
        sch.reorder(e, ko, po, c, pi, ki)
        sch.parallel(sch.fuse(e, ko))
        sch.unroll(pi)
        sch.vectorize(ki)
        sch.decompose_reduction(blk, c)
    # output transform: per tile, its m × m elements unrolled, vectors over the panel's channels
    if has("T"):
        blk = sch.get_sblock("T")
        n, ko, y, x, ki = sch.get_loops(blk)
        yo, yi = sch.split(y, [None, m])
        xo, xi = sch.split(x, [None, m])
        sch.reorder(n, yo, ko, xo, yi, xi, ki)
        sch.parallel(sch.fuse(n, yo))
        sch.unroll(yi)
        sch.unroll(xi)
        vec(ki, nr)
    # activation, conv2 and unpack: as the unfused direct kernel
    if has("U") and not halo_free:
        u = sch.get_sblock("U")
        n, ko, y, x, ki = sch.get_loops(u)
        sch.reorder(n, y, ko)
        sch.parallel(sch.fuse(n, y, ko))
        vec(ki, nr)
    if has("W2p"):
        blk = sch.get_sblock("W2p")
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        vec(sch.get_loops(blk)[-1], nr)
    if has("O2") and has("O"):
        # conv2 per block of output rows, each block unpacked to NCHW right after (while in cache), as the fused
        # direct kernel does (one pass over the output instead of two: ResNet-50 3×3→1×1 1.47 → 1.41 ms)
        from shared_ir.hostinfo import num_cores

        from .conv import _conv_micro

        rows = conv2_rows(spec, ks, plan.fused.capacity_bytes, num_cores())
        out = sch.get_sblock("O")
        n, k, y, x = sch.get_loops(out)
        yo, yi = sch.split(y, [None, rows])
        sch.reorder(n, yo, k, yi, x)
        par = sch.fuse(n, yo)
        sch.parallel(par)
        _unpack_panels(sch, k, yi, x, ks.W, spec.K2, nr)
        o2 = sch.get_sblock("O2")
        sch.compute_at(o2, par, preserve_unit_loops=True)
        ko = _conv_micro(sch, o2, mr, nr, lanes, 1)
        sch.decompose_reduction(o2, ko)
    return sch.mod


def block_tile_rows(spec: ConvChain, ks, ws: WinogradShape, level_bytes: int, cores: int = 1) -> tuple[int, int]:
    """(tile rows per block, GEMM register rows ``mr``) of the blocked schedule, or (0, 0) where it does not apply
    (a 3×3 conv2, whose halo rows would make each block recompute its neighbours' tiles).

    The block's tiles (rows × tiles per row) are a whole number of register rows (no partial register block); its
    transformed input and GEMM output (``(m+2)²`` × tiles × (C + K1) floats) within half of ``level_bytes``; the
    blocks' count a multiple of ``cores`` where possible. ``mr``: the plan's, or down to half of it (as many
    accumulators as the plan's ``nr`` leaves registers for), whichever gives the best of these. Why: Darknet-19's
    14 tiles per row with the plan's 4×64 kernel needed 2-row blocks, 7 of them on 2 cores (1.89 ms, the staged
    schedule 1.80); 7×64 gives 14 one-row blocks."""
    if spec.R2 != 1 or spec.S2 != 1:
        return 0, 0
    top = max(ks.mr, min(16, (28 * 16) // ks.nr))  # ≤ 28 of the 32 vector registers hold accumulators
    best, key = (0, 0), None
    for mr in range(top, max(1, ks.mr // 2) - 1, -1):
        for t in range(1, ws.th + 1):
            if ws.th % t or (t * ws.tw) % mr:
                continue
            fits = 4 * ws.a * ws.a * t * ws.tw * (ws.Cp + ks.K1p) <= level_bytes // 2
            balanced = (spec.N * ws.th // t) % max(1, cores) == 0
            k = (balanced, fits, mr >= ks.mr, t if fits else -t, mr)
            if key is None or k > key:
                best, key = (t, mr), k
    return best


def _schedule_blocked(sch, spec: ConvChain, plan: Plan, ks, ws: WinogradShape, tr: int, mr_w: int):
    """Per block of ``tr`` tile rows (one parallel loop over images × blocks): the input transform of its tiles,
    the batched GEMM, the output transform (with bias and ReLU), conv2 and the unpack to NCHW, so that the
    transformed tiles ((m+2)²/m² times the data they come from) stay in the core's cache instead of a round trip
    through memory (YOLO-1/2 at m = 2: a 3.2 MB transformed input and a 9.6 MB GEMM output per call).
    The input's layout change and the weights' transform run before it, over the whole tensors."""
    from .conv import _conv_micro, _unpack_panels

    mr, nr, lanes, m, vl = ks.mr, ks.nr, plan.micro.vector_lanes, ws.m, ws.vl

    def vec(loop, width):
        if width % lanes == 0:
            _, v = sch.split(loop, [None, lanes])
            sch.vectorize(v)

    blk = sch.get_sblock("Ic")
    n, cb, y, x, cl = sch.get_loops(blk)
    sch.parallel(sch.fuse(n, cb))
    sch.vectorize(cl)
    for name in ("W1p", "W2p"):
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        vec(sch.get_loops(blk)[-1], nr)
    blk = sch.get_sblock("Uw")
    e, ko, c, ki = sch.get_loops(blk)
    sch.reorder(ko, c, e, ki)
    sch.parallel(sch.fuse(ko, c))
    sch.unroll(e)
    vec(ki, nr)
    # the output drives the blocks: n, rows/(tr·m) | channels, rows, columns
    out = sch.get_sblock("O")
    n, k, y, x = sch.get_loops(out)
    yo, yi = sch.split(y, [None, tr * m])
    sch.reorder(n, yo, k, yi, x)
    par = sch.fuse(n, yo)
    sch.parallel(par)
    _unpack_panels(sch, k, yi, x, ks.W, spec.K2, nr)
    o2 = sch.get_sblock("O2")
    sch.compute_at(o2, par, preserve_unit_loops=True)
    ko = _conv_micro(sch, o2, mr, nr, lanes, 1)
    sch.decompose_reduction(o2, ko)
    # output transform of the block's tiles: m × m elements unrolled, vectors over a panel's channels
    t = sch.get_sblock("T")
    sch.compute_at(t, par, preserve_unit_loops=True)
    ko, y, x, ki = sch.get_loops(t)[-4:]
    yo, yi = sch.split(y, [None, m])
    xo, xi = sch.split(x, [None, m])
    sch.reorder(yo, ko, xo, yi, xi, ki)
    sch.unroll(yi)
    sch.unroll(xi)
    vec(ki, nr)
    # the block's GEMMs: element, panel, mr tiles | channels (reduction) | mr (unrolled), nr (vector)
    mw = sch.get_sblock("Mw")
    sch.compute_at(mw, par, preserve_unit_loops=True)
    e, ko, p, ki, c = sch.get_loops(mw)[-5:]
    po, pi = sch.split(p, [None, mr_w])
    sch.reorder(e, ko, po, c, pi, ki)
    sch.unroll(pi)
    sch.vectorize(ki)
    sch.decompose_reduction(mw, c)
    # the block's input transform: tiles × channel vectors, every tile element unrolled
    v = sch.get_sblock("V")
    sch.compute_at(v, par, preserve_unit_loops=True)
    e, p, c = sch.get_loops(v)[-3:]
    co, ci = sch.split(c, [None, vl])
    sch.reorder(p, co, e, ci)
    sch.unroll(e)
    sch.vectorize(ci)
    return sch.mod
