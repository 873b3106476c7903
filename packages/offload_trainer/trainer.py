"""One trainer for every method — LSP-Offload and the baselines (full fine-tuning, DeepSpeed's ZeRO-Offload, a
ZeRO-Offload style trainer of this package with and without the one-step delayed update as an ablation, LoRA via
peft, GaLore via galore-torch) — on the same model, data, batches and step counts.

Runs write ``metrics.csv`` (one row per step) and ``loss.png`` and keep one atomic checkpoint ``checkpoint.pt``
(written to a temporary file, then renamed). A run resumed from its checkpoint continues exactly as an
uninterrupted one. A NaN/inf gradient stops training with :class:`NonFiniteGradientError` naming the layer and
leaves the last good checkpoint untouched.
"""
from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from .config import RunConfig, flat_config, resume_changes
from .data import Splits, batch_indices, load_splits
from .errors import CheckpointError, ConfigError, ModelError, NonFiniteGradientError
from .lsp_linear import find_target_linears, linear_weight, wrap_model
from .models import build_model, head_parameters, is_classifier

CHECKPOINT = "checkpoint.pt"


class Trainer:
    """Fine-tunes ``cfg.model`` on ``cfg.data`` with ``cfg.train.method``.

    ``model``/``tok``/``splits`` may be passed in to share one loaded model and data set between runs (the model is
    deep-copied so runs never share weights).
    """

    def __init__(self, cfg: RunConfig, model=None, tok=None, splits: Optional[Splits] = None, resume: bool = True):
        import copy

        import torch

        self.cfg = cfg
        tc = cfg.train
        if tc.threads:
            torch.set_num_threads(tc.threads)
        dev = cfg.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(dev)
        if model is None:
            model, tok = build_model(cfg.model, seed=tc.seed)
        else:
            model = copy.deepcopy(model)
        self.model, self.tok = model, tok
        self.classify = is_classifier(model)
        self.splits = splits if splits is not None else load_splits(cfg.data, tok, self.classify)
        self.model.to(self.device)
        self.method = tc.method
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self.refits = 0
        self.scheduler = None
        self.opt = None
        self._zero = None
        self._ds = None
        self._setup()
        if cfg.model.gradient_checkpointing and hasattr(self.model, "gradient_checkpointing_enable"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if hasattr(self.model.config, "use_cache"):
                self.model.config.use_cache = False
        self.model.train()
        self._announce()
        if cfg.out_dir:
            remove_stale_temps(cfg.out_dir)
        if resume and cfg.out_dir and os.path.isfile(os.path.join(cfg.out_dir, CHECKPOINT)):
            self.load_checkpoint(os.path.join(cfg.out_dir, CHECKPOINT))
        elif self.method == "lsp" and cfg.lsp.initial_fit:
            self.fit_projectors(initial=True)

    # --- setup ----------------------------------------------------------------------------------------------------
    def _announce(self) -> None:
        """One line on what trains where (with ``train.progress``)."""
        import sys

        if not self.cfg.train.progress:
            return
        msg = f"  {self.method}: {int(self.n_trainable):,} trainable parameters on {self.device.type}"
        if self.method == "lsp":
            lc = self.cfg.lsp
            budget = lc.fit_budget_for(self.device.type)
            msg += (f", {len(self.layers)} LSP linears (d={lc.d}, r={lc.r}, frozen weights "
                    f"{lc.weight_dtype_for(self.device.type)}), projector fit budget "
                    f"{f'{budget:g} s' if budget else 'unlimited'}")
        print(msg, file=sys.stderr, flush=True)

    def _targets(self) -> list[tuple[str, Any]]:
        found = find_target_linears(self.model, self.cfg.model.target_modules)
        if not found:
            raise ModelError("model.target_modules", f"no trainable linear in {type(self.model).__name__} matches "
                                                     f"{list(self.cfg.model.target_modules)}",
                             list(self.cfg.model.target_modules))
        return found

    def _setup(self) -> None:
        import torch

        tc, m = self.cfg.train, self.method
        head = head_parameters(self.model) if self.classify else []
        head_ids = {id(p) for p in head}
        if m != "lora":
            for p in self.model.parameters():
                p.requires_grad_(id(p) in head_ids)
        adam_kw = dict(lr=tc.lr, betas=tc.betas, eps=tc.eps)
        if m == "lsp":
            lc = self.cfg.lsp
            wdt = getattr(torch, lc.weight_dtype_for(self.device.type))
            self._targets()  # a clear error before wrapping
            self.layers = wrap_model(self.model, self.cfg.model.target_modules, lc.d, lc.r, lc.seed, wdt)
            for p in head:
                p.requires_grad_(True)
            from .schedule import LayerwiseScheduler

            self.scheduler = LayerwiseScheduler(self.layers, tc.lr, tc.betas, tc.eps, overlap=lc.overlap,
                                                threads=lc.adam_threads)
            self.opt = torch.optim.Adam(head, **adam_kw) if head else None
            self.trainable = [lay.weight for lay in self.layers] + head
            self.n_trainable = sum(lay.d * lay.d for lay in self.layers) + sum(p.numel() for p in head)
        elif m in ("full_ft", "zero_offload", "zero_offload_delayed"):
            ws = []
            for _, mod in self._targets():
                mod.weight.requires_grad_(True)
                ws.append(mod.weight)
            self.trainable = ws + head
            self.n_trainable = sum(p.numel() for p in self.trainable)
            if m == "full_ft":
                self.opt = torch.optim.Adam(self.trainable, fused=True, **adam_kw)
            else:
                self._zero = _ZeroOffload(self.trainable, tc.lr, tc.betas, tc.eps, delayed=m.endswith("delayed"))
        elif m == "deepspeed_zero_offload":
            from .ds_zero import DeepSpeedZeroOffload

            if self.cfg.out_dir:
                raise ConfigError("out_dir", "deepspeed_zero_offload keeps its states in DeepSpeed's engine and "
                                             "writes no checkpoint here; run it with out_dir null", self.cfg.out_dir)
            for _, mod in self._targets():
                mod.weight.requires_grad_(True)
            self.trainable = [mod.weight for _, mod in self._targets()] + head
            self.n_trainable = sum(p.numel() for p in self.trainable)
            self._ds = DeepSpeedZeroOffload(self.model, self.trainable, tc.batch, tc.accum, tc.lr, tc.betas, tc.eps)
            self.model = self._ds.engine
        elif m == "lora":
            from peft import LoraConfig, get_peft_model

            names = sorted({n.rsplit(".", 1)[-1] for n, _ in self._targets()})
            lcfg = LoraConfig(r=tc.lora_r, lora_alpha=tc.lora_alpha, lora_dropout=0.0, target_modules=names,
                              modules_to_save=[n for n in ("classifier", "score") if hasattr(self.model, n)] or None,
                              fan_in_fan_out=type(self._targets()[0][1]).__name__ == "Conv1D")
            self.model = get_peft_model(self.model, lcfg)
            self.trainable = [p for p in self.model.parameters() if p.requires_grad]
            self.n_trainable = sum(p.numel() for p in self.trainable)
            self.opt = torch.optim.Adam(self.trainable, **adam_kw)
        elif m == "galore":
            from galore_torch import GaLoreAdamW

            ws = []
            for _, mod in self._targets():
                mod.weight.requires_grad_(True)
                ws.append(mod.weight)
            groups = [{"params": ws, "rank": tc.galore_rank, "update_proj_gap": tc.galore_update_gap,
                       "scale": tc.galore_scale, "proj_type": "std"}]
            if head:
                groups.insert(0, {"params": head})
            self.trainable = ws + head
            self.n_trainable = sum(p.numel() for p in self.trainable)  # full weights train (states are low-rank)
            with warnings.catch_warnings():  # GaLore's own "this AdamW is deprecated" notice, on every construction
                warnings.filterwarnings("ignore", message="This implementation of AdamW is deprecated",
                                        category=FutureWarning)
                self.opt = GaLoreAdamW(groups, lr=tc.lr, betas=tc.betas, eps=tc.eps, weight_decay=0.0)

    # --- batches and losses ----------------------------------------------------------------------------------------
    def _batch(self, data, idx) -> dict:
        import torch

        b = data.take(torch.as_tensor(idx, dtype=torch.long))
        return {k: v.to(self.device) for k, v in b.items()}

    def _loss(self, batch: dict):
        return self.model(**batch).loss

    def evaluate(self) -> dict[str, float]:
        """Mean loss (and accuracy for a classifier) over the eval split; pending LSP updates land first."""
        import torch

        if self.scheduler is not None:
            self.scheduler.flush()
        if self._zero is not None:
            self._zero.flush()
        data = self.splits.eval
        tot, n, correct = 0.0, 0, 0
        was = self.model.training
        self.model.eval()
        prog = _Progress(self.cfg.train.progress, -(-len(data) // self.cfg.train.batch), 0, "eval", "batch")
        with torch.no_grad():
            for a in range(0, len(data), self.cfg.train.batch):
                idx = list(range(a, min(len(data), a + self.cfg.train.batch)))
                b = self._batch(data, idx)
                out = self.model(**b)
                tot += out.loss.item() * len(idx)
                n += len(idx)
                if self.classify:
                    correct += int((out.logits.argmax(-1) == b["labels"]).sum())
                prog.update()
        prog.close()
        self.model.train(was)
        res = {"eval_loss": tot / max(1, n)}
        if self.classify:
            res["eval_acc"] = correct / max(1, n)
        return res

    # --- LSP projector fitting --------------------------------------------------------------------------------------
    def calibration_grads(self, deadline: Optional[float] = None) -> list:
        """Full ∇W of every LSP layer accumulated over the held-out calibration batches (those that start before
        ``deadline``, at least one)."""
        data, b = self.splits.calib, self.cfg.train.batch
        nb = min(self.cfg.lsp.calib_batches, max(1, len(data) // b))
        batches = (self._batch(data, list(range(k * b, min(len(data), (k + 1) * b)))) for k in range(nb))
        return calibration_grads(self.model, self.layers, batches, nb, self.scheduler, self.cfg.train.progress,
                                 deadline)

    def projection_errors(self, grads=None) -> list[float]:
        from .projector import estimation_error

        grads = grads if grads is not None else self.calibration_grads()
        return [estimation_error(lay.P, lay.Q, g) for lay, g in zip(self.layers, grads)]

    def fit_projectors(self, initial: bool = False, grads: Optional[list] = None) -> dict[str, Any]:
        """The initial fit or a periodic check (:func:`fit_layer_projectors`) on the calibration gradients, both
        within ``lsp.fit_budget_s`` (:func:`fit_deadlines`)."""
        calib_end, end = fit_deadlines(self.cfg.lsp, self.device.type)
        grads = grads if grads is not None else self.calibration_grads(calib_end)
        info = fit_layer_projectors(self.layers, grads, self.cfg.lsp, self.device.type, initial=initial,
                                    scheduler=self.scheduler, progress=self.cfg.train.progress, end=end)
        self.refits += info["refit"]
        return info

    # --- the loop ---------------------------------------------------------------------------------------------------
    def _check_finite(self) -> None:
        import torch

        names = {id(p): n for n, p in self.model.named_parameters()}
        for p in self.trainable:
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                name = names.get(id(p), "?").rsplit(".", 1)[0]
                raise NonFiniteGradientError(name, "gradient holds NaN/inf; step skipped, last checkpoint kept")

    def train_step(self) -> float:
        """One optimizer step (``accum`` micro-batches); returns the mean micro-batch loss."""
        tc = self.cfg.train
        data = self.splits.train
        total = 0.0
        for k in range(tc.accum):
            idx = batch_indices(len(data), tc.batch, self.step, k, tc.accum, tc.seed)
            if self.scheduler is not None:
                self.scheduler.begin_step(final_micro_batch=(k == tc.accum - 1))
            loss = self._loss(self._batch(data, idx))
            if self._ds is not None:  # DeepSpeed scales by the accumulation steps and updates at their boundary
                self._ds.backward(loss)
                self._ds.step()
            else:
                loss = loss / tc.accum
                loss.backward()
            total += loss.item() / (tc.accum if self._ds is not None else 1)
        if self.scheduler is not None:
            self.scheduler.end_step()
        if self.method != "lsp":
            self._check_finite()
        elif self.opt is not None:
            self._check_finite()
        if self._zero is not None:
            self._zero.step()
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        self.step += 1
        lc = self.cfg.lsp
        if self.method == "lsp" and lc.check_interval and self.step % lc.check_interval == 0 \
                and self.step < tc.steps:
            self.fit_projectors(initial=False)
        return total

    def train(self) -> dict[str, Any]:
        """Run to ``train.steps``; returns a summary. On a bad gradient or an interrupt: cleanup, metrics kept,
        checkpoint untouched, the error re-raised."""
        tc = self.cfg.train
        t0 = time.perf_counter()
        prog = _Progress(tc.progress, tc.steps, self.step, f"{self.method}")
        try:
            while self.step < tc.steps:
                ts = time.perf_counter()
                loss = self.train_step()
                if not math.isfinite(loss):
                    raise NonFiniteGradientError("loss", f"loss is {loss} at step {self.step}")
                row = {"step": self.step, "loss": loss, "step_s": time.perf_counter() - ts}
                if tc.eval_every and self.step % tc.eval_every == 0 and self.step < tc.steps:
                    row.update(self.evaluate())
                self.history.append(row)
                prog.update(loss)
                if tc.checkpoint_every and self.step % tc.checkpoint_every == 0 and self.step < tc.steps:
                    self.save_checkpoint()
            wall = time.perf_counter() - t0
            ev = self.evaluate()
            if self.history:
                self.history[-1].update(ev)
            if self.cfg.out_dir:
                self.save_checkpoint()
        finally:
            prog.close()
            self._write_metrics()
        return {"method": self.method, "steps": self.step, "train_loss": self.history[-1]["loss"] if self.history
                else None, **ev, "wall_s": wall, "trainable_params": int(self.n_trainable), "refits": self.refits}

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
            self.scheduler = None
        if self._zero is not None:
            self._zero.close()
            self._zero = None
        if self._ds is not None:
            self._ds.close()
            self._ds = None

    # --- outputs ----------------------------------------------------------------------------------------------------
    def _write_metrics(self) -> None:
        if not self.cfg.out_dir or not self.history:
            return
        from shared_ir import atomic_write_text

        keys = sorted({k for r in self.history for k in r}, key=lambda k: (k != "step", k))
        buf = io.StringIO()
        w = csv.DictWriter(buf, keys)
        w.writeheader()
        w.writerows(self.history)
        atomic_write_text(os.path.join(self.cfg.out_dir, "metrics.csv"), buf.getvalue())
        plot_losses({self.method: self.history}, os.path.join(self.cfg.out_dir, "loss.png"))

    def _trainable_state(self) -> dict:
        names = {id(p): n for n, p in self.model.named_parameters()}
        return {names[id(p)]: p.detach().cpu().clone() for p in self.trainable}

    def save_checkpoint(self, path: Optional[str] = None) -> str:
        """Atomically write the state needed to continue exactly (weights that train, optimizer/offload states,
        projectors, step)."""
        import torch

        path = path or os.path.join(self.cfg.out_dir, CHECKPOINT)
        remove_stale_temps(os.path.dirname(os.path.abspath(path)), os.path.basename(path))
        if self.scheduler is not None:
            self.scheduler.flush()
        if self._zero is not None:
            self._zero.flush()
        state: dict[str, Any] = {"step": self.step, "method": self.method, "weights": self._trainable_state(),
                                 "history": self.history, "refits": self.refits, "rng": torch.get_rng_state(),
                                 "config": flat_config(self.cfg)}
        if self.opt is not None:
            state["opt"] = self.opt.state_dict()
        if self.scheduler is not None:
            state["lsp"] = {"sched": self.scheduler.state_dict(),
                            "proj": [(lay.P.state_dict(), lay.Q.state_dict()) for lay in self.layers]}
        if self._zero is not None:
            state["zero"] = self._zero.state_dict()
        from shared_ir import atomic_path

        with atomic_path(path) as tmp:
            torch.save(state, tmp)
        return path

    def load_checkpoint(self, path: str) -> None:
        """Continue from ``path``: refuses settings that differ from the checkpoint's and change training (unless
        ``train.resume_allow_changes`` lists them) and names the file when it is unreadable or does not fit."""
        state = read_checkpoint(path, self._fits)
        if not isinstance(state, dict) or "weights" not in state:
            raise CheckpointError(path, f"is not a checkpoint of this trainer{older_checkpoint_hint(path, self._fits)}")
        if state.get("method") != self.method:
            raise ModelError("train.method", f"checkpoint {path} was written by method {state.get('method')!r}",
                             self.method)
        saved = state.get("config")
        changes = resume_changes(saved if isinstance(saved, dict) else {}, self.cfg)
        if changes:
            diff = ", ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)
            names = ", ".join(k[6:] if k.startswith("train.") else k for k, _, _ in changes)
            raise ConfigError(changes[0][0], f"differs from checkpoint {path} ({diff}); resume with the checkpoint's "
                              f"values, use a new out_dir, or allow it: train.resume_allow_changes: [{names}]",
                              changes[0][2])
        bad = self._fits(state)
        if bad:
            raise CheckpointError(path, f"does not fit this model: {bad}{older_checkpoint_hint(path, self._fits)}")
        try:
            self._restore(state)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(path, f"cannot be restored ({type(e).__name__}: {e})"
                                        f"{older_checkpoint_hint(path, self._fits)}") from None

    def _fits(self, state: Any) -> str:
        """Why ``state`` is no checkpoint of this model ('' if it is one)."""
        if not isinstance(state, dict) or not {"step", "weights", "history", "rng"} <= set(state):
            return "not a checkpoint of this trainer (no step/weights/history/rng)"
        if state.get("method") != self.method:
            return f"written by method {state.get('method')!r}, this run is {self.method!r}"
        params = dict(self.model.named_parameters())
        for n, t in state["weights"].items():
            if n not in params:
                return f"no parameter {n} in the model"
            if tuple(t.shape) != tuple(params[n].shape):
                return (f"weights.{n} has shape {tuple(t.shape)}, the model's is {tuple(params[n].shape)} "
                        "(a checkpoint of another model size?)")
        return ""

    def _restore(self, state: dict) -> None:
        import torch

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, t in state["weights"].items():
                params[n].copy_(t.to(params[n].device))
        if self.opt is not None and "opt" in state:
            self.opt.load_state_dict(state["opt"])
            self._apply_hparams()
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["lsp"]["sched"])
            for lay, (p, q) in zip(self.layers, state["lsp"]["proj"]):
                lay.P.load_state_dict(p)
                lay.Q.load_state_dict(q)
        if self._zero is not None:
            self._zero.load_state_dict(state["zero"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.refits = int(state.get("refits", 0))
        torch.set_rng_state(state["rng"])

    def _apply_hparams(self) -> None:
        # a loaded optimizer state carries the checkpoint's hyper-parameters: this run's (allowed) values win
        tc = self.cfg.train
        for g in self.opt.param_groups:
            g.update(lr=tc.lr, betas=tc.betas, eps=tc.eps)
            if "rank" in g:
                g.update(rank=tc.galore_rank, update_proj_gap=tc.galore_update_gap, scale=tc.galore_scale)


def fit_deadlines(lc, device_type: str) -> tuple[Optional[float], Optional[float]]:
    """(end of the calibration batches, end of the module fits) as ``time.perf_counter()`` values for a projector
    fit starting now within ``lc.fit_budget_s`` (the calibration gets half; (None, None) without a limit)."""
    budget = lc.fit_budget_for(device_type)
    if budget <= 0:
        return None, None
    now = time.perf_counter()
    return now + budget / 2, now + budget


def calibration_grads(model, layers: list, batches, n: int, scheduler=None, progress: bool = False,
                      deadline: Optional[float] = None) -> list:
    """Full ∇W of every LSP layer of ``model`` accumulated over ``batches`` (``n`` dicts of model inputs with
    labels; those that start before ``deadline``, at least one), pending updates of ``scheduler`` applied first; a
    progress line per batch."""
    if scheduler is not None:
        scheduler.flush()
    for lay in layers:
        lay.calibrating, lay.calib_grad = True, None
    prog = _Progress(progress, n, 0, "calibration gradients", "batch")
    try:
        for k, batch in enumerate(batches):
            if k and deadline is not None and time.perf_counter() >= deadline:
                prog.say(f"{k} of {n} batches within the fit budget")
                break
            model(**batch).loss.backward()
            prog.update()
        grads = [lay.calib_grad for lay in layers]
    finally:
        prog.close()
        for lay in layers:
            lay.calibrating, lay.calib_grad = False, None
        for p in model.parameters():
            p.grad = None
    return grads


def fit_layer_projectors(layers: list, grads: list, lc, device_type: str, initial: bool = True, scheduler=None,
                         progress: bool = False, end: Optional[float] = None) -> dict[str, Any]:
    """Initial fit (per module by default; or one fit per weight shape on up to 3 layers' calibration gradients,
    values copied to every layer of that shape) or a periodic check (refit a layer only if its error exceeds
    ``lc.alpha``, re-projecting its Adam moments in ``scheduler`` onto the new subspace). Bounded by
    ``end`` (a ``time.perf_counter()`` value; default: ``lc.fit_budget_s`` from now, 30 s on the CPU), with
    progress lines. ``info["refit"]``: layers refitted."""
    from .projector import estimation_error, reproject_moments

    info: dict[str, Any] = {"refit": 0}
    if initial and lc.fit_per_module:
        # each module on its own calibration gradient: the subspaces of different layers' gradients differ
        with _fitter(lc, device_type, len(layers), progress, end) as fit:
            info["module_errors"] = [fit(lay, [g]) for lay, g in zip(layers, grads)]
        return info
    if initial:
        by_shape: dict[tuple, list[int]] = {}
        for i, lay in enumerate(layers):
            by_shape.setdefault(tuple(lay.weight.shape), []).append(i)
        errs = []
        with _fitter(lc, device_type, len(by_shape), progress, end) as fit:
            for ids in by_shape.values():
                pick = ids if len(ids) <= 3 else [ids[0], ids[len(ids) // 2], ids[-1]]
                lead = layers[pick[0]]
                errs.append(fit(lead, [grads[i] for i in pick]))
                for i in ids:
                    if layers[i].P.idx.equal(lead.P.idx) and layers[i].Q.idx.equal(lead.Q.idx):
                        layers[i].P.set_values(lead.P.val)
                        layers[i].Q.set_values(lead.Q.val)
                    else:  # different sparsity pattern: fit on its own
                        fit(layers[i], [grads[i]], count=False)
        info["shape_errors"] = errs
        return info
    over = [i for i, (lay, g) in enumerate(zip(layers, grads)) if estimation_error(lay.P, lay.Q, g) > lc.alpha]
    with _fitter(lc, device_type, len(over), progress, end, "projector refit") as fit:
        for i in over:
            P0, Q0 = layers[i].P.clone(), layers[i].Q.clone()
            fit(layers[i], [grads[i]])
            st = scheduler.states[i]
            reproject_moments(st.m, st.v, layers[i].P, P0, layers[i].Q, Q0)
    info["refit"] = len(over)
    return info


@contextlib.contextmanager
def _fitter(lc, device_type: str, n: int, progress: bool, end: Optional[float], label: str = "projector fit"):
    """A function fitting one layer's projectors within its share of the time up to ``end`` (an even share of the
    time left over the ``n`` modules left; default: the fit budget from now), with a progress line."""
    from .projector import fit_projectors

    budget = lc.fit_budget_for(device_type)
    if end is None and budget > 0:
        end = time.perf_counter() + budget
    prog = _Progress(progress, n, 0, label, "module")
    left = [n]

    def fit(lay, gs: list, count: bool = True) -> tuple[float, float]:
        now = time.perf_counter()
        deadline = None if end is None else now + max(0.0, end - now) / max(1, left[0])
        err = fit_projectors(lay.P, lay.Q, gs, lc.fit_steps, lc.fit_lr, deadline=deadline)
        if count:
            left[0] -= 1
            cut = "" if end is None or time.perf_counter() < end else f" (budget of {budget:g} s reached)"
            prog.update(note=f"error {err[0]:.3f} -> {err[1]:.3f}{cut}")
        return err

    try:
        yield fit
    finally:
        prog.close()


def remove_stale_temps(folder: str, *names: str) -> list[str]:
    """Temp files that an interrupted write of the trainer's outputs (``names``, default the checkpoint,
    metrics.csv, loss.png) left in ``folder``, removed (:func:`shared_ir.atomic.remove_stale_temps`)."""
    from shared_ir.atomic import remove_stale_temps as remove

    return remove(folder, names or (CHECKPOINT, "metrics.csv", "loss.png"))


def read_checkpoint(path: str, fits=None) -> Any:
    """The checkpoint at ``path``; :class:`CheckpointError` naming the file (and an older good checkpoint of the
    same folder that ``fits`` accepts) when it cannot be read."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # truncated zip, empty file, garbage: torch raises many kinds
        raise CheckpointError(path, f"cannot be read ({type(e).__name__}: {e}); the file is damaged or no torch "
                                    f"checkpoint{older_checkpoint_hint(path, fits)}") from None


def older_checkpoint_hint(path: str, fits=None) -> str:
    """'; resume from X ...' naming the newest other ``*.pt`` of the folder that loads (and ``fits``), or ''."""
    import torch

    folder = os.path.dirname(os.path.abspath(path))
    try:
        cands = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".pt") and not f.startswith(".")]
    except OSError:
        return ""
    cands = [c for c in cands if os.path.abspath(c) != os.path.abspath(path)]
    for c in sorted(cands, key=os.path.getmtime, reverse=True):
        try:
            state = torch.load(c, map_location="cpu", weights_only=False)
        except Exception:
            continue
        if isinstance(state, dict) and "step" in state and (fits is None or not fits(state)):
            return f"; {c} (step {state['step']}) is a good checkpoint: move it to {path} to resume from it"
    return ""


class _ZeroOffload:
    """ZeRO-Offload style: the full gradients go to the host, CPU Adam updates fp32 master weights, the new weights
    come back. ``delayed``: the CPU update of step t overlaps step t+1 (one-step stale weights, as DeepSpeed's
    delayed parameter update)."""

    def __init__(self, params: list, lr: float, betas, eps: float, delayed: bool):
        import torch

        from .cpu_adam import CPUAdam

        self.params, self.lr, self.delayed = params, float(lr), delayed
        pin = any(p.device.type == "cuda" for p in params)
        self.master = [p.detach().float().cpu().contiguous().clone() for p in params]
        if pin:
            self.master = [m.pin_memory() for m in self.master]
        self.m = [torch.zeros_like(x) for x in self.master]
        self.v = [torch.zeros_like(x) for x in self.master]
        self.host_g = [torch.zeros_like(x) for x in self.master]
        self.adam = CPUAdam(betas, eps)
        self.t = 0
        self._job = None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="zero_host")

    def _cpu_update(self) -> None:
        self.t += 1
        for p, m, v, g in zip(self.master, self.m, self.v, self.host_g):
            self.adam.param(p.view(-1), g.view(-1), m.view(-1), v.view(-1), self.t, self.lr)

    def _upload(self) -> None:
        import torch

        with torch.no_grad():
            for p, w in zip(self.params, self.master):
                p.copy_(w, non_blocking=True)

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for p, g in zip(self.params, self.host_g):  # d2h of the full gradients
                g.copy_(p.grad if p.grad is not None else torch.zeros_like(p))
                p.grad = None
        if not self.delayed:
            self._cpu_update()
            self._upload()
            return
        self.flush()  # the previous step's update lands now (its weights were one step stale during this step)
        self._job = self._worker.submit(self._cpu_update)

    def flush(self) -> None:
        if self._job is not None:
            job, self._job = self._job, None
            job.result()
            self._upload()

    def close(self) -> None:
        self.flush()
        self._worker.shutdown(wait=True)
        self.adam.close()

    def state_dict(self) -> dict:
        self.flush()
        return {"t": self.t, "master": [x.clone() for x in self.master], "m": [x.clone() for x in self.m],
                "v": [x.clone() for x in self.v]}

    def load_state_dict(self, sd: dict) -> None:
        self.t = int(sd["t"])
        for dst, src in ((self.master, sd["master"]), (self.m, sd["m"]), (self.v, sd["v"])):
            for a, b in zip(dst, src):
                a.copy_(b)
        self._upload()


class _Progress:
    """A rich progress bar on a terminal; elsewhere (a log file, CI) a line every :attr:`LOG_EVERY_S` seconds and
    at the last item, so that a phase of minutes (training steps, calibration batches, projector fits) never sits
    silent. Nothing when disabled."""

    LOG_EVERY_S = 5.0

    def __init__(self, enabled: bool, total: int, done: int, label: str, unit: str = "step"):
        import sys

        self.p = None
        self.enabled, self.total, self.done, self.label, self.unit = enabled, total, done, label, unit
        self.t0 = self.last = time.perf_counter()
        if enabled and total > 0 and sys.stderr.isatty():
            from rich.progress import Progress

            self.p = Progress(transient=True)
            self.p.start()
            self.task = self.p.add_task(label, total=total, completed=done)

    def update(self, loss: Optional[float] = None, note: str = "") -> None:
        import sys

        self.done += 1
        msg = ", ".join(x for x in (f"loss {loss:.4f}" if loss is not None else "", note) if x)
        if self.p is not None:
            self.p.update(self.task, advance=1, description=f"{self.label}: {msg}" if msg else self.label)
            return
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.LOG_EVERY_S or self.done == self.total):
            print(f"  {self.label}: {self.unit} {self.done}/{self.total}{', ' + msg if msg else ''}, "
                  f"{now - self.t0:.0f} s", file=sys.stderr, flush=True)
            self.last = now

    def say(self, msg: str) -> None:
        """One line now (when enabled)."""
        import sys

        if self.enabled:
            print(f"  {self.label}: {msg}, {time.perf_counter() - self.t0:.0f} s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()
            self.p = None


def plot_losses(histories: dict[str, list[dict]], path: str) -> None:
    """Training-loss curves of one or several runs as a PNG (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, hist in histories.items():
        ax.plot([r["step"] for r in hist], [r["loss"] for r in hist], label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    from shared_ir import atomic_savefig

    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def run(cfg: RunConfig, **kw) -> dict[str, Any]:
    """Build, train, close; the summary."""
    tr = Trainer(cfg, **kw)
    try:
        return tr.train()
    finally:
        tr.close()


__all__ = ["Trainer", "run", "calibration_grads", "fit_deadlines", "fit_layer_projectors", "plot_losses", "CHECKPOINT",
           "linear_weight", "read_checkpoint", "remove_stale_temps"]
