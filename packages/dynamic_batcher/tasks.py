"""Experiment task functions (``python -m experiments.run experiment=dynamic_batcher/<name>``).

Each writes CSV tables and PNG plots under ``out_dir`` and returns a JSON-able summary.
"""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from .config import BenchConfig, SweepConfig


def _write_csv(path: str, rows: list[dict]) -> None:
    from shared_ir import atomic_write_text

    if not rows:
        return
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _rows(ws: list[dict], extra: dict | None = None) -> tuple[list[dict], list[dict]]:
    tp, bt = [], []
    for w in ws:
        base = {"workload": w["name"], "family": w["family"], "batch": w["batch"], "hidden": w["hidden"],
                **(extra or {})}
        for pol, v in w["throughput"].items():
            tp.append({**base, "variant": pol, "instances_per_s": round(v, 2),
                       "exec_instances_per_s": round(w["exec_throughput"].get(pol, 0.0), 2),
                       **{f"{k}_ms": v2 for k, v2 in w["phase_ms"][pol].items()}})
        b = w["batches"]
        # fsm_table_only: the FSM without its search step (the table and its fallback), beside the FSM
        for pol in ("fsm", "fsm_table_only", "fsm_set", "fsm_sorted", "fsm_set_max", "typewise_lb", "critical_path",
                    "rollout",
                    "dynet_depth", "dynet_agenda", "dynet_agenda_depth", "no_batching"):
            if pol not in b:  # rollout: lattices only (an offline reference)
                continue
            bt.append({**base, "policy": pol, "batches": b[pol], "lower_bound": b["lower_bound"],
                       "lower_bound_source": b.get("lower_bound_components", {}).get("best_source", "typewise"),
                       "typewise_lower_bound": b.get("typewise_lower_bound", b["lower_bound"]),
                       "scs_lower_bound": b.get("scs_lower_bound", b["lower_bound"]),
                       "ratio_to_lb": round(b[pol] / b["lower_bound"], 4)})
    return tp, bt


def _grouped_bars(plt, names: list[str], series: dict[str, list[float]], ylabel: str, title: str, path: str,
                  log: bool = False, hlines: tuple = ()) -> str:
    """One group of bars per workload, one bar per series; ``hlines``: (y, kwargs) reference lines."""
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(names) + 2), 4))
    wd = 0.8 / len(series)
    for i, (label, ys) in enumerate(series.items()):
        ax.bar([j + i * wd for j in range(len(names))], ys, wd, label=label)
    for y, kw in hlines:
        ax.axhline(y, **kw)
    ax.set_xticks([j + 0.4 - wd / 2 for j in range(len(names))], names, rotation=20)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot(ws: list[dict], out_dir: str, tag: str = "") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [w["name"] for w in ws]
    variants = ["fsm_pq", "dynet_depth", "dynet_agenda", "dynet_agenda_depth", "dynet_depth_blocks",
                "dynet_agenda_blocks", "no_batching", "eager_pytorch"]
    pols = ["fsm", "fsm_table_only", "typewise_lb", "dynet_depth", "dynet_agenda", "dynet_agenda_depth"]
    return [
        _grouped_bars(plt, names, {v: [w["throughput"].get(v, 0) for w in ws] for v in variants}, "instances / s",
                      f"throughput per policy {tag}", os.path.join(out_dir, f"throughput{tag}.png"), log=True),
        # results from before the search step have no fsm_table_only: there the FSM was the table alone
        _grouped_bars(plt, names, {p: [w["batches"].get(p, w["batches"]["fsm"]) / w["batches"]["lower_bound"]
                                       for w in ws] for p in pols},
                      "batches / lower bound", f"batches vs lower bound {tag}",
                      os.path.join(out_dir, f"batches_vs_lb{tag}.png"),
                      hlines=((1.0, dict(color="k", lw=0.8)),
                              (1.05, dict(color="r", lw=0.8, ls="--", label="1.05 × LB")))),
    ]


