"""LSP-Offload inside a Hugging Face ``transformers.Trainer``: an optimizer and a callback, so an existing script
switches to LSP by passing two objects::

    opt, cb = LSPOffload.for_model(model, d=64, r=4, lr=3e-4)
    Trainer(model=model, args=args, train_dataset=ds, optimizers=(opt, None), callbacks=[cb]).train()

:class:`LSPOffload` wraps the model's target linears in place (frozen weights, compressed gradients Pᵀ∇W Q to a
CPU Adam, layer-wise updates through :class:`~offload_trainer.schedule.LayerwiseScheduler`). The optimizer
(:meth:`LSPOffload.optimizer`) drives the schedule: the Trainer calls its ``train()`` before each micro-batch (the
last micro-batch of a step hands the accumulated gradient on: accelerate's ``sync_gradients``) and ``step()``
after the backward, by which time every layer's update has landed; its param groups carry the learning rate, so
the Trainer's LR schedule applies. Its ``state_dict`` holds the Adam moments, the projectors and their fit state,
so the Trainer's checkpoints (``optimizer.pt``) resume LSP exactly where it stopped. The callback fits the
projectors on the first training batches when training starts (unless a checkpoint restored them) and runs the
periodic refit checks (``lsp.check_interval``). ``max_grad_norm`` clips only a classifier head's gradients: the
compressed gradients never exist as ``.grad``. :meth:`LSPOffload.unwrap` gives back a plain model to save.
"""
from __future__ import annotations

from typing import Any, Optional

from .errors import ConfigError, DataError, ModelError

# what LSPOffload takes besides d, r, lr: the lsp section, Adam's betas/eps, the layers that train, the seed of the
# projectors' pattern; steps, batches and the schedule come from the TrainingArguments
_OPTIONS = {"alpha", "check_interval", "fit_steps", "fit_lr", "calib_batches", "initial_fit", "fit_per_module",
            "weight_dtype", "fit_budget_s", "overlap", "adam_threads", "betas", "eps", "target_modules", "lsp"}


