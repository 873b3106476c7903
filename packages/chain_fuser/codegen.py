"""TVM code generation for GEMM chains (and attention): TensorIR from ``te.create_prim_func`` scheduled with
``tvm.s_tir.Schedule`` so that the plan's order and tiles are realised.

Kernel structure (fused):

* ``Bp``/``Dp``: B and D packed into column panels of ``nr`` (the micro kernel's vector width × registers), zero
  padded to multiples of ``nr``: one contiguous vector load per k step.
* the second GEMM's loops are split by the plan's tiles and reordered in the plan's order; the first GEMM (and the
  glue) is ``compute_at`` the innermost prefix loop, so the intermediate is compacted to its live tile.
* inner loops of both GEMMs: ``row tiles, column tiles, reduction, mr (unrolled), nr (vectorised)``: an mr×nr
  block of accumulators kept in vector registers, one broadcast + ``nr/lanes`` FMAs per row per k step.
* batch and the leading data-parallel prefix loops are fused and run in parallel.

Odd sizes are padded (M to mr, L and N to nr inside the kernel by the packing, zero columns/rows contribute
nothing; padded l columns are masked out of the softmax) and the caller slices the result back.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from .model import MicroKernel, Plan
from .spec import GemmChain


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


@dataclass(frozen=True)
class GemmKernelShape:
    """Padded sizes the generated kernel works on."""

    batch: int
    M: int
    Mp: int
    K: int
    L: int
    Lp: int
    N: int
    Np: int
    mr: int
    nr: int
    Lv: int = 0
    """Columns of GEMM 1 the kernel computes (and GEMM 2's reduction): ``L`` padded to whole vectors. Below ``Lp``
    (whole panels) the last panel is a *tail*: a narrower register block over its ``Lv - Lp + nr`` columns."""
    Nv: int = 0
    """The same for GEMM 2's columns (the output's width)."""

    @property
    def l_tail(self) -> int:
        """Columns of GEMM 1's narrower last block (0: every block is ``nr`` wide)."""
        return self.Lv % self.nr if self.Lv < self.Lp else 0

    @property
    def n_tail(self) -> int:
        return self.Nv % self.nr if self.Nv < self.Np else 0


TAILS = True
"""Narrower last register blocks instead of whole padded panels (:func:`kernel_shape`); False: the padded kernels
(for A/B measurements)."""


def kernel_shape(spec: GemmChain, mk: MicroKernel) -> GemmKernelShape:
    """Padded sizes: rows to ``mr``, the packed panels to ``nr``. The columns computed are padded to whole vectors
    only (``Lv``, ``Nv``), except with softmax (its row statistics run over whole panels).

    Why: 208-token rows (ViT/16) in 32-wide panels computed 224 columns, and GEMM 2 reduced over all 224: 7.7 % of
    both GEMMs on padding; N = 80 (ViT-Huge) padded GEMM 2 to 96 columns, 20 %. A 16-wide last block costs one load
    per mr FMAs more than the 32-wide ones (gemm 1 of ViT-Base/16 alone, 12 x 208 x 64 x 208, interleaved:
    0.128 ms vs 0.137 ms padded)."""
    Lp, Np = _pad(spec.L, mk.nr), _pad(spec.N, mk.nr)
    if spec.glue == "softmax" or not TAILS:
        Lv, Nv = Lp, Np
    else:
        Lv, Nv = min(Lp, _pad(spec.L, mk.vector_lanes)), min(Np, _pad(spec.N, mk.vector_lanes))
    return GemmKernelShape(spec.batch, spec.M, _pad(spec.M, mk.mr), spec.K, spec.L, Lp, spec.N, Np, mk.mr, mk.nr,
                           Lv, Nv)


def target(mcpu: str | None = None, cores: int | None = None):
    """The LLVM target for this host: ``mcpu`` from LLVM's host detection (a CPU model without AVX-512 when
    ``$CHAIN_FUSER_ISA`` caps the ISA below it, :func:`host_mcpu`), ``num-cores`` = usable cores."""
    from shared_ir.hostinfo import num_cores

    return _target(mcpu or host_mcpu(), int(cores or num_cores()))


