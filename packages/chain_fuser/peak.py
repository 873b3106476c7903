"""The machine's FMA peak, measured with a tiny generated kernel: each core runs a loop of independent vector FMAs
on register-resident accumulators (no memory traffic), so the time is the FMA throughput alone."""
from __future__ import annotations

import json
import time


def fma_kernel(lanes: int, accumulators: int, iters: int, threads: int):
    """TVMScript of the peak loop: ``threads`` parallel copies, each ``accumulators`` vectors of ``lanes`` floats
    updated ``acc = acc * a + b`` ``iters`` times (unrolled over the accumulators, vectorised over lanes)."""
    from tvm.script import tirx as T

    width = lanes * accumulators

    @T.prim_func
    def fma(out: T.Buffer((threads, width), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            acc = T.alloc_buffer((width,), "float32", scope="local")
            for i in T.vectorized(width):
                acc[i] = T.Cast("float32", p + i)
            for it in range(iters):
                for j in T.unroll(accumulators):
                    for v in T.vectorized(lanes):
                        acc[j * lanes + v] = acc[j * lanes + v] * T.float32(0.99990) + T.float32(0.0001)
            for i in T.vectorized(width):
                out[p, i] = acc[i]

    return fma


def _fma_loop(tvm, lanes: int, accumulators: int, iters: int, threads: int):
    """The compiled peak loop, its output tensor and the FLOPs of one call."""
    import numpy as np

    from .codegen import compile_tir, target

    mod = compile_tir(fma_kernel(lanes, accumulators, iters, threads), target())
    out = tvm.runtime.tensor(np.zeros((threads, lanes * accumulators), "float32"), tvm.cpu(0))
    return mod, out, 2.0 * threads * lanes * accumulators * iters


def peak_accumulators() -> int:
    """Independent accumulators of the peak loop: 24 of AVX-512's (or NEON's) 32 vector registers, 12 of AVX2's 16;
    either covers 2 FMA pipes × 4+ cycles of latency with room to spare, and none spills."""
    from shared_ir.hostinfo import vector_registers

    return min(24, vector_registers() - 4)


def measure_fma_peak(threads: int | None = None, lanes: int | None = None, accumulators: int | None = None,
                     iters: int = 50_000, repeat: int = 40, rounds: int = 3, save: bool = True) -> dict:
    """Measure and (by default) record the FMA peak (:func:`shared_ir.hostinfo.record_peak`, which keeps the best).
    Returns ``{"gflops", "threads", "lanes", ...}``.

    The peak is the *best* of many short runs (``rounds`` × ``repeat`` runs of ``iters`` loop trips, ~0.2 ms each
    on idle cores): on a shared machine a short run often gets both cores to itself, a long one almost never, so
    the best short run is the closest to the hardware's limit. ``accumulators``: :func:`peak_accumulators`."""
    from shared_ir.hostinfo import cpu_id, isa, num_cores

    from .hw import vector_lanes
    from .kernel import import_tvm

    tvm = import_tvm()
    threads = threads or num_cores()
    lanes = lanes or vector_lanes()
    accumulators = accumulators or peak_accumulators()
    mod, out, flops = _fma_loop(tvm, lanes, accumulators, iters, threads)
    dev = tvm.cpu(0)
    ev = mod.time_evaluator("main", dev, number=1, repeat=repeat)
    ev(out)  # warm-up: the thread pool's workers started and spinning
    runs = [t for _ in range(rounds) for t in ev(out).results]
    best = min(runs)
    median = sorted(runs)[len(runs) // 2]
    # one accumulator: every FMA waits for the previous one (latency-bound). Peak over this rate is the number of
    # independent accumulators that saturate the FMA pipes (pipes × latency): 8 on cores with two 512-bit pipes,
    # 4 on Zen 4, which issues one 512-bit FMA per cycle (two 256-bit halves). The micro-kernel model needs it.
    lat_mod, lat_out, lat_flops = _fma_loop(tvm, lanes, 1, max(1, iters * accumulators // 8), threads)
    lat_ev = lat_mod.time_evaluator("main", dev, number=1, repeat=max(5, repeat // 4))
    lat_ev(lat_out)
    lat_best = min(t for _ in range(rounds) for t in lat_ev(lat_out).results)
    lat_gflops = lat_flops / lat_best / 1e9
    res = {"gflops": flops / best / 1e9, "threads": threads, "lanes": lanes, "accumulators": accumulators,
           "iters": iters, "seconds": best, "runs": len(runs),
           "median_gflops": flops / median / 1e9, "latency_bound_gflops": lat_gflops,
           "saturating_accumulators": round(flops / best / 1e9 / lat_gflops, 2),
           "cpu": cpu_id(), "isa": isa(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if save:
        from shared_ir.hostinfo import record_peak

        record_peak(res)
    return res


def fma_peak_gflops(refresh: bool = False) -> float:
    """The cached measurement, measuring once if there is none."""
    from .hw import measured_peak_flops

    m = None if refresh else measured_peak_flops()
    return m / 1e9 if m else measure_fma_peak()["gflops"]


class FmaProbe:
    """A short FMA-peak run (~0.2 ms) that tells whether the machine delivers its full throughput *now*.

    Why: on the shared VMs this project runs on, the two vCPUs' FMA throughput halves for stretches of 1-2 s
    (measured: an FMA loop timed every 5 ms for 40 s ran at a median 199 GFLOP/s, and at ~115 GFLOP/s in 19 % of
    the samples, in whole-second runs; the host's placement of the vCPUs, not this process). A timed slot that
    falls into such a stretch runs every kernel at half speed, whichever it is, and a benchmark row whose variants
    meet different states reports ratios of the machine, not of the kernels. The benchmark probes before and after
    each timed slot and times the slot again when the machine was slow (see ``timing.InterleavedTimer``)."""

    def __init__(self, threads: int | None = None, iters: int = 20_000, accumulators: int | None = None,
                 wait_budget_s: float = 120.0, cache: bool = False):
        """``wait_budget_s``: the most seconds all of ``wait_fast`` may wait, together; past it the probe stops
        gating (``exhausted``), so that a machine that stays slow makes the benchmark noisier, not hours long.
        ``cache``: the machine is fast only when a :class:`CacheProbe` also runs at ``CACHE_FLOOR`` of its best."""
        from shared_ir.hostinfo import num_cores

        from .hw import vector_lanes
        from .kernel import import_tvm

        mod, self._out, self._flops = _fma_loop(import_tvm(), vector_lanes(), accumulators or peak_accumulators(),
                                                iters, threads or num_cores())
        self._f = mod["main"]
        self._f(self._out)  # warm-up: workers started
        self.samples = 0
        self.slow = 0
        self.last = 0.0
        self.wait_budget_s = wait_budget_s
        self.waited_s = 0.0
        self.cache = CacheProbe() if cache else None
        self.cache_slow = 0  # of ``slow``: the probes whose FMA rate was fast but the cache copy was not

    @property
    def exhausted(self) -> bool:
        """The waiting budget is spent: callers time slots whatever the machine's state from now on."""
        return self.waited_s >= self.wait_budget_s

    def gflops(self) -> float:
        """Best of two back-to-back runs (the first may pay the thread pool's wake-up)."""
        best = 0.0
        for _ in range(2):
            t = time.perf_counter()
            self._f(self._out)
            best = max(best, self._flops / (time.perf_counter() - t) / 1e9)
        return best

    def fast(self, floor_gflops: float) -> bool:
        self.last = self.gflops()
        ok = self.last >= floor_gflops
        if ok and self.cache is not None and not self.cache.fast():
            ok = False
            self.cache_slow += 1
        self.samples += 1
        self.slow += not ok
        return ok

    def wait_fast(self, floor_gflops: float, max_wait_s: float = 3.0, step_s: float = 0.05) -> bool:
        """Probe until the machine runs at ``floor_gflops`` or better (True), or ``max_wait_s`` passed or the
        waiting budget is spent (False)."""
        t0 = time.perf_counter()
        end = t0 + min(max_wait_s, max(0.0, self.wait_budget_s - self.waited_s))
        try:
            while not self.fast(floor_gflops):
                if time.perf_counter() > end:
                    return False
                time.sleep(step_s)
            return True
        finally:
            self.waited_s += time.perf_counter() - t0


CACHE_FLOOR = 0.65
""":class:`CacheProbe`: the machine's cache is taken as uncontended when the copies run at ≥ this fraction of the best
copy rate seen so far (quiet, right after a kernel's timed slot: 0.68-0.9 of it, best of six copies; contended:
0.3-0.7)."""


class CacheProbe:
    """Copies of 2 MB (one thread, numpy; six, ~0.25 ms) that tell whether the last-level cache this machine shares
    with other tenants is contended *now*.

    Why: the FMA probe only sees the cores. On this VM the shared L3 and memory are contended for stretches of tens of
    seconds while the FMA rate stays at its peak; the Winograd conv kernels (their transformed weights re-read per
    block from L3) then ran 12-35 % slower and torch's convs too (in one benchmark run: Darknet-19 0.83 vs
    0.61 ms, with every FMA probe at 513-524 GFLOP/s), and the reference peak fraction fell from 82-83 % to 78 %.
    Measured side by side (a monitor, 1 s steps): copies at 105-131 GB/s and the kernels at their usual times; copies
    at 42-93 GB/s and the kernels 20-25 % slower. Right after a kernel's timed slot the first copies are slow
    whatever the state (the first of six at 20-50 GB/s: its lines come back from memory), the best of six at
    89-117 GB/s when quiet; the best of two read as contended in most slots of a quiet run (a bench run with it:
    2960 of 4315 probes, the waiting budget spent). It does not see every such state: in another run the conv
    rows ran 15-35 % slower while it read the cache as contended in only 23 of 1388 probes (a monitor during such a
    stretch: the copies at 107-130 GB/s, Darknet-19 at 0.77-0.98 ms against 0.59 quiet)."""

    def __init__(self, mbytes: int = 2, floor: float = CACHE_FLOOR, copies: int = 6):
        import numpy as np

        self._src = np.ones(mbytes << 18, dtype=np.float32)
        self._dst = np.empty_like(self._src)
        self._copyto = np.copyto  # looked up once: the copies are what is timed
        self.floor = floor
        self.copies = copies
        self.best = 0.0
        self.last = 0.0
        for _ in range(10):  # a first best; it only rises afterwards
            self.gbps()

    def gbps(self) -> float:
        """Best of ``copies`` back-to-back copies (bytes read + written per second, GB/s); raises the running best."""
        rate = 0.0
        for _ in range(self.copies):
            t = time.perf_counter()
            self._copyto(self._dst, self._src)
            rate = max(rate, 2 * self._src.nbytes / (time.perf_counter() - t) / 1e9)
        self.last = rate
        self.best = max(self.best, rate)
        return rate

    def fast(self) -> bool:
        return self.gbps() >= self.floor * self.best


def _core_rates(core: int, seconds: float, iters: int, calls: int, conn) -> None:
    """Child process: pinned to ``core``, one thread, FMA-loop rates (GFLOP/s) of ``calls`` calls at a time, each
    stamped with the wall clock (shared between the cores' processes)."""
    import os

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    os.environ["TVM_NUM_THREADS"] = "1"  # before TVM starts its pool
    from .hw import vector_lanes
    from .kernel import import_tvm

    mod, out, flops = _fma_loop(import_tvm(), vector_lanes(), peak_accumulators(), iters, 1)
    f = mod["main"]
    f(out)
    conn.send("ready")
    conn.recv()  # all cores start together
    res, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        for _ in range(calls):
            f(out)
        res.append((time.time(), flops * calls / (time.perf_counter() - t) / 1e9))
    conn.send(res)


def per_core_slow_windows(seconds: float = 20.0, window_s: float = 0.01, slow_fraction: float = 0.85,
                          iters: int = 2000, calls: int = 40) -> dict:
    """Whether the machine's slow stretches hit one core at a time or all together: every core runs a one-thread FMA
    loop in its own pinned process for ``seconds``; the wall clock is cut into ``window_s`` windows, and a window is
    slow on a core when that core's slowest sample in it ran below ``slow_fraction`` of its median.

    Why it matters: a parallel kernel split statically between the cores (TVM's parallel loops, OpenBLAS's and MKL's
    threads) waits for its slowest core, so slow windows that hit one core at a time slow every parallel kernel by
    the slow core's share, and how much each row pays depends on when its slots ran."""
    import multiprocessing as mp
    import statistics

    from shared_ir.hostinfo import cpu_ids

    cores = list(cpu_ids())  # sorted
    ctx = mp.get_context("spawn")  # a fresh interpreter per core: TVM's pool is created after the pinning
    pipes, procs = [], []
    for c in cores:
        a, b = ctx.Pipe()
        p = ctx.Process(target=_core_rates, args=(c, seconds, iters, calls, b), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    for a in pipes:
        a.recv()
    for a in pipes:
        a.send("go")
    samples = [a.recv() for a in pipes]
    for p in procs:
        p.join()
    t0 = min(s[0][0] for s in samples if s)
    slow: dict[int, set[int]] = {}
    windows: set[int] | None = None
    per_core = {}
    for c, s in zip(cores, samples):
        med = statistics.median(r for _, r in s)
        worst: dict[int, float] = {}
        for t, r in s:
            w = int((t - t0) / window_s)
            worst[w] = min(worst.get(w, r), r)
        slow[c] = {w for w, r in worst.items() if r < slow_fraction * med}
        windows = set(worst) if windows is None else windows & set(worst)
        per_core[str(c)] = {"median_gflops": med, "samples": len(s)}
    windows = windows or set()
    for c in cores:
        per_core[str(c)]["slow_windows"] = len(slow[c] & windows)
    all_slow = set.intersection(*(slow[c] & windows for c in cores)) if cores else set()
    any_slow = set.union(*(slow[c] & windows for c in cores)) if cores else set()
    return {"seconds": seconds, "window_s": window_s, "slow_fraction": slow_fraction, "windows": len(windows),
            "cores": per_core, "windows_some_core_slow": len(any_slow), "windows_all_cores_slow": len(all_slow)}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m chain_fuser.peak", description="The machine's FMA peak, measured.")
    ap.add_argument("--refresh", action="store_true", help="measure again (the cached best is kept if higher)")
    ap.add_argument("--per-core", type=float, metavar="SECONDS", default=None,
                    help="instead: one FMA loop per core for SECONDS; how often each core, and all at once, ran slow")
    a = ap.parse_args(argv)
    if a.per_core:
        print(json.dumps(per_core_slow_windows(a.per_core), indent=1))
    else:
        print(json.dumps(measure_fma_peak(save=True) if a.refresh else {"gflops": fma_peak_gflops()}, indent=1))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
