"""Shapes of the DSE suites found in any imported graph (``task.from_workload``): the attention chains (GEMM →
softmax → GEMM) and conv chains (conv → [batch norm] → [ReLU] → conv) of a ``shared_ir.Graph``, whichever frontend
built it (zoo, ONNX file, Hugging Face model, the user's module). Chains the DSE's problems cannot express are
returned with the reason, never dropped silently."""
from __future__ import annotations

from typing import Any

from shared_ir.op import OpKind

_MM = (OpKind.matmul, OpKind.batch_matmul)
_CONV_GLUE = ("batchnorm", "relu")


def _attention(ch) -> tuple | str:
    o1, o2 = ch.compute_ops
    if o1.kind not in _MM or o2.kind not in _MM:
        return f"{o1.kind.value}→{o2.kind.value} is not GEMM→GEMM"
    if not any(o.kind == OpKind.softmax for o in ch.ops):
        return "no softmax between the GEMMs (not attention)"
    e1, e2 = o1.extents, o2.extents
    batch = 1
    for d in o1.dims:
        if d.name.startswith("b"):
            batch *= e1[d.name]
    return (ch.names[0], batch, e1["m"], e2["n"], e1["k"], e1["n"])


def _conv(ch) -> tuple | str:
    o1, o2 = ch.compute_ops
    if o1.kind != OpKind.conv2d or o2.kind != OpKind.conv2d:
        return f"{o1.kind.value}→{o2.kind.value} is not conv→conv"
    glue = [o for o in ch.ops if o not in (o1, o2)]
    bad = [o.name for o in glue if o.kind != OpKind.elementwise or o.attr("fn") not in _CONV_GLUE]
    if bad:
        return f"{bad[0]}: only batch norm and ReLU between the convs"
    for o in (o1, o2):
        if o.attr("stride") != (1, 1) or o.attr("dilation") != (1, 1) or o.attr("groups") != 1:
            return f"{o.name}: only stride 1, dilation 1, groups 1 convs"
        if o.extents["r"] != o.extents["s"]:
            return f"{o.name}: only square kernels"
    N, C, H, W = o1.inputs[0].tensor.shape
    R1, R2 = o1.extents["r"], o2.extents["r"]
    K1, K2 = o1.inputs[1].tensor.shape[0], o2.inputs[1].tensor.shape[0]
    p1, p2 = o1.attr("padding"), o2.attr("padding")
    if R2 == 1 and p2 == (0, 0):
        # the problem's first conv is "valid" on a pre-padded input
        return (ch.names[0], C, H + 2 * p1[0], W + 2 * p1[1], K1, R1, K2, 1)
    if p1 == (R1 // 2, R1 // 2) and p2 == (R2 // 2, R2 // 2):
        return (ch.names[0], C, H, W, K1, R1, K2, R2)
    return f"{o1.name}→{o2.name}: only 'same' padding (or a valid first conv before a 1x1)"


def graph_shapes(g: Any, kind: str, limit: int | None = None) -> tuple[list[tuple], list[dict]]:
    """(distinct shapes as rows of ``dse.ATTENTION_SHAPES`` (kind ``attention``) or ``dse.CONV_SHAPES`` (``conv``),
    named after the chain's first op, at most ``limit``; the chains left out as ``{"chain", "reason"}``), over every
    pair of consecutive compute ops of the graph's chains. A conv chain is per image (the DSE's problems have no
    batch dim)."""
    pick = _attention if kind == "attention" else _conv
    rows: dict[tuple, tuple] = {}
    left_out: list[dict] = []
    for ch in (p for c in g.chains() for p in c.pairs()):
        r = pick(ch)
        if isinstance(r, str):
            left_out.append({"chain": "→".join(ch.names), "reason": r})
        else:
            rows.setdefault(r[1:], r)  # the same shape elsewhere in the model is the same problem
    out = list(rows.values())
    return (out[:limit] if limit else out), left_out


__all__ = ["graph_shapes"]
