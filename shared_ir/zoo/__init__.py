"""The model zoo: PyTorch modules defined in the project (random weights, no downloads), traced into Graphs.

    from shared_ir.zoo import graph, MODELS
    g = graph("resnet50")                 # cached per (name, batch, kwargs): treat the Graph as read-only
    m = module("bert_base", seq=64); xs = example_inputs("bert_base", batch=2, seq=64)

What the MAC figures count: multiply-accumulates of conv2d, linear, matmul and batch-matmul ops only (the loop-nest
points of those ops: ``Graph.macs``). That is what the published counters quoted below count (torchvision's ``_ops``
via fvcore-style counting, thop, Ultralytics' ``GFLOPs`` = 2 × thop MACs, the GFLOPs tables of BERT papers = 2 ×
MACs). BatchNorm, activations, softmax, layer norm and pooling are not MACs. Each :class:`ZooEntry` names its
source and says where a figure counts something differently.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import ValidationError


@dataclass(frozen=True)
class InputSpec:
    """One example input of a model."""

    shape: tuple[int, ...]
    """Shape including the batch axis."""
    dtype: str = "float32"
    """``float32`` for images/activations, ``int64`` for token ids."""
    high: int | None = None
    """For integer inputs: ids are drawn from [0, high)."""


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: how to build it, its example inputs, and the MAC figure it must match."""

    builder: Callable[..., Any]
    """``builder(**kw) -> torch.nn.Module`` with random weights."""
    inputs: Callable[[int, Mapping[str, Any]], tuple[InputSpec, ...]]
    """``inputs(batch, kw)``: the example inputs for a batch size and the model kwargs."""
    published_gmacs: float | None
    """Published MACs (×1e9) at batch 1 with default kwargs, or None when none is published (see ``analytic``)."""
    source: str
    """Where the figure comes from and what it counts."""
    analytic: Callable[[Mapping[str, Any]], float] | None = None
    """Closed-form GMACs for any kwargs (batch 1), used when kwargs change or nothing is published."""
    input_only: frozenset[str] = frozenset()
    """Kwargs that only shape the inputs (e.g. ``img`` of a CNN), not passed to the builder."""
    note: str = ""
    """How the published figure compares with ours (counted differently, version differences)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Default kwargs (documentation; the builders carry them)."""

    def default_inputs(self) -> tuple[InputSpec, ...]:
        return self.inputs(1, {})

    def expected_gmacs(self, batch: int = 1, **kw: Any) -> float | None:
        """The GMACs the traced graph should have: published × batch at default kwargs, else the analytic form."""
        if not kw and self.published_gmacs is not None:
            return self.published_gmacs * batch
        if self.analytic is not None:
            return self.analytic(kw) * batch
        return None


# --- analytic MAC counts ------------------------------------------------------------------------------------------
def _tb_macs(d: int, f: int, s: int) -> float:
    """One transformer block: q,k,v,o projections 4·s·d², FFN 2·s·d·f, scores + context 2·s²·d."""
    return (s * (4 * d * d + 2 * d * f) + 2 * s * s * d) / 1e9


def _transformer_block_macs(kw):
    return _tb_macs(kw.get("d_model", 768), kw.get("ffn", 3072), kw.get("seq", 128))


def _bert_macs(kw):
    d, L = kw.get("d_model", 768), kw.get("layers", 12)
    return L * _tb_macs(d, kw.get("ffn", 3072), kw.get("seq", 128)) + (d * d / 1e9 if kw.get("pooler", True) else 0)


