"""How chain_fuser times kernels against their baselines: PyTorch's variants, the interleaved timer with its
warm-up and FMA-probe retries, and the baselines (PyTorch, numpy's OpenBLAS) in child processes of their own,
driven over a pipe so that their timings interleave with ours (``chain_fuser.torch_server``,
``chain_fuser.openblas_server``). Used by the benchmark, the Hydra tasks, ``compile``'s report and the
cross-package pipeline."""
from __future__ import annotations

import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from .spec import GemmChain


# --- variants -------------------------------------------------------------------------------------------------------
def torch_eager(spec, ins) -> Callable[[], Any]:
    import torch
    import torch.nn.functional as F

    if isinstance(spec, GemmChain):
        A, B, D = ins
        Bm = B.transpose(-1, -2) if spec.bt else B
        if spec.glue == "softmax":
            return lambda: torch.bmm(torch.softmax(torch.bmm(A, Bm) * spec.scale, dim=-1), D)
        if spec.glue == "relu":
            return lambda: torch.bmm(torch.relu(torch.bmm(A, Bm)), D)
        return lambda: torch.bmm(torch.bmm(A, Bm), D)
    I, W1, W2 = ins[:3]
    p1, p2 = (spec.R1 // 2, spec.S1 // 2), (spec.R2 // 2, spec.S2 // 2)
    if spec.glue == "relu":
        return lambda: F.conv2d(torch.relu(F.conv2d(I, W1, padding=p1)), W2, padding=p2)
    return lambda: F.conv2d(F.conv2d(I, W1, padding=p1), W2, padding=p2)


TORCH_COMPILE_MODES = {"torch_compile": "default", "torch_compile_max_autotune": "max-autotune"}
"""The baseline variants of ``torch.compile`` (Inductor) and the mode each runs: what a user tries first."""


def torch_compiled(spec, ins, mode: str = "default") -> Callable[[], Any]:
    """The eager chain (:func:`torch_eager`) through ``torch.compile`` (Inductor, static shapes, ``mode``),
    compiled here by a first call (Inductor's on-disk caches make a rerun's compile quick)."""
    import torch

    eager = torch_eager(spec, ins)
    compiled = torch.compile(eager, mode=mode, dynamic=False, fullgraph=True)
    with torch.no_grad():
        compiled()
    return compiled


def torch_sdpa(spec, ins) -> Callable[[], Any]:
    import torch.nn.functional as F

    A, B, D = ins  # A = Q·(scale folded by SDPA's scale=), B = K as (L, K), D = V
    return lambda: F.scaled_dot_product_attention(A, B, D, scale=spec.scale)


POOL_SETTLE_S = 0.02
"""Untimed pause after each in-process variant's timed calls (see ``time_interleaved``)."""

WARM_S = 0.03
"""Untimed calls for this long before each timed slot, every variant (the OpenBLAS child's too). After the pauses
around the OpenBLAS child's slots (0.25 s idle) the next ~20 ms run slower (measured: ours ×1.04, torch ×1.10 after
0.3 s idle with one warm-up call; the same as back-to-back calls after 30-100 ms of warm-up), which cost every GEMM
row 3-6 % (ours) and 5-10 % (torch) against rows timed without the child."""


PROBE_FLOOR = 0.85
"""A timed slot counts when the FMA probe ran at ≥ this fraction of the run's measured peak just before and just
after it (the machine's slow state runs at ~0.5 of it, with intermediate readings at 0.75-0.85; its fast state at
0.9-1.0)."""
PROBE_RETRIES = 4


def run_peak(start_gflops: float, end_gflops: float, probe_rates: list[float]) -> float:
    """The FMA peak the run's fractions divide by: the best FMA rate measured during the run (the full measurements
    at its start and end, and every probe reading after a timed slot). See :data:`PEAK_NOTE`."""
    return max(start_gflops, end_gflops, *probe_rates)


PEAK_NOTE = ("fma_peak_gflops (the denominator of every peak_fraction) is the best FMA rate measured in this run: "
             "the best of 120 short runs at its start and again at its end, and every FMA probe after a timed slot; "
             "the kernels were timed in the same run, so the fraction is a ratio measured together. The best rate "
             "ever recorded on this CPU model (fma_peak_cached_gflops, earlier runs) can be a few % higher (the "
             "boost clock varies with the other tenants of the host): reference_peak_fraction_vs_cached_peak "
             "divides by it")


@functools.cache  # once per process: the raised threshold stays
def malloc_steady_state() -> None:
    """Allocate and free one 31 MB block, so that glibc's malloc serves every later block below 32 MB from its heap.
    ``time_interleaved`` calls it, so every benchmark that times through it starts in that state.

    Why: glibc maps blocks above its mmap threshold (128 kB at start) with mmap and unmaps them on free, so each
    call that allocates its output pays page faults and zeroing, until freeing a larger mapped block raises the
    threshold (up to 32 MB). Which rows paid that depended on what ran before: the OpenBLAS child's first shapes ran
    at half speed (Mixer-Small first in a fresh child 0.43 ms, after other shapes 0.18 ms; Bert-Small and Bert-Base
    2x slower than Bert-Large in the bench). Both processes start in the steady state instead."""
    import numpy as np

    np.ones((31 << 20) // 4, np.float32)


def warm_up(f: Callable[[], Any], seconds: float) -> None:
    """Call ``f`` at least once, and again until ``seconds`` have passed."""
    end = time.perf_counter() + seconds
    f()
    while time.perf_counter() < end:
        f()


class InterleavedTimer:
    """Timed slots of a set of variants, one repeat at a time (:meth:`round`), so that a caller can spread one row's
    repeats over a longer run (``run``: every row's round ``r`` before any row's round ``r + 1``). Each slot: the
    variant's untimed warm-up calls, then a number of timed calls fixed at construction (about
    ``budget_s / repeat / len(variants)`` seconds of them); :meth:`medians` gives the medians over the rounds.

    ``probe`` (a :class:`chain_fuser.peak.FmaProbe`): each timed slot waits until the machine runs at
    ``floor_gflops`` and is timed again (up to ``PROBE_RETRIES`` times) when the probe right after it finds the
    machine slow, so that every variant is timed in the same (full-speed) state. ``stats`` receives the counts."""

    def __init__(self, variants: dict[str, Callable[[], Any]], repeat: int, budget_s: float, probe=None,
                 floor_gflops: float = 0.0, stats: dict | None = None):
        malloc_steady_state()
        self.variants, self.probe, self.floor, self.stats = variants, probe, floor_gflops, stats
        self.calls: dict[str, int] = {}
        self.long_calls: set[str] = set()  # variants whose one call takes > 50 ms: a pool's wake-up is noise there
        self.runs: dict[str, list[float]] = {k: [] for k in variants}
        self.cpu: dict[str, list[float]] = {k: [] for k in variants}
        self.rounds = 0
        self.seconds = 0.0  # spent in the constructor's calibration and in the rounds
        self._rng = random.Random(0)
        t = time.perf_counter()
        for k, f in variants.items():  # warm-up, and how many calls fit in a ~budget/repeat slice
            dt = max(self._once(k, f, 1)[0] * 1e-3, 1e-6)
            if dt > 0.05 and not isinstance(f, SelfTimed):
                self.long_calls.add(k)  # warm enough after two calls; memory-bound variants need seconds per call
            else:
                dt = max(self._once(k, f, 1)[0] * 1e-3, 1e-6)
            self.calls[k] = max(1, min(50, int(budget_s / repeat / len(variants) / dt)))
        self.seconds += time.perf_counter() - t

    def _once(self, k, f, n):
        if isinstance(f, SelfTimed):
            if f.settle_s:  # and this process's TVM workers still spin after the previous variant's last call
                time.sleep(f.settle_s / 5)
            r = f.timed(n)
            if f.settle_s:  # the other process's threads still spin after its calls: let them go idle first
                time.sleep(f.settle_s)
            return r if isinstance(r, tuple) else (r, None)
        if k not in self.long_calls:
            warm_up(f, WARM_S)  # thread pools awake, caches warm, clocks up, as the other process's variant gets too
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n):
            f()
        r = (time.perf_counter() - t) / n * 1e3, (time.process_time() - c) / n * 1e3
        # this process's pools spin-wait after a parallel call before they sleep (libgomp ~300k iterations, a few
        # ms; TVM's too), on the core where the other library's worker runs: without the pause the next variant
        # shares that core with a spinner (measured: ours after torch 0.31 ms, after torch + 20 ms 0.19 ms)
        time.sleep(POOL_SETTLE_S)
        return r

    def round(self) -> None:
        """One repeat: a slot per variant, in a fresh (seeded) order after the first round."""
        t = time.perf_counter()
        probe, stats = self.probe, self.stats
        # a fresh order per repeat: whichever variant runs right after the OpenBLAS child's settle pause (its
        # process has just used the shared caches, the cores were idle) pays for it, measured ×1.02-1.18 on the same
        # kernel timed twice in one fixed order (ViT-Base/14 1.19 vs 1.01 ms; a rotation keeps the cyclic
        # neighbours, so it does not help): shuffled, no variant holds that slot in most repeats of the median
        order = list(self.variants)
        if self.rounds:
            self._rng.shuffle(order)
        for k in order:
            f = self.variants[k]
            for attempt in range(PROBE_RETRIES + 1):
                if probe is not None:
                    probe.wait_fast(self.floor)
                    time.sleep(POOL_SETTLE_S)  # the probe's TVM workers stop spinning before the slot
                w, c = self._once(k, f, self.calls[k])
                if probe is None or probe.fast(self.floor) or probe.exhausted:
                    if probe is not None and stats is not None:
                        stats.setdefault("rates", []).append(probe.last)
                    break
                if stats is not None:
                    stats["retried_slots"] = stats.get("retried_slots", 0) + 1
            self.runs[k].append(w)
            if c is not None:
                self.cpu[k].append(c)
            if stats is not None:
                stats["slots"] = stats.get("slots", 0) + 1
        self.rounds += 1
        self.seconds += time.perf_counter() - t

    def medians(self, cpu_out: dict[str, float] | None = None) -> dict[str, float]:
        """Median ms per variant over the rounds so far; ``cpu_out`` receives the median CPU ms per call."""
        if cpu_out is not None:
            cpu_out.update({k: statistics.median(v) for k, v in self.cpu.items() if v})
        return {k: statistics.median(v) for k, v in self.runs.items()}


def time_round_robin(timers: list[InterleavedTimer], rounds: int, log=print) -> None:
    """``rounds`` rounds of every timer, each timer's round ``r`` before any timer's round ``r + 1`` (a line of
    progress per round). Why: the machine's contended stretches last tens of seconds to minutes (the conv rows
    12-35 % slower, see :class:`peak.CacheProbe`), longer than one row's timing (3-13 s); timed row after row, the
    rows timed during one had every repeat in it (in three benchmark runs: all six conv rows), while spread
    over the whole timing phase a stretch meets a few rounds of many rows, and the medians keep the other rounds."""
    for r in range(rounds):
        t = time.perf_counter()
        for timer in timers:
            timer.round()
        log(f"  timing round {r + 1}/{rounds}: {len(timers)} rows in {time.perf_counter() - t:.0f} s")


def time_interleaved(variants: dict[str, Callable[[], Any]], repeat: int, budget_s: float,
                     cpu_out: dict[str, float] | None = None, probe=None, floor_gflops: float = 0.0,
                     stats: dict | None = None) -> dict[str, float]:
    """Median ms per variant; variants alternate within each repeat so that drifting machine load hits all
    (:class:`InterleavedTimer`, its ``repeat`` rounds back to back).

    ``cpu_out``, when given, receives each variant's median CPU ms per call (all its threads, spin-waits included):
    on a shared machine the wall clock counts other processes' time slices, the CPU time does not."""
    timer = InterleavedTimer(variants, repeat, budget_s, probe=probe, floor_gflops=floor_gflops, stats=stats)
    for _ in range(repeat):
        timer.round()
    return timer.medians(cpu_out)


# --- baselines in processes of their own: what their child scripts share ----------------------------------------
def child_place_threads(warm: Callable[[], Any]) -> dict | None:
    """In a baseline's child process: the parent's placement. ``warm()`` first (the library's workers start on
    their first call), then this thread on the first usable core and every other thread round-robin on the others.
    Returns the placement, or None (one core, or no affinity API)."""
    import threading

    if not hasattr(os, "sched_setaffinity"):
        return None
    warm()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    me = str(threading.get_native_id())
    os.sched_setaffinity(0, {cores[0]})
    placement: dict = {"caller_core": cores[0], "other_threads": {}}
    for i, tid in enumerate(sorted(t for t in os.listdir("/proc/self/task") if t != me)):
        core = cores[1 + i % (len(cores) - 1)]
        try:
            os.sched_setaffinity(int(tid), {core})
            placement["other_threads"][tid] = core
        except OSError:
            pass
    return placement


def child_serve(setups: dict[str, Callable[[dict], Callable[[], Any]]]) -> None:
    """A baseline child's command loop, one JSON line per command on stdin and per answer on stdout: a command in
    ``setups`` builds the named callable (and calls it once); ``time`` runs it for ``warm_s`` untimed, then ``n``
    timed calls (wall and CPU ms per call); ``drop`` forgets it."""
    fns: dict[str, Callable[[], Any]] = {}
    for line in sys.stdin:
        j = json.loads(line)
        if j["cmd"] in setups:
            try:
                fns[j["name"]] = f = setups[j["cmd"]](j)
                f()
                out: dict = {"ok": True}
            except Exception as e:  # noqa: BLE001 - e.g. torch.compile giving up: the other variants stay served
                fns.pop(j["name"], None)
                out = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        elif j["cmd"] == "time":
            f = fns[j["name"]]
            warm_up(f, j.get("warm_s", 0.0))
            t, c = time.perf_counter(), time.process_time()
            for _ in range(j["n"]):
                f()
            out = {"ms": (time.perf_counter() - t) / j["n"] * 1e3, "cpu_ms": (time.process_time() - c) / j["n"] * 1e3}
        else:  # drop
            fns.pop(j["name"], None)
            out = {"ok": True}
        print(json.dumps(out), flush=True)


class _ChildServer:
    """A baseline library in a child process of its own, driven over a pipe (one JSON line per command and per
    answer) so that its timings interleave with the other variants'."""

    what = "child"
    settle_s = 0.25

    def _start(self, module: str, threads: int, pin: bool, env: dict) -> dict:
        """``python -m chain_fuser.<module> THREADS pin|free``; its first line is its hello."""
        self.p = subprocess.Popen([sys.executable, "-m", f"chain_fuser.{module}", str(threads),
                                   "pin" if pin else "free"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.what} benchmark process did not start (exit code {self.p.wait()})")
        return json.loads(line)

    def _ask(self, **msg) -> dict:
        try:
            self.p.stdin.write(json.dumps(msg) + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"the {self.what} benchmark process died (exit code {self.p.poll()})") from None
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.what} benchmark process died")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"in the {self.what} benchmark process: {out['error']}")
        return out

    def _variant(self, name: str, cmd: str = "setup", **setup) -> "SelfTimed":
        self._ask(cmd=cmd, name=name, **setup)

        def timed(n):
            r = self._ask(cmd="time", name=name, n=n, warm_s=WARM_S)
            return r["ms"], r.get("cpu_ms")

        return SelfTimed(timed, lambda: self._ask(cmd="drop", name=name), settle_s=self.settle_s)

    def close(self) -> None:
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:  # noqa: BLE001 - best effort
            self.p.kill()


class TorchServer(_ChildServer):
    """PyTorch eager (and SDPA) in a child process with torch's own defaults (libgomp's wait policy: its workers
    spin a while after each call). Why not in the benchmark's process: there torch's spinning workers took the
    cores from the TVM kernel timed next, and with passive waiting (``OMP_WAIT_POLICY=PASSIVE``) torch itself
    ran slower: alone, 2 threads, Mixer-Small 0.38 vs 0.19 ms and ResNet-50
    3x3-1x1 2.42 vs 1.90 ms."""

    what = "PyTorch"
    settle_s = 0.05  # libgomp's workers spin ~1 ms after a call, then sleep

    def __init__(self, threads: int, pin: bool = False):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        self.info = self._start("torch_server", threads, pin, env)

    def variant(self, name: str, spec, which: str = "torch") -> "SelfTimed":
        import dataclasses

        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        return self._variant(name, kind="gemm" if isinstance(spec, GemmChain) else "conv", fields=fields,
                             variant=which)

    def block_variant(self, block: str, which: str = "eager") -> "SelfTimed":
        """One of ``bench_compile.blocks()`` (by name) in the child: eager PyTorch, or a key of
        :data:`TORCH_COMPILE_MODES` for the block through ``torch.compile``."""
        return self._variant(f"{block}/{which}", cmd="setup_block", block=block, variant=which)


class OpenBLASServer(_ChildServer):
    """numpy in a child process started without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` (set in its environment
    before numpy is imported), driven over a pipe so that its timings interleave with the other variants'."""

    what = "OpenBLAS"
    # OpenBLAS's pthreads spin-wait after a call (THREAD_TIMEOUT, 2^28 cycles ≈ 0.1 s by default) before they
    # sleep: without the pause they take the cores from whichever variant is timed next (measured: ours ×5-10
    # slower in the bench than alone)
    settle_s = 0.25

    def __init__(self, threads: int, pin: bool = False):
        # before numpy loads OpenBLAS: let it pick its best kernel, with the benchmark's thread count
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["OPENBLAS_NUM_THREADS"] = str(threads)
        hello = self._start("openblas_server", threads, pin, env)
        info = hello["threadpool_info"]
        self.placement = hello.get("placement")
        ob = [x for x in info if x.get("internal_api") == "openblas"]
        self.info = ({k: ob[0].get(k) for k in ("version", "architecture", "num_threads", "threading_layer")}
                     if ob else None)

    def variant(self, name: str, s: GemmChain) -> "SelfTimed":
        return self._variant(name, b=s.batch, M=s.M, N=s.N, K=s.K, L=s.L, glue=s.glue, scale=s.scale)


class SelfTimed:
    """A variant that times itself (in another process): ``timed(n)`` returns ms per call over n calls, or
    (wall ms, CPU ms) per call."""

    def __init__(self, timed: Callable[[int], Any], done: Callable[[], Any] = lambda: None, settle_s: float = 0.0):
        self.timed, self.done, self.settle_s = timed, done, settle_s

    def __call__(self):
        r = self.timed(1)
        return r[0] if isinstance(r, tuple) else r
