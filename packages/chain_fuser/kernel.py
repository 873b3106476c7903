"""Compiled fused kernels: build (TVM), call on torch tensors zero-copy (DLPack), time, cache on disk, and pick the
fastest of the model's top K plans by measurement."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from . import cache
from .errors import ChainDTypeError, ChainShapeError, UnsupportedChainError
from .model import Plan
from .spec import ConvChain, GemmChain, input_names


def import_tvm():
    """Import TVM with its thread pool sized to the usable cores (it reads TVM_NUM_THREADS when created), its
    worker threads left unpinned (``TVM_BIND_THREADS=0``) and their spin after a kernel short
    (``TVM_THREAD_POOL_SPIN_COUNT=1000``), unless the caller set them.

    Why unpinned: TVM pins worker *i* to core *i* but leaves the calling (main) thread, which runs task 0, free.
    Whenever the scheduler has put the main thread on the pinned worker's core (after a pipe read, a sleep, a
    torch call, a compile), both halves of every parallel region share that one core: the kernel runs at half
    speed, CPU time == wall time, until the load balancer moves the main thread (measured here, 2 cores, quiet:
    15-45 consecutive calls of a 1 ms kernel, and in the benchmark a whole timed block: ViT-Large/16 1.94 ms
    instead of 0.97 ms, the same kernel as its 0.97 ms unfused sibling). Unpinned, the worker moves instead, at
    once (0 slow calls, even with the main thread forced onto the worker's core). See ``unpinned_thread_pool``."""
    from shared_ir.hostinfo import num_cores

    os.environ.setdefault("TVM_NUM_THREADS", str(num_cores()))
    os.environ.setdefault("TVM_BIND_THREADS", "0")  # read by the pool when it is (re)configured: before first use
    # TVM's workers spin 300,000 rounds after each parallel kernel by default, on the cores the user's own torch
    # ops then need: eager bmm right after our kernels took 7.6 ms instead of 0.88 ms on 2 cores; 1,000 rounds
    # give 1.0-1.4 ms there at +4% on back-to-back calls of a 0.5 ms kernel (0: 1.2 ms, +14%)
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "1000")
    import tvm

    return tvm


