"""``experiment=ir_summary``: the per-op roofline of a workload on one device of a hardware preset.

For every op of the graph (topological order): kind, MACs, FLOPs, bytes moved (compulsory traffic), arithmetic
intensity, compute- and memory-bound times, the roofline time and which bound binds, all from the shared IR
(:class:`shared_ir.Op`) and :func:`shared_ir.roofline.roofline`. Writes ``ir_summary.csv`` (every op) and
``roofline.png`` (log-log intensity vs attainable FLOP/s under the device's roofs, one dot per op coloured by kind),
prints the slowest ops with rich, and returns a summary dict.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Mapping

from .config import ExperimentConfigError, IrSummaryConfig

COLUMNS = ["op", "kind", "macs", "flops", "bytes", "intensity_flop_per_byte", "compute_s", "memory_s", "time_s",
           "bound", "attainable_flop_per_s", "peak_flop_per_s", "level", "supported"]
"""CSV columns, in order."""


def pick_device(system: Any, device: str | int | None) -> Any:
    """The device to model: by name, by index into ``system.all_devices`` (host first), or the primary one."""
    if device is None:
        return system.primary
    devs = list(system.all_devices)
    if isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        i = int(device)
        if not 0 <= i < len(devs):
            raise ExperimentConfigError("task.device", f"index {i} out of range; the system has {len(devs)} "
                                        f"device(s): {[d.name for d in devs]}", device)
        return devs[i]
    for d in devs:
        if d.name == device:
            return d
    raise ExperimentConfigError("task.device", f"no device {device!r}; the system has {[d.name for d in devs]}",
                                device)


def op_rows(graph: Any, device: Any, level: str | int | None = None) -> list[dict[str, Any]]:
    """One roofline row per op of ``graph`` (topological order) on ``device``, memory time at ``level`` (default
    the outermost memory level); keys are :data:`COLUMNS`."""
    from shared_ir.roofline import roofline

    rows = []
    for op in graph.topological_ops():
        r = roofline(op, device, level)
        time_s = float(r.time_s)
        rows.append({
            "op": op.name,
            "kind": op.kind.value,
            "macs": int(op.macs),
            "flops": int(op.flops),
            "bytes": int(op.total_bytes),
            "intensity_flop_per_byte": float(op.arithmetic_intensity),
            "compute_s": float(r.compute_s),
            "memory_s": float(r.memory_s),
            "time_s": time_s,
            "bound": str(getattr(r.bound, "value", r.bound)),
            "attainable_flop_per_s": float(r.attained_flops),
            "peak_flop_per_s": float(r.peak_flops),
            "level": r.level,
            "supported": bool(device.supports(op.kind)),
        })
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    from shared_ir import atomic_write_text

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(str(path), buf.getvalue())


def _memory_roofs(device: Any, used: str | None) -> list[tuple[str, float, bool]]:
    """(level name, total read bandwidth, whether the table's memory times use it) per memory level, outermost
    first: the slanted roofs."""
    names = [lv.name for lv in device.memory]
    used = used if used in names else names[0]
    return [(lv.name, float(lv.total_read_bandwidth_bytes_per_s), lv.name == used) for lv in device.memory]


def _rate(v: float, unit: str) -> str:
    """1.01e12 -> '1.01 TB/s' (SI prefixes, 3 significant digits)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def plot_roofline(rows: list[dict[str, Any]], device: Any, path: Path, title: str) -> int:
    """Write the roofline PNG atomically; returns the number of ops plotted (ops with no FLOPs are left out)."""
    import matplotlib

    from shared_ir import atomic_savefig

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt

    pts = [r for r in rows if r["flops"] > 0 and r["intensity_flop_per_byte"] > 0 and r["time_s"] > 0]
    # one horizontal roof per peak the ops used (a dtype-specific peak, e.g. bf16 tensor cores, may differ)
    peaks = sorted({r["peak_flop_per_s"] for r in pts} or {float(device.peak_flops)})
    peak = peaks[-1]
    roofs = _memory_roofs(device, rows[0]["level"] if rows else None)
    used_bw = next(bw for _, bw, u in roofs if u)
    xs = [r["intensity_flop_per_byte"] for r in pts] or [1.0]
    ridge = peak / used_bw
    x_lo = min(min(xs), ridge) / 4
    x_hi = max(max(xs), ridge) * 4
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    try:
        import numpy as np

        grid = np.logspace(np.log10(x_lo), np.log10(x_hi), 200)
        for name, bw, used in roofs:
            ax.plot(grid, np.minimum(peak, grid * bw), "-" if used else ":", color="black" if used else "grey",
                    lw=1.6 if used else 1, label=f"{name} roof ({_rate(bw, 'B/s')})" + (" [used]" if used else ""))
        for p in peaks:
            ax.axhline(p, color="black", lw=0.6, ls="--")
            ax.text(x_hi, p, f"peak {_rate(p, 'FLOP/s')} ", va="bottom", ha="right", fontsize=8)
        kinds = sorted({r["kind"] for r in pts})
        cmap = plt.get_cmap("tab10" if len(kinds) <= 10 else "tab20")
        for i, k in enumerate(kinds):
            sel = [r for r in pts if r["kind"] == k]
            ax.scatter([r["intensity_flop_per_byte"] for r in sel], [r["attainable_flop_per_s"] for r in sel],
                       s=18, alpha=0.8, color=cmap(i % cmap.N), label=f"{k} ({len(sel)})", edgecolors="none")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("attainable FLOP/s (roofline)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        atomic_savefig(fig, path, format="png")  # readers never see half a PNG
    finally:
        plt.close(fig)
    return len(pts)


def print_table(rows: list[dict[str, Any]], top: int, title: str) -> None:
    from rich.table import Table

    from .run import console

    t = Table(title=title, title_justify="left")
    for c, j in [("op", "left"), ("kind", "left"), ("MACs", "right"), ("bytes", "right"), ("FLOP/B", "right"),
                 ("time (µs)", "right"), ("bound", "left")]:
        t.add_column(c, justify=j, no_wrap=(c != "op"), overflow="fold", min_width=12 if c == "op" else None)
    shown = sorted(rows, key=lambda r: r["time_s"], reverse=True)[:top]
    for r in shown:
        t.add_row(r["op"], r["kind"], f"{r['macs']:,}", f"{r['bytes']:,}", f"{r['intensity_flop_per_byte']:.2f}",
                  f"{r['time_s'] * 1e6:.2f}", r["bound"])
    if len(rows) > len(shown):
        t.caption = f"slowest {len(shown)} of {len(rows)} ops; every op is in the CSV"
    console().print(t)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total_t = sum(r["time_s"] for r in rows)
    by_kind: dict[str, dict[str, float]] = {}
    for r in rows:
        k = by_kind.setdefault(r["kind"], {"ops": 0, "macs": 0, "time_s": 0.0})
        k["ops"] += 1
        k["macs"] += r["macs"]
        k["time_s"] += r["time_s"]
    return {
        "ops": len(rows),
        "total_macs": sum(r["macs"] for r in rows),
        "total_flops": sum(r["flops"] for r in rows),
        "total_bytes": sum(r["bytes"] for r in rows),
        # ops one after another, each at its own roofline: a lower bound on serial latency
        "roofline_time_s": total_t,
        "compute_bound_ops": sum(r["bound"] == "compute" for r in rows),
        "memory_bound_ops": sum(r["bound"] == "memory" for r in rows),
        "time_share_by_kind": {k: round(v["time_s"] / total_t, 4) if total_t else 0.0
                               for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]["time_s"])},
        "ops_by_kind": {k: v["ops"] for k, v in sorted(by_kind.items())},
    }


