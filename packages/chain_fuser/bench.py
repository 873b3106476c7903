"""Benchmark: ``python -m chain_fuser.bench [--scale small|full]`` → ``results/bench-chain_fuser.json``.

Per shape, side by side in one process (variants interleaved, medians of repeats after warm-up, torch's thread
count equal to TVM's): our fused kernel (the fastest of the model's top K, measured), PyTorch eager (bmm, [glue],
bmm / conv2d, [relu], conv2d), PyTorch ``scaled_dot_product_attention`` (attention shapes), TVM without fusion
using the same micro kernel, and TVM MetaSchedule without chain fusion (:mod:`chain_fuser.metaschedule`: a fixed
trial budget per operator, on a subset at the small scale; its tuning time is recorded). numpy with OpenBLAS's best
kernel runs in a subprocess whose environment has ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed before numpy
is imported (the kernel OpenBLAS picked is recorded through threadpoolctl). The measured FMA peak gives each
kernel's fraction of the machine's limit.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .spec import ConvChain, GemmChain
from .timing import (
    PEAK_NOTE,
    PROBE_FLOOR,
    TORCH_COMPILE_MODES,
    InterleavedTimer,
    OpenBLASServer,
    SelfTimed,
    TorchServer,
    run_peak,
    time_round_robin,
    torch_eager,
    torch_sdpa,
)

# the reference's GEMM chains: (name, batch, M, N, K, L)
REFERENCE_GEMM = [
    ("Bert-Small", 8, 512, 64, 64, 512), ("Bert-Base", 12, 512, 64, 64, 512), ("Bert-Large", 16, 512, 64, 64, 512),
    ("ViT-Base/14", 12, 256, 64, 64, 256), ("ViT-Large/14", 16, 256, 64, 64, 256),
    ("ViT-Huge/14", 16, 256, 80, 80, 256), ("ViT-Base/16", 12, 208, 64, 64, 208),
    ("ViT-Large/16", 16, 208, 64, 64, 208), ("ViT-Huge/16", 16, 208, 80, 80, 208),
    ("Mixer-Small/32-S", 1, 512, 64, 64, 256), ("Mixer-Base/32-S", 1, 768, 64, 64, 384),
    ("Mixer-Large/32-S", 1, 1024, 64, 64, 512),
]
# conv chains [N, C, H, W, K1, R1, S1, K2, R2, S2] (3×3→1×1 and 3×3→3×3 from YOLO, Darknet, ResNet-50, ...)
REFERENCE_CONV = [
    ("YOLO-1", 1, 64, 112, 112, 192, 3, 3, 128, 1, 1), ("YOLO-2", 1, 32, 56, 56, 64, 3, 3, 32, 1, 1),
    ("Darknet-19", 1, 128, 28, 28, 256, 3, 3, 128, 1, 1), ("ResNet-50-3x3-1x1", 1, 64, 56, 56, 64, 3, 3, 256, 1, 1),
    ("ResNet-50-3x3-3x3", 1, 64, 56, 56, 64, 3, 3, 64, 3, 3), ("Inception-3x3-3x3", 1, 64, 35, 35, 96, 3, 3, 96, 3, 3),
]
REFERENCE_CONV_SMALL = [
    ("YOLO-1/2", 1, 64, 56, 56, 192, 3, 3, 128, 1, 1), ("YOLO-2", 1, 32, 56, 56, 64, 3, 3, 32, 1, 1),
    ("Darknet-19", 1, 128, 28, 28, 256, 3, 3, 128, 1, 1), ("ResNet-50-3x3-1x1", 1, 64, 56, 56, 64, 3, 3, 256, 1, 1),
    ("ResNet-50-3x3-3x3", 1, 64, 56, 56, 64, 3, 3, 64, 3, 3), ("Inception-3x3-3x3", 1, 64, 35, 35, 96, 3, 3, 96, 3, 3),
]
# memory bound: intermediates beyond the 32 MB last-level cache; (name, batch, M, N, K, L, glue)
MEMORY_BOUND = {
    "small": [("KN8-4k", 1, 4096, 8, 8, 4096), ("KN16-4k", 1, 4096, 16, 16, 4096), ("KN32-4k", 1, 4096, 32, 32, 4096),
              ("KN64-2kx8k", 1, 2048, 64, 64, 8192), ("KN16-8kx2k", 1, 8192, 16, 16, 2048),
              ("KN32-2kx4k", 2, 2048, 32, 32, 4096)],
    "full": [("KN8-8k", 1, 8192, 8, 8, 8192), ("KN16-8k", 1, 8192, 16, 16, 8192), ("KN32-4k", 1, 4096, 32, 32, 4096),
             ("KN64-4k", 1, 4096, 64, 64, 4096), ("KN16-8kx4k", 1, 8192, 16, 16, 4096),
             ("KN32-2kx8k", 1, 2048, 32, 32, 8192)],
}
ATTENTION = {"small": [("Attention-2k", 4, 2048), ("Attention-4k", 2, 4096)],
             "full": [("Attention-2k", 12, 2048), ("Attention-4k", 8, 4096)]}
# MetaSchedule without chain fusion (chain_fuser.metaschedule): each operator of a chain (GEMMs, softmax, convs)
# tuned on its own, ``trials`` measured candidates per operator, ``per_iter`` per search round; ``group``: chains per
# tuning run (None: all in one; a run that fails or times out loses only its chains), ``timeout_s`` the wall clock
# of one run, ``workers`` its build workers ("cores": one per core). ``search``: "replay-trace" (random schedules,
# random cost model: the cheapest search that still measures) or "evolutionary" (the default search with a cost
# model). One measured candidate costs ~4 s on 2 cores (build + run), so the small scale tunes 64 trials per
# operator (MetaSchedule's tutorials use 64-1000) on 3 of the plain chains, one per kind where ours leads PyTorch
# least (ViT-Base/16, ResNet-50 3x3->1x1, KN64): ~25 min the first time, then read back from the tuning cache
# (chain_fuser.metaschedule.tuning_cache_dir, keyed by shape, budget, target and TVM version). The full scale
# tunes every shape, one run each (a failing run loses only its shape).
METASCHEDULE = {"small": {"shapes": ["ViT-Base/16", "ResNet-50-3x3-1x1", "KN64-2kx8k"],
                          "trials": 64, "per_iter": 16, "timeout_s": 3600, "search": "evolutionary", "group": None,
                          "workers": "cores"},
                "full": {"shapes": None, "trials": 64, "per_iter": 16, "timeout_s": 3600, "search": "evolutionary",
                         "group": 1, "workers": "cores"}}


# torch.compile (Inductor) of the eager chain, in the PyTorch child: the compiler a user tries first. Each mode is
# a list of the shapes it runs on (None: every shape). max-autotune benchmarks its GEMM templates per shape at
# compile time (~10 s a shape here on 2 cores with empty caches): the default scale runs it on MetaSchedule's subset
TORCH_COMPILE = {"small": {"torch_compile": None,
                           "torch_compile_max_autotune": METASCHEDULE["small"]["shapes"]},
                 "full": {"torch_compile": None, "torch_compile_max_autotune": None}}


def shapes(scale: str) -> list[dict]:
    out = []
    for name, b, M, N, K, L in REFERENCE_GEMM:
        out.append({"name": name, "suite": "reference", "spec": GemmChain(b, M, N, K, L, name=_ident(name))})
    for name, *c in (REFERENCE_CONV if scale == "full" else REFERENCE_CONV_SMALL):
        out.append({"name": name, "suite": "reference", "spec": ConvChain(*c, glue="relu", name=_ident(name))})
    for name, b, M, N, K, L in MEMORY_BOUND[scale]:
        out.append({"name": name, "suite": "memory_bound", "spec": GemmChain(b, M, N, K, L, name=_ident(name))})
    for name, b, S in ATTENTION[scale]:
        out.append({"name": name, "suite": "memory_bound",
                    "spec": GemmChain(b, S, 64, 64, S, glue="softmax", scale=0.125, bt=True, name=_ident(name))})
    return out


def _ident(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name).lower()


def geomean(xs) -> float | None:
    """:func:`shared_ir.benchkit.geomean` of the positive values, None when there is none (a ratio not measured)."""
    from shared_ir.benchkit import geomean as gm

    return gm(xs, empty=None)


# --- the run --------------------------------------------------------------------------------------------------------
@dataclass
class _PreparedRow:
    """A benchmark row set up and calibrated, waiting for its rounds (``run``)."""

    it: dict  # the row of :func:`shapes`
    kernel: Any  # the pick (a FusedKernel)
    rep: Any  # its TuneReport
    err: float  # max relative error against the reference
    variants: dict[str, Callable[[], Any]]
    same_as_ours: bool  # the unfused kernel is the pick itself
    ms_tune_s: float | None  # the MetaSchedule tuning run this row was part of
    ms_note: str | None
    timer: InterleavedTimer  # its ``stats``: the row's probe counts
    prepare_s: float


@dataclass
class _Run:
    """What the phases of :func:`run` share: the settings, the machine's measured peak and probe, the baselines'
    child processes and MetaSchedule's tuned chains."""

    scale: str
    top_k: int
    repeat: int
    budget: float  # seconds of timing per shape and variant set
    threads: int
    winograd: tuple[int, ...]
    log: Callable[..., Any]
    peak: dict  # the FMA peak measured at the start
    cached_peak: float  # GFLOP/s, the best this machine did in earlier measurements
    machine: dict
    fma_probe: Any = None
    floor: float = 0.0
    server: Any = None  # OpenBLASServer
    torch_server: Any = None
    ms_cfg: dict = field(default_factory=dict)
    ms_runs: list[dict] = field(default_factory=list)
    ms_chains: dict = field(default_factory=dict)
    compile_cfg: dict = field(default_factory=dict)  # torch.compile variant -> its shapes (None: all)
    calibration: dict | None = None  # the model's micro-kernel rates measured on this machine (calibrate.py)
    probe_rates: list[float] = field(default_factory=list)  # every FMA probe reading after a timed slot, all rows

    @property
    def peak_gflops(self) -> float:
        return self.peak["gflops"]


