"""Small models built directly with ``shared_ir.ops`` (no tracing): tests, examples and the exact solver's
instances. A mini CNN (conv, depthwise conv, pointwise conv, linear) and a mini transformer layer."""
from __future__ import annotations

from shared_ir import Graph, Tensor, ops
from shared_ir.op import TensorRole

W = TensorRole.weight


def tiny_cnn(name: str = "tiny_cnn", ch: int = 32, hw: int = 28, blocks: int = 2) -> Graph:
    """conv3x3 → [dw3x3 → relu → pw1x1] × blocks → pool → linear."""
    x = Tensor("x", (1, 3, hw, hw), role=TensorRole.input)
    o = [ops.conv2d("stem", x, Tensor("w_stem", (ch, 3, 3, 3), role=W), "a0", padding=1)]
    t = o[-1].outputs[0].tensor
    for b in range(blocks):
        o.append(ops.conv2d(f"dw{b}", t, Tensor(f"w_dw{b}", (ch, 1, 3, 3), role=W), f"d{b}", padding=1, groups=ch))
        o.append(ops.unary(f"relu{b}", o[-1].outputs[0].tensor, "relu", f"r{b}"))
        o.append(ops.conv2d(f"pw{b}", o[-1].outputs[0].tensor, Tensor(f"w_pw{b}", (ch, ch, 1, 1), role=W), f"p{b}"))
        t = o[-1].outputs[0].tensor
    o.append(ops.pool2d("gap", t, "g", kernel=hw, fn="avg"))
    o.append(ops.view("flat", o[-1].outputs[0].tensor, (1, ch), "f"))
    o.append(ops.linear("fc", o[-1].outputs[0].tensor, Tensor("w_fc", (10, ch), role=W), "y"))
    return Graph(o, name=name)


def tiny_branchy(name: str = "branchy", ch: int = 64, hw: int = 14) -> Graph:
    """Two parallel conv branches joined by an add (a DAG that is not a chain)."""
    x = Tensor("x", (1, ch, hw, hw), role=TensorRole.input)
    a = ops.conv2d("ca", x, Tensor("wa", (ch, ch, 3, 3), role=W), "ya", padding=1)
    b = ops.conv2d("cb", x, Tensor("wb", (ch, ch, 1, 1), role=W), "yb")
    s = ops.binary("add", a.outputs[0].tensor, b.outputs[0].tensor, "add", "s")
    c = ops.conv2d("cc", s.outputs[0].tensor, Tensor("wc", (ch, ch, 3, 3), role=W), "yc", padding=1)
    return Graph([a, b, s, c], name=name)


def tiny_transformer(name: str = "tiny_tf", seq: int = 64, d: int = 128, heads: int = 2) -> Graph:
    """q, k, v projections, two batched matmuls of attention, output projection, FFN."""
    x = Tensor("x", (seq, d), role=TensorRole.input)
    hd = d // heads
    q = ops.linear("q", x, Tensor("wq", (d, d), role=W), "q")
    k = ops.linear("k", x, Tensor("wk", (d, d), role=W), "k")
    v = ops.linear("v", x, Tensor("wv", (d, d), role=W), "v")
    qh = ops.view("qh", q.outputs[0].tensor, (heads, seq, hd), "qh")
    kh = ops.view("kh", k.outputs[0].tensor, (heads, hd, seq), "kh")
    vh = ops.view("vh", v.outputs[0].tensor, (heads, seq, hd), "vh")
    s = ops.batch_matmul("qk", qh.outputs[0].tensor, kh.outputs[0].tensor, "s")
    p = ops.softmax("sm", s.outputs[0].tensor, "p")
    c = ops.batch_matmul("pv", p.outputs[0].tensor, vh.outputs[0].tensor, "c")
    cf = ops.view("cf", c.outputs[0].tensor, (seq, d), "cf")
    o = ops.linear("o", cf.outputs[0].tensor, Tensor("wo", (d, d), role=W), "o")
    f1 = ops.linear("ff1", o.outputs[0].tensor, Tensor("w1", (4 * d, d), role=W), "h")
    f2 = ops.linear("ff2", f1.outputs[0].tensor, Tensor("w2", (d, 4 * d), role=W), "y")
    return Graph([q, k, v, qh, kh, vh, s, p, c, cf, o, f1, f2], name=name)
