"""Fine-tuning a user's own model in three lines: ``finetune(model, dataset, method="lsp")``.

The model is any ``torch.nn.Module`` with Hugging Face's calling convention (``model(**batch).loss``; a causal LM or
a sequence classifier); the dataset is token ids in one of the usual shapes (:func:`token_data`). ``finetune``
builds and validates a :class:`~offload_trainer.config.RunConfig` (errors name the field) and runs the package's
:class:`~offload_trainer.trainer.Trainer` on the model, so checkpoints and resume work as for any run.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Optional

from .config import LSPConfig, RunConfig, TrainConfig, from_dict
from .errors import ConfigError, DataError, ModelError

DEFAULT_LRS = {"lsp": 3e-4, "full_ft": 1e-4, "zero_offload": 1e-4, "zero_offload_delayed": 1e-4, "lora": 1e-3,
               "galore": 1e-3}
"""Each method's learning rate when ``lr`` is not given (the benchmark's, on SmolLM2-135M)."""
_TRAIN = {f.name for f in dataclasses.fields(TrainConfig)} - {"method"}
_LSP = {f.name for f in dataclasses.fields(LSPConfig)} - _TRAIN  # `seed` is train.seed; lsp.seed via lsp={...}
_MODEL = {"target_modules", "gradient_checkpointing"}


class Finetuned(NamedTuple):
    """What :func:`finetune` returns: unpack it (``model, summary = finetune(...)``) or use the fields."""

    model: Any
    """The fine-tuned model: a plain model of the input's structure (LSP linears and LoRA adapters merged back), on
    the training device; the input model is left unchanged."""
    summary: dict
    """The run's summary: method, steps, train_loss, eval_loss (eval_acc), wall_s, setup_s, trainable_params,
    refits, eval_on and history (one row per step: step, loss, step_s)."""


def finetune(model, dataset, method: str = "lsp", *, tokenizer=None, steps: Optional[int] = None, batch: int = 4,
             lr: Optional[float] = None, d: int = 64, r: int = 4, out_dir: Optional[str] = None,
             device: Optional[str] = None, eval_dataset=None, progress: bool = True,
             max_length: Optional[int] = None, **overrides) -> Finetuned:
    """Fine-tune ``model`` on ``dataset`` with ``method`` (one of :data:`~offload_trainer.config.METHODS`).

    ``steps`` defaults to one pass over the data; ``lr`` to :data:`DEFAULT_LRS` of the method; ``d``/``r`` are
    LSP's subspace size and non-zeros per projector row. ``overrides`` are fields of the ``train``, ``lsp`` or
    ``model`` config sections by name (``fit_steps=20``, ``accum=2``, ``weight_dtype="bfloat16"``,
    ``target_modules=[...]``), or whole sections (``lsp={"seed": 1}``). With ``out_dir`` the run writes
    metrics.csv, loss.png and checkpoint.pt there, and a later call with the same out_dir resumes from it.
    Without ``eval_dataset``, eval_loss is measured on the first training examples (``summary["eval_on"]``).
    The projectors are fitted on the first ``lsp.calib_batches`` training batches.
    """
    import time

    import torch

    from .data import Splits
    from .models import is_classifier
    from .trainer import Trainer

    if not isinstance(model, torch.nn.Module):
        raise ConfigError("model", f"must be a torch.nn.Module (a Hugging Face model), got {type(model).__name__}")
    classify = is_classifier(model)
    pad = _pad_id(model, tokenizer)
    train = token_data(dataset, tokenizer, classify, "dataset", max_length, pad, _vocab(model))
    ev = None if eval_dataset is None else token_data(eval_dataset, tokenizer, classify, "eval_dataset",
                                                      max_length, pad, _vocab(model))
    if steps is None:  # one pass over the data (a bad batch/accum is named by the config below)
        per_step = [batch, overrides.get("accum", 1)]
        ok = all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in per_step)
        steps = max(1, len(train) // (per_step[0] * per_step[1])) if ok else 1
    if lr is None:
        lr = DEFAULT_LRS.get(method, 1e-4) if isinstance(method, str) else 1e-4
    cfg = run_config(method, steps=steps, batch=batch, lr=lr, d=d, r=r, progress=progress, out_dir=out_dir,
                     device=device, **overrides)
    head = min(len(train), cfg.lsp.calib_batches * cfg.train.batch)
    calib = train.subset(0, head)
    if ev is None:
        ev = train.subset(0, min(len(train), max(16, cfg.train.batch)))
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(
        cfg.data, source=f"finetune:{type(dataset).__name__}", seq_len=int(train.input_ids.shape[1]),
        max_examples=len(train), eval_examples=len(ev), calib_examples=len(calib)))
    t0 = time.perf_counter()
    tr = Trainer(cfg, model=model, splits=Splits(train=train, eval=ev, calib=calib))
    try:
        setup_s = time.perf_counter() - t0
        summary = tr.train()
    finally:
        tr.close()
    summary.update(setup_s=setup_s, eval_on="eval_dataset" if eval_dataset is not None else "train",
                   history=list(tr.history))
    return Finetuned(plain_model(tr.model, model, cfg), summary)


def run_config(method: str, *, out_dir: Optional[str] = None, device: Optional[str] = None, **kw) -> RunConfig:
    """A validated :class:`RunConfig` from keyword arguments: each a field of ``train``, ``lsp`` or ``model`` by
    its name (``seed`` is ``train.seed``), or a whole ``train``/``lsp`` section as a mapping; an unknown name is
    a :class:`ConfigError` naming it."""
    sec: dict[str, dict] = {"train": {"method": method}, "lsp": {}, "model": {}}
    for k, v in kw.items():
        if k in ("train", "lsp"):
            if not isinstance(v, Mapping):
                raise ConfigError(k, f"must be a mapping of {k} fields, got {v!r}", v)
            sec[k].update(v)
            continue
        where = "train" if k in _TRAIN else "lsp" if k in _LSP else "model" if k in _MODEL else None
        if where is None:
            raise ConfigError(k, f"unknown argument (expected a field of train, lsp or model: "
                                 f"{', '.join(sorted(_TRAIN | _LSP | _MODEL))})", v)
        sec[where][k] = v
    sec["model"] = {"source": "user", **sec["model"]}
    return from_dict({**sec, "out_dir": out_dir, "device": "auto" if device is None else device})


# --- data ------------------------------------------------------------------------------------------------------
def token_data(data, tokenizer=None, classify: bool = False, name: str = "dataset", max_length: Optional[int] = None,
               pad_id: int = 0, vocab: Optional[int] = None):
    """:class:`~offload_trainer.data.TokenData` from a dataset: a list (or torch ``Dataset``, or ``datasets.Dataset``)
    of examples, each a dict with ``input_ids`` (and optionally ``attention_mask``, ``labels``/``label``) or with
    ``text``, a string, or a list/1-D tensor of token ids; or one mapping of columns (a tokenizer's batch output).
    Text needs ``tokenizer``. Examples are right-padded with ``pad_id`` to the longest (``max_length`` truncates);
    a classifier needs an integer label per example, a causal LM's labels (optional) are per token. Errors name
    the example and field (``dataset[3].input_ids``)."""
    import torch

    from .data import TokenData

    if isinstance(data, TokenData):
        return data
    rows = _rows(data, name)
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                   or max_length < 1):
        raise ConfigError("max_length", f"must be an integer >= 1 or None, got {max_length!r}", max_length)
    ids, masks, labels = [], [], []
    for i, row in enumerate(rows):
        t, m, lab = _example(row, f"{name}[{i}]", tokenizer, classify)
        if max_length is not None:
            t, m = t[:max_length], m[:max_length]
            lab = lab[:max_length] if lab is not None and not classify else lab
        if vocab is not None and int(t.max()) >= vocab:
            raise DataError(f"{name}[{i}].input_ids", f"token id {int(t.max())} >= the model's vocabulary ({vocab})",
                            int(t.max()))
        ids.append(t)
        masks.append(m)
        labels.append(lab)
    n, L = len(ids), max(len(t) for t in ids)
    out_ids = torch.full((n, L), pad_id, dtype=torch.long)
    out_mask = torch.zeros(n, L, dtype=torch.long)
    for i, (t, m) in enumerate(zip(ids, masks)):
        out_ids[i, :len(t)], out_mask[i, :len(t)] = t, m
    if classify:
        return TokenData(out_ids, out_mask, torch.tensor(labels, dtype=torch.long))
    if all(lab is None for lab in labels):
        return TokenData(out_ids, out_mask, None)
    out_lab = torch.full((n, L), -100, dtype=torch.long)
    for i, (t, m, lab) in enumerate(zip(ids, masks, labels)):
        out_lab[i, :len(t)] = torch.where(m.bool(), t, -100) if lab is None else lab
    return TokenData(out_ids, out_mask, out_lab)


def _rows(data, name: str) -> list:
    if data is None or isinstance(data, (str, bytes)):
        raise ConfigError(name, f"must be a list of examples, a torch Dataset or a datasets.Dataset, got "
                                f"{type(data).__name__}")
    if isinstance(data, Mapping):  # columns: {"input_ids": (N, L), ...}
        cols = {k: v for k, v in data.items() if k in ("input_ids", "attention_mask", "labels", "label", "text")}
        if "input_ids" not in cols and "text" not in cols:
            raise DataError(f"{name}.input_ids", "a mapping of columns needs 'input_ids' (or 'text')", list(data))
        n = len(cols.get("input_ids", cols.get("text")))
        rows = [{k: v[i] for k, v in cols.items()} for i in range(n)]
    elif hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        rows = [data[i] for i in range(len(data))]
    elif hasattr(data, "__iter__"):
        rows = list(data)
    else:
        raise ConfigError(name, f"must be a list of examples, a torch Dataset or a datasets.Dataset, got "
                                f"{type(data).__name__}")
    if not rows:
        raise DataError(name, "holds no examples", 0)
    return rows


def _example(row, path: str, tokenizer, classify: bool):
    """(ids, mask, label) of one example: 1-D long tensors, the label an int (classifier), a 1-D tensor or None."""
    import torch

    label = None
    if isinstance(row, Mapping):
        label = row.get("labels")
        if label is None and classify:  # datasets' classification convention; a causal LM ignores it
            label = row.get("label")
        if "input_ids" in row:
            ids, key = row["input_ids"], "input_ids"
        elif "text" in row:
            ids, key = _encode(row["text"], tokenizer, f"{path}.text"), "text"
        else:
            raise DataError(path, f"an example needs 'input_ids' or 'text', got keys {sorted(map(str, row))}")
        mask = row.get("attention_mask")
    else:
        ids, key, mask = (_encode(row, tokenizer, path), "", None) if isinstance(row, str) else (row, "", None)
    where = f"{path}.{key}" if key else path
    t = _ids(ids, where)
    m = torch.ones_like(t) if mask is None else _ids(mask, f"{path}.attention_mask", mask=True)
    if len(m) != len(t):
        raise DataError(f"{path}.attention_mask", f"has {len(m)} entries for {len(t)} tokens", len(m))
    if classify:
        if isinstance(label, torch.Tensor) and label.numel() == 1:
            label = label.item()
        if isinstance(label, bool) or not isinstance(label, int):
            raise DataError(f"{path}.labels", f"a sequence classifier needs an integer label per example ('labels' "
                                              f"or 'label'), got {label!r}", label)
        return t, m, label
    if label is not None:
        label = _ids(label, f"{path}.labels", signed=True)
        if len(label) != len(t):
            raise DataError(f"{path}.labels", f"has {len(label)} entries for {len(t)} tokens", len(label))
    return t, m, label


def _ids(x, path: str, signed: bool = False, mask: bool = False):
    """A 1-D long tensor of token ids (labels: ``signed``, -100 allowed; an attention ``mask``: 0/1 of any dtype)."""
    import torch

    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as e:
        raise DataError(path, f"must be a sequence of token ids ({e})", repr(x)[:80]) from None
    if t.dim() == 2 and t.shape[0] == 1:  # a tokenizer's return_tensors="pt" output of one example
        t = t[0]
    if mask and t.dim() == 1 and len(t) and bool(((t == 0) | (t == 1)).all()):
        return t.long()
    if t.dim() != 1 or len(t) == 0 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise DataError(path, f"must be a non-empty 1-D sequence of integers, got {repr(x)[:80]}", repr(x)[:80])
    t = t.long()
    if not signed and int(t.min()) < 0:
        raise DataError(path, f"token ids must be >= 0, got {int(t.min())}", int(t.min()))
    return t


def _encode(text, tokenizer, path: str) -> list:
    if not isinstance(text, str):
        raise DataError(path, f"must be a string, got {type(text).__name__}", repr(text)[:80])
    if tokenizer is None:
        raise ConfigError("tokenizer", f"{path} is text: pass tokenizer= (a Hugging Face tokenizer) or token ids")
    return list(tokenizer.encode(text))


def _pad_id(model, tokenizer) -> int:
    for src in (tokenizer, getattr(model, "config", None)):
        for k in ("pad_token_id", "eos_token_id"):
            v = getattr(src, k, None)
            if isinstance(v, int) and v >= 0:
                return v
    return 0


def _vocab(model) -> Optional[int]:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return getattr(emb, "num_embeddings", None)


# --- the model back ----------------------------------------------------------------------------------------------
def linear_kinds(model, targets) -> dict[str, tuple[bool, Any]]:
    """``{name: (is a GPT-2 Conv1D, weight dtype)}`` of the target linears: what :func:`unwrap_model` rebuilds."""
    from .lsp_linear import find_target_linears, linear_weight

    found = find_target_linears(model, targets)
    return {n: (type(m).__name__ == "Conv1D", linear_weight(m)[0].dtype) for n, m in found}


def unwrap_model(model, kinds: dict):
    """Replace each LSP linear of ``model`` named in ``kinds`` (:func:`linear_kinds` of the model before wrapping)
    by a plain ``nn.Linear`` (or GPT-2 ``Conv1D``) holding its trained weight in the original dtype; in place."""
    import torch

    from .lsp_linear import lsp_linear_class

    cls = lsp_linear_class()
    for name, (conv1d, dtype) in kinds.items():
        lay = model.get_submodule(name)
        if not isinstance(lay, cls):
            continue
        w = lay.weight.detach().to(dtype)
        bias = None if lay.bias is None else lay.bias.detach().to(dtype)
        with torch.device("meta"):
            if conv1d:
                from transformers.pytorch_utils import Conv1D

                new = Conv1D(lay.out_features, lay.in_features)
            else:
                new = torch.nn.Linear(lay.in_features, lay.out_features, bias=bias is not None)
        new.weight = torch.nn.Parameter(w.t().contiguous() if conv1d else w)
        if conv1d or bias is not None:
            new.bias = torch.nn.Parameter(torch.zeros(lay.out_features, dtype=dtype, device=w.device)
                                          if bias is None else bias)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, new)
    return model


def plain_model(trained, original, cfg: RunConfig):
    """``trained`` (a Trainer's model) as a plain model like ``original``: LSP linears unwrapped, LoRA merged, the
    original's requires_grad flags, train/eval mode, use_cache and activation checkpointing restored."""
    import warnings

    if cfg.train.method == "lora":
        trained = trained.merge_and_unload()
    elif cfg.train.method == "lsp":
        kinds = linear_kinds(original, cfg.model.target_modules)
        if not kinds:
            raise ModelError("model.target_modules", "no target linear in the original model", None)
        unwrap_model(trained, kinds)
    flags = {n: p.requires_grad for n, p in original.named_parameters()}
    for n, p in trained.named_parameters():
        p.requires_grad_(flags.get(n, True))
    trained.train(original.training)
    if getattr(original, "config", None) is not None and hasattr(original.config, "use_cache"):
        trained.config.use_cache = original.config.use_cache
    if not _checkpointing(original) and _checkpointing(trained):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trained.gradient_checkpointing_disable()
    return trained


def _checkpointing(model) -> bool:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(getattr(model, "is_gradient_checkpointing", False))


__all__ = ["finetune", "Finetuned", "run_config", "token_data", "linear_kinds", "unwrap_model", "plain_model",
           "DEFAULT_LRS"]