def machine_line(machine: dict) -> str:
    """The benchmark's first printed line: the machine, the ISA, vector width, register count and FMA pipes that
    its kernels were generated and modelled for (``$CHAIN_FUSER_ISA`` caps the ISA)."""
    from shared_ir.benchkit import machine_line as line

    return f"chain_fuser benchmark, {line(machine)}, {machine['fma_pipes']:g} FMA pipes ({machine['fma_pipes_source']})"


def _start(scale, top_k, repeat, winograd, probe, cache_probe, log) -> _Run:
    """The run's settings, TVM's pool sized, the FMA peak measured, the machine stated (the first line printed),
    and the FMA probe created (before the threads are placed: its workers are TVM's pool, placed with the rest)."""
    import torch

    from shared_ir.hostinfo import num_cores

    from .hw import measured_peak_flops
    from .kernel import import_tvm
    from .peak import measure_fma_peak

    cached_peak = (measured_peak_flops() or 0.0) / 1e9  # the best this machine did in earlier measurements
    repeat = repeat or (11 if scale == "full" else 9)
    threads = num_cores()
    torch.set_num_threads(threads)
    import_tvm()  # sizes TVM's thread pool before anything else loads it
    peak = measure_fma_peak(save=True)
    ctx = _Run(scale, top_k, repeat, 0.8 if scale == "small" else 2.0, threads, winograd, log, peak, cached_peak,
               _machine(threads))
    log(machine_line(ctx.machine))
    log(f"FMA peak (measured, {threads} threads, {peak['lanes']} lanes): {ctx.peak_gflops:.1f} GFLOP/s")
    if probe:
        from .peak import FmaProbe

        ctx.fma_probe = FmaProbe(threads, cache=cache_probe)
    ctx.floor = PROBE_FLOOR * max(ctx.peak_gflops, cached_peak)
    return ctx


def _start_baselines(ctx: _Run, openblas: bool, torch_process: bool, pin: bool) -> None:
    ctx.server = OpenBLASServer(ctx.threads, pin=pin) if openblas else None
    ctx.torch_server = TorchServer(ctx.threads, pin=pin) if torch_process else None
    if ctx.torch_server is not None:
        ctx.log(f"PyTorch (own process, its default thread wait policy): {ctx.torch_server.info}")
    if ctx.server is not None:
        ctx.log(f"OpenBLAS (own process, pinning variables unset): {ctx.server.info}")


