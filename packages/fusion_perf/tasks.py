"""Hydra task functions (``experiments/conf/experiment/fusion_perf/*.yaml``): search every fusion template for
each shape on the configured hardware; write ``<name>.csv``, ``<name>_best.csv``, best mappings as YAML and PNG
plots under ``out_dir``; return a JSON-able summary."""
from __future__ import annotations

import math
import os
from typing import Any

from shared_ir import atomic_savefig, atomic_write_text

from .arch import load_arch
from .config import DSEConfig
from .dse import ATTENTION_SHAPES, CONV_SHAPES, FUSED_LAYER, attention_problem, compare, conv_problem, geomean
from .errors import ConfigError
from .mapping import dump_mapping
from .model import evaluate

# baselines reported per shape and as geomeans (``flat``: the old name of ``flat_rgran``, when a config uses it)
REFS = ("layerwise", "flat_hgran", "flat_hgran_split", "flat_rgran", "flat")


def _workload_table(kind: str, workload: Any, cfg: DSEConfig) -> tuple[list, list[dict], str]:
    from shared_ir.workload import load_workload

    from .graph_shapes import graph_shapes

    g = load_workload(workload)
    table, left_out = graph_shapes(g, kind, cfg.max_chains)
    if not table:
        why = "; ".join(f"{r['chain']}: {r['reason']}" for r in left_out[:3]) or "it has no chain of two compute ops"
        raise ConfigError("workload", f"{g.name} has no {kind} chain the DSE can model ({why})", g.name)
    print(f"[fusion_perf] {g.name}: {len(table)} distinct {kind} chains, {len(left_out)} left out", flush=True)
    return table, left_out, g.name


def _run(kind: str, hardware: Any, workload: Any, out_dir: str, cfg: DSEConfig) -> dict:
    arch = load_arch(hardware if hardware is not None else "edge_accel")
    os.makedirs(out_dir, exist_ok=True)
    if cfg.from_workload:
        table, left_out, wl_name = _workload_table(kind, workload, cfg)
    else:
        table, left_out, wl_name = (cfg.pick(ATTENTION_SHAPES, ("batch", "M", "N", "K", "L")) if kind == "attention"
                                    else cfg.pick(CONV_SHAPES, ("C", "H", "W", "K1", "R1", "K2", "R2"))), None, None
    rows, best_rows, results = [], [], []
    for sh in table:
        prob = attention_problem(sh, cfg.softmax) if kind == "attention" else conv_problem(sh)
        r = compare(prob, arch, cfg.templates, cfg.iterations, cfg.rollouts, cfg.seed, restarts=cfg.restarts,
                    top_k=cfg.top_k, kicks=cfg.kicks, sweep=cfg.sweep)
        results.append(r)
        for t, c in r["cycles"].items():
            rows.append(f"{sh[0]},{t},{c},{r['energy_pj'][t]},{c / r['best_cycles'] if math.isfinite(c) else 'inf'}")
        best_rows.append(",".join(str(v) for v in (
            sh[0], r["best"], r["best_cycles"], *[r.get(f"speedup_vs_{k}", float("nan")) for k in REFS],
            r.get("speedup_vs_fused_layer", float("nan")), r["compute_bound_cycles"], f"{r['search_s']:.2f}",
            r["best_structure"], r["evaluations"])))
        tree = r["trees"][r["best"]]
        safe = sh[0].replace("/", "_")
        atomic_write_text(os.path.join(out_dir, f"best_{safe}.yaml"), dump_mapping(tree))
        if cfg.plots and sh is table[0]:
            evaluate(prob, arch, tree).plot(os.path.join(out_dir, f"best_{safe}.png"), f"{sh[0]}: {r['best']}")
    name = f"{kind}_dse" if kind == "attention" else "conv_chain"
    atomic_write_text(os.path.join(out_dir, f"{name}.csv"),
                      "shape,template,cycles,energy_pj,cycles_over_best\n" + "\n".join(rows) + "\n")
    atomic_write_text(os.path.join(out_dir, f"{name}_best.csv"),
                      "shape,best_template,best_cycles," + ",".join(f"speedup_vs_{k}" for k in REFS) +
                      ",speedup_vs_fused_layer,compute_bound_cycles,search_s,best_structure,evaluations\n" +
                      "\n".join(best_rows) + "\n")
    if cfg.plots:
        _plot(results, cfg.templates, os.path.join(out_dir, f"{name}.png"), f"{name} on {arch.name}")
    out = {"arch": arch.name, "shapes": [s[0] for s in table]}
    if wl_name is not None:
        out.update(workload=wl_name, shape_rows=[list(s) for s in table], chains_left_out=left_out)
    for k in REFS:
        vals = [r.get(f"speedup_vs_{k}") for r in results]
        if any(v is not None for v in vals):
            out[f"geomean_speedup_vs_{k}"] = geomean(vals)
    if "geomean_speedup_vs_flat" not in out and "geomean_speedup_vs_flat_rgran" in out:
        out["geomean_speedup_vs_flat"] = out["geomean_speedup_vs_flat_rgran"]  # old key: FLAT-like = row gran.
    if kind == "conv":
        # TileFlow's conv-chain figure: best fused dataflow vs Fused-Layer (reference: 1.28x)
        out["geomean_vs_fused_layer"] = geomean([r.get("speedup_vs_fused_layer") for r in results])
        out["fused_layer_template"] = FUSED_LAYER
    else:
        out["reference_1_8x_compares_to"] = "flat_hgran"
    out.update({"best": {r["problem"]: r["best"] for r in results},
                "best_structure": {r["problem"]: r["best_structure"] for r in results},
                "budget_per_template": results[0]["budget"] if results else {},
                "evaluations": sum(r["evaluations"] for r in results)})
    return out


def _plot(results: list, templates: list, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(results)), 4))
    w = 0.8 / len(templates)
    for i, t in enumerate(templates):
        vals = [r["cycles"][t] / r["best_cycles"] if math.isfinite(r["cycles"][t]) else 0 for r in results]
        ax.bar(np.arange(len(results)) + i * w, vals, w, label=t)
    ax.set_xticks(np.arange(len(results)) + 0.4 - w / 2)
    ax.set_xticklabels([r["problem"] for r in results], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("cycles / best")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def attention_dse(hardware: Any = None, workload: Any = None, out_dir: str = ".", **params) -> dict:
    """Attention (QK, softmax, PV) of the Bert/ViT shapes: every template searched; best vs layerwise and FLAT at
    head and row granularity."""
    return _run("attention", hardware, workload, out_dir, DSEConfig(**params))


def conv_chain(hardware: Any = None, workload: Any = None, out_dir: str = ".", **params) -> dict:
    """Conv chains (3x3→1x1, 3x3→3x3, 1x1→3x3): every template searched; best fused vs Fused-Layer
    (``geomean_vs_fused_layer``) and vs layerwise."""
    params.pop("softmax", None)
    return _run("conv", hardware, workload, out_dir, DSEConfig(**params))


__all__ = ["attention_dse", "conv_chain"]
