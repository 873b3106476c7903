"""Frontends: build a :class:`shared_ir.Graph` from a PyTorch module (torch.fx or torch.export) or an ONNX model.

``from_torch`` and ``from_onnx`` import torch / onnx only when called, so ``import shared_ir.frontends`` stays light.
The data-movement op builders the frontends share (strided slices, broadcasts, nearest resizes) live in
:mod:`shared_ir.ops` with the other op constructors and are re-exported here.
"""
from __future__ import annotations

from typing import Any

from ..ops import (  # noqa: F401  (re-exported)
    expand_op,
    resize_nearest_op,
    select_op,
    slice_op,
    strided_view,
    upsample_nearest_op,
)
from .trace import user_frame  # noqa: F401  (re-exported)


def from_torch(module: Any, example_inputs: Any, name: str | None = None, **kw: Any):
    """Trace ``module`` with torch.fx + shape propagation into a Graph (see :mod:`.torch_fx`)."""
    from .torch_fx import from_torch as _f

    return _f(module, example_inputs, name=name, **kw)


def from_torch_export(module: Any, example_inputs: Any, name: str | None = None, dynamic_shapes: Any = None,
                      strict: bool = True, **kw: Any):
    """Capture ``module`` with torch.export, lowered to core ATen, into a Graph (see :mod:`.torch_export`): covers
    models torch.fx cannot trace (Hugging Face transformers) with a documented list of ATen operators."""
    from .torch_export import from_torch_export as _f

    return _f(module, example_inputs, name=name, dynamic_shapes=dynamic_shapes, strict=strict, **kw)


def from_onnx(path_or_model: Any, name: str | None = None, **kw: Any):
    """Translate an ONNX file or ``onnx.ModelProto`` into a Graph (see :mod:`.onnx_frontend`)."""
    from .onnx_frontend import from_onnx as _f

    return _f(path_or_model, name=name, **kw)


__all__ = ["from_torch", "from_torch_export", "from_onnx", "strided_view", "slice_op", "select_op", "expand_op",
           "upsample_nearest_op", "resize_nearest_op"]