def _tune_metaschedule(ctx: _Run, items: list[dict]) -> None:
    """MetaSchedule's unfused chains of the configured subset, tuned before any timing, alone: its builder/runner
    processes would otherwise take the cores from the variants."""
    cfg = ctx.ms_cfg
    ms_items = [it for it in items if cfg["shapes"] is None or it["name"] in cfg["shapes"]]
    if not ms_items:
        return
    from .metaschedule import metaschedule_unfused

    workers = ctx.threads if cfg.get("workers") == "cores" else int(cfg.get("workers") or 1)
    ctx.log(f"MetaSchedule baseline: tuning {len(ms_items)} chains without fusion ({cfg['trials']} trials per "
            f"operator, at most {cfg['timeout_s']} s per run) before any timing ...")
    ctx.ms_chains, ctx.ms_runs = metaschedule_unfused([it["spec"] for it in ms_items], cfg["trials"],
                                                      cfg["timeout_s"], cfg.get("per_iter", 4),
                                                      cfg.get("search", "replay-trace"), cfg.get("group"), workers,
                                                      log=ctx.log)
    by_spec = {it["spec"].name: it["name"] for it in ms_items}
    for r in ctx.ms_runs:  # the benchmark's shape names
        r["names"] = [by_spec[n] for n in r["names"]]


def _place_threads(ctx: _Run) -> dict | None:
    """This process's threads pinned off TVM's worker. Torch's OpenMP pool, the OpenBLAS child and MetaSchedule's
    processes exist by now (they would inherit the caller's single core); TVM's pool exists since the peak
    measurement."""
    import torch

    from .kernel import pin_threads_for_benchmark

    torch.mm(torch.ones(256, 256), torch.ones(256, 256))
    pinning = pin_threads_for_benchmark()
    ctx.log(f"thread placement: {pinning or 'unchanged (no pinned TVM worker)'}")
    return pinning


def _variants(ctx: _Run, it: dict, kernel, rep, ins) -> tuple[dict[str, Callable[[], Any]], bool]:
    """A row's timed variants (the baselines' in their child processes), and whether the unfused kernel is the pick
    itself (then timed once, as ``ours``)."""
    from .kernel import build_kernel

    spec, name, ts = it["spec"], it["name"], ctx.torch_server
    variants: dict[str, Callable[[], Any]] = {
        "ours": lambda k=kernel: k(*ins),
        "torch": ts.variant(name, spec) if ts else torch_eager(spec, ins)}
    if isinstance(spec, GemmChain) and spec.glue == "softmax":
        variants["sdpa"] = ts.variant(name + "/sdpa", spec, "sdpa") if ts else torch_sdpa(spec, ins)
    if not kernel.fused and rep.best_fused_kernel is not None:
        # the measured pick kept the unfused kernel: the best fused one is timed too, so that the fused-vs-
        # unfused ratio stays the measured one (not 1.0 after the pick)
        variants["ours_fused"] = lambda k=rep.best_fused_kernel: k(*ins)
    same_as_ours = False
    try:
        unf = rep.unfused_kernel if rep.unfused_kernel is not None else build_kernel(spec, kernel.plan, fused=False)
        same_as_ours = unf is kernel
        if not same_as_ours:
            variants["tvm_unfused"] = lambda k=unf: k(*ins)
    except Exception as e:  # noqa: BLE001 - recorded, the row goes on without it
        ctx.log(f"  {name}: unfused variant failed: {e}")
    if ctx.server is not None and isinstance(spec, GemmChain):
        variants["openblas"] = ctx.server.variant(name, spec)
    variants.update(_compile_variants(ctx, it, ins))
    return variants, same_as_ours


