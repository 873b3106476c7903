"""Hydra task functions: ``experiment=chain_fuser/gemm_chains`` and ``experiment=chain_fuser/conv_chains``.

Each tunes our fused kernel for every shape of its suite, times it against PyTorch eager (and TVM without fusion,
same micro kernel), and writes ``<suite>.csv`` (one row per shape) and ``<suite>.png`` (bar plot of speedups)
under the run directory. The hardware config feeds the model's prediction of the fusion gain on that machine.
"""
from __future__ import annotations

import csv
import io
import os
import time
from typing import Any

from .config import ChainsExperiment


def _device_or_none(hardware: dict | None):
    if not hardware:
        return None
    from shared_ir.hardware import load_hardware

    from .hw import resolve_device

    try:
        return resolve_device(load_hardware(hardware))
    except ValueError:
        return None  # no CPU in that description: predictions are for the host


def _workload_items(kind: type, workload: dict | None, cfg: ChainsExperiment) -> tuple[list, list[dict], str]:
    """(items, skipped chains, graph name) of ``task.from_workload``: the workload graph's chains of ``kind``."""
    from shared_ir.errors import ValidationError
    from shared_ir.workload import load_workload

    from .spec import graph_specs

    g = load_workload(workload)
    specs, skipped = graph_specs(g, kind)
    if not specs:
        why = "; ".join(f"{s['chain']}: {s['reason']}" for s in skipped[:3]) or "it has no chain of two compute ops"
        raise ValidationError("workload", f"{g.name} has no {kind.__name__} that a template covers ({why})", g.name)
    print(f"[chain_fuser] {g.name}: {len(specs)} distinct {kind.__name__}s, {len(skipped)} chains left out",
          flush=True)
    return [(s.name, s) for s in specs[:cfg.max_chains]], skipped, g.name


def _run_suite(suite: str, items: list[tuple[str, Any]], cfg: ChainsExperiment, hardware, out_dir: str) -> dict:
    import torch

    from shared_ir.hostinfo import num_cores

    from .peak import fma_peak_gflops
    from .timing import TorchServer

    torch.set_num_threads(num_cores())
    dev = _device_or_none(hardware)
    peak = fma_peak_gflops()
    if cfg.shapes:
        items = _chosen(suite, items, cfg.shapes)
    rows = []
    server = None if cfg.torch_in_process else TorchServer(num_cores())
    try:
        for i, (name, spec) in enumerate(items):
            t = time.perf_counter()  # a first tune compiles several kernels: say where the run is
            print(f"[chain_fuser] {suite} {i + 1}/{len(items)} {name}: tuning and timing ...", flush=True)
            rows.append(_suite_row(name, spec, cfg, server, dev, peak))
            print(f"[chain_fuser] {name}: {rows[-1]['speedup_vs_torch']:.2f}x vs PyTorch eager "
                  f"({time.perf_counter() - t:.1f} s)", flush=True)
    finally:
        if server is not None:
            server.close()
    return _write_suite(suite, rows, cfg, out_dir, peak)


def _chosen(suite: str, items: list[tuple[str, Any]], shapes: list) -> list[tuple[str, Any]]:
    """The suite's shapes named in ``shapes``, and the user's own chains (specs) in their order."""
    from shared_ir.errors import ValidationError

    known = dict(items)
    bad = [s for s in shapes if isinstance(s, str) and s not in known]
    if bad:
        raise ValidationError("task.shapes", f"unknown shapes {bad}; the {suite} suite has {list(known)}", bad)
    return [(s, known[s]) if isinstance(s, str) else (s.name, s) for s in shapes]


def _suite_row(name: str, spec, cfg: ChainsExperiment, server, dev, peak: float) -> dict:
    from .kernel import build_kernel, random_inputs, tune
    from .planner import predict_fusion_gain
    from .timing import SelfTimed, time_interleaved, torch_eager

    ins = random_inputs(spec)
    k, rep = tune(spec, top_k=cfg.top_k, winograd=tuple(cfg.winograd))
    variants = {"ours": lambda k=k: k(*ins),
                "torch": server.variant(name, spec) if server is not None else torch_eager(spec, ins)}
    if cfg.unfused:
        u = rep.unfused_kernel if rep.unfused_kernel is not None else build_kernel(spec, k.plan, fused=False)
        variants["tvm_unfused"] = lambda u=u: u(*ins)
    ms = time_interleaved(variants, cfg.repeat, cfg.budget_s)
    for v in variants.values():
        if isinstance(v, SelfTimed):  # the child drops the row's inputs
            v.done()
    pred = predict_fusion_gain(spec, dev)
    return {"shape": name, "ours_ms": ms["ours"], "torch_ms": ms["torch"],
            "speedup_vs_torch": ms["torch"] / ms["ours"],
            "tvm_unfused_ms": ms.get("tvm_unfused"),
            "speedup_vs_unfused": ms["tvm_unfused"] / ms["ours"] if "tvm_unfused" in ms else None,
            # executed multiply-adds: a Winograd kernel's own (fewer than the chain's), as the benchmark counts
            "gflops": k.executed_flops / ms["ours"] / 1e6, "peak_fraction": k.executed_flops / ms["ours"] / 1e6 / peak,
            "model_pick_vs_best": rep.model_pick_vs_best, "algorithm": k.algorithm, "micro_kernel": k.plan.micro.name,
            # a Winograd kernel has no block order, and its prediction is winograd.predict's (tune's candidate)
            "order": ",".join(k.plan.fused.order) if k.algorithm == "direct" else "",
            "predicted_ms": (rep.candidates[rep.chosen].get("predicted_ms") if rep.candidates
                             else k.plan.predicted_s * 1e3),
            "predicted_fusion_gain": pred["predicted_gain"]}


