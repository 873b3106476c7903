"""The pipeline's picture: one panel per package, each showing its result on the model against its baselines."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

Panel = Callable[[Any, Mapping[str, Any]], None]


def _bars(ax: Any, labels: list[str], values: list[float], title: str, ylabel: str, best: str | None = None) -> None:
    colors = ["tab:orange" if lab == best else "tab:blue" for lab in labels]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)


def _fusion_perf(ax: Any, f: Mapping[str, Any]) -> None:
    tpl = [k.split(".", 1)[1] for k in f if k.startswith("cycles.")]
    _bars(ax, tpl, [f[f"cycles.{t}"] for t in tpl], f"fusion_perf: attention dataflows on {f['arch']}",
          "cycles per chain", f.get("best_template"))


def _chain_fuser(ax: Any, f: Mapping[str, Any]) -> None:
    _bars(ax, ["chain_fuser fused", "PyTorch eager"], [f["fused_ms"], f["eager_ms"]],
          f"chain_fuser: {f['chain']} ({f['speedup_vs_eager']:.2f}x)", "ms per call", "chain_fuser fused")


def _soc_mapper(ax: Any, f: Mapping[str, Any]) -> None:
    algos = [k.split(".")[0] for k in f if k.endswith(".latency_ms")]
    _bars(ax, algos, [f[f"{a}.latency_ms"] for a in algos], f"soc_mapper: {f['models']} on {f['soc']}",
          "latency, ms", algos[0] if algos else None)


def _offload_trainer(ax: Any, f: Mapping[str, Any]) -> None:
    keys = [k for k in f if ".iteration_ms." in k]
    labels = [k.replace(".iteration_ms.", "\n") for k in keys]
    _bars(ax, labels, [f[k] for k in keys], "offload_trainer: planned iteration time", "ms per iteration")
    ax.tick_params(axis="x", labelsize=7)


def _dynamic_batcher(ax: Any, f: Mapping[str, Any]) -> None:
    keys = [k for k in ("batches.lower_bound", "batches.fsm") if k in f]
    keys += [k for k in f if k.startswith("batches.dynet")]
    _bars(ax, [k.split(".", 1)[1] for k in keys], [f[k] for k in keys],
          f"dynamic_batcher: {f['workload']}, batch {f['batch']}", "batches per minibatch", "fsm")


PANELS: dict[str, Panel] = {"fusion_perf": _fusion_perf, "chain_fuser": _chain_fuser, "soc_mapper": _soc_mapper,
                            "offload_trainer": _offload_trainer, "dynamic_batcher": _dynamic_batcher}


def plot_stages(stages: Mapping[str, Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """One panel per stage that ran (a stage whose figures a panel cannot read is shown as such); None when no
    stage ran. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shared_ir import atomic_savefig

    ran = [n for n in PANELS if stages.get(n, {}).get("status") == "ok"]
    if not ran:
        return None
    cols = min(3, len(ran))
    rows = -(-len(ran) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, ran):
        try:
            PANELS[name](ax, stages[name]["figures"])
        except (KeyError, TypeError, ValueError) as e:
            ax.set_title(f"{name}: no picture ({type(e).__name__}: {e})", fontsize=8)
    for ax in list(axes.flat)[len(ran):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    atomic_savefig(fig, path, format="png", dpi=100)
    plt.close(fig)
    return path
