"""Host-side cost of one trainable linear per training step, counted with ``torch.profiler`` on the CPU: native full
fine-tuning (``full_ft``), LSP-Offload with the overlapped and the synchronous schedule, and the ZeRO-Offload style
baseline, on the same small random LLaMA and the same batches.

What is counted: every profiler event named ``aten::*`` that has no ``aten::*`` ancestor, i.e. each ATen operator
the Python side (module code, autograd nodes, hooks, the scheduler, the optimizer) dispatched, not the operators
that one calls internally (``aten::linear`` → ``aten::t``, ``aten::matmul`` → ``aten::mm`` count once). Such a
top-level operator is what costs the host a trip through the dispatcher and, on a GPU, at least one kernel launch
decision; the nested ones are reported too (``aten_events_per_linear``). The whole step is counted for every method
— forward, backward, the trainer's finiteness check, and the optimizer or the LSP update — so operators common to
all methods (norms, attention, loss) are in every figure, divided by the same number of trainable linears.

``torch.profiler`` records only the thread that started it, so the overlapped LSP schedule runs its host jobs
(CPU Adam, h2d) inline on that thread while profiled (:meth:`LayerwiseScheduler.inline_host_jobs`): the same
operators as with its worker thread. Host times come from separate, unprofiled steps of all variants interleaved
(with the worker thread): ``host_ms_per_linear`` is the median wall time of a step divided by the trainable linears
(on a tiny model mostly host overhead), ``host_cpu_ms_per_linear`` the same in process CPU time (all threads, the
worker's included), and ``python_ms_per_linear`` the profiled steps' wall time outside top-level ATen operators
(Python, autograd engine, hooks, ctypes; the profiler's own cost per event included) per linear and step. On a
shared machine the times are noisy; the counts are exact and repeatable.

Native's optimizer is the trainer's ``torch.optim.Adam(fused=True)``: one ``aten::_fused_adam_`` for all weights.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any, Optional

VARIANTS = {"full_ft": ("full_ft", True), "lsp_overlap": ("lsp", True), "lsp_sync": ("lsp", False),
            "zero_offload": ("zero_offload", True)}
"""Measured variant → (trainer method, LSP overlap)."""
TINY_LLAMA = {"source": "llama", "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4}
"""The default model: a random-weight LLaMA of 2 blocks (14 trainable linears), built offline. Activation
checkpointing is off unless the model dict turns it on (``"gradient_checkpointing": True``, the trainer's default,
runs every forward twice for every method)."""


def top_level_aten(events) -> list:
    """The profiler events named ``aten::*`` without an ``aten::*`` ancestor (see the module docstring)."""
    out = []
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        p = e.cpu_parent
        while p is not None and not p.name.startswith("aten::"):
            p = p.cpu_parent
        if p is None:
            out.append(e)
    return out


def _config(method: str, overlap: bool, model: dict, batch: int, seq: int, d: int, r: int, wdt: str = "float32"):
    from .config import from_dict

    return from_dict({"model": {"gradient_checkpointing": False, **model},
                      "data": {"source": "synthetic", "seq_len": seq, "max_examples": 8 * batch,
                               "eval_examples": batch, "calib_examples": batch},
                      "train": {"method": method, "steps": 1_000_000, "batch": batch, "lr": 1e-3, "progress": False},
                      "lsp": {"d": d, "r": r, "initial_fit": False, "check_interval": 0, "overlap": overlap,
                              "weight_dtype": wdt, "calib_batches": 1},
                      "device": "cpu"})


def _profile_steps(tr, steps: int) -> dict[str, Any]:
    """Counts and times of ``steps`` profiled training steps of trainer ``tr``."""
    from torch.profiler import ProfilerActivity, profile

    sched = tr.scheduler
    inline = sched.inline_host_jobs() if sched is not None and sched.overlap else contextlib.nullcontext()
    with inline, profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            tr.train_step()
        if sched is not None:
            sched.flush()
        wall = time.perf_counter() - t0
    events = prof.events()
    top = top_level_aten(events)
    return {"top": len(top), "all": sum(1 for e in events if e.name.startswith("aten::")),
            "threads": len({e.thread for e in events}),
            "aten_s": sum(e.time_range.elapsed_us() for e in top) * 1e-6, "wall_s": wall,
            "ops": Counter(e.name for e in top)}


def _step(tr) -> None:
    """One training step with every pending LSP update landed inside it."""
    tr.train_step()
    if tr.scheduler is not None:
        tr.scheduler.flush()


def _build(variant: str, model: Optional[dict], batch: int, seq: int, d: int, r: int, warmup: int,
           proj_mode: Optional[str], wdt: str):
    """(trainer, trainable linears) of ``variant`` after ``warmup`` steps (allocations, CSR/dense forms and the
    dense-vs-CSR measurement happen in the first ones)."""
    from .lsp_linear import find_target_linears
    from .trainer import Trainer

    method, overlap = VARIANTS[variant]
    cfg = _config(method, overlap, model or TINY_LLAMA, batch, seq, d, r, wdt)
    tr = Trainer(cfg)
    n_lin = len(tr.layers) if method == "lsp" else len(find_target_linears(tr.model, cfg.model.target_modules))
    if proj_mode is not None and method == "lsp":
        for lay in tr.layers:
            lay.set_proj_mode(proj_mode)
    for _ in range(warmup):
        _step(tr)
    return tr, n_lin


def _variant_record(tr, n_lin: int, prof: dict, steps: int) -> dict[str, Any]:
    per = steps * n_lin
    res: dict[str, Any] = {
        "method": tr.method, "trainable_linears": n_lin,
        "dispatches_per_linear": prof["top"] / per, "aten_events_per_linear": prof["all"] / per,
        "python_ms_per_linear": 1e3 * max(0.0, prof["wall_s"] - prof["aten_s"]) / per,
        "profiled_threads": prof["threads"], "top_ops_per_step": {k: v / steps for k, v in prof["ops"].most_common(12)}}
    if tr.method == "lsp":
        res["overlap"] = tr.scheduler.overlap
        res["dense_projections"] = sum(bool(lay.dense_proj) for lay in tr.layers)
    if tr.opt is not None:
        res["optimizer"] = (f"{type(tr.opt).__name__}(fused={tr.opt.defaults.get('fused')}, "
                            f"foreach={tr.opt.defaults.get('foreach')})")
    return res


def measure(model: Optional[dict] = None, batch: int = 4, seq: int = 32, d: int = 16, r: int = 4, warmup: int = 2,
            steps: int = 3, timing_steps: int = 7, proj_mode: Optional[str] = None, threads: Optional[int] = 1,
            variants=tuple(VARIANTS), lsp_weight_dtype: str = "float32") -> dict[str, Any]:
    """Dispatches and host time per trainable linear per step of each variant of :data:`VARIANTS`, and the ratios
    LSP / native: ``host_dispatch_ratio_lsp_vs_native`` is the larger of the overlapped and the synchronous LSP's.

    Each variant: its own trainer on the same model and batches, ``warmup`` steps, ``steps`` profiled steps, then
    ``timing_steps`` unprofiled steps of all variants interleaved (:func:`shared_ir.benchkit.interleave`), medians
    of wall and of process CPU time (all threads, so the overlapped schedule's worker is included). ``threads``:
    torch's intra-op threads meanwhile (default 1: on a tiny model more threads only add synchronisation, and on a
    shared machine their wake-ups dominate the times; the counts do not depend on it), restored after.
    ``proj_mode`` forces LSP's dense or CSR products (default: the layers' own choice); ``lsp_weight_dtype``
    ``bfloat16`` counts the casts of the GPU default (frozen bf16 weights, fp32 activations and projections)."""
    import torch

    from shared_ir.benchkit import interleave

    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    built: dict[str, Any] = {}
    try:
        res: dict[str, Any] = {}
        for v in variants:
            built[v] = _build(v, model, batch, seq, d, r, warmup, proj_mode, lsp_weight_dtype)
            res[v] = _variant_record(*built[v], _profile_steps(built[v][0], steps), steps)
        if timing_steps:
            tim = interleave({v: (lambda tr=tr: _step(tr)) for v, (tr, _) in built.items()}, repeats=timing_steps,
                             warmup=1)
            for v, (_, n_lin) in built.items():
                res[v]["host_ms_per_linear"] = 1e3 * tim[v].wall / n_lin
                res[v]["host_cpu_ms_per_linear"] = 1e3 * tim[v].cpu / n_lin
    finally:
        for tr, _ in built.values():
            tr.close()
        torch.set_num_threads(old)
    out = _summarise(res, model, batch, seq, d, r, steps, warmup, threads or old)
    out["lsp_weight_dtype"] = lsp_weight_dtype
    return out


def _summarise(res: dict, model, batch, seq, d, r, steps, warmup, threads) -> dict[str, Any]:
    out: dict[str, Any] = {"variants": res, "model": {"gradient_checkpointing": False, **(model or TINY_LLAMA)},
                           "batch": batch, "seq": seq, "d": d, "r": r, "profiled_steps": steps,
                           "warmup_steps": warmup, "threads": threads,
                           "counted": "top-level ATen operators (aten::* profiler events without an aten::* "
                                      "ancestor) of whole training steps, per trainable linear per step"}
    nat = res.get("full_ft")
    if nat is None:
        return out
    for v in ("lsp_overlap", "lsp_sync", "zero_offload"):
        if v not in res:
            continue
        out[f"dispatch_ratio_{v}_vs_native"] = res[v]["dispatches_per_linear"] / nat["dispatches_per_linear"]
        if "host_ms_per_linear" in nat:
            out[f"host_time_ratio_{v}_vs_native"] = res[v]["host_ms_per_linear"] / nat["host_ms_per_linear"]
            out[f"host_cpu_ratio_{v}_vs_native"] = res[v]["host_cpu_ms_per_linear"] / nat["host_cpu_ms_per_linear"]
    lsp = [out[f"dispatch_ratio_{v}_vs_native"] for v in ("lsp_overlap", "lsp_sync") if v in res]
    if lsp:
        out["host_dispatch_ratio_lsp_vs_native"] = max(lsp)
    return out


def summary_lines(r: dict[str, Any]) -> list[str]:
    """One readable line per variant, and the ratio."""
    lines = []
    for v, x in r["variants"].items():
        t = (f", host {x['host_ms_per_linear']:.3f} ms wall / {x['host_cpu_ms_per_linear']:.3f} ms CPU"
             if "host_ms_per_linear" in x else "")
        lines.append(f"{v:13s} {x['dispatches_per_linear']:6.2f} dispatches/linear/step "
                     f"({x['aten_events_per_linear']:6.2f} with nested){t}, outside ATen "
                     f"{x['python_ms_per_linear']:.3f} ms (profiled)")
    if "host_dispatch_ratio_lsp_vs_native" in r:
        lines.append(f"LSP / native dispatches: {r['host_dispatch_ratio_lsp_vs_native']:.3f}")
    return lines


if __name__ == "__main__":  # pragma: no cover
    for line in summary_lines(measure()):
        print(line)
