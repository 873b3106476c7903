"""DeepSpeed's CPU Adam (``deepspeed.ops.adam.DeepSpeedCPUAdam``, the optimizer ZeRO-Offload runs on the host) beside
ours on the same elements and threads.

ZeRO-Offload keeps each rank's fp32 master weights, moments and gradients as one flat partition and steps it with
``DeepSpeedCPUAdam``; the comparison gives both the same flat fp32 buffer of ``n`` elements, a full Adam step with
the parameter update (ours: :meth:`offload_trainer.cpu_adam.CPUAdam.param`), interleaved, medians after warm-up.
DeepSpeed builds its CPU Adam extension with its own op builder the first time (a C++ compile of a few minutes;
``DS_ACCELERATOR=cpu`` where no GPU is present); when it cannot be imported or built, the result says why.
"""
from __future__ import annotations

import os
from typing import Any


def load_deepspeed_cpu_adam() -> tuple[Any, str | None]:
    """(``DeepSpeedCPUAdam`` class, None), or (None, the reason it is unavailable)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not _cuda() else "cuda")
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # noqa: BLE001 - any import or build failure means: not available here
        return None, f"deepspeed.ops.adam does not import: {type(e).__name__}: {e}"
    return DeepSpeedCPUAdam, None


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def deepspeed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def cpu_adam_vs_deepspeed(n: int, repeats: int, threads: int, lr: float = 1e-3) -> dict[str, Any]:
    """Ours (:class:`CPUAdam`.param) against DeepSpeedCPUAdam and torch's fused Adam, one flat fp32 parameter of
    ``n`` elements each, ``threads`` threads. ``{"deepspeed_unavailable": reason}`` when DeepSpeed is absent."""
    import torch

    from shared_ir.benchkit import interleave

    from .cpu_adam import CPUAdam, kernel_info

    DSAdam, why = load_deepspeed_cpu_adam()
    if DSAdam is None:
        return {"deepspeed_unavailable": why, "deepspeed_version": deepspeed_version()}
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    grad = torch.randn(n, generator=gen)
    ps = {k: torch.zeros(n, requires_grad=True) for k in ("deepspeed", "torch")}
    for p in ps.values():
        p.grad = grad.clone()
    ds = DSAdam([ps["deepspeed"]], lr=lr, adamw_mode=False)
    tf = torch.optim.Adam([ps["torch"]], lr=lr, fused=True)
    ours = CPUAdam(threads=threads)
    p, m, v, step = torch.zeros(n), torch.zeros(n), torch.zeros(n), [0]

    def run_ours():
        step[0] += 1
        ours.param(p, grad, m, v, step[0], lr)

    timings = interleave({"ours": run_ours, "deepspeed": ds.step, "torch": tf.step}, repeats=repeats, warmup=3)
    ours.close()
    # the same number of steps on the same gradient: the parameters must agree (a check that both ran Adam)
    steps = ds.state[ps["deepspeed"]]["step"]
    agree = float((p - ps["deepspeed"].detach()).abs().max()) if step[0] == int(steps) else None
    ms = {k: 1e3 * t.wall for k, t in timings.items()}
    return {"cpu_adam_vs_deepspeed": ms["deepspeed"] / ms["ours"], "cpu_adam_vs_torch_fused": ms["torch"] / ms["ours"],
            "ms": ms, "cpu_ms": {k: 1e3 * t.cpu for k, t in timings.items()}, "elements": n, "threads": threads,
            "deepspeed_version": deepspeed_version(), "max_abs_param_diff_vs_deepspeed": agree,
            "kernel_build": kernel_info()}