class LSPOffload:
    """LSP-Offload state of one model for a ``transformers.Trainer``: build it after the model is complete, pass
    :attr:`optimizer` as ``optimizers=(optimizer, None)`` and :attr:`callback` in ``callbacks``.

    ``device`` (``auto``: cuda if available) is where the model is moved before wrapping; it must be the
    TrainingArguments' device. Options are the ``lsp`` config fields (``fit_steps``, ``check_interval``,
    ``weight_dtype``, ``fit_budget_s``, ...), ``betas``, ``eps`` and ``target_modules``; errors name the field.
    """

    def __init__(self, model, *, d: int = 64, r: int = 4, lr: float = 3e-4, device: Optional[str] = None,
                 progress: bool = True, **options):
        import torch

        from .api import linear_kinds, run_config
        from .lsp_linear import wrap_model
        from .models import head_parameters, is_classifier
        from .schedule import LayerwiseScheduler

        for k in options:
            if k not in _OPTIONS:
                raise ConfigError(k, f"not an option of LSPOffload (steps, batch size and the LR schedule come from "
                                     f"the TrainingArguments; options: {', '.join(sorted(_OPTIONS))})")
        if not isinstance(model, torch.nn.Module):
            raise ConfigError("model", f"must be a torch.nn.Module (a Hugging Face model), got {type(model).__name__}")
        self.cfg = cfg = run_config("lsp", d=d, r=r, lr=lr, progress=progress, device=device, **options)
        dev = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(dev)
        self.model = model.to(self.device)
        self.kinds = linear_kinds(model, cfg.model.target_modules)
        self._grad_flags = {n: p.requires_grad for n, p in model.named_parameters()}
        lc = cfg.lsp
        wdt = getattr(torch, lc.weight_dtype_for(self.device.type))
        self.layers = wrap_model(model, cfg.model.target_modules, lc.d, lc.r, lc.seed, wdt)
        self.head = head_parameters(model) if is_classifier(model) else []
        for p in self.head:
            p.requires_grad_(True)
        self.scheduler = LayerwiseScheduler(self.layers, cfg.train.lr, cfg.train.betas, cfg.train.eps,
                                            overlap=lc.overlap, threads=lc.adam_threads)
        self.fitted = self.warned = False
        self.refits = 0
        self.calib: list[dict] = []
        opt_cls, cb_cls = _classes()
        self.optimizer = opt_cls(self)
        self.callback = cb_cls(self)

    @classmethod
    def for_model(cls, model, **kw) -> tuple[Any, Any]:
        """``(optimizer, callback)`` for ``transformers.Trainer(optimizers=(optimizer, None), callbacks=[callback])``;
        both carry the :class:`LSPOffload` as ``.offload``."""
        off = cls(model, **kw)
        return off.optimizer, off.callback

    # --- projectors --------------------------------------------------------------------------------------------------
    def calibration_batches(self, dataloader, batch: int) -> list[dict]:
        """The first ``lsp.calib_batches`` batches of ``dataloader``'s dataset in order, collated by its
        ``collate_fn`` (the RNG and the loader's state untouched), on the model's device."""
        import itertools

        import torch

        ds = getattr(dataloader, "dataset", None)
        collate = getattr(dataloader, "collate_fn", None)
        if ds is None or collate is None:
            raise DataError("train_dataset", "the Trainer gave the callback no train dataloader with a dataset")
        n = self.cfg.lsp.calib_batches * batch
        if hasattr(ds, "__len__") and hasattr(ds, "__getitem__"):
            items = [ds[i] for i in range(min(n, len(ds)))]
        else:
            items = list(itertools.islice(iter(ds), n))
        if not items:
            raise DataError("train_dataset", "holds no examples to fit the projectors on", 0)
        out = []
        for a in range(0, len(items), batch):
            b = collate(items[a:a + batch])
            out.append({k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in b.items()})
        return out

    def fit(self, initial: bool = True) -> dict:
        """Fit the projectors (``initial``) or check them and refit those above ``lsp.alpha`` on the calibration
        batches (:meth:`calibration_batches`, set by the callback)."""
        from .trainer import calibration_grads, fit_deadlines, fit_layer_projectors

        if not self.calib:
            raise DataError("train_dataset", "no calibration batches: pass the callback to the Trainer")
        was = self.model.training
        self.model.train()
        calib_end, end = fit_deadlines(self.cfg.lsp, self.device.type)
        try:
            grads = calibration_grads(self.model, self.layers, self.calib, len(self.calib), self.scheduler,
                                      self.cfg.train.progress, calib_end)
        except (AttributeError, TypeError) as e:
            if "loss" not in str(e):
                raise
            raise DataError("train_dataset", f"the model returned no loss on a calibration batch ({e}): the batches "
                                              "need labels (e.g. DataCollatorForLanguageModeling(mlm=False))") from None
        finally:
            self.model.train(was)
        info = fit_layer_projectors(self.layers, grads, self.cfg.lsp, self.device.type, initial=initial,
                                    scheduler=self.scheduler, progress=self.cfg.train.progress, end=end)
        self.fitted = True
        self.refits += info["refit"]
        return info

    # --- state ---------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Adam moments and steps of every layer, the projectors, whether they were fitted, the refits (tensors and
        plain values only: the Trainer reloads ``optimizer.pt`` with ``weights_only=True``)."""
        return {"sched": self.scheduler.state_dict(), "names": [lay.name for lay in self.layers],
                "proj": [(lay.P.state_dict(), lay.Q.state_dict()) for lay in self.layers],
                "fitted": self.fitted, "refits": self.refits}

    def load_state_dict(self, sd: dict) -> None:
        names = [lay.name for lay in self.layers]
        if list(sd.get("names", [])) != names:
            raise ModelError("optimizer", f"the checkpoint's LSP layers {list(sd.get('names', []))[:3]}... differ "
                                          f"from this model's {names[:3]}... ({len(names)} layers)")
        self.scheduler.load_state_dict(sd["sched"])
        for lay, (p, q) in zip(self.layers, sd["proj"]):
            lay.P.load_state_dict(p)
            lay.Q.load_state_dict(q)
        self.fitted, self.refits = bool(sd["fitted"]), int(sd["refits"])

    def unwrap(self):
        """The model with plain linears again (trained weights, original dtype and layout), the original
        requires_grad flags; ends this LSPOffload (pending updates land first)."""
        from .api import unwrap_model

        self.close()
        unwrap_model(self.model, self.kinds)
        for n, p in self.model.named_parameters():
            p.requires_grad_(self._grad_flags.get(n, True))
        return self.model

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
            self.scheduler = None


def _sync_gradients() -> bool:
    """Whether this micro-batch ends an optimizer step (accelerate's flag that transformers.Trainer sets before each
    micro-batch; True outside a Trainer)."""
    try:
        from accelerate.state import GradientState
    except ImportError:  # pragma: no cover - transformers.Trainer needs accelerate
        return True
    return bool(GradientState().sync_gradients)


_CLASSES: Optional[tuple] = None


def _classes() -> tuple:
    """(optimizer class, callback class), built on first use so that importing this module imports neither torch
    nor transformers."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = (_optimizer_class(), _callback_class())
    return _CLASSES