def thread_affinities() -> dict[str, str]:
    """``{thread id: allowed CPU list}`` of every thread of this process (Linux; empty elsewhere)."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list"):
                        out[tid] = line.split()[1]
    except OSError:
        pass
    return out


def _cpus(lst: str) -> set[int]:
    """CPU ids of a Linux CPU list such as ``0-3,6``."""
    out: set[int] = set()
    for part in lst.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def unpinned_thread_pool() -> bool:
    """True when no thread of this process (TVM's workers included) is pinned to fewer CPUs than the process may
    use: the condition under which a parallel kernel can never be stuck on one core with its calling thread."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    return all(len(_cpus(v)) >= allowed for v in thread_affinities().values())


def pin_threads_for_benchmark() -> dict | None:
    """Benchmarks only: the calling thread on one core, every other thread of this process on the other cores (TVM's
    workers, pinned by TVM with ``TVM_BIND_THREADS=1``, stay where they are; the rest, torch's OpenMP workers
    included, go round-robin over the cores the caller does not use), so that both libraries run the two halves of
    a parallel call on different cores. Free threads are stacked onto one core by the scheduler's wake-up placement
    after the benchmark's pipe reads (the OpenBLAS child): measured on 2 cores, Mixer-Small timed after an OpenBLAS
    call ran on one core in 24 of 30 samples (0.33 vs 0.18 ms) with the threads free, in 0 of 30 placed. Threads
    and processes started later inherit the caller's core, so start them first. Returns the placement, or None
    (nothing changed) when there is a single core or no worker was pinned by TVM."""
    import threading

    if not hasattr(os, "sched_setaffinity"):
        return None
    me = str(threading.get_native_id())
    allowed = os.sched_getaffinity(0)
    pinned: set[int] = set()
    free_threads = []
    for tid, lst in thread_affinities().items():
        cpus = _cpus(lst)
        if tid == me:
            continue
        if len(cpus) == 1:
            pinned |= cpus
        else:
            free_threads.append(int(tid))
    caller = sorted(allowed - pinned)
    others = sorted(allowed - set(caller[:1]))
    if not pinned or not caller or not others:
        return None
    os.sched_setaffinity(0, {caller[0]})  # Linux: the calling thread only
    moved = {}
    for i, tid in enumerate(sorted(free_threads)):
        core = others[i % len(others)]
        try:
            os.sched_setaffinity(tid, {core})
            moved[tid] = core
        except OSError:  # the thread ended meanwhile
            pass
    return {"caller_core": caller[0], "tvm_worker_cores": sorted(pinned), "other_threads": moved}


def plan_signature(plan: Plan) -> dict:
    lp = plan.fused
    return {"micro": plan.micro.name, "level": lp.level, "order": list(lp.order),
            "tiles": {d: int(v) for d, v in sorted(lp.tiles.items())}}


@dataclass
class FusedKernel:
    """A compiled chain kernel. Call it on torch tensors (A, B, D) or (I, W1, W2); returns a torch tensor.

    Inputs are passed zero-copy through DLPack; odd sizes are padded into a scratch buffer only when needed and the
    result is sliced back (a view)."""

    spec: Any
    plan: Plan
    module: Any
    fused: bool = True
    build_s: float = 0.0
    from_cache: bool = False
    measured_ms: float | None = None
    info: dict = field(default_factory=dict)
    algorithm: str = "direct"
    """``direct``, or ``winograd<m>``: the conv chain's 3×3 convs by Winograd ``F(m×m, 3×3)``
    (:mod:`chain_fuser.winograd`; unfused, per block of tile rows)."""

    @property
    def name(self) -> str:
        how = "fused" if self.fused else "unfused" if self.algorithm == "direct" else self.algorithm
        return f"{self.spec.name}[{how} {self.plan.micro.name}]"

    @property
    def executed_flops(self) -> int:
        """The multiply-adds (×2) this kernel executes: the chain's own count for direct kernels; for Winograd, its
        batched GEMM (padded tiles and channels included) and conv2, the work the hardware does (the fraction of the
        FMA peak is then a measure of the kernel, not of the algorithm's saving)."""
        if self.algorithm == "direct":
            return self.spec.flops
        from .winograd import executed_flops, tile_of

        return executed_flops(self.spec, self.plan, tile_of(self.algorithm))

    # --- calling ----------------------------------------------------------------------------------------------
    def _call_info(self) -> dict:
        """What every call needs and never changes: the expected inputs, the padded shape, the compiled function
        (looked up once: a module's ``["main"]`` is a registry lookup per call otherwise). Per call this path took
        ~13 µs above the compiled function alone (Mixer-Small: 174 vs 161 µs), 7 % of a 0.19 ms kernel."""
        info = self.__dict__.get("_ci")
        if info is None:
            import torch

            want = self.spec.shapes()
            info = {"want": [(n, tuple(want[n])) for n in input_names(self.spec)], "fn": self.module["main"],
                    "torch": torch, "Tensor": torch.Tensor, "f32": torch.float32}
            # torch.Size, so that the per-call check compares like with like
            info["shapes"] = [torch.Size(s) for _, s in info["want"]]
            if isinstance(self.spec, GemmChain):
                from .codegen import kernel_shape

                info["ks"] = kernel_shape(self.spec, self.plan.micro)
            else:
                from .conv import conv_call

                info["out_shape"] = tuple(want["O"])
                info["conv_call"] = conv_call
            self.__dict__["_ci"] = info
        return info

    def _check(self, tensors: Sequence[Any], info: dict):
        shapes = info["shapes"]
        # the common case in one loop (~0.5 µs; a generator under all() ~0.8 µs, the checks below with their
        # messages ~1.2 µs: a few % of a 0.08 ms kernel's call); a non-tensor, a wrong dtype or shape falls through
        # to the checks that name it
        if len(tensors) == len(shapes):
            tensor, f32 = info["Tensor"], info["f32"]
            for t, s in zip(tensors, shapes):
                if type(t) is not tensor or t.dtype is not f32 or t.shape != s:
                    break
            else:
                return
        import torch

        want = info["want"]
        if len(tensors) != len(want):
            names = [n for n, _ in want]
            raise ChainShapeError(f"{self.spec.name}.inputs",
                                  f"expected {len(names)} tensors {names}, got {len(tensors)}")
        for (n, shape_want), t in zip(want, tensors):
            if not isinstance(t, torch.Tensor):
                raise ChainShapeError(f"{self.spec.name}.{n}", f"expected a torch.Tensor, got {type(t).__name__}")
            if t.dtype != torch.float32:
                raise ChainDTypeError(f"{self.spec.name}.{n}", t.dtype)
            shape = tuple(t.shape)
            if shape != shape_want:
                raise ChainShapeError(f"{self.spec.name}.{n}", f"shape {list(shape)} does not match the compiled "
                                      f"chain's {list(shape_want)}", shape)

    def __call__(self, *tensors, out=None):
        info = self.__dict__.get("_ci") or self._call_info()
        self._check(tensors, info)
        if "ks" in info:  # a GEMM chain
            torch = info["torch"]
            ks = info["ks"]
            A, B, D, *rest = [t if t.is_contiguous() else t.contiguous() for t in tensors]
            b1 = rest.pop(0) if self.spec.bias1 else None
            b2 = rest.pop(0) if self.spec.bias2 else None
            if ks.Mp != ks.M:
                A = self._padded_rows(A, ks.Mp)
            full = out if (out is not None and ks.Mp == ks.M and ks.Nv == ks.N) else \
                torch.empty(ks.batch, ks.Mp, ks.Nv, dtype=torch.float32)  # sizes as arguments: 0.84 vs 1.24 µs
            info["fn"](A, B, D, *([b1] if b1 is not None else []), full)
            res = full[:, :ks.M, :ks.N] if (ks.Mp != ks.M or ks.Nv != ks.N) else full
            if b2 is not None:
                # the second bias, one pass over the (small) output, in numpy on this thread: a torch op here would
                # wake torch's OpenMP pool, whose spinning threads then take the cores from the next kernel
                # (measured, a 197×384×1536 MLP: 5.5 ms with ``res.add_(b2)``, 3.1 ms without the bias)
                import numpy as np

                r = res.numpy()
                np.add(r, b2.detach().numpy(), out=r)
            if out is not None and res is not out:
                out.copy_(res)
                return out
            return res
        return info["conv_call"](info, tensors, out)

    def _padded_rows(self, A, Mp: int):
        """A with its rows zero-padded to ``Mp``, in a scratch buffer kept per thread (the pad rows are zeroed once
        and never written). The copy is numpy's single-threaded one, not torch's: a torch op here would wake
        torch's OpenMP pool, whose threads then spin on the cores the TVM kernel's threads need next (measured on
        ViT-Huge/16, 2 threads: 14.3 ms with ``F.pad``, 2.6 ms without)."""
        import threading

        import numpy as np
        import torch

        tl = self.__dict__.setdefault("_scratch", threading.local())
        key = (tuple(A.shape), Mp)
        buf = getattr(tl, "bufs", {}).get(key)
        if buf is None:
            buf = torch.zeros((A.shape[0], Mp, A.shape[2]), dtype=torch.float32)
            tl.bufs = {key: buf}
        np.copyto(buf.numpy()[:, :A.shape[1]], A.detach().numpy())
        return buf

    # --- timing -----------------------------------------------------------------------------------------------
    def time_ms(self, number: int = 5, repeat: int = 5, inputs: Sequence[Any] | None = None) -> float:
        """Median over ``repeat`` runs of ``number`` calls each (after one warm-up call), in ms."""
        import statistics

        ins = list(inputs) if inputs is not None else random_inputs(self.spec)
        self(*ins)
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            for _ in range(number):
                self(*ins)
            runs.append((time.perf_counter() - t) / number * 1e3)
        return statistics.median(runs)


def random_inputs(spec, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*spec.shapes()[n], generator=g) for n in input_names(spec)]