def _compile_variants(ctx: _Run, it: dict, ins) -> dict[str, Callable[[], Any]]:
    """The row's torch.compile variants (:data:`TORCH_COMPILE`), compiled now; a compile that fails is logged and
    the row goes on without it."""
    from .timing import TORCH_COMPILE_MODES, torch_compiled

    out: dict[str, Callable[[], Any]] = {}
    for v, names in ctx.compile_cfg.items():
        if names is not None and it["name"] not in names:
            continue
        t = time.perf_counter()
        try:
            ts = ctx.torch_server
            out[v] = (ts.variant(f"{it['name']}/{v}", it["spec"], v) if ts else
                      torch_compiled(it["spec"], ins, TORCH_COMPILE_MODES[v]))
        except Exception as e:  # noqa: BLE001 - recorded, the row goes on without it
            ctx.log(f"  {it['name']}: {v} failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        ctx.log(f"  {it['name']}: {v} compiled in {time.perf_counter() - t:.1f} s")
    return out


def _prepare(ctx: _Run, it: dict) -> _PreparedRow:
    """A row ready to be timed: its kernel tuned (or from the disk cache), checked against the reference, and its
    variants set up."""
    from .kernel import random_inputs, reference, tune

    spec, name = it["spec"], it["name"]
    t_row = time.perf_counter()
    ins = random_inputs(spec)
    kernel, rep = tune(spec, top_k=ctx.top_k, winograd=ctx.winograd)
    ref = reference(spec, *ins)
    got = kernel(*ins)
    err = float((got - ref).abs().max() / (ref.abs().max() + 1e-6))
    variants, same_as_ours = _variants(ctx, it, kernel, rep, ins)
    ms_tune_s = ms_note = None
    ms_run = next((r for r in ctx.ms_runs if name in r["names"]), None)
    if ms_run is not None:
        ms_tune_s, ms_note = ms_run["tune_s"], ms_run["status"]
        rt = ctx.ms_chains.get(spec.name)
        if rt is not None:
            variants["metaschedule"] = lambda rt=rt: rt(*ins)
    timer = InterleavedTimer(variants, ctx.repeat, ctx.budget, probe=ctx.fma_probe, floor_gflops=ctx.floor, stats={})
    return _PreparedRow(it, kernel, rep, err, variants, same_as_ours, ms_tune_s, ms_note, timer,
                        time.perf_counter() - t_row - timer.seconds)


def _timed_ms(p: _PreparedRow) -> tuple[dict[str, float], dict[str, float]]:
    """The row's median wall and CPU ms per variant; the child processes drop the row's inputs."""
    cpu_ms: dict[str, float] = {}
    ms_ = p.timer.medians(cpu_ms)
    for v in p.variants.values():
        if isinstance(v, SelfTimed):
            v.done()
    if p.same_as_ours:  # one kernel timed twice read ×0.94-1.06 against itself: the noise, not a difference
        ms_["tvm_unfused"] = ms_["ours"]
        if "ours" in cpu_ms:
            cpu_ms["tvm_unfused"] = cpu_ms["ours"]
    return ms_, cpu_ms


def _row(ctx: _Run, p: _PreparedRow) -> dict:
    """One shape's result: times, speed-ups, GFLOP/s and fractions of the peak, per CPU second too, and the
    server64 prediction."""
    from .hw import server_device
    from .planner import predict_fusion_gain

    it, kernel, rep, spec, probe_stats = p.it, p.kernel, p.rep, p.it["spec"], p.timer.stats
    ms_, cpu_ms = _timed_ms(p)
    flops = spec.flops
    row = {"name": it["name"], "suite": it["suite"], "kind": spec.kind, "key": spec.key,
           "shape": _shape_dict(spec), "gflop": flops / 1e9, "max_rel_error": p.err,
           "ms": ms_, "ms_by_round": p.timer.runs,  # each round's ms per call, in the order timed
           "plan": kernel.plan.to_dict(), "tune": rep.to_dict(),
           "model_pick_vs_best_measured": rep.model_pick_vs_best, "probe": probe_stats,
           "tvm_unfused_is_ours": p.same_as_ours,
           # where the run's time goes: tuning (compiles, or the disk cache) + inputs and the reference, and timing
           "seconds": {"prepare": p.prepare_s, "timing": p.timer.seconds}}
    if p.ms_tune_s is not None:
        row["metaschedule_tune_s"] = p.ms_tune_s  # the tuning run this shape was part of
        row["metaschedule_status"] = p.ms_note
        row["metaschedule_trials"] = ctx.ms_cfg["trials"]
    o = row["ms"]["ours"]
    row["speedup"] = {k: v / o for k, v in row["ms"].items() if k != "ours"}
    tc = [row["ms"][k] for k in TORCH_COMPILE_MODES if k in row["ms"]]
    if tc:  # against the faster of the modes that ran: the user's best torch.compile
        row["speedup"]["torch_compile_best"] = min(tc) / o
    row["chosen_fused"] = kernel.fused
    if "tvm_unfused" in row["ms"]:  # the best fused kernel vs the unfused one, both measured here
        row["fused_vs_unfused"] = row["ms"]["tvm_unfused"] / row["ms"].get("ours_fused", o)
    _rates(ctx, row, kernel, flops, cpu_ms, probe_stats)
    t_pred = time.perf_counter()
    row["server_prediction"] = predict_fusion_gain(spec, server_device())
    row["seconds"]["server_prediction"] = time.perf_counter() - t_pred
    return row


def _rates(ctx: _Run, row: dict, kernel, flops: float, cpu_ms: dict, probe_stats: dict) -> None:
    """GFLOP/s (and so the fraction of the FMA peak) count what each kernel executes: a Winograd kernel's own
    multiply-adds (fewer than the chain's), so that its fraction measures the kernel, not the algorithm's saving."""
    row["algorithm"] = kernel.algorithm
    done = {k: (kernel.executed_flops if k == "ours" else flops) for k in row["ms"]}
    if kernel.algorithm != "direct":
        row["executed_gflop"] = {"ours": kernel.executed_flops / 1e9}
    row["gflops"] = {k: done[k] / (v * 1e-3) / 1e9 for k, v in row["ms"].items()}
    # provisional (the final fractions use the best FMA rate of the whole run, :func:`run_peak`)
    best = run_peak(ctx.peak_gflops, ctx.peak_gflops, ctx.probe_rates)
    row["peak_fraction"] = {k: g / best for k, g in row["gflops"].items()}
    rates = probe_stats.pop("rates", [])
    ctx.probe_rates.extend(rates)
    if rates:  # the FMA probe's rate right after this row's slots: what the machine delivered then
        row["probe_gflops"] = statistics.median(rates)
        row["peak_fraction_vs_probe"] = {k: g / row["probe_gflops"] for k, g in row["gflops"].items()}
    # per CPU second (robust to other processes' load): ratios, and GFLOP per CPU-second against one core's peak
    row["cpu_ms"] = cpu_ms
    oc = cpu_ms.get("ours")
    row["speedup_cpu"] = {k: v / oc for k, v in cpu_ms.items() if k != "ours" and oc}
    row["gflops_per_cpu_s"] = {k: done.get(k, flops) / (v * 1e-3) / 1e9 for k, v in cpu_ms.items() if v > 0}


def _row_line(row: dict) -> str:
    algo = "" if row["algorithm"] == "direct" else f", {row['algorithm']}"
    return (f"{row['name']:22s} {row['suite']:12s} ours {row['ms']['ours']:9.3f} ms "
            f"({row['peak_fraction']['ours']:.0%} "
            f"of peak{algo})  " + "  ".join(f"{k} ×{v:.2f}" for k, v in row["speedup"].items()) +
            f"  err {row['max_rel_error']:.1e}  | per CPU-s: " +
            "  ".join(f"{k} ×{v:.2f}" for k, v in row["speedup_cpu"].items()) +
            "  [s: " + ", ".join(f"{k.split('_')[0]} {v:.0f}" for k, v in row["seconds"].items()) + "]")


def _speedups(rs: list[dict], k: str) -> list[float]:
    return [r["speedup"].get(k) for r in rs if r["speedup"].get(k) is not None]


def _suite_summary(rows: list[dict]) -> dict:
    """The headline geomeans over the suites (reference, memory bound), against each baseline."""
    ref_rows = [r for r in rows if r["suite"] == "reference"]
    mem_rows = [r for r in rows if r["suite"] == "memory_bound"]
    gemm_rows = [r for r in ref_rows if r["kind"] == "gemm"]
    sp = _speedups
    return {
        "reference_geomean_vs_torch": geomean(sp(ref_rows, "torch")),
        "reference_min_vs_torch": min(sp(ref_rows, "torch"), default=None),
        "reference_geomean_vs_openblas": geomean(sp(ref_rows, "openblas")),
        "reference_min_vs_openblas": min(sp(ref_rows, "openblas"), default=None),
        "reference_max_vs_openblas": max(sp(ref_rows, "openblas"), default=None),
        "reference_geomean_vs_openblas_cpu": geomean([r["speedup_cpu"].get("openblas") for r in ref_rows]),
        "reference_geomean_vs_torch_cpu": geomean([r["speedup_cpu"].get("torch") for r in ref_rows]),
        "reference_peak_fraction": geomean([r["peak_fraction"]["ours"] for r in ref_rows]),
        "reference_gemm_geomean_vs_torch": geomean(sp(gemm_rows, "torch")),
        "reference_gemm_min_vs_torch": min(sp(gemm_rows, "torch"), default=None),
        "reference_gemm_geomean_vs_openblas": geomean(sp(gemm_rows, "openblas")),
        "geomean_vs_torch_compile": geomean(sp(rows, "torch_compile_best")),
        "geomean_vs_torch_compile_by_mode": {k: geomean(sp(rows, k)) for k in TORCH_COMPILE_MODES},
        "conv_geomean_vs_torch": geomean(sp([r for r in ref_rows if r["kind"] == "conv"], "torch")),
        "memory_bound_geomean_vs_torch": geomean(sp(mem_rows, "torch")),
        "attention_vs_sdpa": geomean(sp(mem_rows, "sdpa"))}


def _metaschedule_config(ctx: _Run) -> dict:
    cfg = ctx.ms_cfg
    return {"trials_per_operator": cfg["trials"], "num_trials_per_iter": cfg.get("per_iter", 4),
            "timeout_s": cfg["timeout_s"], "search": cfg.get("search", "replay-trace"), "shapes": cfg["shapes"],
            "runs": ctx.ms_runs, "tune_s": sum(r["tune_s"] for r in ctx.ms_runs), "group": cfg.get("group"),
            "workers": cfg.get("workers", 1),
            "note": "chain_fuser.metaschedule: every operator of a chain (GEMMs with their element-wise epilogue, "
                    "softmax, convs with padding, bias and ReLU) a task of its own (no chain fusion: intermediates "
                    "in memory), trials_per_operator measured candidates each, the chains of a group in one tune_tir "
                    "run; timed as its operators in turn" + ("" if cfg["shapes"] is None else "; subset only")}


def _metaschedule_summary(ctx: _Run, rows: list[dict]) -> dict:
    sp = _speedups
    return {
        "geomean_vs_metaschedule": geomean(sp(rows, "metaschedule")),
        "geomean_vs_metaschedule_by_group": {  # suite/kind
            g: geomean(sp([r for r in rows if f"{r['suite']}/{r['kind']}" == g], "metaschedule"))
            for g in ("reference/gemm", "reference/conv", "memory_bound/gemm", "memory_bound/attention")},
        "geomean_vs_metaschedule_why_none": (None if sp(rows, "metaschedule") else
                                             "; ".join(f"{', '.join(r['names'])}: {r['status']} ({r['tune_s']:.0f} s)"
                                                       for r in ctx.ms_runs) or "MetaSchedule not run")}


def _probe_summary(probe, floor: float, rows: list[dict]) -> dict | None:
    if probe is None:
        return None
    return {
        "floor_gflops": floor, "probes": probe.samples, "slow_probes": probe.slow,
        "cache_slow_probes": probe.cache_slow,
        "cache_probe": None if probe.cache is None else {
            "best_gbps": probe.cache.best, "floor": probe.cache.floor,
            "note": "six 2 MB copies after each FMA probe; a probe counts as slow also when the FMA rate was fast but "
                    "the copy ran below floor × its best (the shared cache contended by other tenants)"},
        "slots": sum(r["probe"].get("slots", 0) for r in rows),
        "retried_slots": sum(r["probe"].get("retried_slots", 0) for r in rows),
        "waited_s": probe.waited_s, "wait_budget_s": probe.wait_budget_s, "gave_up": probe.exhausted,
        "note": "every timed slot was preceded and followed by a ~0.2 ms FMA probe (and 2 MB cache copies); a slot "
                "whose following probe ran below the floor (the shared machine's half-speed state, or its shared "
                "cache contended) was timed again, until the waiting budget was spent (gave_up: later slots were "
                "timed whatever the state)"}


def _result(ctx: _Run, rows: list[dict], pinning, t_start: float, load_start) -> dict:
    """The run's JSON before the final peak measurement (:func:`_final_peak` completes it)."""
    from .kernel import unpinned_thread_pool

    ms_runs, server = ctx.ms_runs, ctx.server
    return {
        "scale": ctx.scale, "threads": ctx.threads, "top_k": ctx.top_k, "repeat": ctx.repeat,
        "winograd_tiles": list(ctx.winograd), "machine": ctx.machine, "reduced_at_this_scale": REDUCED.get(ctx.scale),
        "fma_peak_gflops": ctx.peak_gflops, "fma_peak": ctx.peak,
        "openblas": server.info if server is not None else None,
        "openblas_note": "numpy in a child process without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, timed interleaved "
                         "with the other variants; softmax there is numpy's",
        "metaschedule": _metaschedule_config(ctx),
        "shapes": rows,
        **_suite_summary(rows),
        **_metaschedule_summary(ctx, rows),
        "geomean_fused_vs_unfused_same_microkernel": geomean([r.get("fused_vs_unfused") for r in rows]),
        "fused_vs_unfused_note": "the best fused kernel of the top K vs the unfused one (same micro kernel), as "
                                 "measured, whichever the pick kept; shapes where the pick kept the unfused kernel: "
                                 + (", ".join(r["name"] for r in rows if not r["chosen_fused"]) or "none"),
        "tvm_threads_unpinned": unpinned_thread_pool(),
        "thread_pinning": {"this_process": pinning, "openblas_process": server.placement if server else None},
        "model_pick_vs_best_measured": {
            "geomean": geomean([r["model_pick_vs_best_measured"] for r in rows]),
            "max": max((r["model_pick_vs_best_measured"] for r in rows), default=None),
            "within_10_percent": sum(r["model_pick_vs_best_measured"] <= 1.10 for r in rows),
            "shapes": len(rows)},
        "server_predictions": {
            "device": "server64 (2×32 cores AVX-512, 1 MiB L2/core, 2×128 MiB L3, 400 GB/s DRAM)",
            "gains_from_fusion": [r["name"] for r in rows if r["server_prediction"]["predicted_gain"] > 1.1],
            "no_gain": [r["name"] for r in rows if r["server_prediction"]["predicted_gain"] <= 1.1],
            "per_shape": {r["name"]: r["server_prediction"] for r in rows}},
        "machine_probe": _probe_summary(ctx.fma_probe, ctx.floor, rows),
        "seconds": time.perf_counter() - t_start,
        "wall_s": time.perf_counter() - t_start,
        "isa": ctx.machine.get("isa"),
        "micro_calibration": None if ctx.calibration is None else {
            k: ctx.calibration.get(k) for k in ("factors", "seconds", "measured_at")},
        "metaschedule_trials_per_operator": ctx.ms_cfg.get("trials"),
        # where the run's time went (the rest: the peak measurement, the child processes' start, the summary)
        "seconds_by_phase": {"metaschedule_tuning": sum(r["tune_s"] for r in ms_runs if not r.get("cached")),
                             **{k: sum(r["seconds"][k] for r in rows)
                                for k in ("prepare", "timing", "server_prediction")}},
        "load_avg_start": list(load_start),
        "load_avg_end": list(os.getloadavg()),
    }


def _final_peak(ctx: _Run, result: dict) -> None:
    """The peak measured again at the end (on a shared machine the best of the two is the closer to the real limit),
    and every fraction divided by the run's best FMA rate (:func:`run_peak`)."""
    from .peak import measure_fma_peak

    rows, threads, cached_peak = result["shapes"], ctx.threads, ctx.cached_peak
    ref_rows = [r for r in rows if r["suite"] == "reference"]
    peak2 = measure_fma_peak(save=True)
    best = run_peak(ctx.peak_gflops, peak2["gflops"], ctx.probe_rates)
    result["fma_peak_start_gflops"], result["fma_peak_end_gflops"] = ctx.peak_gflops, peak2["gflops"]
    result["fma_peak_probe_max_gflops"] = max(ctx.probe_rates, default=None)
    result["fma_peak_cached_gflops"] = cached_peak
    result["fma_peak_gflops"] = best
    result["fma_peak_note"] = PEAK_NOTE
    for r in rows:
        r["peak_fraction"] = {k: g / best for k, g in r["gflops"].items()}
        r["peak_fraction_cpu"] = {k: g / (best / threads) for k, g in r["gflops_per_cpu_s"].items()}
    result["reference_peak_fraction"] = geomean([r["peak_fraction"]["ours"] for r in ref_rows])
    # against the best rate ever recorded on this CPU model (earlier runs included): stricter, across runs
    top = max(best, cached_peak)
    result["reference_peak_fraction_vs_cached_peak"] = geomean([r["gflops"]["ours"] / top for r in ref_rows])
    # the same over our direct kernels (a row's kept kernel, or where that is Winograd, the best direct one timed
    # beside it): the code generator's efficiency apart from the algorithm's, since a Winograd kernel's transforms
    # and data reshuffles count as time but not as FMAs
    result["reference_peak_fraction_direct_kernels"] = geomean(
        [r["peak_fraction"]["ours"] if r.get("algorithm", "direct") == "direct" else
         max([r["peak_fraction"][k] for k in ("ours_fused", "tvm_unfused") if k in r["peak_fraction"]], default=None)
         for r in ref_rows])
    result["conv_algorithms"] = {r["name"]: r.get("algorithm", "direct") for r in ref_rows if r["kind"] == "conv"}
    result["reference_gemm_peak_fraction"] = geomean([r["peak_fraction"]["ours"] for r in ref_rows
                                                      if r["kind"] == "gemm"])
    result["peak_errors"] = _peak_errors(rows, best)
    result["reference_peak_fraction_vs_probe"] = geomean([r.get("peak_fraction_vs_probe", {}).get("ours")
                                                         for r in ref_rows])
    result["ceilings"] = _ceilings(rows, ref_rows)
    result["reference_peak_fraction_cpu"] = geomean([r["peak_fraction_cpu"].get("ours") for r in ref_rows])
    result["cpu_time_note"] = ("*_cpu keys: the same runs measured in CPU time (all threads of the process, spin-waits "
                               "included; PyTorch's and OpenBLAS's in their own processes): robust to the other "
                               "processes on a shared machine; peak_fraction_cpu = GFLOP per CPU-second "
                               "/ (FMA peak / threads)")


def _peak_errors(rows: list[dict], peak: float) -> list[str]:
    """Every kernel (ours or a baseline's) that ran above the FMA peak doing the chain's own multiply-adds: the peak
    probe under-measured the machine (a fraction above 100 % is a bug, reported, never hidden). Winograd kernels do
    fewer multiply-adds than they are credited with and are left out."""
    out = []
    for r in rows:
        for k, g in r["gflops"].items():
            wino = (k == "ours" and r.get("algorithm", "direct") != "direct") or k == "ours_winograd"
            if g > peak and not wino:
                out.append(f"{r['name']}/{k}: {g:.1f} GFLOP/s is {g / peak:.0%} of the measured FMA peak "
                           f"{peak:.1f} GFLOP/s")
    return out


def _ceilings(rows: list[dict], ref_rows: list[dict]) -> dict:
    """What any kernel could reach at most: the FMA peak over the baseline's measured rate, per shape (geomean). A
    target ratio above this ceiling is out of reach on this machine whatever the kernel."""
    def inv(rs, k):
        return geomean([1 / r["peak_fraction"][k] for r in rs if r["peak_fraction"].get(k)])

    return {
        "note": "geomean over the suite of (FMA peak / the baseline's measured FLOP rate): the speed-up a kernel "
                "running at 100 % of the peak would show doing the chain's own multiply-adds (Winograd kernels "
                "do fewer: conv rows can pass the conv ceiling)",
        "reference_vs_torch": inv(ref_rows, "torch"),
        "conv_vs_torch": inv([r for r in ref_rows if r["kind"] == "conv"], "torch"),
        "reference_vs_openblas": inv(ref_rows, "openblas"),
        "vs_metaschedule": inv(rows, "metaschedule"),
        "torch_reference_peak_fraction": geomean([r["peak_fraction"].get("torch") for r in ref_rows]),
        "metaschedule_peak_fraction": geomean([r["peak_fraction"].get("metaschedule") for r in rows])}


def _restore(ctx: _Run, pinning, allowed, pin: bool, bind_before: str | None) -> None:
    """The baselines' processes closed and the placement back (TVM's pool, configured pinned, stays so in this
    process)."""
    for srv in (ctx.server, ctx.torch_server):
        if srv is not None:
            srv.close()
    if pinning and allowed:
        for tid in [0, *pinning["other_threads"]]:
            try:
                os.sched_setaffinity(tid, allowed)
            except OSError:
                pass
    if pin:
        if bind_before is None:
            os.environ.pop("TVM_BIND_THREADS", None)
        else:
            os.environ["TVM_BIND_THREADS"] = bind_before


def run(scale: str = "small", top_k: int = 4, repeat: int | None = None, out: str = "results/bench-chain_fuser.json",
        only: list[str] | None = None, metaschedule: bool = True, openblas: bool = True, log=print,
        ms_config: dict | None = None, pin: bool = True, probe: bool = True, torch_process: bool = True,
        winograd: tuple[int, ...] = (2,), cache_probe: bool = True, torch_compile: bool = True) -> dict:
    """``torch_process``: PyTorch's variants run in a child process of their own (``TorchServer``); False times
    them in this process. ``winograd``: the Winograd tile sizes ``tune`` tries on conv chains (the default
    ``(2,)``: a direct conv's rounding error; ``(2, 4)`` adds the opt-in F(4×4, 3×3)). ``cache_probe``: the machine
    probe also requires the shared cache uncontended (:class:`peak.CacheProbe`)."""
    from shared_ir.benchkit import write_json

    t_start = time.perf_counter()
    load_start = os.getloadavg()  # the machine is shared: the load says how far wall-clock ratios can be trusted
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    bind_before = os.environ.get("TVM_BIND_THREADS")
    if pin:  # TVM's worker on its own core; the caller is pinned off it once the other pools exist (below)
        os.environ["TVM_BIND_THREADS"] = "1"
    ctx = _start(scale, top_k, repeat, winograd, probe, cache_probe, log)
    from .calibrate import ensure

    ctx.calibration = ensure(log)
    items = shapes(scale)
    if only:
        items = [it for it in items if it["name"] in only or it["suite"] in only]
    _start_baselines(ctx, openblas, torch_process, pin)
    ctx.ms_cfg = ms_config or METASCHEDULE[scale]
    ctx.compile_cfg = TORCH_COMPILE[scale] if torch_compile else {}
    if metaschedule:
        _tune_metaschedule(ctx, items)
    pinning = _place_threads(ctx) if pin else None
    prepared = []  # every row set up first, then timed round by round (time_round_robin)
    for i, it in enumerate(items):
        prepared.append(_prepare(ctx, it))
        log(f"  set up {i + 1}/{len(items)}: {it['name']}")
    time_round_robin([p.timer for p in prepared], ctx.repeat, log)
    rows = []
    for p in prepared:
        rows.append(_row(ctx, p))
        log(_row_line(rows[-1]))
    result = _result(ctx, rows, pinning, t_start, load_start)
    _final_peak(ctx, result)
    _restore(ctx, pinning, allowed, pin, bind_before)
    write_json(out, result)
    log(summary_table(result))
    return result


# what the default scale measures smaller than --scale full (the keys are measured the same way at both)
REDUCED = {"small": "memory-bound chains 2k-8k (full: up to 8k x 8k), attention batch 4 x 2k / 2 x 4k tokens "
                    "(full: 12 x 2k / 8 x 4k), YOLO-1 at 56x56 (full: 112x112), MetaSchedule on 3 shapes (ViT-Base/16, "
                    "ResNet-50-3x3-1x1, KN64-2kx8k; full: every shape), 9 rounds of repeats (full: 11)"}


def _machine(threads: int) -> dict:
    """The machine the numbers were measured on (:func:`shared_ir.hostinfo.machine_record`: CPU, ISA, vector width
    and registers, FMA pipes, clock, caches, peak), with the threads used and the CPUs seen."""
    from shared_ir import hostinfo

    return {**hostinfo.machine_record(), "threads": threads, "logical_cpus": os.cpu_count(),
            "usable_cores": hostinfo.num_cores(), "python": sys.version.split()[0]}


def _shape_dict(spec) -> dict:
    if isinstance(spec, GemmChain):
        return {"batch": spec.batch, "M": spec.M, "N": spec.N, "K": spec.K, "L": spec.L, "glue": spec.glue}
    return {"N": spec.N, "C": spec.C, "H": spec.H, "W": spec.W, "K1": spec.K1, "R1": spec.R1, "S1": spec.S1,
            "K2": spec.K2, "R2": spec.R2, "S2": spec.S2, "glue": spec.glue}


def summary_table(res: dict) -> str:
    def f(x, fmt="{:.2f}"):
        return "n/a" if x is None else fmt.format(x)

    tiles = res.get("winograd_tiles", [2])
    lines = [f"chain_fuser benchmark ({res['scale']}, {res['threads']} threads, FMA peak "
             f"{res['fma_peak_gflops']:.0f} GFLOP/s, OpenBLAS {res.get('openblas')}"
             + ("" if tiles == [2] else f", Winograd tiles {tiles or 'none'} (not the default [2])") + ")"]
    lines.append(f"  machine: {res['machine']['cpu']}, {res['machine']['threads']} threads")
    lines.append(f"  reference: geomean ×{f(res['reference_geomean_vs_torch'])} vs torch (min ×"
                 f"{f(res['reference_min_vs_torch'])}), ×{f(res['reference_geomean_vs_openblas'])} vs OpenBLAS (min ×"
                 f"{f(res.get('reference_min_vs_openblas'))}, max ×{f(res.get('reference_max_vs_openblas'))}), "
                 f"{f(res['reference_peak_fraction'], '{:.0%}')} of the run's FMA peak (direct kernels "
                 f"{f(res.get('reference_peak_fraction_direct_kernels'), '{:.0%}')}); conv ×"
                 f"{f(res['conv_geomean_vs_torch'])} ("
                 + ", ".join(f"{a} {sum(v == a for v in res.get('conv_algorithms', {}).values())}"
                             for a in sorted(set(res.get("conv_algorithms", {}).values()))) + ")")
    lines.append(f"  per CPU second (robust to load): reference ×{f(res.get('reference_geomean_vs_torch_cpu'))} vs "
                 f"torch, ×{f(res.get('reference_geomean_vs_openblas_cpu'))} vs OpenBLAS, "
                 f"{f(res.get('reference_peak_fraction_cpu'), '{:.0%}')} of the per-core FMA peak")
    lines.append(f"  memory bound: ×{f(res['memory_bound_geomean_vs_torch'])} vs torch; attention ×"
                 f"{f(res['attention_vs_sdpa'])} vs SDPA")
    by_mode = res.get("geomean_vs_torch_compile_by_mode", {})
    lines.append(f"  ×{f(res.get('geomean_vs_torch_compile'))} vs torch.compile (the faster mode per shape; "
                 + ", ".join(f"{k} ×{f(v)}" for k, v in by_mode.items()) + ")")
    msr = res["metaschedule"]
    lines.append(f"  ×{f(res['geomean_vs_metaschedule'])} vs MetaSchedule ({msr['trials_per_operator']} "
                 f"trials per operator, {sum(len(r['names']) for r in msr['runs'])} shapes: "
                 + ", ".join(f"{k} ×{f(v)}" for k, v in res["geomean_vs_metaschedule_by_group"].items() if v)
                 + (f"; {res['geomean_vs_metaschedule_why_none']}" if res.get('geomean_vs_metaschedule_why_none')
                    else "") + f"); fused vs unfused (same micro kernel) ×"
                 f"{f(res['geomean_fused_vs_unfused_same_microkernel'])}")
    for e in res.get("peak_errors", []):
        lines.append(f"  ERROR (peak probe below a measured kernel): {e}")
    mp = res["model_pick_vs_best_measured"]
    lines.append(f"  model's first pick vs best of top K: geomean {f(mp['geomean'], '{:.3f}')}, max "
                 f"{f(mp['max'], '{:.3f}')}, within 10% on {mp['within_10_percent']}/{mp['shapes']}")
    lines.append(f"  server64 predictions, fusion gains on: "
                 f"{', '.join(res['server_predictions']['gains_from_fusion']) or '-'}")
    if res.get("reference_peak_fraction_vs_cached_peak"):
        lines.append(f"  reference vs the best FMA rate ever recorded on this CPU ({res['fma_peak_cached_gflops']:.0f} "
                     f"GFLOP/s, earlier runs; this run's best: {res['fma_peak_gflops']:.0f}): "
                     f"{f(res['reference_peak_fraction_vs_cached_peak'], '{:.0%}')}")
    if res.get("reference_peak_fraction_vs_probe"):
        lines.append(f"  reference vs the FMA probe's rate right after each row's slots (the machine then): "
                     f"{f(res['reference_peak_fraction_vs_probe'], '{:.0%}')}")
    c = res.get("ceilings") or {}
    if c:
        lines.append(f"  ceilings at 100 % of the peak: ×{f(c.get('reference_vs_torch'))} vs torch (torch at "
                     f"{f(c.get('torch_reference_peak_fraction'), '{:.0%}')} of it), "
                     f"conv ×{f(c.get('conv_vs_torch'))}, "
                     f"×{f(c.get('reference_vs_openblas'))} vs OpenBLAS, "
                     f"×{f(c.get('vs_metaschedule'))} vs MetaSchedule")
    if res.get("machine_probe"):
        mp_ = res["machine_probe"]
        lines.append(f"  machine state: {mp_['slow_probes']}/{mp_['probes']} probes below {mp_['floor_gflops']:.0f} "
                     f"GFLOP/s or with the cache contended ({mp_.get('cache_slow_probes', 0)}); "
                     f"{mp_['retried_slots']} of {mp_['slots']} timed slots timed again; "
                     f"{mp_.get('waited_s', 0):.0f} s waited for the fast state"
                     + (" (budget spent: later slots timed whatever the state)" if mp_.get("gave_up") else ""))
    lines.append(f"  total {res['seconds']:.0f} s; load average (1/5/15 min) at start {res.get('load_avg_start')}, "
                 f"at end {res.get('load_avg_end')}")
    if res.get("seconds_by_phase"):
        lines.append("  of which: " + ", ".join(f"{k} {v:.0f} s" for k, v in res["seconds_by_phase"].items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chain_fuser.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=["small", "full"], default=os.environ.get("SCALE") or "small")
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--out", default="results/bench-chain_fuser.json")
    ap.add_argument("--only", nargs="*", help="shape names or suites to run")
    ap.add_argument("--no-metaschedule", action="store_true")
    ap.add_argument("--ms-trials", type=int, default=None, help="MetaSchedule's measured candidates per operator")
    ap.add_argument("--ms-per-iter", type=int, default=None, help="MetaSchedule candidates per search round")
    ap.add_argument("--ms-search", choices=["replay-trace", "evolutionary"], default=None,
                    help="MetaSchedule search strategy")
    ap.add_argument("--ms-timeout", type=float, default=None, help="seconds before MetaSchedule is given up")
    ap.add_argument("--ms-shapes", nargs="*", default=None, help="shapes MetaSchedule tunes (a subset)")
    ap.add_argument("--no-openblas", action="store_true")
    ap.add_argument("--no-torch-compile", action="store_true", help="leave out the torch.compile baselines")
    ap.add_argument("--no-pin", action="store_true",
                    help="leave the calling thread and TVM's worker unpinned (the library's default placement)")
    ap.add_argument("--torch-in-process", action="store_true",
                    help="time PyTorch in this process (default: in a child process with torch's own settings)")
    ap.add_argument("--winograd", default="2",
                    help="Winograd tile sizes tried on conv chains, comma-separated: 2 (default), 2,4 (adds the "
                         "opt-in F(4x4,3x3), 15-25x a direct conv's rounding error), or none")
    ap.add_argument("--no-probe", action="store_true",
                    help="time slots whatever the machine's state (no FMA probe around them)")
    ap.add_argument("--no-cache-probe", action="store_true",
                    help="the machine probe checks the FMA rate only, not whether the shared cache is contended")
    a = ap.parse_args(argv)
    # this process's torch only makes inputs and references (the timed torch variants run in TorchServer's child,
    # with torch's defaults): its OpenMP workers wait passively, so that they never spin on the cores a TVM kernel
    # needs (measured: our kernels 2-5x slower right after a spinning torch call). Set before torch loads.
    if "torch" not in sys.modules and not a.torch_in_process:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ms = dict(METASCHEDULE[a.scale])
    if a.ms_trials:
        ms["trials"] = a.ms_trials
    if a.ms_timeout:
        ms["timeout_s"] = a.ms_timeout
    if a.ms_per_iter:
        ms["per_iter"] = a.ms_per_iter
    if a.ms_search:
        ms["search"] = a.ms_search
    if a.ms_shapes is not None:
        ms["shapes"] = a.ms_shapes
    try:
        tiles = () if a.winograd.strip().lower() == "none" else tuple(int(t) for t in a.winograd.split(","))
    except ValueError:
        ap.error(f"--winograd: expected comma-separated tile sizes or none, got {a.winograd!r}")
    from .winograd import WINOGRAD_TILES

    if any(t not in WINOGRAD_TILES for t in tiles):
        ap.error(f"--winograd: tile sizes must be among {list(WINOGRAD_TILES)}, got {a.winograd!r}")
    run(a.scale, a.top_k, a.repeat, a.out, a.only, not a.no_metaschedule, not a.no_openblas, ms_config=ms,
        pin=not a.no_pin, probe=not a.no_probe, torch_process=not a.torch_in_process, winograd=tiles,
        cache_probe=not a.no_cache_probe, torch_compile=not a.no_torch_compile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