CROSS_TARGETS = {"neon": {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
                 "avx512": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512"},
                 "avx2": {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}}
"""LLVM targets for a described device that is not this host, by its ISA (:func:`chain_fuser.hw.isa`)."""


def target_for(device=None):
    """The LLVM target that code for ``device`` is compiled for: :func:`target` for the host, else the cross
    target of its ISA (:data:`CROSS_TARGETS`) with its core count."""
    import tvm

    from .hw import is_host, isa

    if device is None or is_host(device):
        return target()
    name = isa(device)
    if name not in CROSS_TARGETS:
        from .errors import UnsupportedChainError

        raise UnsupportedChainError(device.name, f"no code generator for ISA {name!r}; one of {sorted(CROSS_TARGETS)}")
    return tvm.target.Target({**CROSS_TARGETS[name], "num-cores": int(device.compute.cores)})


@functools.lru_cache(maxsize=8)
def _target(mcpu: str, cores: int):
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": cores})


CAPPED_MCPU = {"avx2": "haswell", "sse": "x86-64-v2", "scalar": "x86-64"}
"""LLVM CPU models for an ISA capped by ``$CHAIN_FUSER_ISA``: the oldest that have that level's vector features
(Haswell: AVX2 and FMA, no AVX-512), so that nothing above the cap is generated."""


@functools.lru_cache(maxsize=1)
def _detected_mcpu() -> str:
    import tvm

    from shared_ir.hostinfo import detected_isa

    try:
        f = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName", allow_missing=True)
        if f is not None:
            name = str(f())
            if name and name != "generic":
                return name
    except Exception:  # pragma: no cover - depends on the LLVM build
        pass
    return {"avx512": "skylake-avx512", "avx2": "haswell"}.get(detected_isa(), "x86-64")


def host_mcpu() -> str:
    """The LLVM CPU model kernels are compiled for: LLVM's name for this host, or under an ISA cap
    (:data:`shared_ir.hostinfo.ISA_ENV`) the model of :data:`CAPPED_MCPU`."""
    from shared_ir.hostinfo import isa, isa_capped

    if isa_capped():
        return CAPPED_MCPU.get(isa(), "x86-64")
    return _detected_mcpu()


def compile_tir(mod, tgt=None, pipeline="default"):
    """``tvm.tirx.build`` of ``mod`` for ``tgt`` (default :func:`target`): what ``tvm.build`` does, without its
    deprecation warning printed on every compile (older TVMs without ``tirx``: ``tvm.build``, that warning
    filtered)."""
    import warnings

    import tvm

    tgt = tgt or target()
    tirx = getattr(tvm, "tirx", None)
    if tirx is not None and hasattr(tirx, "build"):
        return tirx.build(mod, tgt, pipeline)
    with warnings.catch_warnings():  # pragma: no cover - older TVM
        warnings.filterwarnings("ignore", message="build is deprecated", category=DeprecationWarning)
        return tvm.build(mod, target=tgt, pipeline=pipeline)


# erf(x) ≈ x·P(x²)/Q(x²) on x clamped to [-4, 4] (Eigen's float32 approximation, the one TVM's fast_erf uses): max
# abs error 4.2e-7 against math.erf over [-6, 6] (tested)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def relu(v):
    """max(v, 0) as torch.relu computes it: NaN and -0.0 pass through (LLVM's maxnum would turn NaN into 0)."""
    from tvm import tirx

    zero = tirx.const(0, "float32")  # every template computes in fp32
    return tirx.Select(v < zero, zero, v)


def erf_rational(x):
    """erf as vectorisable arithmetic. Why: ``tirx.erf`` lowers to a scalar libm call per element, and an MLP's
    GELU over a 197×1536 tile took 2.4 ms that way, as long as both GEMMs around it."""
    from tvm import tirx

    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    x = tirx.max(tirx.min(x, f32(4.0)), f32(-4.0))
    x2 = x * x
    p = f32(_ERF_P[0])
    for c in _ERF_P[1:]:
        p = p * x2 + f32(c)
    q = f32(_ERF_Q[0])
    for c in _ERF_Q[1:]:
        q = q * x2 + f32(c)
    return x * p / q


def _glue(C, spec: GemmChain, name: str = "P", bias=None):
    """The op between the GEMMs as a stage over C's tile: scale, bias (over l), then relu/gelu. Padded columns
    (l >= L) are set to zero: they meet zero rows of Dp, and an inf in A makes them inf·0 = NaN, which would
    turn the row's outputs NaN where eager gives ±inf. (Without a glue stage they stay unmasked: a stage of its
    own would cost the plain chains time; there an inf in A may turn its row's ±inf outputs into NaN.)"""
    from tvm import te, tirx

    L = spec.L
    padded = int(C.shape[2]) > L
    zero = tirx.const(0.0, "float32")

    def pre(i, m, l):
        x = C[i, m, l] * spec.scale if spec.scale != 1.0 else C[i, m, l]
        return x + bias[tirx.min(l, L - 1)] if bias is not None else x

    def stage(f):
        body = (lambda i, m, l: tirx.if_then_else(l < L, f(i, m, l), zero)) if padded else f
        return te.compute(C.shape, body, name=name)

    if spec.glue == "relu":
        return stage(lambda i, m, l: relu(pre(i, m, l)))
    if spec.glue == "gelu":
        def g(i, m, l):
            x = pre(i, m, l)
            return x * 0.5 * (1.0 + erf_rational(x * (1.0 / math.sqrt(2.0))))
        return stage(g)
    if spec.glue == "scale" or spec.scale != 1.0 or bias is not None:
        return stage(pre)
    return None


def gemm_chain_te(spec: GemmChain, mk: MicroKernel, fused_inputs_padded: bool = True):
    """TE of the padded chain. Returns (args, stages) where stages names every compute by role."""
    from tvm import te, tirx

    ks = kernel_shape(spec, mk)
    b, Mp, K, L, Lp, N, Np, nr = ks.batch, ks.Mp, ks.K, ks.L, ks.Lp, ks.N, ks.Np, ks.nr
    A = te.placeholder((b, Mp, K), "float32", name="A")
    B = te.placeholder((b, L, K) if spec.bt else (b, K, L), "float32", name="B")
    Bat = (lambda i, k, l: B[i, l, k]) if spec.bt else (lambda i, k, l: B[i, k, l])
    D = te.placeholder((b, N, L) if spec.dt else (b, L, N), "float32", name="D")
    Dat = (lambda i, l, n: D[i, n, l]) if spec.dt else (lambda i, l, n: D[i, l, n])
    b1 = te.placeholder((L,), "float32", name="b1") if spec.bias1 else None
    zero = tirx.const(0.0, "float32")
    Bp = te.compute((b, Lp // nr, K, nr),
                    lambda i, lo, k, li: tirx.if_then_else(lo * nr + li < L,
                                                          Bat(i, k, tirx.min(lo * nr + li, L - 1)), zero)
                    if Lp != L else Bat(i, k, lo * nr + li), name="Bp")
    Dp = te.compute((b, Np // nr, Lp, nr),
                    lambda i, no, l, ni: tirx.if_then_else(tirx.all(l < L, no * nr + ni < N),
                                                          Dat(i, tirx.min(l, L - 1), tirx.min(no * nr + ni, N - 1)),
                                                          zero)
                    if (Np != N or Lp != L) else Dat(i, l, no * nr + ni), name="Dp")
    k = te.reduce_axis((0, K), name="k")
    Lv, Nv = ks.Lv, ks.Nv  # the columns computed (whole vectors; = Lp, Np with softmax)
    C = te.compute((b, Mp, Lv), lambda i, m, l: te.sum(A[i, m, k] * Bp[i, l // nr, k, l % nr], axis=k), name="C")
    stages: dict[str, Any] = {"Bp": Bp, "Dp": Dp, "C": C}
    if spec.glue == "softmax":
        from tvm import topi

        V = 16 if Lp % 16 == 0 else 1
        neg = tirx.const(-3.0e38, "float32")
        lv = te.reduce_axis((0, Lp // V), name="lv")
        keep = _attended(spec, L)
        mxv = te.compute((b, Mp, V), lambda i, m, v: te.max(
            tirx.if_then_else(keep(m, lv * V + v), C[i, m, lv * V + v], neg), axis=lv), name="mxv")
        vv = te.reduce_axis((0, V), name="vv")
        mx = te.compute((b, Mp), lambda i, m: te.max(mxv[i, m, vv], axis=vv), name="mx")
        X = te.compute((b, Mp, Lp), lambda i, m, l: tirx.if_then_else(keep(m, l), (C[i, m, l] - mx[i, m]) * spec.scale,
                                                                      tirx.const(-80.0, "float32")), name="X")
        P = topi.fast_exp(X)
        lv2 = te.reduce_axis((0, Lp // V), name="lv2")
        smv = te.compute((b, Mp, V), lambda i, m, v: te.sum(
            tirx.if_then_else(keep(m, lv2 * V + v), P[i, m, lv2 * V + v], zero), axis=lv2), name="smv")
        vv2 = te.reduce_axis((0, V), name="vv2")
        sm = te.compute((b, Mp), lambda i, m: te.sum(smv[i, m, vv2], axis=vv2), name="sm")
        l2 = te.reduce_axis((0, Lp), name="l2")
        Eacc = te.compute((b, Mp, Np), lambda i, m, n: te.sum(P[i, m, l2] * Dp[i, n // nr, l2, n % nr], axis=l2),
                          name="Eacc")
        E = te.compute((b, Mp, Np), lambda i, m, n: Eacc[i, m, n] / sm[i, m], name="E")
        stages.update({"mxv": mxv, "mx": mx, "X": X, "P": P, "smv": smv, "sm": sm, "E2": Eacc, "out": E})
    else:
        P = _glue(C, spec, bias=b1)
        src = P if P is not None else C
        l2 = te.reduce_axis((0, Lv), name="l2")
        E = te.compute((b, Mp, Nv), lambda i, m, n: te.sum(src[i, m, l2] * Dp[i, n // nr, l2, n % nr], axis=l2),
                       name="E")
        if P is not None:
            stages["P"] = P
        stages.update({"E2": E, "out": E})
    return [A, B, D] + ([b1] if b1 is not None else []) + [E], stages


def _attended(spec: GemmChain, L: int):
    """(m, l) → whether score column l of row m takes part in the softmax: a real column (not padding) and, for
    causal attention, l ≤ m."""
    from tvm import tirx

    if spec.causal:
        return lambda m, l: tirx.all(l < L, l <= m)
    return lambda m, l: l < L


def attention_blocked_te(spec: GemmChain, mk: MicroKernel, Tl: int):
    """Attention with the l loop tiled (online softmax, block form): per l block of ``Tl`` columns the scores S,
    their row max mb, P = exp(S - mb), the row sum sb and the partial output Ob = P·V; afterwards the blocks are
    combined with the rescaling factors exp(mb - max): O = Σ_b e_b·Ob / Σ_b e_b·sb. Only a Tm×Tl score tile and the
    Tm×N partial outputs are live: the chain's intermediate never exists whole."""
    from tvm import te, tirx, topi

    ks = kernel_shape(spec, mk)
    b, Mp, K, L, Lp, N, Np, nr = ks.batch, ks.Mp, ks.K, ks.L, ks.Lp, ks.N, ks.Np, ks.nr
    nb = Lp // Tl
    A = te.placeholder((b, Mp, K), "float32", name="A")
    B = te.placeholder((b, L, K) if spec.bt else (b, K, L), "float32", name="B")
    Bat = (lambda i, k, l: B[i, l, k]) if spec.bt else (lambda i, k, l: B[i, k, l])
    D = te.placeholder((b, N, L) if spec.dt else (b, L, N), "float32", name="D")
    Dat = (lambda i, l, n: D[i, n, l]) if spec.dt else (lambda i, l, n: D[i, l, n])
    zero = tirx.const(0.0, "float32")
    neg = tirx.const(-3.0e38, "float32")
    Bp = te.compute((b, Lp // nr, K, nr), lambda i, lo, k, li: tirx.if_then_else(
        lo * nr + li < L, Bat(i, k, tirx.min(lo * nr + li, L - 1)), zero), name="Bp")
    Dp = te.compute((b, Np // nr, Lp, nr), lambda i, no, l, ni: tirx.if_then_else(
        tirx.all(l < L, no * nr + ni < N), Dat(i, tirx.min(l, L - 1), tirx.min(no * nr + ni, N - 1)), zero), name="Dp")
    k = te.reduce_axis((0, K), name="k")
    pb = Tl // nr
    S = te.compute((b, Mp, nb, Tl), lambda i, m, lb, li: te.sum(
        A[i, m, k] * Bp[i, lb * pb + li // nr, k, li % nr], axis=k), name="C")
    V = 16 if Tl % 16 == 0 else 1
    keep = _attended(spec, L)
    lv = te.reduce_axis((0, Tl // V), name="lv")
    mbv = te.compute((b, Mp, nb, V), lambda i, m, lb, v: te.max(tirx.if_then_else(
        keep(m, lb * Tl + lv * V + v), S[i, m, lb, lv * V + v], neg), axis=lv), name="mbv")
    vv = te.reduce_axis((0, V), name="vv")
    mb = te.compute((b, Mp, nb), lambda i, m, lb: te.max(mbv[i, m, lb, vv], axis=vv), name="mb")
    X = te.compute((b, Mp, nb, Tl), lambda i, m, lb, li: tirx.if_then_else(
        keep(m, lb * Tl + li), (S[i, m, lb, li] - mb[i, m, lb]) * spec.scale, tirx.const(-80.0, "float32")), name="X")
    P = topi.fast_exp(X)
    lv2 = te.reduce_axis((0, Tl // V), name="lv2")
    sbv = te.compute((b, Mp, nb, V), lambda i, m, lb, v: te.sum(tirx.if_then_else(
        keep(m, lb * Tl + lv2 * V + v), P[i, m, lb, lv2 * V + v], zero), axis=lv2), name="sbv")
    vv2 = te.reduce_axis((0, V), name="vv2")
    sb = te.compute((b, Mp, nb), lambda i, m, lb: te.sum(sbv[i, m, lb, vv2], axis=vv2), name="sb")
    li2 = te.reduce_axis((0, Tl), name="li2")
    Ob = te.compute((b, Mp, nb, Np), lambda i, m, lb, n: te.sum(
        P[i, m, lb, li2] * Dp[i, n // nr, lb * Tl + li2, n % nr], axis=li2), name="Ob")
    r1 = te.reduce_axis((0, nb), name="r1")
    Mx = te.compute((b, Mp), lambda i, m: te.max(mb[i, m, r1], axis=r1), name="Mx")
    Ew = te.compute((b, Mp, nb), lambda i, m, lb: tirx.exp((mb[i, m, lb] - Mx[i, m]) * spec.scale), name="Ew")
    r2 = te.reduce_axis((0, nb), name="r2")
    Ss = te.compute((b, Mp), lambda i, m: te.sum(Ew[i, m, r2] * sb[i, m, r2], axis=r2), name="Ss")
    r3 = te.reduce_axis((0, nb), name="r3")
    Eacc = te.compute((b, Mp, Np), lambda i, m, n: te.sum(Ew[i, m, r3] * Ob[i, m, r3, n], axis=r3), name="Eacc")
    E = te.compute((b, Mp, Np), lambda i, m, n: Eacc[i, m, n] / Ss[i, m], name="E")
    st = {"Bp": Bp, "Dp": Dp, "C": S, "mbv": mbv, "mb": mb, "X": X, "P": P, "sbv": sbv, "sb": sb, "Ob": Ob,
          "Mx": Mx, "Ew": Ew, "Ss": Ss, "Eacc": Eacc, "out": E}
    return [A, B, D, E], st


def _schedule_attention_blocked(spec: GemmChain, plan: Plan, T: dict[str, int]):
    from tvm import s_tir, te

    mk = plan.micro
    ks = kernel_shape(spec, mk)
    mr, nr, lanes = mk.mr, mk.nr, mk.vector_lanes
    Tl = T["l"]
    args, st = attention_blocked_te(spec, mk, Tl)
    sch = s_tir.Schedule(te.create_prim_func(args))
    name = _block_name
    for nm in ("Bp", "Dp"):
        blk = sch.get_sblock(nm)
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        if nr % lanes == 0:
            _, vi = sch.split(loops[-1], [None, lanes])
            sch.vectorize(vi)
    out = sch.get_sblock("E")
    bo, m_l, n_l = sch.get_loops(out)
    mo, _ = sch.split(m_l, [None, T["m"]])
    par = sch.fuse(bo, mo)
    sch.parallel(par)
    if ks.Np % lanes == 0:
        _, v = sch.split(sch.get_loops(out)[-1], [None, lanes])
        sch.vectorize(v)
    # every stage at the row block; then the per-l-block stages' block loops are merged into one loop, so that
    # per block S, its max, P, its sum and Ob = P·V are computed together and S/P only ever hold one block
    sch.compute_inline(sch.get_sblock(name(st["X"])))
    per_block = ("C", "mbv", "mb", "P", "sbv", "sb", "Ob")
    for nm in ("Eacc", "Ss", "Ew", "Mx"):
        sch.compute_at(sch.get_sblock(name(st[nm])), par, preserve_unit_loops=True)
    for nm in reversed(per_block):  # each at the first possible point: the per-block stages end up together, first
        sch.compute_at(sch.get_sblock(name(st[nm])), par, preserve_unit_loops=True, index=-2)
    lbs = []
    for nm in per_block:
        blk = sch.get_sblock(name(st[nm]))
        loops = sch.get_loops(blk)
        b_l, m_l, lb_l = loops[1], loops[2], loops[3]
        sch.reorder(lb_l, b_l, m_l)
        lbs.append(lb_l)
    sch.merge(*lbs)
    ob = sch.get_sblock(name(st["Ob"]))
    _, _, m_l, n_l, li = sch.get_loops(ob)[-5:]
    m1, m2 = sch.split(m_l, [None, mr])
    n1, n2 = sch.split(n_l, [None, nr])
    sch.reorder(m1, n1, li, m2, n2)
    sch.unroll(m2)
    sch.vectorize(n2)
    sch.decompose_reduction(ob, m1)
    for nm in ("sbv", "mbv"):
        blk = sch.get_sblock(name(st[nm]))
        loops = sch.get_loops(blk)
        sch.reorder(loops[-1], loops[-2])
        loops = sch.get_loops(blk)
        if int(sch.get(loops[-1]).extent) > 1:
            sch.vectorize(loops[-1])
        sch.decompose_reduction(blk, loops[-2])
    pblk = sch.get_sblock(name(st["P"]))
    if Tl % lanes == 0:
        _, v = sch.split(sch.get_loops(pblk)[-1], [None, lanes])
        sch.vectorize(v)
    cblk = sch.get_sblock("C")
    _, cm, cl, ck = sch.get_loops(cblk)[-4:]
    c1m, c2m = sch.split(cm, [None, mr])
    c1l, c2l = sch.split(cl, [None, nr])
    sch.reorder(c1m, c1l, ck, c2m, c2l)
    sch.unroll(c2m)
    sch.vectorize(c2l)
    sch.decompose_reduction(cblk, c1m)
    blk = sch.get_sblock(name(st["Eacc"]))
    loops = sch.get_loops(blk)
    sch.reorder(loops[-1], loops[-2])  # (.., m, n, r) -> (.., m, r, n): n innermost, vectorised
    loops = sch.get_loops(blk)
    if ks.Np % lanes == 0:
        _, v = sch.split(loops[-1], [None, lanes])
        sch.vectorize(v)
    sch.decompose_reduction(blk, loops[-2])
    return sch.mod



def _block_name(t) -> str:
    return t.op.name


def _tiles(spec: GemmChain, plan: Plan, ks: GemmKernelShape) -> tuple[list[str], dict[str, int]]:
    """The plan's fused-level order over (m, l, k, n) and its tiles, fitted to the padded extents."""
    lp = plan.fused
    order = [d for d in lp.order if d in ("m", "l", "k", "n")]
    order += [d for d in ("m", "l", "k", "n") if d not in order]  # dims of extent 1 are not in the plan's order
    return order, fit_gemm_tiles(spec, ks, lp.tiles)


def fit_gemm_tiles(spec: GemmChain, ks: GemmKernelShape, tiles) -> dict[str, int]:
    """A GEMM chain plan's tiles as the kernel realises them: each dividing its padded extent, in multiples of the
    micro kernel. Used by the code generator and by the planner (``planner.realised``), so the model prices the
    tiles the kernel runs.

    Attention's l tile: the model plans over the unpadded extent, so a whole score row of an odd length arrives one
    panel short of the padded row, and the largest dividing multiple below it can be one panel. ViT-B attention
    (197 tokens, padded to 208 = 13 × 16): the plan's whole rows became 13 blocks of 16 columns, each with its own
    row max, sum and rescaled partial output: 2.05 ms; with whole rows of 208, 1.17 ms (2 threads, interleaved;
    our unfused kernel 1.16 ms). So an l tile within one panel of the padded row is the whole row. (The same rule
    for m made that kernel's 198 rows one block of scores, 165 kB: 2.07 ms; m keeps the dividing rule.)"""
    ext = {"m": ks.Mp, "l": ks.Lp, "n": ks.Np, "k": ks.K}
    gran = {"m": ks.mr, "l": ks.nr, "n": ks.nr, "k": 1}
    T = {d: _fit_tile(ext[d], int(tiles.get(d, ext[d])), gran[d]) for d in ext}
    if spec.glue == "softmax" and int(tiles.get("l", ks.Lp)) > ks.Lp - ks.nr:
        T["l"] = ks.Lp
    # a dim with a narrower last block is not tiled (one pass over its whole, vector-padded, extent), nor is its
    # GEMM's reduction: the tail's accumulators are zeroed in its own block (_micro_cols)
    if ks.l_tail:
        T["l"], T["k"] = ks.Lv, ks.K
    if ks.n_tail:
        T["n"], T["l"] = ks.Nv, ks.Lv
    return T


def _micro_cols(sch, col, nr: int, tail: int):
    """The micro kernel's columns over ``col``, a loop above ``(red, rows)`` (the register block's reduction step and
    its unrolled rows, the innermost loops): panels of ``nr`` vectorised columns. With a ``tail``, the loop is
    partitioned first and its last ``tail`` columns are a narrower block of their own (the same unrolled rows, one
    vector per ``lanes`` columns), and each block zeroes its accumulators right above its reduction: the partition
    puts each block in a scope of its own, where an outer loop cannot take the zeroing (the reduction must then be
    whole below the block: :func:`fit_gemm_tiles` keeps it so). Without one the caller places the zeroing."""
    ext = int(sch.get(col).extent)
    parts = [col] if not tail or tail == ext else sch.loop_partition(col, [ext - tail, None])
    for i, part in enumerate(parts):
        blk = sch.get_child_blocks(part)[0]
        red, rows = sch.get_loops(blk)[-2:]
        if i == 0:
            c1, c2 = sch.split(part, [None, min(nr, ext)])  # (all of it one narrower block when ext < nr)
            sch.reorder(c1, red, rows, c2)
        else:  # a partitioned loop that does not start at 0 cannot be split: vectorised whole (LLVM splits it)
            c2 = part
            sch.reorder(red, rows, c2)
        sch.unroll(rows)
        sch.vectorize(c2)
        if tail:
            sch.decompose_reduction(blk, red)


def _gemm_root(sch, blk, T_row, T_col, T_red, mr, nr, tail: int = 0):
    """One GEMM at root with the micro kernel: parallel over (batch, row tiles); col tiles, red tiles, micro.
    ``tail``: the columns' narrower last block (see :func:`_micro_cols`; the columns are then one tile)."""
    b, r, c, k = sch.get_loops(blk)
    ro, ri = sch.split(r, [None, T_row])
    r1, r2 = sch.split(ri, [None, mr])
    co, ci = sch.split(c, [None, T_col])
    # with a tail the reduction is one segment: its unit outer loop must not bind the block (see _micro_cols)
    ko, ki = sch.split(k, [None, T_red], preserve_unit_iters=not tail)
    sch.reorder(b, ro, co, ko, r1, ci, ki, r2)
    par = sch.fuse(b, ro)
    sch.parallel(par)
    _micro_cols(sch, ci, nr, tail)
    if not tail:
        sch.decompose_reduction(blk, co)


def _elementwise_root(sch, blk, lanes):
    loops = sch.get_loops(blk)
    sch.parallel(sch.fuse(loops[0], loops[1]))
    ext = sch.get(loops[-1]).extent
    if int(ext) % lanes == 0:
        _, v = sch.split(loops[-1], [None, lanes])
        sch.vectorize(v)


def schedule_gemm_chain(spec: GemmChain, plan: Plan, fused: bool = True):
    """A scheduled IRModule for the chain. ``fused=False`` gives the same micro kernel on two separate GEMMs
    (the intermediate goes to memory): the benchmark's "TVM unfused, same micro kernel" variant."""
    from tvm import s_tir, te

    mk = plan.micro
    ks = kernel_shape(spec, mk)
    args, st = gemm_chain_te(spec, mk)
    sch = s_tir.Schedule(te.create_prim_func(args))
    mr, nr, lanes = mk.mr, mk.nr, mk.vector_lanes
    order, T = _tiles(spec, plan, ks)
    softmax = spec.glue == "softmax"
    prefix = _prefix(order)
    if softmax and fused and "l" in prefix and T["l"] < ks.Lp:
        return _schedule_attention_blocked(spec, plan, T)
    threads = _pack_per_thread(spec, ks, order, T, fused)
    per_batch = _pack_per_batch(spec, ks, order, T, fused) and not threads
    for name in ("Bp", "Dp"):  # packing: parallel over batch × panels, vectorised along the panel
        if threads or per_batch:
            continue  # packed inside the parallel loop, by the iteration that uses it (below)
        blk = sch.get_sblock(name)
        loops = sch.get_loops(blk)
        sch.parallel(sch.fuse(loops[0], loops[1]))
        if nr % lanes == 0:
            _, vi = sch.split(loops[-1], [None, lanes])
            sch.vectorize(vi)
    e2 = sch.get_sblock(_block_name(st["E2"]))
    cblk = sch.get_sblock("C")
    if not fused:
        _gemm_root(sch, cblk, T["m"], T["l"], T["k"], mr, nr, tail=ks.l_tail)
        if softmax:
            # every stage at root: the score matrix goes to memory, softmax passes over it, then GEMM 2
            for name in ("mxv", "smv"):
                blk = sch.get_sblock(_block_name(st[name]))
                loops = sch.get_loops(blk)
                sch.reorder(loops[-1], loops[-2])
                loops = sch.get_loops(blk)
                sch.parallel(sch.fuse(loops[0], loops[1]))
                if int(sch.get(loops[-1]).extent) > 1:
                    sch.vectorize(loops[-1])
                sch.decompose_reduction(blk, loops[-2])
            for name in ("X", "P"):
                _elementwise_root(sch, sch.get_sblock(_block_name(st[name])), lanes)
            _gemm_root(sch, e2, T["m"], T["n"], ks.Lp, mr, nr)
            _elementwise_root(sch, sch.get_sblock("E"), lanes)
            return sch.mod
        if "P" in st:
            _elementwise_root(sch, sch.get_sblock(_block_name(st["P"])), lanes)
        _gemm_root(sch, e2, T["m"], T["n"], T["l"], mr, nr, tail=ks.n_tail)
        return sch.mod
    if softmax:
        # E = Eacc / sm is the output: tile its m (the fused loop); everything else is computed at the m tile
        out_blk = sch.get_sblock("E")
        bo, m_l, n_l = sch.get_loops(out_blk)
        mo, _ = sch.split(m_l, [None, T["m"]])
        par = sch.fuse(bo, mo)
        sch.parallel(par)
        if ks.Np % lanes == 0:
            _, v = sch.split(sch.get_loops(out_blk)[-1], [None, lanes])
            sch.vectorize(v)
        sch.compute_at(e2, par, preserve_unit_loops=True)
        _, m_l, n_l, l_l = sch.get_loops(e2)[-4:]
        m1, m2 = sch.split(m_l, [None, mr])
        no, ni = sch.split(n_l, [None, T["n"]])
        n1, n2 = sch.split(ni, [None, nr])
        lo, li = sch.split(l_l, [None, T["l"]])
        rest = {"n": no, "l": lo}
        sch.reorder(*[rest[d] for d in order if d in rest], m1, n1, li, m2, n2)
        sch.unroll(m2)
        sch.vectorize(n2)
        sch.decompose_reduction(e2, [rest[d] for d in order if d in rest][0])
        sch.compute_inline(sch.get_sblock(_block_name(st["X"])))  # (C - max)·scale feeds exp directly
        for name in ("sm", "smv", "P", "mx", "mxv"):
            sch.compute_at(sch.get_sblock(_block_name(st[name])), par, preserve_unit_loops=True)
        for name in ("smv", "mxv"):
            blk = sch.get_sblock(_block_name(st[name]))
            loops = sch.get_loops(blk)
            sch.reorder(loops[-1], loops[-2])  # (.., v, lv) -> (.., lv, v): v is data parallel, vectorise it
            loops = sch.get_loops(blk)
            if int(sch.get(loops[-1]).extent) > 1:
                sch.vectorize(loops[-1])
            sch.decompose_reduction(blk, loops[-2])
        blk = sch.get_sblock(_block_name(st["P"]))
        loops = sch.get_loops(blk)
        if ks.Lp % lanes == 0:
            _, v = sch.split(loops[-1], [None, lanes])
            sch.vectorize(v)
        c_attach = par
        c_prefix = ["m"]
    else:
        bo, m_l, n_l, l_l = sch.get_loops(e2)
        mo, mi = sch.split(m_l, [None, T["m"]])
        no, ni = sch.split(n_l, [None, T["n"]])
        lo, li = sch.split(l_l, [None, T["l"]], preserve_unit_iters=not ks.n_tail)  # (as in _gemm_root)
        m1, m2 = sch.split(mi, [None, mr])
        outer = {"m": mo, "n": no, "l": lo}
        e_order = [outer[d] for d in order if d in outer]
        if ks.n_tail:  # the columns' blocks at the end (_micro_cols), once the other stages are placed
            sch.reorder(bo, *e_order, m1, ni, li, m2)
        else:
            n1, n2 = sch.split(ni, [None, nr])
            sch.reorder(bo, *e_order, m1, n1, li, m2, n2)
            sch.unroll(m2)
            sch.vectorize(n2)
        # parallel: batch, and m when it leads (l is GEMM 2's reduction, n would race nothing but splits C)
        if e_order[0] is mo:
            par = sch.fuse(bo, mo)
            outer["m"] = par
        else:
            par = bo
        if threads:
            # one parallel unit per thread, each packing B and D for itself (see _pack_per_thread)
            par, outer["m"] = sch.split(par, [threads, None])
            sch.parallel(par)
            e_init_at = sch.get_loops(e2)[2]
        else:
            sch.parallel(par)
            e_init_at = sch.get_loops(e2)[1]
        if not ks.n_tail:  # else zeroed per register block (_micro_cols, below)
            sch.decompose_reduction(e2, e_init_at)
        c_prefix = prefix
        c_attach = outer[prefix[-1]] if prefix else par
        if "P" in st:
            sch.compute_at(sch.get_sblock(_block_name(st["P"])), c_attach, preserve_unit_loops=True)
            pblk = sch.get_sblock(_block_name(st["P"]))
            ploops = sch.get_loops(pblk)
            if int(sch.get(ploops[-1]).extent) % lanes == 0:
                _, v = sch.split(ploops[-1], [None, lanes])
                sch.vectorize(v)
    sch.compute_at(cblk, c_attach, preserve_unit_loops=True)
    _, cm, cl_l, ck = sch.get_loops(cblk)[-4:]
    c1m, c2m = sch.split(cm, [None, mr])
    c_lo, c_li = sch.split(cl_l, [None, T["l"]])
    cko, cki = sch.split(ck, [None, T["k"]], preserve_unit_iters=not ks.l_tail)
    rest = {"l": c_lo, "k": cko}
    c_order = [rest[d] for d in order if d in rest and d not in c_prefix]
    if "l" in c_prefix:
        c_order = [c_lo] + c_order
    if ks.l_tail:
        sch.reorder(*c_order, c1m, c_li, cki, c2m)
    else:
        c1l, c2l = sch.split(c_li, [None, nr])
        sch.reorder(*c_order, c1m, c1l, cki, c2m, c2l)
        sch.unroll(c2m)
        sch.vectorize(c2l)
        sch.decompose_reduction(cblk, c_order[0])
    if threads or per_batch:  # B and D packed at the top of the parallel unit (their consumers are all below it)
        for name in ("Bp", "Dp"):
            blk = sch.get_sblock(name)
            sch.compute_at(blk, par, preserve_unit_loops=True)
            if nr % lanes == 0:
                _, vi = sch.split(sch.get_loops(blk)[-1], [None, lanes])
                sch.vectorize(vi)
    # the tails last: a partitioned block's regions are its whole buffers, which compute_at above would then
    # have produced in every parallel unit
    if ks.l_tail:
        _micro_cols(sch, c_li, nr, ks.l_tail)
    if ks.n_tail:
        _micro_cols(sch, ni, nr, ks.n_tail)
    return sch.mod


def _pack_per_thread(spec: GemmChain, ks: GemmKernelShape, order, T: dict, fused: bool) -> int:
    """The thread count when each thread should pack B and D into a buffer of its own, else 0.

    Why: packed in a parallel loop of their own, the panels are split between the cores, and every core then reads
    all of them in the main loop: with one batch (Mixer, the memory-bound chains) half of each call's panels come
    from the other core's cache, and the next call's packing writes lines the other core holds. Measured on 2
    cores, Mixer-Small: 163 µs per call, against 151 µs for half the one-thread time. Each thread packing its own
    copy costs it the copy of the other half (a few µs) and no traffic between the cores. With a whole number of
    batches per thread each thread already packs only the batches it computes, so nothing changes there."""
    if not fused or spec.glue == "softmax" or [d for d in order if d in ("m", "n", "l")][0] != "m":
        return 0  # the unfused variant keeps its loops; attention has its own template; m must lead the parallel loop
    packed = 4 * ks.K * ks.Lp + 4 * ks.Lp * ks.Np  # one batch's Bp and Dp
    return private_packing_threads(ks.batch, ks.batch * -(-ks.Mp // T["m"]), packed)


def _pack_per_batch(spec: GemmChain, ks: GemmKernelShape, order, T: dict, fused: bool) -> bool:
    """Whether B and D are packed per batch inside the parallel loop, each iteration packing the batch it then
    computes: when an iteration of the parallel loop is one whole batch (the loop is over batches alone, or m leads
    the order untiled).

    Why: packed in a parallel loop of their own, all batches' panels are written before the first is used (Bert-Large:
    16 batches, 4 MB of panels) and come back from L3; packed per batch they are in L2 (256 kB) when used."""
    if not fused or spec.glue == "softmax" or ks.batch < 2:
        return False
    return [d for d in order if d in ("m", "n", "l")][0] != "m" or T["m"] >= ks.Mp


def private_packing_threads(batch: int, units: int, packed_bytes: int) -> int:
    """The thread count when a kernel of ``units`` parallel units over ``batch`` batches (images) should give each
    thread one unit and its own packed operands: the batches do not divide among the threads but the units do, and
    one batch's packed operands (``packed_bytes``) fit in one core's L2. Else 0 (packing in its own parallel loop).

    Why the L2 bound: every thread then packs all of the operands, twice the packing work in all. For Mixer's
    64-256 kB of panels that is a few µs; for an MLP's weights it is not (measured on 2 cores, Linear 256→1024→256
    on 64 rows, 2 MB of panels: 0.83 ms private, 0.61 ms shared; 768→3072→768 on 512 rows, 19 MB: 28.3 vs 26.6 ms)."""
    from shared_ir.hostinfo import num_cores

    from .hw import host_device, model_levels

    threads = num_cores()
    if threads < 2 or batch % threads == 0 or units % threads:
        return 0
    l2 = {lv.name: lv.capacity_bytes for lv in model_levels(host_device())}.get("l2", 1 << 20)
    return threads if packed_bytes <= l2 else 0


def _prefix(order) -> list[str]:
    out = []
    for d in order:
        if d in ("m", "l"):
            out.append(d)
        else:
            break
    return out


def _fit_tile(extent: int, tile: int, gran: int) -> int:
    """The largest multiple of ``gran`` that divides ``extent`` and is ≤ ``tile`` (≥ gran)."""
    tile = max(gran, min(tile, extent))
    best = gran
    for t in range(gran, tile + 1, gran):
        if extent % t == 0:
            best = t
    return best


def _stack_locals_pass():
    """A host pass before TVM's ``LowerTVMBuiltin``: every ``local`` buffer (register blocks of accumulators, a
    transform's first pass, a packed weight slice) stays an ``alloca`` on the stack, which LLVM promotes to
    registers, instead of a TVM workspace.

    Why: TVM 0.27 keeps only small *global* buffers on the stack; each local one became a
    ``TVMBackendAllocWorkspace``/``FreeWorkspace`` pair per iteration of the parallel loop it sits in (YOLO-2's
    Winograd kernel: 235 pairs per call; Darknet-19's: 1111, one per weight-transform iteration)."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    def mark(stmt):
        if stmt.buffer.scope() != "local":
            return stmt
        ann = dict(stmt.annotations)
        ann["disable_lower_builtin"] = tirx.IntImm("bool", 1)  # LowerTVMBuiltin leaves it an alloca
        return tirx.AllocBuffer(stmt.buffer, ann, stmt.span)

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="chain_fuser.StackLocals")
    def stack_locals(func, mod, ctx):
        return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, mark)]))

    return stack_locals


PIPELINE = "chain_fuser"
"""The TIR pipeline our kernels build with (:func:`pipeline`)."""


@functools.lru_cache(maxsize=1)
def pipeline() -> str:
    """Registers (once) and returns the name of our TIR pipeline: TVM's default, with :func:`_stack_locals_pass`
    before the host finalisation."""
    import tvm
    from tvm.s_tir.pipeline import default_s_tir_pipeline
    from tvm.tirx.compilation_pipeline import register_tir_pipeline

    def factory(**kwargs):
        passes, host, device = default_s_tir_pipeline(**kwargs)
        return passes, (lambda: tvm.ir.transform.Sequential([_stack_locals_pass(), host()])), device

    register_tir_pipeline(PIPELINE, factory)
    return PIPELINE


def build(mod, tgt=None):
    """``mod`` compiled for ``tgt`` (default: :func:`target`) with this package's TIR pipeline."""
    return compile_tir(mod, tgt or target(), pipeline())