def run_workloads(hardware: Any = None, workload: Any = None, out_dir: str = ".", **params) -> dict:
    """Benchmark the given workloads; writes throughput.csv, batches.csv, bench.json and two plots."""
    from shared_ir import atomic_write_text

    from .evaluation import run_workload, set_clock, summarize

    cfg = BenchConfig(**params)
    set_clock(cfg.clock)
    os.makedirs(out_dir, exist_ok=True)
    ws = [run_workload(n, cfg.batch, cfg.hidden, cfg.scale, cfg.seed, cfg.threads, out_dir) for n in cfg.workloads]
    tp, bt = _rows(ws)
    _write_csv(os.path.join(out_dir, "throughput.csv"), tp)
    _write_csv(os.path.join(out_dir, "batches.csv"), bt)
    summ = summarize(ws)
    atomic_write_text(os.path.join(out_dir, "bench.json"), json.dumps({"workloads": ws, **summ}, default=float))
    plots = _plot(ws, out_dir) if cfg.plots else []
    return {"workloads": {w["name"]: {"batches_fsm": w["batches"]["fsm"], "lower_bound": w["batches"]["lower_bound"],
                                      "speedup_vs_best_baseline": round(w["speedup_vs_best_baseline"], 3),
                                      "exec_speedup": round(w["exec_speedup_vs_best_baseline"], 3),
                                      "sched_fraction": round(w["sched_fraction"], 3),
                                      "cells_copy_reduction": (None if w["copied_bytes"]["cells_reduction"] is None
                                                               else round(w["copied_bytes"]["cells_reduction"], 3))}
                          for w in ws},
            "speedup_vs_best_baseline": summ["speedup_vs_best_baseline"], "plots": plots,
            "tables": ["throughput.csv", "batches.csv"]}


def sweep(hardware: Any = None, workload: Any = None, out_dir: str = ".", **params) -> dict:
    """Grid over batch × hidden for the given workloads; writes sweep_throughput.csv, sweep_batches.csv, plots."""
    import matplotlib

    from .evaluation import run_workload, set_clock

    cfg = SweepConfig(**params)
    set_clock(cfg.clock)
    os.makedirs(out_dir, exist_ok=True)
    tp_all, bt_all, res = [], [], []
    bm, hm = cfg.batches[len(cfg.batches) // 2], cfg.hiddens[len(cfg.hiddens) // 2]
    points = [(b, h) for b in cfg.batches for h in cfg.hiddens
              if cfg.grid == "full" or b == bm or h == hm]
    for b, h in points:
        ws = [run_workload(n, b, h, cfg.scale, cfg.seed, cfg.threads, None) for n in cfg.workloads]
        tp, bt = _rows(ws)
        tp_all += tp
        bt_all += bt
        for w in ws:
            res.append({"workload": w["name"], "family": w["family"], "batch": b, "hidden": h,
                        "speedup_vs_best_baseline": w["speedup_vs_best_baseline"],
                        "exec_speedup": w["exec_speedup_vs_best_baseline"],
                        "speedup_on_blocks": w["speedup_vs_best_baseline_on_blocks"],
                        "sched_fraction": w["sched_fraction"],
                        "batches_over_lb": w["batches"]["fsm"] / w["batches"]["lower_bound"]})
        _write_csv(os.path.join(out_dir, "sweep_throughput.csv"), tp_all)  # partial results survive a kill
        _write_csv(os.path.join(out_dir, "sweep_batches.csv"), bt_all)
        _write_csv(os.path.join(out_dir, "sweep_speedup.csv"), res)
    plots = []
    if cfg.plots:
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(cfg.workloads), figsize=(4.5 * len(cfg.workloads), 3.6), squeeze=False)
        for ax, name in zip(axes[0], cfg.workloads):
            for h in cfg.hiddens:
                pts = [r for r in res if r["workload"] == name and r["hidden"] == h]
                if len(pts) < 2:  # cross grid: a hidden size off the middle has one point
                    ax.scatter([r["batch"] for r in pts], [r["speedup_vs_best_baseline"] for r in pts],
                               label=f"hidden {h}")
                    continue
                ax.plot([r["batch"] for r in pts], [r["speedup_vs_best_baseline"] for r in pts], marker="o",
                        label=f"hidden {h}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.set_ylabel("FSM+PQ / best DyNet")
            ax.set_title(name)
            ax.legend(fontsize=7)
        fig.tight_layout()
        f = os.path.join(out_dir, "sweep_speedup.png")
        fig.savefig(f, dpi=110)
        plt.close(fig)
        plots.append(f)
    return {"points": len(res), "grid": cfg.grid,
            "tables": ["sweep_throughput.csv", "sweep_batches.csv", "sweep_speedup.csv"],
            "plots": plots,
            "speedup_range": [round(min(r["speedup_vs_best_baseline"] for r in res), 3),
                              round(max(r["speedup_vs_best_baseline"] for r in res), 3)]}


__all__ = ["run_workloads", "sweep"]
