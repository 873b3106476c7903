"""Experiment entry points for ``python -m experiments.run experiment=soc_mapper/<mix>``.

``run_mix`` maps one workload mix on the SoC given by the composed ``hardware`` config with every algorithm
listed, writes ``schedule_<algorithm>.csv``, ``gantt_<algorithm>.png`` and ``summary.csv`` under ``out_dir``,
and returns the summary (latency, energy, PE occupancy, search seconds per algorithm, ratios vs the baselines).
"""
from __future__ import annotations

import csv
import io
import os
from typing import Any

from shared_ir import atomic_write_text

from .config import RunConfig
from .cost import cost_table
from .report import schedule_rows, write_gantt, write_schedule_csv
from .soc import soc_from_system
from .workload import load_user_mix


def run_mix(hardware: Any = None, workload: Any = None, out_dir: str = ".", mix: Any = "mixed1",
            algorithms: list[str] | None = None, time_budget_s: float = 20.0, seed: int = 0,
            bandwidth: float | None = None, copies: int | None = None, ga: dict | None = None,
            magma: dict | None = None, h2h: dict | None = None, gantt: bool = True) -> dict:
    """Map ``mix`` on ``hardware`` (a hardware config dict; default the soc_small preset). ``mix``: a reference mix
    name, or the user's own models: a list of zoo names, graph files (.yaml/.json/.onnx) or mappings
    ``{model|path, kwargs, copies, name}`` (:func:`soc_mapper.workload.load_user_mix`)."""
    kw: dict[str, Any] = dict(time_budget_s=time_budget_s, seed=seed, bandwidth=bandwidth, copies=copies)
    if algorithms is not None:
        kw["algorithms"] = list(algorithms)
    for k, v in (("ga", ga), ("magma", magma), ("h2h", h2h)):
        if v:
            kw[k] = dict(v)
    rc = RunConfig(**kw)
    from .algorithms import ALGORITHMS

    soc = soc_from_system(hardware if hardware is not None else "soc_small", rc.bandwidth)
    if not isinstance(mix, str) and hasattr(mix, "items"):
        mix = dict(mix)
    elif not isinstance(mix, str):
        mix = [dict(e) if hasattr(e, "items") else e for e in mix]  # Hydra ListConfig/DictConfig -> plain
    w = load_user_mix(mix, copies=rc.copies)
    cost = cost_table(w, soc)
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, dict] = {}
    for name in rc.algorithms:
        r = ALGORITHMS[name](w, soc, cost, rc)
        results[name] = {"latency_s": r.result.latency, "energy_j": r.result.energy,
                         "pe_occupancy": r.result.occupancy, "search_s": r.search_seconds,
                         "generations": r.generations, "evaluations": r.evaluations, "converged": r.converged}
        write_schedule_csv(os.path.join(out_dir, f"schedule_{name}.csv"),
                           schedule_rows(w, soc, cost, r.plan, r.result))
        if gantt:
            write_gantt(os.path.join(out_dir, f"gantt_{name}.png"), w, soc, r.plan, r.result,
                        f"{w.name} on {soc.name} ({soc.nn_bandwidth / 1e9:.1f} GB/s): {name}, "
                        f"{r.result.latency * 1e3:.3f} ms, {r.result.energy * 1e3:.3f} mJ")
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(["algorithm", "latency_ms", "energy_mj", "pe_occupancy", "search_s"])
    for name, r in results.items():
        wr.writerow([name, f"{r['latency_s'] * 1e3:.4f}", f"{r['energy_j'] * 1e3:.4f}", f"{r['pe_occupancy']:.4f}",
                     f"{r['search_s']:.2f}"])
    atomic_write_text(os.path.join(out_dir, "summary.csv"), buf.getvalue())
    summary: dict[str, Any] = {"mix": mix if isinstance(mix, str) else w.name, "soc": soc.name,
                               "nn_bandwidth": soc.nn_bandwidth, "layers": len(w),
                               "time_budget_s": rc.time_budget_s, "seed": rc.seed, "algorithms": results}
    if "comb" in results:
        for base in ("magma", "h2h", "magma_comb_simplified", "h2h_wave_greedy"):
            if base in results:
                summary[f"latency_vs_{base}"] = results[base]["latency_s"] / results["comb"]["latency_s"]
                summary[f"energy_reduction_vs_{base}"] = 1 - results["comb"]["energy_j"] / results[base]["energy_j"]
    return summary
