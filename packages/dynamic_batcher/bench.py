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


def format_table(doc: dict) -> str:
    lines = [f"{'workload':15s} {'fam':8s} {'LB':>5s} {'fsm':>5s} {'depth':>6s} {'agenda':>6s} {'ag+d':>5s} "
             f"{'fsm/s':>8s} {'bestDy/s':>8s} {'x':>5s} {'x_exec':>6s} {'x_s+e':>6s} {'sched%':>6s} "
             f"{'cellPQ/DyNet':>14s}"]
    for w in doc["workloads"]:
        b, t, cb = w["batches"], w["throughput"], w["copied_bytes"]
        lines.append(f"{w['name']:15s} {w['family']:8s} {b['lower_bound']:5d} {b['fsm']:5d} {b['dynet_depth']:6d} "
                     f"{b['dynet_agenda']:6d} {b['dynet_agenda_depth']:5d} {t['fsm_pq']:8.0f} "
                     f"{t[w['best_baseline']]:8.0f} {w['speedup_vs_best_baseline']:5.2f} "
                     f"{w['exec_speedup_vs_best_baseline']:6.2f} {w['sched_exec_speedup_vs_best_baseline']:6.2f} "
                     f"{100 * w['sched_fraction']:6.1f} {cb['cells_pq']:>6d}/{cb['cells_dynet'] or 0:<7d}")
    lines.append("geomean speedup vs best DyNet baseline (end to end): "
                 + ", ".join(f"{f} {v:.2f}x" for f, v in doc["speedup_vs_best_baseline"].items()))
    lines.append("  execution only: "
                 + ", ".join(f"{f} {v:.2f}x" for f, v in doc["exec_speedup_vs_best_baseline"].items()))
    lines.append("  schedule + plan + execution (no recording): "
                 + ", ".join(f"{f} {v:.2f}x" for f, v in doc["sched_exec_speedup_vs_best_baseline"].items()))
    if doc["speedup_vs_best_baseline_on_blocks"]:
        lines.append("  vs DyNet policies on the same static blocks: "
                     + ", ".join(f"{f} {v:.2f}x" for f, v in doc["speedup_vs_best_baseline_on_blocks"].items()))
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