def _optimizer_class():
    import torch

    class LSPOptimizer(torch.optim.Optimizer):
        """The Trainer's optimizer: group 0 holds the LSP layers' anchors (its ``lr`` is η of W ← W − η P Δ Qᵀ),
        group 1 a classifier head (plain Adam)."""

        def __init__(self, off: LSPOffload):
            tc = off.cfg.train
            groups = [{"params": [lay.anchor for lay in off.layers], "kind": "lsp"}]
            if off.head:
                groups.append({"params": list(off.head), "kind": "head"})
            super().__init__(groups, {"lr": tc.lr, "betas": tc.betas, "eps": tc.eps})
            self.offload = off
            self._head = torch.optim.Adam(off.head, lr=tc.lr, betas=tc.betas, eps=tc.eps) if off.head else None
            self._new_step = True

        def train(self) -> None:
            """Before each micro-batch's forward (transformers.Trainer.training_step)."""
            off = self.offload
            sched = off.scheduler
            if self._new_step:  # this step's lr for every update of this step
                sched.lr = float(self.param_groups[0]["lr"])
                self._new_step = False
                if not off.fitted and off.cfg.lsp.initial_fit and not off.warned:
                    import warnings

                    warnings.warn("LSPOffload: training with unfitted (random) projectors; pass LSPOffload's "
                                  "callback to the Trainer (callbacks=[...]) to fit them first", stacklevel=2)
                    off.warned = True
            sched.begin_step(final_micro_batch=_sync_gradients())

        def eval(self) -> None:
            self.offload.scheduler.flush()

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            sched = self.offload.scheduler
            if self._new_step:  # step() without train(): a loop other than the Trainer's
                sched.lr = float(self.param_groups[0]["lr"])
            sched.end_step()
            sched.flush()  # every update of this step lands with this step's lr
            if self._head is not None:
                self._head.param_groups[0]["lr"] = self.param_groups[1]["lr"]
                self._head.step()
            self._new_step = True
            return loss

        def zero_grad(self, set_to_none: bool = True) -> None:
            if self._head is not None:
                self._head.zero_grad(set_to_none=set_to_none)

        def state_dict(self) -> dict:
            sd = super().state_dict()
            sd["lsp"] = self.offload.state_dict()
            if self._head is not None:
                sd["head"] = self._head.state_dict()
            return sd

        def load_state_dict(self, state_dict: dict) -> None:
            sd = dict(state_dict)
            lsp, head = sd.pop("lsp", None), sd.pop("head", None)
            super().load_state_dict(sd)
            if lsp is not None:
                self.offload.load_state_dict(lsp)
            if head is not None and self._head is not None:
                self._head.load_state_dict(head)

    return LSPOptimizer


def _callback_class():
    from transformers import TrainerCallback

    class LSPCallback(TrainerCallback):
        """Fits the projectors when training starts (unless restored from a checkpoint) and runs the periodic
        refit checks."""

        def __init__(self, off: LSPOffload):
            self.offload = off

        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
            off = self.offload
            lay = off.layers[0]
            if lay.weight.device != lay.P.device:
                raise ModelError("device", f"the model moved to {lay.weight.device} after LSPOffload wrapped it on "
                                           f"{lay.P.device}: pass device= (the TrainingArguments' device)")
            lc = off.cfg.lsp
            if (not off.fitted and lc.initial_fit) or lc.check_interval:
                off.calib = off.calibration_batches(train_dataloader, args.per_device_train_batch_size)
            if not off.fitted and lc.initial_fit:
                off.fit(initial=True)
            off.fitted = True

        def on_step_end(self, args, state, control, **kw):
            ci = self.offload.cfg.lsp.check_interval
            if ci and state.global_step % ci == 0 and state.global_step < state.max_steps:
                self.offload.fit(initial=False)

        def on_train_end(self, args, state, control, **kw):
            self.offload.scheduler.flush()

    return LSPCallback


__all__ = ["LSPOffload"]
