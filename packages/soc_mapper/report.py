"""Outputs: the schedule as a CSV table and a Gantt chart (one row per accelerator stream)."""
from __future__ import annotations

import csv
import io

from shared_ir import atomic_write_text

from .cost import CostTable
from .simulator import Plan, Result
from .soc import SoC
from .workload import Workload


def schedule_rows(w: Workload, soc: SoC, cost: CostTable, plan: Plan, res: Result) -> list[dict]:
    rows = []
    for v in sorted(range(len(w.layers)), key=lambda v: (res.start[v], v)):
        a = plan.placement[v]
        l = w.layers[v]
        rows.append({
            "layer": l.name, "model": l.model, "kind": "depthwise" if l.is_depthwise else l.op_kind,
            "accelerator": soc.accs[a].name, "stream": int(res.stream[v]),
            "start_us": round(float(res.start[v]) * 1e6, 4), "finish_us": round(float(res.finish[v]) * 1e6, 4),
            "pes": int(cost.pes[v, a]), "power_w": round(float(cost.power[v, a]), 4),
            "weights_pinned": bool(plan.pinned[v]) if plan.pinned is not None else False,
            "phase": plan.phase[v] if plan.phase is not None else "",
        })
    return rows


def write_schedule_csv(path: str, rows: list[dict]) -> None:
    buf = io.StringIO()
    if rows:
        wr = csv.DictWriter(buf, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def write_gantt(path: str, w: Workload, soc: SoC, plan: Plan, res: Result, title: str = "") -> None:
    """One horizontal lane per (accelerator, stream); bars coloured by model copy. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lanes = []
    for a, acc in enumerate(soc.accs):
        used = {int(res.stream[v]) for v in range(len(w.layers)) if plan.placement[v] == a}
        for s in range(max(used, default=-1) + 1 if used else 1):
            lanes.append((a, s))
    lane_idx = {k: i for i, k in enumerate(lanes)}
    models = sorted({l.model for l in w.layers})
    cmap = plt.get_cmap("tab20")
    color = {m: cmap(i % 20) for i, m in enumerate(models)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.5))
    # one broken_barh per (lane, model): thousands of single barh calls took seconds per chart on large mixes
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for v, l in enumerate(w.layers):
        y = lane_idx[(plan.placement[v], int(res.stream[v]))]
        bars.setdefault((y, l.model), []).append((res.start[v] * 1e3, (res.finish[v] - res.start[v]) * 1e3))
    for (y, m), xr in bars.items():
        ax.broken_barh(xr, (y - 0.4, 0.8), facecolors=color[m], edgecolor="none")
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, max(res.latency * 1e3, 1e-9) * 1.01)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{soc.accs[a].name}/s{s}" for a, s in lanes])
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"{plan.algorithm}: latency {res.latency * 1e3:.3f} ms, energy {res.energy * 1e3:.3f} mJ, "
                          f"PE occupancy {res.occupancy:.1%}")
    if len(models) <= 20:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=color[m], label=m) for m in models], fontsize=6, ncol=4, loc="upper right")
    fig.tight_layout()
    from shared_ir import atomic_savefig

    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)
