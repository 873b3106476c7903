"""A fast multi-threaded CPU Adam for the d×d compressed gradients (and full fp32 states for the ZeRO baseline).

Why a small C kernel: chained in-place torch ops make five passes over memory and torch's fused CPU Adam one; a
single vectorised pass that writes only what LSP needs (Δ, not a parameter) is what makes the host side cheap. The
kernel is plain C (``cpu_adam.c`` next to this module; no torch headers, so it compiles in well under a second
with ``$CC``), is built for this CPU and cached by :func:`shared_ir.cbuild.build_shared` under
``$OFFLOAD_TRAINER_CACHE`` (default ``~/.cache/offload_trainer``) and is called through ctypes
(which releases the GIL); it splits the array over its own OpenMP team and, with AVX-512, writes Δ with streaming
stores. Without a C compiler the same update runs as in-place torch ops (correct, slower).
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    import torch

_SRC = Path(__file__).with_name("cpu_adam.c")
# -fopenmp first; a compiler without OpenMP still gets a vectorised single-threaded kernel. -march=native (capped
# by $CHAIN_FUSER_ISA: avx2 drops the AVX-512 streaming-store path) is added by shared_ir.cbuild, which keys the
# cache on the target CPU
_FLAG_SETS = (["-O3", "-fno-math-errno", "-fopenmp"], ["-O3", "-fno-math-errno", "-fopenmp-simd"])
_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_error: Optional[str] = None
_so: Optional[Path] = None


def _cache_dir() -> Path:
    return Path(os.environ.get("OFFLOAD_TRAINER_CACHE", Path.home() / ".cache" / "offload_trainer"))


def load_kernel() -> Optional[ctypes.CDLL]:
    """The compiled kernel library, or None (with a warning once) when no C compiler works."""
    global _lib, _lib_error, _so
    with _lock:
        if _lib is not None or _lib_error is not None:
            return _lib
        from shared_ir.cbuild import CompileError, build_shared

        try:
            so = build_shared(_SRC, _cache_dir(), flag_sets=_FLAG_SETS, native=True, link=["-lm"])
            lib = ctypes.CDLL(str(so))
            fp, L, F, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_int
            lib.lsp_adam_delta.argtypes = [fp, fp, fp, fp, L, F, F, F, F, F, I]
            lib.lsp_adam_delta.restype = None
            lib.lsp_adam_param.argtypes = [fp, fp, fp, fp, L, F, F, F, F, F, F, I]
            lib.lsp_adam_param.restype = None
            lib.lsp_adam_delta_checked.argtypes = [fp, fp, fp, fp, L, F, F, F, F, F, I]
            lib.lsp_adam_delta_checked.restype = L
            _lib, _so = lib, so
        except (OSError, CompileError) as e:
            _lib_error = str(e)
            warnings.warn(f"offload_trainer.cpu_adam: C kernel unavailable ({e}); using torch ops", RuntimeWarning)
        return _lib


def kernel_info() -> dict:
    """How the loaded kernel was built (flags, ISA cap included), for benchmark records; {} without one."""
    from shared_ir.cbuild import build_info

    if load_kernel() is None or _so is None:
        return {}
    try:
        return {"flags": build_info(_so)["flags"], "library": _so.name}
    except (OSError, ValueError, KeyError):
        return {"library": _so.name}


class CPUAdam:
    """Adam over flat fp32 CPU tensors, chunked across ``threads`` worker threads.

    Two entry points: :meth:`delta` (LSP: update moments, write the direction Δ) and :meth:`param` (full Adam
    with a parameter update, ZeRO-Offload baseline). Bias correction uses the ``step`` passed in, so one instance
    serves many layers that each keep their own step count.
    """

    CHUNK = 1 << 16  # elements per task: big enough to amortise the call, small enough to balance threads

    def __init__(self, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, threads: int = 0,
                 use_kernel: bool = True):
        import torch

        self.b1, self.b2 = float(betas[0]), float(betas[1])
        self.eps = float(eps)
        self.threads = int(threads) or torch.get_num_threads()
        self.lib = load_kernel() if use_kernel else None
        # the C kernel runs its own OpenMP team; only the torch-ops fallback needs a pool of Python threads
        self._pool = (ThreadPoolExecutor(self.threads, thread_name_prefix="cpu_adam")
                      if self.threads > 1 and self.lib is None else None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def _corr(self, step: int) -> tuple[float, float]:
        return 1.0 / (1.0 - self.b1 ** step), 1.0 / (1.0 - self.b2 ** step) ** 0.5

    def _split(self, n: int) -> list[tuple[int, int]]:
        per = max(self.CHUNK, -(-n // max(1, self.threads)))
        return [(a, min(n, a + per)) for a in range(0, n, per)]

    def _run(self, fn, n: int) -> None:
        parts = self._split(n)
        if self._pool is None or len(parts) == 1:
            for a, b in parts:
                fn(a, b)
        else:
            list(self._pool.map(lambda ab: fn(*ab), parts))

    @staticmethod
    def _check(*ts: "torch.Tensor") -> int:
        import torch

        n = ts[0].numel()
        f32 = torch.float32
        for t in ts:  # is_cpu, not device.type: this runs per layer and step, and a device object costs
            if not t.is_cpu or t.dtype is not f32 or not t.is_contiguous() or t.numel() != n:
                raise ValueError("CPUAdam: tensors must be contiguous fp32 CPU tensors of equal size")
        return n

    def delta(self, g: "torch.Tensor", m: "torch.Tensor", v: "torch.Tensor", out: "torch.Tensor", step: int,
              check_finite: bool = False) -> bool:
        """m, v ← Adam moments after gradient g; out ← m̂ / (√v̂ + eps). ``step`` counts from 1. With
        ``check_finite`` a g holding NaN/inf changes nothing and False is returned (the kernel checks g in C, so the
        check costs no torch operator). Tensors of any shape, contiguous."""
        n = self._check(g, m, v, out)
        c1, c2 = self._corr(step)
        if self.lib is not None:
            # the kernel splits the array over its own OpenMP team
            args = (m.data_ptr(), v.data_ptr(), g.data_ptr(), out.data_ptr(), n, self.b1, self.b2, self.eps, c1, c2,
                    self.threads)
            if check_finite:
                return self.lib.lsp_adam_delta_checked(*args) == 0
            self.lib.lsp_adam_delta(*args)
            return True
        import torch

        if check_finite and not bool(torch.isfinite(g).all()):
            return False

        def run(a: int, b: int) -> None:
            mm, vv, gg, oo = m.view(-1)[a:b], v.view(-1)[a:b], g.view(-1)[a:b], out.view(-1)[a:b]
            mm.mul_(self.b1).add_(gg, alpha=1 - self.b1)
            vv.mul_(self.b2).addcmul_(gg, gg, value=1 - self.b2)
            torch.sqrt(vv, out=oo).mul_(c2).add_(self.eps)
            torch.div(mm, oo, out=oo).mul_(c1)

        self._run(run, n)
        return True

    def param(self, p: "torch.Tensor", g: "torch.Tensor", m: "torch.Tensor", v: "torch.Tensor", step: int,
              lr: float) -> None:
        """Full Adam on fp32 master parameters in place."""
        n = self._check(p, g, m, v)
        c1, c2 = self._corr(step)
        if self.lib is not None:
            self.lib.lsp_adam_param(p.data_ptr(), m.data_ptr(), v.data_ptr(), g.data_ptr(), n, float(lr), self.b1,
                                    self.b2, self.eps, c1, c2, self.threads)
            return
        else:
            def run(a: int, b: int) -> None:
                import torch
                pp, mm, vv, gg = p.view(-1)[a:b], m.view(-1)[a:b], v.view(-1)[a:b], g.view(-1)[a:b]
                mm.mul_(self.b1).add_(gg, alpha=1 - self.b1)
                vv.mul_(self.b2).addcmul_(gg, gg, value=1 - self.b2)
                den = torch.sqrt(vv).mul_(c2).add_(self.eps)
                pp.addcdiv_(mm, den, value=-lr * c1)
        self._run(run, n)
