"""Winograd code generation for the 3×3 convs of a conv→conv chain (stride 1, 'same' padding).

``F(m×m, 3×3)`` computes each ``m × m`` output tile from an ``(m+2) × (m+2)`` input tile with ``(m+2)²``
element-wise products per channel pair instead of ``9 m²`` (``m`` = 2: 2.25× fewer; ``m`` = 4: 4× fewer)::

    V = Bᵀ d B   (input tile, per channel)        U = G g Gᵀ   (weights, per channel pair)
    M[e] = Σ_c V[e, c] U[e, c, k]                 (a batched GEMM: one per tile element e)
    Y = Aᵀ M A   (output tile, per output channel)

Stages (one TVM function):

* ``Ic``: the input zero-padded and transposed to channel blocks of ``vl`` (``[n, c/vl, y, x, c%vl]``), so the input
  transform is vector code over channels; ``W1p``/``W2p``: the weights packed as the direct kernel's.
* ``V[e, p, c]``: the input transform of tile ``p``; ``Uw[e, k/nr, c, k%nr]``: the weight transform, in the micro
  kernel's packed panel layout (one vector load per reduction step). Both transforms are generated from the
  matrices' non-zero entries only (a ``Select`` on the tile element that folds once the element loops are unrolled),
  so no multiplication by 0 or 1 is left in the code.
* ``Mw[e, k/nr, p, k%nr]``: the batched GEMM with the chain's micro kernel (``mr`` tiles × ``nr`` channels of
  accumulators, the reduction over input channels).
* ``T[n, k/nr, y, x, k%nr]``: the output transform (with conv1's bias and ReLU), in the layout the direct kernel's
  conv2 reads (NCHW[nr]c). A 1×1 conv2 is the direct one; a 3×3 conv2 is Winograd too (``V2``, ``Uw2``, ``Mw2``,
  its input transform reading ``T`` with zeros outside the image); then the unpack to NCHW.
* Blocked (:func:`block_tile_rows`): everything after ``Ic`` and the weight transforms runs per block of tile rows,
  so that the transformed tiles stay in cache (:func:`_schedule_blocked`).

Accuracy: ``m`` = 2 has the error of a direct conv (measured max |error| 1-2e-6 against float64 on unit-scale
inputs, C = 32…128; direct: 1.3-1.9e-6); ``m`` = 4 has 15-25× that (1.7-3.2e-5), which exceeds a 1e-5 absolute
tolerance near zero. So ``m`` = 2 is the default.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as Fr

from .codegen import relu
from .conv import _pad
from .model import Plan
from .spec import ConvChain

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
WINOGRAD_TILES = tuple(sorted(_MATRICES))
"""The tile sizes ``m`` there are kernels for (the matrices above)."""


def tile_of(algorithm: str) -> int:
    """``m`` of an algorithm name ``winograd<m>``."""
    digits = algorithm[len("winograd"):]
    m = int(digits) if algorithm.startswith("winograd") and digits.isdigit() else 0
    if m not in WINOGRAD_TILES:
        raise ValueError(f"unknown conv algorithm {algorithm!r}: expected 'direct' or one of "
                         f"{[f'winograd{k}' for k in WINOGRAD_TILES]}")
    return m


def executed_flops(spec: ConvChain, plan: Plan, m: int, cores: int | None = None) -> int:
    """2 × the multiply-adds the Winograd kernel executes: its batched GEMMs (padded tiles and channels included;
    conv2's too where it is 3×3) and a direct conv2's. ``cores``: of the machine it runs on (default: this one's),
    which decide the blocking and so the padding."""
    from shared_ir.hostinfo import num_cores

    from .conv import conv_kernel_shape

    ks, ws = conv_kernel_shape(spec, plan), winograd_shape(spec, plan, m)
    cores = num_cores() if cores is None else cores
    blocked = block_tile_rows(spec, ks, ws, plan.fused.capacity_bytes, cores)[0] > 0
    tiles = ws.P if blocked else ws.Pp
    conv1 = 2 * ws.a * ws.a * tiles * ws.Cp * ks.K1p
    if spec.R2 == spec.S2 == 3:
        return conv1 + 2 * ws.a * ws.a * tiles * ks.K1p * ks.K2p
    return conv1 + 2 * spec.N * spec.H * spec.W * spec.K2 * spec.K1 * spec.R2 * spec.S2


def plan_for(spec: ConvChain, plans: list[Plan], device=None) -> Plan:
    """The plan whose micro kernel the Winograd kernel uses: the model's best with two-vector panels (``nr`` = 2
    lanes), planned for that kernel when none of ``plans`` has one. Why: the batched GEMMs reduce over only 32-128
    channels; measured (interleaved, 2 threads) Darknet-19 1.44 ms with its plan's 4×64, 1.33 ms with 14×32 or
    12×32, and the nr = 32 kernels within 3 % of each other on every reference chain (the rows per register block
    are chosen per block anyway: :func:`block_tile_rows`)."""
    from . import hw
    from .planner import MR_CHOICES, plan_chain

    lanes = plans[0].micro.vector_lanes
    for p in plans:
        if p.micro.nr == 2 * lanes:
            return p
    mks = [k for k in hw.micro_kernels(device) if k.nr == 2 * lanes and k.mr in MR_CHOICES]
    if not mks:
        return plans[0]
    return plan_chain(spec, device, top_k=1, micro=max(mks, key=lambda k: k.mr))[0]


def predict(spec: ConvChain, plan: Plan, m: int = 2, device=None) -> dict:
    """The model's account of a Winograd kernel: the multiply-adds it executes at the FMA peak, plus the traffic
    of what does no FMAs (the input's layout change, the weight transform, and per block the transformed input, the
    GEMM output and the output transform's result, each written and read once, at the bandwidth of the level that
    holds them: memory for the whole tensors, L2 for a block's), added on top (the transforms run between the
    GEMMs, not under them). Seconds and bytes in a dict; :func:`explain` prints it."""
    from shared_ir.hostinfo import num_cores

    from . import hw
    from .conv import conv_kernel_shape

    dev = hw.resolve_device(device)
    ks, ws = conv_kernel_shape(spec, plan), winograd_shape(spec, plan, m)
    cores = hw.cores(dev) if device is not None else num_cores()
    tr, mr_w = block_tile_rows(spec, ks, ws, plan.fused.capacity_bytes, cores)
    levels = hw.model_levels(dev)
    dram_bw, l1_fill = levels[0].fill_bandwidth_bytes_per_s, levels[-1].fill_bandwidth_bytes_per_s
    wino2 = spec.R2 == spec.S2 == 3
    a2 = ws.a * ws.a
    f = 4  # bytes per float
    whole = f * (spec.N * spec.C * spec.H * spec.W  # input read
                 + 2 * spec.N * ws.Cp * (ws.th * m + 2) * (ws.tw * m + 2)  # its blocked copy written and read
                 + (1 + 2 * a2 / 9) * ks.K1p * ws.Cp * 9  # W1 read, its transform written and read
                 + (1 + 2 * a2 / 9 if wino2 else 1) * ks.K2p * ks.K1p * spec.R2 * spec.S2
                 + 2 * spec.N * spec.K2 * spec.H * spec.W)  # the output written (and its cache lines read first)
    tiles = ws.P if tr else ws.Pp
    blocks = f * 2 * (a2 * tiles * (ws.Cp + ks.K1p) + ks.K1p * ws.th * m * _pad(ks.Wp, m))
    if wino2:
        blocks += f * 2 * (a2 * tiles * (ks.K1p + ks.K2p) + ks.K2p * ws.th * m * _pad(ks.Wp, m))
    flops = executed_flops(spec, plan, m, cores)
    compute_s = flops / hw.peak_flops(dev)
    memory_s, cache_s = whole / dram_bw, blocks / l1_fill
    return {"m": m, "tiles": tiles, "block_tile_rows": tr, "gemm_mr": mr_w or ks.mr, "executed_flops": flops,
            "direct_flops": spec.flops, "compute_s": compute_s, "memory_bytes": whole, "memory_s": memory_s,
            "cache_bytes": blocks, "cache_s": cache_s, "predicted_s": compute_s + memory_s + cache_s}


def explain(spec: ConvChain, plan: Plan, m: int = 2, device=None, file=None) -> str:
    """A readable account of the Winograd kernel (:func:`predict`), printed (to ``file`` or stdout) and returned."""
    p = predict(spec, plan, m, device)
    conv2 = "Winograd" if spec.R2 == spec.S2 == 3 else "direct"
    blocks = (f"blocks of {p['block_tile_rows']} tile rows, GEMM register rows {p['gemm_mr']}"
              if p["block_tile_rows"] else "staged (each stage over the whole image)")
    text = "\n".join([
        f"winograd F({m}x{m}, 3x3) for {spec.name}: {p['tiles']} tiles, conv2 {conv2}, micro kernel "
        f"{plan.micro.name}, {blocks}",
        f"  compute: {p['executed_flops'] / 1e9:.3f} GFLOP executed "
        f"({spec.flops / p['executed_flops']:.2f}x fewer than "
        f"the direct {spec.flops / 1e9:.3f}) -> {p['compute_s'] * 1e3:.3f} ms at the FMA peak",
        f"  transforms and layout changes: {p['memory_bytes'] / 2**20:.2f} MiB through memory -> "
        f"{p['memory_s'] * 1e3:.3f} ms, {p['cache_bytes'] / 2**20:.2f} MiB through L2 -> {p['cache_s'] * 1e3:.3f} ms",
        f"  predicted: {p['predicted_s'] * 1e3:.3f} ms"])
    print(text, file=file)
    return text


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


def _transforms(m: int, th: int, tw: int, N: int):
    """TE building blocks of one Winograd conv over a tile grid of ``th × tw`` tiles per image."""
    from tvm import te, tirx

    a = m + 2
    BT, G, AT = (_MATRICES[m][k] for k in ("BT", "G", "AT"))
    elems = [(i, j) for i in range(a) for j in range(a)]

    def input_transform(name, Pp, Cp, d):
        """``V[e, p, c]``: tile ``p``'s transformed input ``Bᵀ d B``; ``d(n, c, y, x)`` reads the zero-padded input
        at padded coordinates (``y, x`` from 0 to ``m·t + 2``). In two passes: ``<name>r[i, p, s, c]`` = row ``i``
        of ``Bᵀ d`` (column ``s``), then ``V`` = those rows times ``B``. Why: 2·a³ instead of a⁴ terms per tile
        (m = 2: 32 additions instead of 48 per tile and channel vector); the first pass lives in registers
        (:meth:`_Sched.input_transform`)."""
        def rows_of(i, p, s, c):
            n = tirx.min(p // (th * tw), N - 1)  # padded tiles (p ≥ P) read the last image; their rows go unused
            ty, tx = p % (th * tw) // tw, p % tw
            vals = [_combo([(BT[k][r], d(n, c, ty * m + r, tx * m + s)) for r in range(a)]) for k in range(a)]
            return _select([i == k for k in range(a)], vals)

        rows = te.compute((a, Pp, a, Cp), rows_of, name=name + "r")

        def v_of(e, p, c):
            vals = [_combo([(BT[j][s], rows[i, p, s, c]) for s in range(a)]) for i, j in elems]
            return _select([e == k for k in range(len(elems))], vals)

        return te.compute((a * a, Pp, Cp), v_of, name=name)

    def weight_transform(name, Wpk):
        """``U[e, k/nr, c, k%nr]`` from weights packed as ``[k/nr, c, 3, 3, k%nr]`` (whole vectors per read)."""
        panels, Cp, _, _, nr = (int(d) for d in Wpk.shape)

        def u_of(e, ko, c, ki):
            vals = [_combo([(G[i][r] * G[j][s], Wpk[ko, c, r, s, ki]) for r in range(3) for s in range(3)])
                    for i, j in elems]
            return _select([e == q for q in range(len(elems))], vals)

        return te.compute((a * a, panels, Cp, nr), u_of, name=name)

    def gemm(name, V, U):
        _, panels, Cp, nr = (int(d) for d in U.shape)
        c = te.reduce_axis((0, Cp), name="c")
        return te.compute((a * a, panels, int(V.shape[1]), nr),
                          lambda e, ko, p, ki: te.sum(V[e, p, c] * U[e, ko, c, ki], axis=[c]), name=name)

    def output_rows(name, Mw):
        """``<name>[u, k/nr, p, j, k%nr]``: row ``u`` of ``Aᵀ M`` (column ``j``) of tile ``p``, the first pass of
        the output transform (:func:`output_transform` does the second: m = 2, 24 additions per tile and channel
        vector instead of 32), computed per tile in registers (:meth:`_Sched.output_transform`)."""
        _, panels, Pp, nr = (int(d) for d in Mw.shape)

        def r_of(u, ko, p, j, ki):
            vals = [_combo([(AT[k][i], Mw[i * a + j, ko, p, ki]) for i in range(a)]) for k in range(m)]
            return _select([u == k for k in range(m)], vals)

        return te.compute((m, panels, Pp, a, nr), r_of, name=name)

    def output_transform(n, ko, y, x, ki, rows):
        """conv output at (y, x): element (y % m, x % m) of tile (y / m, x / m), from the tile's rows of ``Aᵀ M``
        (:func:`output_rows`); columns past the tile grid read the last tile (they are masked, or never read)."""
        ty, tx = y // m, tirx.min(x // m, tw - 1)
        p = n * th * tw + ty * tw + tx
        conds, vals = [], []
        for u in range(m):
            for v in range(m):
                conds.append(tirx.all(y % m == u, x % m == v))
                vals.append(_combo([(AT[v][j], rows[u, ko, p, j, ki]) for j in range(a)]))
        return _select(conds, vals)

    return input_transform, weight_transform, gemm, output_rows, output_transform


def winograd_chain_te(spec: ConvChain, plan: Plan, m: int = 2):
    """TE of the chain with conv1 by Winograd ``F(m×m, 3×3)``, and conv2 by Winograd too where it is 3×3, else
    direct (as the unfused direct kernel)."""
    from tvm import te, tirx

    from .conv import conv_kernel_shape, pack_weights, unpacked_output

    if not supported(spec):
        raise ValueError(f"{spec.name}: Winograd needs a 3×3 first conv, got {spec.R1}×{spec.S1}")
    if m not in WINOGRAD_TILES:
        raise ValueError(f"{spec.name}: Winograd tile m must be one of {list(WINOGRAD_TILES)}, got {m}")
    ks = conv_kernel_shape(spec, plan)
    ws = winograd_shape(spec, plan, m)
    nr, vl = ks.nr, ws.vl
    N, C, H, W, Wp = ks.N, ks.C, ks.H, ks.W, ks.Wp
    th, tw = ws.th, ws.tw
    R2, S2 = spec.R2, spec.S2
    halo_free = R2 == 1 and S2 == 1
    wino2 = R2 == 3 and S2 == 3
    zero = tirx.const(0.0, "float32")
    I = te.placeholder((N, C, H, W), "float32", name="I")
    W1 = te.placeholder((spec.K1, C, 3, 3), "float32", name="W1")
    W2 = te.placeholder((spec.K2, spec.K1, R2, S2), "float32", name="W2")
    args = [I, W1, W2]
    b1 = te.placeholder((spec.K1,), "float32", name="b1") if spec.bias1 else None
    b2 = te.placeholder((spec.K2,), "float32", name="b2") if spec.bias2 else None
    args += [t for t in (b1, b2) if t is not None]
    input_transform, weight_transform, gemm, output_rows, output_transform = _transforms(m, th, tw, N)

    # input padded by 1 (conv1's halo) and to whole tiles, channels in blocks of vl
    Hi, Wi = th * m + 2, tw * m + 2
    Ic = te.compute((N, ws.Cp // vl, Hi, Wi, vl),
                    lambda n, cb, y, x, cl: tirx.if_then_else(
                        tirx.all(y >= 1, y < H + 1, x >= 1, x < W + 1, cb * vl + cl < C),
                        I[n, tirx.min(cb * vl + cl, C - 1), tirx.max(tirx.min(y - 1, H - 1), 0),
                          tirx.max(tirx.min(x - 1, W - 1), 0)], zero), name="Ic")
    V = input_transform("V", ws.Pp, ws.Cp, lambda n, c, y, x: Ic[n, c // vl, y, x, c % vl])
    # the weights packed first (as the direct kernel's W1p: output channels contiguous), so that the transform reads
    # whole vectors; transforming straight from [k, c, r, s] (a gather per vector) took 0.22 ms (m = 2) and 0.76 ms
    # (m = 4) of Darknet-19's 1.5-1.8 ms
    W1p = pack_weights(W1, ks.K1p, ws.Cp, nr, "W1p")
    Uw = weight_transform("Uw", W1p)
    Mw = gemm("Mw", V, Uw)

    def activation(v, ko, ki):
        if b1 is not None:
            v = v + b1[tirx.min(ko * nr + ki, spec.K1 - 1)]
        return relu(v) if spec.glue == "relu" else v

    # a 1×1 conv2 (no halo) or a Winograd conv2 (its input transform pads): the bias and ReLU applied here
    glued = halo_free or wino2
    Tr = output_rows("Tr", Mw)
    T = te.compute((N, ks.K1p // nr, th * m, _pad(Wp, m), nr),
                   lambda n, ko, y, x, ki: (activation(output_transform(n, ko, y, x, ki, Tr), ko, ki) if glued
                                            else output_transform(n, ko, y, x, ki, Tr)), name="T")
    W2p = pack_weights(W2, ks.K2p, ks.K1p, nr, "W2p")
    stages = {"Ic": Ic, "V": V, "W1p": W1p, "Uw": Uw, "Mw": Mw, "T": T, "W2p": W2p}
    if wino2:
        # conv2 by Winograd over the same tile grid: its input transform reads T (zero outside the image)
        def t_padded(n, c, y, x):
            inside = tirx.all(y >= 1, y < H + 1, x >= 1, x < W + 1)
            return tirx.if_then_else(inside, T[n, c // nr, tirx.max(tirx.min(y - 1, H - 1), 0),
                                               tirx.max(tirx.min(x - 1, W - 1), 0), c % nr], zero)

        V2 = input_transform("V2", ws.Pp, ks.K1p, t_padded)
        Uw2 = weight_transform("Uw2", W2p)
        Mw2 = gemm("Mw2", V2, Uw2)
        O2r = output_rows("O2r", Mw2)
        O2 = te.compute((N, ks.K2p // nr, th * m, _pad(Wp, m), nr),
                        lambda n, ko, y, x, ki: output_transform(n, ko, y, x, ki, O2r), name="O2")
        stages.update(V2=V2, Uw2=Uw2, Mw2=Mw2)
    else:
        h2, w2 = R2 // 2, S2 // 2
        Ht, Wt = H + 2 * h2, Wp + 2 * w2

        def act(n, ko, y, x, ki):
            v = activation(T[n, ko, tirx.max(tirx.min(y - h2, H - 1), 0), tirx.max(tirx.min(x - w2, Wp - 1), 0),
                             ki], ko, ki)
            inside = tirx.all(y >= h2, y < H + h2, x >= w2, x < W + w2)
            return tirx.if_then_else(inside, v, zero)

        U = T
        if not halo_free:  # conv2's zero halo, in a stage of its own
            U = stages["U"] = te.compute((N, ks.K1p // nr, Ht, Wt, nr), act, name="U")
        c2 = te.reduce_axis((0, ks.K1p), name="c2")
        r2 = te.reduce_axis((0, R2), name="r2")
        s2 = te.reduce_axis((0, S2), name="s2")
        O2 = te.compute((N, ks.K2p // nr, H, Wp, nr),
                        lambda n, ko, y, x, ki: te.sum(U[n, c2 // nr, y + r2, x + s2, c2 % nr] *
                                                       W2p[ko, c2, r2, s2, ki], axis=[c2, r2, s2]), name="O2")
    O = unpacked_output(O2, spec, b2, nr)
    stages.update(O2=O2, O=O)
    return args + [O], ks, ws, stages


def block_tile_rows(spec: ConvChain, ks, ws: WinogradShape, level_bytes: int, cores: int = 1) -> tuple[int, int]:
    """(tile rows per block, GEMM register rows ``mr``) of the blocked schedule, or (0, 0) where it does not apply
    (a direct conv2 with a halo, e.g. 5×5: each block would recompute its neighbours' rows).

    The block's tiles (rows × tiles per row) are a whole number of register rows (no partial register block); its
    transformed input and GEMM output (``(m+2)²`` × tiles × (C + K1) floats) within half of ``level_bytes``; the
    blocks' count a multiple of ``cores`` where possible. ``mr``: the plan's, or down to half of it (as many
    accumulators as the plan's ``nr`` leaves registers for), whichever gives the best of these. Why: Darknet-19's
    14 tiles per row with the plan's 4×64 kernel needed 2-row blocks, 7 of them on 2 cores (1.89 ms, the staged
    schedule 1.80); 7×64 gives 14 one-row blocks."""
    if not (spec.R2 == spec.S2 == 1 or spec.R2 == spec.S2 == 3):
        return 0, 0
    chans = ws.Cp + ks.K1p + (ks.K2p if spec.R2 == 3 else 0)
    # accumulators within the register file: ≤ 28 of AVX-512's 32 (its FMAs take the broadcast from memory), ≤ 13
    # of AVX2's 16 (its B vectors and a broadcast register beside them)
    vecs = max(1, ks.nr // ws.vl)
    top = max(ks.mr, min(16, (28 if ws.vl >= 16 else 13) // vecs))
    best, key = (0, 0), None
    for mr in range(top, max(1, ks.mr // 2) - 1, -1):
        for t in range(1, ws.th + 1):
            # blocks of whole output rows only: with a partial last block (H not a multiple of t·m) the stages
            # computed at the block wrote past their buffers (heap corruption at H = 7, m = 2, found by the property
            # test); such images take the staged schedule
            if ws.th % t or (t * ws.tw) % mr or spec.H % (t * ws.m):
                continue
            fits = 4 * ws.a * ws.a * t * ws.tw * chans <= level_bytes // 2
            balanced = (spec.N * ws.th // t) % max(1, cores) == 0
            k = (balanced, fits, mr >= ks.mr, t if fits else -t, mr)
            if key is None or k > key:
                best, key = (t, mr), k
    return best


class _Sched:
    """Loop transformations shared by the stages of both schedules."""

    def __init__(self, sch, ks, ws, lanes):
        self.sch, self.ks, self.ws, self.lanes = sch, ks, ws, lanes

    def at(self, name, loop):
        """Block ``name`` computed under ``loop`` (its region there: what the loop's iteration consumes)."""
        blk = self.sch.get_sblock(name)
        self.sch.compute_at(blk, loop, preserve_unit_loops=True)
        return blk

    def vec(self, loop, width):
        if width % self.lanes == 0:
            _, v = self.sch.split(loop, [None, self.lanes])
            self.sch.vectorize(v)

    def packing(self, name):
        """A weight packing stage (``W2p`` before a direct conv2): parallel over its two outer loops, vector inner."""
        sch = self.sch
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        self.vec(sch.get_loops(blk)[-1], self.ks.nr)

    def input_layout(self):
        """``Ic`` (the input zero-padded into channel blocks), parallel over (image, channel block): the zero border
        and the interior apart (``decompose_padding``), the interior as ``v × v`` register transposes
        (:func:`~chain_fuser.conv.transpose_intrin` with ``pack``: ``v`` row loads, a shuffle network, ``v`` stores)
        where the width is a multiple of ``v`` = 16 or 8 and the channels fill whole blocks; else one vector per
        pixel, built from ``vl`` scalar loads. Why: those scalar gathers (``vinsertps``) were 3 % of ResNet-50
        3x3->1x1's kernel time."""
        from tvm import s_tir
        from tvm.error import InternalError

        from .conv import transpose_intrin

        sch, ks, vl = self.sch, self.ks, self.ws.vl
        blk = sch.get_sblock("Ic")
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        v = next((w for w in (16, 8) if ks.W % w == 0 and vl % w == 0), 0)
        if not v or ks.C % vl:
            sch.vectorize(sch.get_loops(blk)[-1])
            return
        pad = sch.decompose_padding(blk, sch.get_loops(blk)[1])
        sch.vectorize(sch.get_loops(pad)[-1])
        y, x, c = sch.get_loops(blk)[-3:]
        xo, xi = sch.split(x, [None, v])
        co, ci = sch.split(c, [None, v])
        sch.reorder(xo, co, xi, ci)
        try:
            sch.tensorize(xi, transpose_intrin(v, pack=True))
        except (s_tir.ScheduleError, InternalError):
            sch.unroll(xi)  # the same block as vector code (gathers), as the unpack's fallback
            sch.vectorize(ci)

    def weight_transform(self, name, packed):
        """Per (panel, channel), every tile element unrolled (the Select folds), vectors over the panel; the packing
        of the weights it reads (``packed``: ``W1p``/``W2p``, 3 × 3 × ``nr`` of them per iteration) inside the same
        parallel loop. Why: one parallel region instead of two, and the packed weights read from L1 right after they
        are written, not from memory."""
        sch = self.sch
        blk = sch.get_sblock(name)
        e, ko, c, ki = sch.get_loops(blk)
        sch.reorder(ko, c, e, ki)
        par = sch.fuse(ko, c)
        sch.parallel(par)
        sch.unroll(e)
        self.vec(ki, self.ks.nr)
        pk = self.at(packed, par)
        sch.set_scope(pk, 0, "local")  # one iteration's 3 × 3 × nr floats: on the stack (codegen.build)
        self.vec(sch.get_loops(pk)[-1], self.ks.nr)

    def first_pass(self, blk, loop):
        """A transform's first pass (block ``<blk>r``) per iteration of ``loop`` of its consumer ``blk``, in a local
        buffer (one tile's rows × a channel vector or panel: registers once the loops are unrolled)."""
        sch = self.sch
        rb = sch.get_sblock(sch.get(blk).name_hint + "r")
        sch.compute_at(rb, loop, preserve_unit_loops=True)
        sch.set_scope(rb, 0, "local")
        *outer, last = sch.get_loops(rb)[-len(sch.get(rb).iter_vars):]  # a loop per axis below ``loop``
        for lp in outer:
            sch.unroll(lp)
        if int(sch.get(last).extent) > self.lanes:
            lo, last = sch.split(last, [None, self.lanes])
            sch.unroll(lo)
        sch.vectorize(last)

    def input_transform(self, blk, parallel=False):
        """Tiles × channel vectors, every tile element unrolled."""
        sch = self.sch
        e, p, c = sch.get_loops(blk)[-3:]
        co, ci = sch.split(c, [None, self.ws.vl])
        sch.reorder(p, co, e, ci)
        if parallel:
            sch.parallel(p)
        sch.unroll(e)
        sch.vectorize(ci)
        self.first_pass(blk, co)

    def gemm(self, blk, mr, parallel=False):
        """The micro kernel: element, panel, ``mr`` tiles | input channels | ``mr`` (unrolled), ``nr`` (vector)."""
        from .conv import register_accumulators

        sch = self.sch
        e, ko, p, ki, c = sch.get_loops(blk)[-5:]
        po, pi = sch.split(p, [None, mr])
        sch.reorder(e, ko, po, c, pi, ki)
        if parallel:
            sch.parallel(sch.fuse(e, ko))
        sch.unroll(pi)
        sch.vectorize(ki)
        register_accumulators(sch, blk, po, c)

    def output_transform(self, blk, rows_per_block=0):
        """Per tile, its m × m elements unrolled, vectors over a panel's channels; ``rows_per_block``: this stage
        is a pipeline's root, split into blocks of that many rows, the block loop (returned) parallel."""
        sch, m = self.sch, self.ws.m
        n, ko, y, x, ki = sch.get_loops(blk)[-5:]
        par = None
        if rows_per_block:
            yb, y = sch.split(y, [None, rows_per_block])
        yo, yi = sch.split(y, [None, m])
        xo, xi = sch.split(x, [None, m])
        if rows_per_block:
            sch.reorder(n, yb, yo, ko, xo, yi, xi, ki)
            par = sch.fuse(n, yb)
            sch.parallel(par)
        else:
            sch.reorder(yo, ko, xo, yi, xi, ki)
            if len(sch.get_loops(blk)) == 7:  # at root: n, yo are its outer loops
                sch.parallel(sch.fuse(n, yo))
        sch.unroll(yi)
        sch.unroll(xi)
        self.vec(ki, self.ks.nr)
        self.first_pass(blk, xo)
        return par

    def output_blocks(self, spec, rows):
        """The NCHW output per block of ``rows`` rows (parallel), unpacked panel by panel; returns the block loop."""
        from .conv import _unpack_panels

        sch = self.sch
        out = sch.get_sblock("O")
        n, k, y, x = sch.get_loops(out)
        yo, yi = sch.split(y, [None, rows])
        sch.reorder(n, yo, k, yi, x)
        par = sch.fuse(n, yo)
        sch.parallel(par)
        _unpack_panels(sch, k, yi, x, self.ks.W, spec.K2, self.ks.nr)
        return par


def schedule_winograd_chain(spec: ConvChain, plan: Plan, m: int = 2, blocked: bool = True):
    """The scheduled module. ``blocked`` (where :func:`block_tile_rows` finds a block): the stages after the input's
    layout change and the weights' transforms run per block of tile rows inside one parallel loop (two with a 3×3
    conv2: conv1's, then conv2's, which reads its neighbours' rows); else each stage over the whole image in turn."""
    from tvm import s_tir, te

    from shared_ir.hostinfo import num_cores

    from .conv import _conv_micro, finish_unpack, rows_per_block

    args, ks, ws, stages = winograd_chain_te(spec, plan, m)
    sch = s_tir.Schedule(te.create_prim_func(args))
    st = _Sched(sch, ks, ws, plan.micro.vector_lanes)
    if blocked:
        tr, mr_w = block_tile_rows(spec, ks, ws, plan.fused.capacity_bytes, num_cores())
        if tr:
            return _schedule_blocked(st, spec, plan, tr, mr_w, "V2" in stages)
    wino2 = "V2" in stages  # conv2 by Winograd too
    st.input_layout()
    if not wino2:
        st.packing("W2p")
    for suffix in ("", "2") if wino2 else ("",):
        st.weight_transform(f"Uw{suffix}", f"W{suffix or '1'}p")
        st.input_transform(sch.get_sblock(f"V{suffix}"), parallel=True)
        st.gemm(sch.get_sblock(f"Mw{suffix}"), ks.mr, parallel=True)
    st.output_transform(sch.get_sblock("T"))
    if "U" in stages:
        u = sch.get_sblock("U")
        n, ko, y, x, ki = sch.get_loops(u)
        sch.reorder(n, y, ko)
        sch.parallel(sch.fuse(n, y, ko))
        st.vec(ki, ks.nr)
    rows = rows_per_block(spec, ks.K1p, ks.K2p, ks.Wp, plan.fused.capacity_bytes, num_cores())
    if wino2:  # conv2's output transform per block of output rows (whole tiles), unpacked right after
        par = st.output_blocks(spec, m * max(1, rows // m))
        st.output_transform(st.at("O2", par))
    else:
        # direct conv2 per block of output rows, each block unpacked to NCHW right after (while in cache), as the
        # fused direct kernel does (one pass over the output instead of two: ResNet-50 3×3→1×1 1.47 → 1.41 ms)
        par = st.output_blocks(spec, rows)
        o2 = st.at("O2", par)
        _conv_micro(sch, o2, ks.mr, ks.nr, plan.micro.vector_lanes, 1)
    finish_unpack(sch)
    return sch.mod


def _schedule_blocked(st: _Sched, spec: ConvChain, plan: Plan, tr: int, mr_w: int, wino2: bool):
    """Per block of ``tr`` tile rows (a parallel loop over images × blocks): the input transform of its tiles, the
    batched GEMM, the output transform (with bias and ReLU), and then conv2 and the unpack to NCHW, so that the
    transformed tiles ((m+2)²/m² times the data they come from) stay in the core's cache instead of a round trip
    through memory (YOLO-1/2 at m = 2: a 3.2 MB transformed input and a 9.6 MB GEMM output per call). With a 1×1
    conv2 one pipeline does it all; with a Winograd conv2 its blocks need their neighbours' rows of conv1's output,
    so conv1's pipeline (to ``T``) runs first over all blocks, then conv2's (to the output).
    The input's layout change and the weights' transforms run before, over the whole tensors."""
    from .conv import _conv_micro, finish_unpack

    sch, ks, m = st.sch, st.ks, st.ws.m
    st.input_layout()
    st.weight_transform("Uw", "W1p")
    if wino2:
        st.weight_transform("Uw2", "W2p")
        par = st.output_transform(sch.get_sblock("T"), rows_per_block=tr * m)
    else:
        st.packing("W2p")
        par = st.output_blocks(spec, tr * m)
        o2 = st.at("O2", par)
        _conv_micro(sch, o2, ks.mr, ks.nr, plan.micro.vector_lanes, 1)
        st.output_transform(st.at("T", par))
    st.gemm(st.at("Mw", par), mr_w)
    st.input_transform(st.at("V", par))
    if wino2:
        par2 = st.output_blocks(spec, tr * m)
        st.output_transform(st.at("O2", par2))
        st.gemm(st.at("Mw2", par2), mr_w)
        st.input_transform(st.at("V2", par2))
    finish_unpack(sch)
    return sch.mod