def run(hardware: Mapping[str, Any] | None, workload: Mapping[str, Any] | None, out_dir: str,
        device: str | int | None = None, level: str | int | None = None, top: int = 20, plot: bool = True,
        csv_name: str = "ir_summary.csv", png_name: str = "roofline.png") -> dict[str, Any]:
    """The ir_summary task (runner convention: hardware/workload dicts, out_dir, then the task's parameters)."""
    cfg = IrSummaryConfig(device=device, level=level, top=top, plot=plot, csv_name=csv_name, png_name=png_name)
    if hardware is None:
        raise ExperimentConfigError("hardware", "is required by ir_summary (e.g. hardware=host)")
    from shared_ir.hardware import load_hardware

    from .workloads import load_workload, workload_label

    system = load_hardware(dict(hardware))
    dev = pick_device(system, cfg.device)
    graph = load_workload(workload)
    rows = op_rows(graph, dev, cfg.level)
    out = Path(out_dir)
    csv_path = out / cfg.csv_name
    write_csv(rows, csv_path)
    label = workload_label(workload)
    title = f"{label} on {getattr(system, 'name', 'system')}/{dev.name}"
    if cfg.top:
        print_table(rows, cfg.top, f"ir_summary: {title}")
    summary: dict[str, Any] = {
        "workload": label,
        "graph": graph.name,
        "system": getattr(system, "name", None),
        "device": dev.name,
        "device_kind": dev.kind,
        "peak_flop_per_s": float(dev.peak_flops),
        "memory_level": rows[0]["level"] if rows else None,
        "dram_bandwidth_bytes_per_s": float(dev.dram_bandwidth_bytes_per_s),
        "unsupported_ops": sum(not r["supported"] for r in rows),
        **summarize(rows),
        "csv": str(csv_path),
    }
    if cfg.plot:
        png_path = out / cfg.png_name
        summary["plotted_ops"] = plot_roofline(rows, dev, png_path, f"roofline: {title}")
        summary["png"] = str(png_path)
    return summary


__all__ = ["run", "op_rows", "pick_device", "plot_roofline", "write_csv", "summarize", "COLUMNS"]