def reference(spec, *tensors):
    """Eager PyTorch of the chain (what the kernels are checked against)."""
    import torch

    if isinstance(spec, GemmChain):
        A, B, D, *bias = tensors
        b1 = bias.pop(0) if spec.bias1 else None
        b2 = bias.pop(0) if spec.bias2 else None
        C = torch.bmm(A, B.transpose(-1, -2) if spec.bt else B)
        if spec.dt:
            D = D.transpose(-1, -2)
        if b1 is not None:
            C = C * spec.scale + b1
            spec = _unit_scale(spec)
        if spec.glue == "softmax":
            C = C * spec.scale
            if spec.causal:
                keep = torch.ones(C.shape[-2:], dtype=torch.bool, device=C.device).tril()
                C = C.masked_fill(~keep, float("-inf"))
            C = torch.softmax(C, dim=-1)
        elif spec.glue == "relu":
            C = torch.relu(C * spec.scale)
        elif spec.glue == "gelu":
            C = torch.nn.functional.gelu(C * spec.scale)
        elif spec.glue == "scale" or spec.scale != 1.0:
            C = C * spec.scale
        E = torch.bmm(C, D)
        return E + b2 if b2 is not None else E
    I, W1, W2, *bias = tensors
    b1 = bias.pop(0) if spec.bias1 else None
    b2 = bias.pop(0) if spec.bias2 else None
    T = torch.nn.functional.conv2d(I, W1, b1, padding=(spec.R1 // 2, spec.S1 // 2))
    if spec.glue == "relu":
        T = torch.relu(T)
    return torch.nn.functional.conv2d(T, W2, b2, padding=(spec.R2 // 2, spec.S2 // 2))


def _unit_scale(spec):
    import dataclasses

    return dataclasses.replace(spec, scale=1.0)


# --- building and caching -------------------------------------------------------------------------------------------
def _schedule(spec, plan: Plan, fused: bool, algorithm: str = "direct"):
    if algorithm != "direct":
        from .winograd import schedule_winograd_chain, tile_of

        return schedule_winograd_chain(spec, plan, tile_of(algorithm))
    if isinstance(spec, GemmChain):
        from .codegen import schedule_gemm_chain

        return schedule_gemm_chain(spec, plan, fused)
    if isinstance(spec, ConvChain):
        from .conv import schedule_conv_chain

        return schedule_conv_chain(spec, plan, fused)
    raise UnsupportedChainError(str(spec), "no code generator for this spec")


def cross_compile(spec, device, fused: bool = True, top_k: int = 1):
    """The model's first plan for ``device`` (any hardware description: a preset name, a dict, a Device), its
    micro kernel chosen for that device's ISA and registers, compiled for the device's target
    (:func:`chain_fuser.codegen.target_for`: e.g. aarch64 NEON from an x86 host). Returns ``(plan, module)``;
    ``module.inspect_source("asm")`` is its assembly. Nothing runs: the module is for that machine."""
    from .codegen import build, target_for
    from .hw import resolve_device
    from .planner import plan_chain

    import_tvm()
    dev = resolve_device(device)
    plan = plan_chain(spec, dev, top_k=top_k)[0]
    return plan, build(_schedule(spec, plan, fused), target_for(dev))


def _kernel_key(spec, plan: Plan, fused: bool, device=None, algorithm: str = "direct") -> str:
    tvm = import_tvm()
    extra = () if algorithm == "direct" else (algorithm, _WINOGRAD_VERSION)  # direct kernels keep their keys
    from . import codegen

    if not codegen.TAILS and isinstance(spec, GemmChain):
        extra += ("padded",)  # the A/B switch's other kernel (whole padded panels)
    return cache.entry_key("kernel", spec.key, plan_signature(plan), fused, cache.hardware_key(device),
                           tvm.__version__, _CODEGEN_VERSION, *extra)


_CODEGEN_VERSION = 20  # bump when generated code changes: stale cached kernels are then ignored
_WINOGRAD_VERSION = 12  # the same, for the Winograd kernels alone


def build_kernel(spec, plan: Plan, fused: bool = True, use_cache: bool = True,
                 algorithm: str = "direct") -> FusedKernel:
    """Compile ``plan`` for ``spec`` (or load it from the on-disk cache). ``algorithm``: ``direct`` (the plan's
    fused or unfused kernel), or ``winograd2``/``winograd4`` for a conv chain (its 3×3 convs by Winograd; the plan
    gives the micro kernel)."""
    import_tvm()
    if algorithm != "direct":
        fused = False
    key = _kernel_key(spec, plan, fused, algorithm=algorithm)
    so = cache.entry_path(key, ".so")
    if use_cache and os.path.exists(so):
        k = _load_cached(spec, plan, fused, algorithm, so)
        if k is not None:
            return k
    from shared_ir.cbuild import publish

    from .codegen import build

    t = time.perf_counter()
    mod = build(_schedule(spec, plan, fused, algorithm))
    dt = time.perf_counter() - t
    if use_cache:
        tmp = f"{so}.tmp{os.getpid()}.so"
        mod.export_library(tmp)
        publish(tmp, so, spec=spec.name, algorithm=algorithm)
    k = FusedKernel(spec, plan, mod, fused, dt, False, algorithm=algorithm)
    k._call_info()
    return k


def _load_cached(spec, plan: Plan, fused: bool, algorithm: str, so: str) -> "FusedKernel | None":
    """The cached kernel, or None (with a warning) when the entry is damaged: its size and SHA-256 are checked
    against the sidecar written with it before ``dlopen``, which can crash the process on a truncated object."""
    import warnings

    from shared_ir.cbuild import cached_ok

    tvm = import_tvm()
    why = None if cached_ok(so) else "its size or SHA-256 differs from the record written with it"
    if why is None:
        try:
            t = time.perf_counter()
            k = FusedKernel(spec, plan, tvm.runtime.load_module(so), fused, time.perf_counter() - t, True,
                            algorithm=algorithm)
            k._call_info()  # its shapes as built (codegen.TAILS may change later)
            return k
        except Exception as e:  # noqa: BLE001 - any loader failure means: rebuild
            why = f"it does not load ({type(e).__name__}: {e})"
    warnings.warn(f"chain_fuser: the cached kernel {so} of {spec.name} is damaged ({why}): rebuilt", stacklevel=3)
    return None


def _tune_record(tkey: str) -> dict | None:
    """The cached tuning result, or None (warned, then tuned again) when its structure is not the one written."""
    import warnings

    saved = cache.load_json(tkey)
    if saved is None:
        return None
    try:
        cands, chosen = saved["candidates"], saved["chosen"]
        ok = (isinstance(cands, list) and isinstance(chosen, int) and 0 <= chosen < len(cands)
              and all(isinstance(c, dict) and isinstance(c.get("measured_ms"), (int, float)) for c in cands)
              and isinstance(saved["chosen_signature"], dict))
    except (KeyError, TypeError):
        ok = False
    if not ok:
        warnings.warn(f"chain_fuser: the tuning record {cache.entry_path(tkey, '.json')} has another structure "
                      "than the one written: tuned again", stacklevel=3)
        return None
    return saved


@dataclass
class TuneReport:
    """What measured re-ranking found: each candidate's predicted and measured time. Candidates are the model's
    top K fused plans (``fused: True``), where the model thinks it competitive the unfused kernel with the same
    micro kernel (``fused: False``), and for a 3×3 conv chain its Winograd kernels (``algorithm``: ``winograd<m>``,
    last): the kernel kept is the fastest of all, so it is never slower than our own unfused one."""

    spec_key: str
    candidates: list[dict]
    chosen: int
    model_pick: int = 0
    from_cache: bool = False
    seconds: float = 0.0
    best_fused_kernel: Any = field(default=None, repr=False)
    """The fastest *fused* candidate (the kernel itself; not serialised): the benchmark's fused-vs-unfused ratio."""
    unfused_kernel: Any = field(default=None, repr=False)
    """The unfused candidate when one was measured (not serialised)."""

    def _fused_ms(self) -> list[float]:
        return [c["measured_ms"] for c in self.candidates if c.get("fused", True)]

    @property
    def model_pick_vs_best(self) -> float:
        """Measured time of the model's first choice over the best measured of its top K fused plans (1.0: the
        model picked the best)."""
        ms = self._fused_ms()
        return ms[self.model_pick] / min(ms) if ms and min(ms) > 0 else 1.0

    @property
    def chosen_fused(self) -> bool:
        return bool(self.candidates[self.chosen].get("fused", True)) if self.candidates else True

    def to_dict(self) -> dict:
        return {"spec": self.spec_key, "candidates": self.candidates, "chosen": self.chosen,
                "chosen_fused": self.chosen_fused, "model_pick_vs_best": self.model_pick_vs_best,
                "from_cache": self.from_cache, "seconds": self.seconds}


_MODEL_VERSION = 11  # bump when the planner's ranking changes: cached choices (and their measurements) are stale


def tune(spec, top_k: int = 4, device=None, use_cache: bool = True, number: int = 3, repeat: int = 7,
         check: bool = True, include_unfused: bool | None = None,
         winograd: tuple[int, ...] = (2,), log=None) -> tuple[FusedKernel, TuneReport]:
    """Plan with the model, compile its top ``top_k`` plans, time them, keep the fastest. The choice and the
    kernels are cached on disk (keyed by shape, dtype and hardware): a second call loads them without compiling
    or measuring.

    ``include_unfused``: also time the unfused kernel (same micro kernel, the model's first plan's tiles) and keep
    it if it is the fastest; ``None`` (default): when the model predicts it within ``UNFUSED_MARGIN`` of the best
    fused plan (``planner.unfused_competitive``: compute-bound chains whose intermediate fits the caches), never
    for chains where fusion saves the memory traffic that bounds them.

    ``winograd``: for a conv chain with a 3×3 conv1, the Winograd tile sizes ``m`` whose kernels
    (:mod:`chain_fuser.winograd`: its 3×3 convs by ``F(m×m, 3×3)``, with the micro kernel of
    ``winograd.plan_for``) are candidates too. The default ``(2,)``: its rounding
    error is that of the direct conv; ``4`` does 1.8× fewer multiplications still but has 15-25× the error (below
    the check's tolerance, above a 1e-5 absolute one), so it is opt-in. ``()``: direct kernels only.

    ``log``: called with a line per compiled candidate when the choice is not cached (a first compile takes
    seconds per chain), never on a cache hit."""
    import torch

    from .planner import plan_chain, unfused_competitive

    t0 = time.perf_counter()
    plans = plan_chain(spec, device, top_k=top_k)
    if include_unfused is None:
        include_unfused = unfused_competitive(spec, plans[0], device)
    from .winograd import plan_for as winograd_plan
    from .winograd import supported as winograd_supported

    algos = [f"winograd{m}" for m in winograd] if isinstance(spec, ConvChain) and winograd_supported(spec) else []
    tkey = cache.entry_key("tune", spec.key, top_k, bool(include_unfused), cache.hardware_key(device),
                           _CODEGEN_VERSION, _MODEL_VERSION,
                           *((tuple(algos), _WINOGRAD_VERSION) if algos else ()))
    saved = _tune_record(tkey) if use_cache else None
    if saved is not None:
        sig, bsig = saved["chosen_signature"], saved.get("best_fused_signature", saved["chosen_signature"])
        chosen = saved["candidates"][saved["chosen"]]
        algorithm = chosen.get("algorithm", "direct")
        pool = plans + ([winograd_plan(spec, plans, device)] if algorithm != "direct" else [])
        match = [p for p in pool if plan_signature(p) == sig]
        fmatch = [p for p in plans if plan_signature(p) == bsig]
        if match and fmatch:
            chosen_fused = bool(chosen.get("fused", True))
            k = build_kernel(spec, match[0], chosen_fused, use_cache, algorithm)
            if k.from_cache:
                k.measured_ms = chosen["measured_ms"]
                rep = TuneReport(spec.key, saved["candidates"], saved["chosen"], 0, True, time.perf_counter() - t0)
                rep.best_fused_kernel = k if chosen_fused else build_kernel(spec, fmatch[0], True, use_cache)
                if not chosen_fused and algorithm == "direct":
                    rep.unfused_kernel = k
                return k, rep
    ins = random_inputs(spec)
    ref = reference(spec, *ins) if check else None
    cands, kernels = [], []
    todo = [(p, True, "direct") for p in plans] + ([(plans[0], False, "direct")] if include_unfused else [])
    unfused_at = len(todo) - 1 if include_unfused else None
    if algos:
        wplan = winograd_plan(spec, plans, device)
        todo += [(wplan, False, a) for a in algos]
    for i, (p, fused, algorithm) in enumerate(todo):
        k = build_kernel(spec, p, fused, use_cache, algorithm)
        if log is not None:
            log(f"{spec.name}: candidate {i + 1}/{len(todo)} ({p.micro.name}, "
                f"{algorithm if algorithm != 'direct' else 'fused' if fused else 'unfused'}) built in "
                f"{k.build_s:.1f} s" + (", timing them ..." if i + 1 == len(todo) else ""))
        if check:
            got = k(*ins)
            if not torch.allclose(got, ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max()) + 1e-5):
                raise AssertionError(f"{spec.name}: plan {i} ({plan_signature(p)}, fused={fused}, {algorithm}) gives "
                                     f"wrong results (max error {float((got - ref).abs().max()):.3g})")
        kernels.append(k)
        cand = {"rank": i, **plan_signature(p), "fused": fused, "predicted_ms": p.predicted_s * 1e3,
                "build_s": k.build_s, "fusion_level": p.fusion_level if fused else None,
                "predicted_overhead_ms": p.overhead_s * 1e3}
        if algorithm != "direct":
            # the Winograd kernel's own estimate (winograd.predict: executed FMAs at the peak + its transforms'
            # traffic), not the plan's; it is measured against the direct kernels like every candidate
            from .winograd import predict, tile_of

            cand.update(algorithm=algorithm, fusion_level=None, predicted_overhead_ms=None,
                        predicted_ms=predict(spec, p, tile_of(algorithm), device)["predicted_s"] * 1e3)
        cands.append(cand)
    # candidates timed interleaved (round robin), so that a load change on a shared machine hits all of them
    import statistics

    runs: list[list[float]] = [[] for _ in kernels]
    t = time.perf_counter()
    for k in kernels:
        k(*ins)  # warm-up
    # long kernels (memory-bound chains, attention) need fewer calls per repeat for the same precision
    per_call = (time.perf_counter() - t) / max(1, len(kernels))
    number = max(1, min(number, int(0.05 / max(per_call, 1e-6))))
    for _ in range(repeat):
        for i, k in enumerate(kernels):
            if number > 1:  # untimed: the first call after another kernel's (thread pool handover, caches)
                k(*ins)
            t = time.perf_counter()
            for _ in range(number):
                k(*ins)
            runs[i].append((time.perf_counter() - t) / number * 1e3)
    for i, k in enumerate(kernels):
        # the fastest repeat: on a shared machine other processes only ever add time, so the minimum over
        # interleaved repeats is the estimate least disturbed by them (the median is kept for reference)
        k.measured_ms = min(runs[i])
        cands[i]["measured_ms"] = k.measured_ms
        cands[i]["median_ms"] = statistics.median(runs[i])
    best = min(range(len(cands)), key=lambda i: cands[i]["measured_ms"])
    best_fused = min((i for i in range(len(cands)) if cands[i]["fused"]), key=lambda i: cands[i]["measured_ms"])
    rep = TuneReport(spec.key, cands, best, 0, False, time.perf_counter() - t0, kernels[best_fused],
                     kernels[unfused_at] if unfused_at is not None else None)
    if use_cache:
        cache.save_json(tkey, {"spec": spec.key, "candidates": cands, "chosen": best,
                               "chosen_signature": plan_signature(todo[best][0]),
                               "best_fused_signature": plan_signature(todo[best_fused][0])})
    return kernels[best], rep