def _vit_macs(kw):
    d, p, img = kw.get("d_model", 768), kw.get("patch", 16), kw.get("img", 224)
    n = (img // p) ** 2
    return (n * d * 3 * p * p / 1e9 + kw.get("layers", 12) * _tb_macs(d, kw.get("ffn", 3072), n + 1)
            + d * kw.get("num_classes", 1000) / 1e9)


def _lstm_macs(kw):
    V, E, H = kw.get("vocab", 10000), kw.get("emb", 650), kw.get("hidden", 650)
    L, T = kw.get("layers", 2), kw.get("seq", 35)
    # per layer 4·H·(I+H)·T (input and recurrent gate GEMMs at every step), decoder H·V·T
    return (4 * H * (E + H) * T + (L - 1) * 4 * H * (2 * H) * T + H * V * T) / 1e9


def _mlp_macs(kw):
    i, h, o = kw.get("in_features", 784), kw.get("hidden", 1024), kw.get("out_features", 10)
    return (i * h + h * o) / 1e9


# --- inputs ---------------------------------------------------------------------------------------------------------
def _image(default: int):
    def f(batch, kw):
        s = int(kw.get("img", default))
        return (InputSpec((batch, 3, s, s)),)
    return f


def _tokens(default_seq: int, vocab_key: str = "vocab", default_vocab: int = 30522, time_major: bool = False):
    def f(batch, kw):
        s = int(kw.get("seq", default_seq))
        return (InputSpec((s, batch) if time_major else (batch, s), "int64", int(kw.get(vocab_key, default_vocab))),)
    return f


def _seq_features(batch, kw):
    return (InputSpec((batch, int(kw.get("seq", 128)), int(kw.get("d_model", 768)))),)


def _flat_features(batch, kw):
    return (InputSpec((batch, int(kw.get("in_features", 784)))),)


# --- builders (lazy imports keep `import shared_ir.zoo` free of torch) -----------------------------------------------
def _b(modname: str, fn: str, **fixed: Any):
    def target():
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{modname}"), fn)

    def build(**kw):
        return target()(**fixed, **kw)

    def params() -> frozenset[str]:
        import inspect

        return frozenset(inspect.signature(target()).parameters) - set(fixed)

    build.__name__ = fn
    build.params = params  # the kwargs the builder accepts (checked by module())
    return build


_TV = ("torchvision.models {0}: '_ops' (GMACs, named GFLOPS in the docs table) = {1} at 224x224; "
       "counts conv + linear multiply-accumulates")

MODELS: dict[str, ZooEntry] = {
    "resnet18": ZooEntry(
        _b("vision", "resnet", depth=18), _image(224), 1.814, _TV.format("ResNet18_Weights", 1.814),
        input_only=frozenset({"img"}),
        note="He et al. 2016 Table 1 quotes 1.8e9 FLOPs (multiply-adds) for ResNet-18; the brief's 1.82 agrees"),
    "resnet50": ZooEntry(
        _b("vision", "resnet", depth=50), _image(224), 4.089, _TV.format("ResNet50_Weights", 4.089),
        input_only=frozenset({"img"}),
        note="torchvision's ResNet-50 is v1.5 (stride on the 3x3 conv): 4.09 GMACs; the paper's v1 (stride on the "
             "first 1x1) is 3.8e9. Commonly quoted as ~4.1 GMACs"),
    "mobilenet_v2": ZooEntry(
        _b("vision", "mobilenet_v2"), _image(224), 0.301, _TV.format("MobileNet_V2_Weights", 0.301),
        input_only=frozenset({"img"}),
        note="Sandler et al. 2018 Table 3: 300M multiply-adds at 224 (width 1.0)"),
    "googlenet": ZooEntry(
        _b("vision", "googlenet"), _image(224), 1.498, _TV.format("GoogLeNet_Weights", 1.498),
        input_only=frozenset({"img"}),
        note="torchvision's GoogLeNet uses a 3x3 conv in the '5x5' branch (kept here); the paper (Szegedy et al. "
             "2015) quotes ~1.5e9 multiply-adds. Aux classifiers are training-only and absent"),
    "yolov5s": ZooEntry(
        _b("yolo", "yolov5s"), _image(640), 8.25,
        "Ultralytics YOLOv5 README (v7.0 table): YOLOv5s FLOPs@640 = 16.5 B; utils/torch_utils.model_info reports "
        "thop MACs x 2 as GFLOPs, so 16.5 / 2 = 8.25 GMACs",
        input_only=frozenset({"img"}),
        note="thop also counts BatchNorm (≈2 ops/element) in its 'MACs'; conv MACs alone are slightly lower. "
             "Box decoding against the anchor grid (elementwise, no MACs) is left out of the detect heads"),
    "bert_base": ZooEntry(
        _b("transformers", "bert_base"), _tokens(128), 11.25,
        "TinyBERT (Jiao et al. 2020, Table 1) and MobileBERT (Sun et al. 2020, Table 4): BERT-base 22.5 B FLOPs at "
        "seq 128 (FLOPs = 2 x MACs) -> 11.25 GMACs; counts the linear layers and the attention batch matmuls",
        analytic=_bert_macs,
        note="ours: 12 x (128 x (4·768² + 2·768·3072) + 2·128²·768) + 768² (pooler on [CLS]) = 11.17 GMACs; "
             "embedding lookups have no MACs. No MLM head"),
    "vit_base": ZooEntry(
        _b("transformers", "vit_base"), _image(224), 17.56,
        "torchvision.models ViT_B_16_Weights '_ops' = 17.564 GMACs at 224 (conv patch embedding + linears + "
        "attention batch matmuls); timm's vit_base_patch16_224 figure is ~17.6 with attention",
        analytic=_vit_macs,
        note="timm's model cards quote 16.9 GMACs, which leaves out the attention matmuls (12 x 2·12·197²·64 = "
             "0.72 GMACs); without them ours is 16.85"),
    "lstm_lm": ZooEntry(
        _b("small", "lstm_lm"), _tokens(35, "vocab", 10000, time_major=True), None,
        "no published figure: analytic 4·H·(I+H)·T per layer (input + recurrent gate GEMMs every step) + H·V·T for "
        "the decoder; Zaremba et al. 2014 medium config (650 units, 35 steps, 10k vocab)",
        analytic=_lstm_macs),
    "mlp2": ZooEntry(
        _b("small", "mlp2"), _flat_features, None, "no published figure: analytic in·hidden + hidden·out",
        analytic=_mlp_macs),
    "transformer_block": ZooEntry(
        _b("transformers", "transformer_block"), _seq_features, None,
        "no published figure: analytic s·(4d² + 2·d·f) + 2·s²·d (projections, FFN, scores and context)",
        analytic=_transformer_block_macs),
}


def entry(name: str) -> ZooEntry:
    try:
        return MODELS[name]
    except KeyError:
        raise ValidationError("zoo.name", f"unknown model {name!r}; expected one of {sorted(MODELS)}", name) from None


def module(name: str, **kw: Any):
    """A fresh ``torch.nn.Module`` (eval mode, random weights seeded for reproducibility)."""
    import torch

    e = entry(name)
    check_kwargs(name, kw)
    torch.manual_seed(0)
    m = e.builder(**{k: v for k, v in kw.items() if k not in e.input_only})
    return m.eval()


def check_kwargs(name: str, kw: Mapping[str, Any]) -> None:
    """Reject kwargs the model does not take, naming the ones it does."""
    e = entry(name)
    ok = set(e.input_only) | set(getattr(e.builder, "params", lambda: kw.keys())())
    bad = sorted(set(kw) - ok)
    if bad:
        raise ValidationError(f"zoo.{name}.kwargs", f"unknown arguments {bad}; {name} takes {sorted(ok)}", bad)


def example_inputs(name: str, batch: int = 1, **kw: Any) -> tuple:
    """Random example inputs for ``module(name, **kw)`` at a batch size."""
    import torch

    if not isinstance(batch, int) or batch < 1:
        raise ValidationError("zoo.batch", f"must be an integer >= 1, got {batch!r}", batch)
    check_kwargs(name, kw)
    g = torch.Generator().manual_seed(0)
    out = []
    for s in entry(name).inputs(batch, kw):
        if s.dtype.startswith("int"):
            out.append(torch.randint(0, s.high or 2, s.shape, generator=g, dtype=getattr(torch, s.dtype)))
        else:
            out.append(torch.randn(s.shape, generator=g, dtype=getattr(torch, s.dtype)))
    return tuple(out)


def graph(name: str, batch: int = 1, **kw: Any):
    """The traced :class:`shared_ir.Graph` of a zoo model, cached per (name, batch, kwargs). Do not mutate it."""
    return _graph_cached(name, batch, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items())))


@functools.lru_cache(maxsize=32)
def _graph_cached(name: str, batch: int, kw: tuple):
    from ..frontends.torch_fx import from_torch

    kwd = dict(kw)
    m = module(name, **kwd)
    return from_torch(m, example_inputs(name, batch, **kwd), name=name)


__all__ = ["MODELS", "ZooEntry", "InputSpec", "entry", "module", "example_inputs", "graph", "check_kwargs"]
