"""Benchmark: ``python -m dynamic_batcher.bench [--scale small|full]`` -> results/bench-dynamic_batcher.json.

What is measured per workload is :mod:`dynamic_batcher.evaluation`; this module runs it over the workloads, adds the
small-DAG check of what Q-learning adds, states the machine first and writes the JSON and a table.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from shared_ir.benchkit import add_bench_args, machine, machine_line, write_json

from .evaluation import REDUCED, SCALES, rl_on_small_dags, run_workload, set_clock, summarize
from .workloads import FAMILIES


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dynamic_batcher.bench", description=__doc__.splitlines()[0])
    add_bench_args(ap, sorted(SCALES), "results/bench-dynamic_batcher.json",
                   scale_help="tiny (smoke/sweeps), small (default, < 10 min on 2 cores), full (more repeats/episodes)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, equal for every variant")
    ap.add_argument("--workloads", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: process CPU time (steady on a shared machine; needs --threads 1), wall: wall time")
    return ap


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = _parser().parse_args(argv)
    set_clock(a.clock)
    mach = machine()
    print(machine_line(mach), flush=True)
    t0 = time.perf_counter()
    pdir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "dynamic_batcher_policies")
    os.makedirs(pdir, exist_ok=True)
    ws = [run_workload(n, a.batch, a.hidden, a.scale, a.seed, a.threads, pdir) for n in a.workloads]
    small = rl_on_small_dags(cases=8 if a.scale not in ("tiny", "sweep") else 2, seed=a.seed)
    print(f"small DAGs where the heuristic is not optimal: FSM better in {small['fsm_better_than_heuristic']}/"
          f"{small['n']}, equal to the exact optimum in {small['fsm_equals_exact']}/{small['n']}")
    doc = {"machine": mach, "scale": a.scale, "reduced": REDUCED[a.scale],
           "load_average": list(os.getloadavg()), "batch": a.batch, "hidden": a.hidden,
           "threads": a.threads, "clock": a.clock, "rl_small_dags": small, "workloads": ws,
           **summarize(ws), "seconds": round(time.perf_counter() - t0, 1)}
    write_json(a.out, doc)
    print(format_table(doc))
    print(f"wrote {a.out} in {doc['seconds']} s")
    return doc


def _fam(d: dict | None) -> str:
    return ", ".join(f"{f} {v:.2f}x" for f, v in (d or {}).items() if v is not None) or "not measured"


def _dynet_ms(w: dict) -> tuple[str, str]:
    rd = w["real_dynet"]
    if not rd.get("available"):
        return "-", "-"
    clock = "cpu" if w.get("clock", "cpu") == "cpu" else "wall"
    s = rd["dynet"]["strategies"]
    return (f"{s[rd['inference_best_strategy']]['inference_ms'][clock]:.1f}",
            f"{s[rd['train_best_strategy']]['train_ms'][clock]:.1f}")


def _x(v: float | None) -> str:
    return f"{v:7.2f}" if v else f"{'-':>7s}"


def format_table(doc: dict) -> str:
    lines = [f"{'workload':15s} {'fam':8s} {'LB':>5s} {'fsm':>5s} {'table':>5s} {'depth':>6s} {'agenda':>6s} "
             f"{'DyNet ms':>8s} {'x DyNet':>7s} {'train ms':>8s} {'x train':>7s} {'x best':>6s} {'best baseline':>22s} "
             f"{'sched%':>6s}"]
    for w in doc["workloads"]:
        b, rd = w["batches"], w["real_dynet"]
        inf_ms, tr_ms = _dynet_ms({**w, "clock": doc.get("clock")})
        lines.append(f"{w['name']:15s} {w['family']:8s} {b['lower_bound']:5d} {b['fsm']:5d} {b['fsm_table_only']:5d} "
                     f"{b['dynet_depth']:6d} {b['dynet_agenda']:6d} {inf_ms:>8s} {_x(w['speedup_vs_real_dynet'])} "
                     f"{tr_ms:>8s} {_x(w['train_speedup_vs_real_dynet'])} {w['speedup_vs_best_baseline']:6.2f} "
                     f"{w['best_baseline']:>22s} {100 * w['sched_fraction']:6.1f}")
        if rd.get("errors"):
            lines.append(f"  {w['name']}: could not run " + "; ".join(f"{k}: {v}" for k, v in rd["errors"].items()))
    lines.append(f"real DyNet: {doc.get('dynet_version') or 'not available'}")
    lines.append("geomean speedup vs the fastest baseline (real DyNet, DyNet policies on blocks, eager, no batching): "
                 + _fam(doc["speedup_vs_best_baseline"]))
    lines.append("  vs real DyNet, inference: " + _fam(doc["speedup_vs_real_dynet"]))
    lines.append("  vs real DyNet, training step: " + _fam(doc["train_speedup_vs_real_dynet"]))
    lines.append("  ablation, vs DyNet's policies on the inlined graph recorded in Python: "
                 + _fam(doc["speedup_vs_dynet_policies_inlined"]))
    lines.append("    execution only: " + _fam(doc["exec_speedup_vs_best_baseline"]))
    lines.append("    schedule + plan + execution (no recording): " + _fam(doc["sched_exec_speedup_vs_best_baseline"]))
    if doc["speedup_vs_best_baseline_on_blocks"]:
        lines.append("  vs DyNet policies on the same static blocks: "
                     + _fam(doc["speedup_vs_best_baseline_on_blocks"]))
    lines.append("sched+plan / exec (uncached | cached): " + ", ".join(
        f"{w['name']} {100 * w['sched_fraction']:.0f}%|{100 * w['sched_fraction_cached']:.0f}%"
        for w in doc["workloads"]))
    lines.append("batches / tightest lower bound (table alone): " + ", ".join(
        f"{w['name']} {w['batches']['fsm']}/{w['batches']['lower_bound']} "
        f"({w['batches']['lower_bound_components']['best_source']}; {w['batches']['fsm_table_only']})"
        for w in doc["workloads"]))
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