def _write_suite(suite: str, rows: list[dict], cfg: ChainsExperiment, out_dir: str, peak: float) -> dict:
    from shared_ir import atomic_write_text

    from .bench import geomean

    os.makedirs(out_dir, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(os.path.join(out_dir, f"{suite}.csv"), buf.getvalue())
    if cfg.plots:
        _plot(rows, suite, os.path.join(out_dir, f"{suite}.png"))
    return {"suite": suite, "shapes": len(rows), "fma_peak_gflops": peak,
            "geomean_vs_torch": geomean([r["speedup_vs_torch"] for r in rows]),
            "min_vs_torch": min(r["speedup_vs_torch"] for r in rows),
            "geomean_vs_unfused": geomean([r["speedup_vs_unfused"] for r in rows]),
            "geomean_peak_fraction": geomean([r["peak_fraction"] for r in rows]),
            "table": f"{suite}.csv", "plot": f"{suite}.png" if cfg.plots else None,
            "speedups_vs_torch": {r["shape"]: round(r["speedup_vs_torch"], 3) for r in rows},
            "torch_timed_in": "this process" if cfg.torch_in_process else "a child process (timing.TorchServer)"}


def _plot(rows: list[dict], suite: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["shape"] for r in rows]
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(names) + 2), 4))
    w = 0.4
    ax.bar([i - w / 2 for i in x], [r["speedup_vs_torch"] for r in rows], w, label="vs PyTorch eager")
    if rows[0].get("speedup_vs_unfused") is not None:
        ax.bar([i + w / 2 for i in x], [r["speedup_vs_unfused"] or 0 for r in rows], w,
               label="vs TVM unfused (same micro kernel)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup of the fused kernel (×)")
    ax.set_title(f"chain_fuser: {suite}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    from shared_ir import atomic_savefig

    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def gemm_chains(hardware: dict | None = None, workload: dict | None = None, out_dir: str = ".", **params) -> dict:
    """The reference's 12 GEMM chains (Bert, ViT, Mixer): fused kernel vs PyTorch eager (bmm, bmm)."""
    from .bench import REFERENCE_GEMM, _ident
    from .spec import GemmChain

    cfg = ChainsExperiment(**params)
    if cfg.from_workload:
        return _from_workload("gemm_chains", GemmChain, workload, cfg, hardware, out_dir)
    items = [(n, GemmChain(b, M, N, K, L, name=_ident(n))) for n, b, M, N, K, L in REFERENCE_GEMM]
    return _run_suite("gemm_chains", items, cfg, hardware, out_dir)


def _from_workload(suite: str, kind: type, workload, cfg: ChainsExperiment, hardware, out_dir: str) -> dict:
    items, skipped, name = _workload_items(kind, workload, cfg)
    out = _run_suite(suite, items, cfg, hardware, out_dir)
    return {**out, "workload": name, "chains_left_out": skipped}


def conv_chains(hardware: dict | None = None, workload: dict | None = None, out_dir: str = ".", **params) -> dict:
    """3×3→1×1 and 3×3→3×3 conv chains with ReLU between: fused kernel vs PyTorch eager (conv2d, relu, conv2d)."""
    from .bench import REFERENCE_CONV, REFERENCE_CONV_SMALL, _ident
    from .spec import ConvChain

    cfg = ChainsExperiment(**params)
    if cfg.from_workload:
        return _from_workload("conv_chains", ConvChain, workload, cfg, hardware, out_dir)
    table = REFERENCE_CONV if cfg.scale == "full" else REFERENCE_CONV_SMALL
    items = [(n, ConvChain(*c, glue="relu", name=_ident(n))) for n, *c in table]
    return _run_suite("conv_chains", items, cfg, hardware, out_dir)
