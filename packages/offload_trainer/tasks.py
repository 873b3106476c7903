"""Experiment task functions (``experiments/conf/experiment/offload_trainer/*.yaml``). The runner calls
``fn(hardware=<dict or None>, workload=<dict or None>, out_dir=<run dir>, **params)``; each writes CSV + PNG under
``out_dir`` and returns a JSON-able summary."""
from __future__ import annotations

import csv
import io
import os
from typing import Any, Optional


def _write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    from shared_ir import atomic_write_text

    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    buf = io.StringIO()
    w = csv.DictWriter(buf, keys)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def finetune(hardware: Optional[dict] = None, workload: Optional[dict] = None, out_dir: str = ".",
             methods: Any = ("lsp",), model: Optional[dict] = None, data: Optional[dict] = None,
             train: Optional[dict] = None, lsp: Optional[dict] = None, device: str = "auto",
             method: Optional[str] = None, d: Optional[int] = None, r: Optional[int] = None,
             alpha: Optional[float] = None, lrs: Optional[dict] = None) -> dict[str, Any]:
    """Fine-tune with one or several methods on the same model/data/steps. ``method`` (one) or ``methods`` (a
    list) select the methods; ``d``, ``r``, ``alpha`` override ``lsp``; ``lrs`` maps a method to its own learning
    rate. Writes ``<method>/metrics.csv``, ``<method>/loss.png``, ``summary.csv`` and ``loss.png`` (all methods)."""
    from .config import from_dict
    from .data import load_splits
    from .models import build_model, is_classifier
    from .trainer import Trainer, plot_losses

    del hardware, workload  # the run uses this machine; planning for presets is the `plan` task
    methods = [method] if method else ([methods] if isinstance(methods, str) else list(methods))
    lsp = dict(lsp or {})
    for k, v in (("d", d), ("r", r), ("alpha", alpha)):
        if v is not None:
            lsp[k] = v
    lrs = dict(lrs or {})
    base = {"model": dict(model or {}), "data": dict(data or {}), "train": dict(train or {}), "lsp": lsp,
            "device": device}
    cfg0 = from_dict({**base, "train": {**base["train"], "method": methods[0]}})
    mdl, tok = build_model(cfg0.model, seed=cfg0.train.seed)
    splits = load_splits(cfg0.data, tok, is_classifier(mdl))
    rows, hists = [], {}
    for m in methods:
        tr_over = {"method": m, **({"lr": lrs[m]} if m in lrs else {})}
        cfg = from_dict({**base, "train": {**base["train"], **tr_over},
                         "out_dir": os.path.join(out_dir, m)})
        tr = Trainer(cfg, model=mdl, tok=tok, splits=splits)
        try:
            s = tr.train()
        finally:
            tr.close()
        rows.append(s)
        hists[m] = tr.history
    os.makedirs(out_dir, exist_ok=True)
    _write_csv(os.path.join(out_dir, "summary.csv"), rows)
    plot_losses(hists, os.path.join(out_dir, "loss.png"))
    return {"runs": rows}


def plan(hardware: Optional[dict] = None, workload: Optional[dict] = None, out_dir: str = ".",
         models: Any = ("llama-6.7b", "llama-1.3b"), batches: Any = (1, 2, 4), seq: int = 512, d: int = 512,
         r: int = 4, compute_efficiency: float = 0.6, preset: Optional[str] = None) -> dict[str, Any]:
    """Memory and modeled iteration time of lsp / zero_offload / native for each model and batch on the Hydra
    ``hardware`` (or ``preset``). Writes ``plan.csv``, ``plan.png`` (memory vs capacity, time per method) and
    ``calibration.csv`` (modeled vs published llama-7B per-layer times)."""
    from .errors import PlannerError
    from .planner import PlanParams, calibration_table, machine_from, plan_memory, plan_time

    del workload
    hw: Any = preset or hardware
    if hw is None:
        raise PlannerError("hardware", "the plan task needs a hardware preset (hardware=rtx4090_workstation)")
    machine_from(hw)  # clear errors (no host, no link) before any work
    p = PlanParams(d=int(d), r=int(r), compute_efficiency=float(compute_efficiency))
    models = [models] if isinstance(models, str) else list(models)
    batches = [batches] if isinstance(batches, int) else list(batches)
    rows = []
    for mname in models:
        for b in batches:
            t = plan_time(mname, int(b), int(seq), hw, p)
            for meth in ("lsp", "zero_offload", "native"):
                pm = plan_memory(mname, meth, int(b), int(seq), hw, p)
                rows.append({"model": mname, "batch": b, "seq": seq, "method": meth,
                             "accelerator_gb": round(pm["accelerator_gb"], 3),
                             "capacity_gb": round(pm["accelerator_capacity_gb"], 3),
                             "host_gb": round(pm["host_gb"], 3), "fits": pm["fits"],
                             "iteration_s": round(t[meth], 4)})
    os.makedirs(out_dir, exist_ok=True)
    _write_csv(os.path.join(out_dir, "plan.csv"), rows)
    cal = calibration_table(hw, params=p)
    _write_csv(os.path.join(out_dir, "calibration.csv"), cal)
    _plot_plan(rows, os.path.join(out_dir, "plan.png"))
    return {"hardware": machine_from(hw).name, "rows": rows, "calibration": cal}


def _plot_plan(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["model"], r["batch"]) for r in rows}, key=lambda k: (k[0], k[1]))
    meths = ["lsp", "zero_offload", "native"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    w = 0.27
    for j, m in enumerate(meths):
        mem = [next(r["accelerator_gb"] for r in rows if (r["model"], r["batch"]) == k and r["method"] == m)
               for k in keys]
        tim = [next(r["iteration_s"] for r in rows if (r["model"], r["batch"]) == k and r["method"] == m)
               for k in keys]
        xs = [i + (j - 1) * w for i in range(len(keys))]
        a1.bar(xs, mem, w, label=m)
        a2.bar(xs, tim, w, label=m)
    cap = rows[0]["capacity_gb"]
    a1.axhline(cap, color="k", ls="--", lw=1, label="capacity")
    a1.set_yscale("log")
    for a, t in ((a1, "accelerator memory (GB)"), (a2, "modeled s / iteration")):
        a.set_xticks(range(len(keys)))
        a.set_xticklabels([f"{m}\nb={b}" for m, b in keys], fontsize=8)
        a.set_title(t)
        a.legend(fontsize=8)
    fig.tight_layout()
    from shared_ir import atomic_savefig

    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)
