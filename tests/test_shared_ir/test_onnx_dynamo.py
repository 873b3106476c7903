"""ONNX frontend on ``torch.onnx.export(..., dynamo=True)`` exports of the models test_torch_export.py imports through
torch.export (the same builders, from conftest.py): small Hugging Face models, a CNN with every conv kind, an audio
front end.

- The same MACs as the torch.export import of the same module (within 1%), the same number of GEMM-like ops (a
  ``MatMul`` by a weight is a batch_matmul where torch.export has a linear), of each conv kind, resize and softmax,
  attention as the GEMM-softmax-GEMM chain chain finders look for, and a YAML round trip.
- Opset 20 (the exporter's default) spells attention as MatMul / Softmax with a NaN guard and RMSNorm as elementwise
  nodes; opset 23 has ``Attention`` and ``RMSNormalization`` nodes, imported with the builders torch.export uses.
- Hand-made nodes for the rest of what was added: IsNaN that is not a guard, a three-operand Where,
  GatherElements of constants, GroupNormalization, Attention's causal mask, and typed errors naming the node.
"""
from __future__ import annotations

import contextlib
import warnings

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")  # the dynamo exporter's op library

from shared_ir import Graph, OpKind, UnsupportedOpError  # noqa: E402
from shared_ir.frontends import from_onnx, from_torch_export  # noqa: E402
from shared_ir.frontends.onnx_frontend import ONNX_OPS  # noqa: E402

GEMMS = (OpKind.linear, OpKind.matmul, OpKind.batch_matmul)
SAME_COUNT = (OpKind.conv1d, OpKind.conv2d, OpKind.conv3d, OpKind.conv_transpose, OpKind.interpolate, OpKind.softmax)


def export(m, inputs, path, opset: int | None = None, math_sdpa: bool = False) -> str:
    """``torch.onnx.export(dynamo=True)`` of ``m`` on ``inputs`` (a tuple, or a dict of keyword tensors)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args, kwargs = ((), dict(inputs)) if isinstance(inputs, dict) else (tuple(inputs), None)
    with warnings.catch_warnings(), (sdpa_kernel([SDPBackend.MATH]) if math_sdpa else contextlib.nullcontext()):
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), args, str(path), kwargs=kwargs, dynamo=True, opset_version=opset, verbose=False)
    return str(path)


def attention_chains(g: Graph) -> list[list[OpKind]]:
    return [[o.kind for o in c.compute_ops] for c in g.chains() if any(o.kind == OpKind.softmax for o in c.ops)]


def both(m, inputs, tmp_path, opset: int | None = None, math_sdpa: bool = False) -> tuple[Graph, Graph]:
    """(torch.export graph, ONNX graph) of one module, checked to agree."""
    m.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g_t = from_torch_export(m, inputs)
    g_o = from_onnx(export(m, inputs, tmp_path / "m.onnx", opset, math_sdpa))
    assert g_t.macs > 0 and abs(g_o.macs - g_t.macs) <= 0.01 * g_t.macs, (g_o.macs, g_t.macs)
    kt, ko = g_t.count_kinds(), g_o.count_kinds()
    assert sum(ko.get(k.value, 0) for k in GEMMS) == sum(kt.get(k.value, 0) for k in GEMMS), (ko, kt)
    assert all(ko.get(k.value, 0) == kt.get(k.value, 0) for k in SAME_COUNT), (ko, kt)
    assert attention_chains(g_o) == attention_chains(g_t)
    assert Graph.from_yaml(g_o.to_yaml()) == g_o
    return g_t, g_o


def _slow(*names):
    return [pytest.param(n, marks=pytest.mark.slow) for n in names]


# an export takes 2-5 s on 2 cores: gpt2 (Conv1D Gemms, multi-head), llama (grouped-query, rotary) and bert
# (constant GatherElements) by default; qwen2 is llama's graph, vit and whisper add the conv2d / conv1d the CNN and
# audio tests have, t5 (relative position bias, cross-attention) is the slowest export
@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", *_slow("qwen2", "vit", "t5", "whisper")])
def test_hf_models_same_macs_as_torch_export(name, hf_model, tmp_path):
    m, inputs = hf_model(name)
    # torch 2.13's exporter fails on T5 with the default SDPA kernel (a reshape of SDPA's output recorded as a view
    # that is invalid after its decomposition); the math kernel exports, with the same GEMMs
    g_t, g_o = both(m, inputs, tmp_path, math_sdpa=name == "t5")
    chains = attention_chains(g_o)
    assert chains and all(c == [OpKind.batch_matmul] * 2 for c in chains)
    # the NaN guard after the softmax leaves no op: the softmax feeds the P·V GEMM alone
    assert not any(o.attr("fn") == "isnan" for o in g_o.ops.values())


def test_cnn_every_conv_kind(conv_zoo, tmp_path):
    m, xs = conv_zoo
    g_t, g_o = both(m, xs, tmp_path)
    kinds = g_o.count_kinds()
    assert kinds["conv2d"] == 4 and kinds["conv_transpose"] == 4 and kinds["conv1d"] == 1 and kinds["conv3d"] == 1
    assert kinds["interpolate"] == 2
    assert [o.attr("mode") for o in g_o.ops.values() if o.kind == OpKind.interpolate] == ["bilinear", "trilinear"]
    assert any(o.attr("fn") == "downsample_nearest" for o in g_o.ops.values())
    convs = {(o.kind, o.attr("groups"), o.attr("dilation"), o.attr("output_padding")) for o in g_o.ops.values()
             if o.kind.compute_intensive}
    assert (OpKind.conv2d, 16, (2, 2), None) in convs and (OpKind.conv_transpose, 2, (1, 1), (1, 1)) in convs
    assert sorted(o.points for o in g_o.ops.values() if o.kind.compute_intensive) == \
        sorted(o.points for o in g_t.ops.values() if o.kind.compute_intensive)
    assert [g_o.tensor(t).shape for t in g_o.outputs] == [tuple(y.shape) for y in m(*xs)]


def test_audio_front_end(audio_front_end, tmp_path):
    g_t, g_o = both(*audio_front_end, tmp_path)
    assert [o.kind for o in g_o.chains()[0].compute_ops] == [OpKind.conv1d, OpKind.conv1d]


@pytest.mark.parametrize("name", ["llama", *_slow("gpt2")])
def test_opset23_attention_and_rmsnorm_nodes(name, hf_model, tmp_path):
    m, inputs = hf_model(name)
    g_t, g_o = both(m, inputs, tmp_path, opset=23)
    # Attention nodes import as torch.export's SDPA: the named GEMM-softmax-GEMM chain (llama: grouped-query)
    attn = [c for c in g_o.chains() if any(o.kind == OpKind.softmax for o in c.ops)]
    assert len(attn) == 2 and all(c.ops[0].name.endswith(".scores") and c.ops[-2].name.endswith(".probs")
                                  for c in attn)
    if name == "llama":
        assert sum(o.attr("fn") == "rms_norm" for o in g_o.ops.values()) == 5


def test_coverage_list_is_documented():
    import shared_ir.frontends.onnx_frontend as of

    missing = [k for k in sorted(ONNX_OPS) if f"``{k}``" not in of.__doc__]
    assert not missing
    assert {"Conv", "ConvTranspose", "Attention", "RMSNormalization", "Resize", "IsNaN"} <= ONNX_OPS


# --- hand-made nodes -------------------------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=23):
    from onnx import helper

    m = helper.make_model(helper.make_graph(nodes, "hand", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _vi(name, shape, t=None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, t or TensorProto.FLOAT, shape)


def _init(name, a):
    from onnx import numpy_helper

    return numpy_helper.from_array(a, name)


def test_isnan_where_gather_elements_groupnorm():
    import numpy as np
    from onnx import helper

    nodes = [helper.make_node("IsNaN", ["x"], ["nan"], name="isnan"),
             helper.make_node("Where", ["nan", "zero", "x"], ["clean"], name="guard"),  # a NaN guard: x itself
             helper.make_node("IsNaN", ["y"], ["nany"], name="isnan_y"),  # read by a Where that is no guard
             helper.make_node("Where", ["nany", "clean", "y"], ["w"], name="where3"),
             helper.make_node("GatherElements", ["table", "idx"], ["ge"], name="ge", axis=1),
             helper.make_node("Add", ["w", "ge"], ["s"], name="add"),
             helper.make_node("GroupNormalization", ["s", "scale", "bias"], ["out"], name="gn", num_groups=2)]
    inits = [_init("zero", np.array(0.0, np.float32)), _init("table", np.zeros((1, 8), np.float32)),
             _init("idx", np.arange(4, dtype=np.int64)[None]), _init("scale", np.ones(4, np.float32)),
             _init("bias", np.zeros(4, np.float32))]
    g = from_onnx(_model(nodes, [_vi("x", [2, 4, 4]), _vi("y", [2, 4, 4])], [_vi("out", [2, 4, 4])], inits,
                         opset=21))
    assert "isnan" not in g.ops and "guard" not in g.ops
    assert g.op("isnan_y").attr("fn") == "isnan" and g.op("where3").attr("fn") == "where"
    assert g.op("where3").input_names == ("nany", "x", "y")
    assert "ge" not in g.ops and g.tensor("ge").shape == (1, 4)  # GatherElements of constants: folded
    assert g.op("gn").attr("fn") == "group_norm" and g.op("gn").attr("groups") == 2


def test_attention_causal_and_refusals():
    import numpy as np
    from onnx import helper

    ins, outs = [_vi("q", [1, 4, 6, 8]), _vi("k", [1, 2, 6, 8]), _vi("v", [1, 2, 6, 8])], [_vi("y", [1, 4, 6, 8])]
    m = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1, scale=0.5)], ins,
               outs)
    g = from_onnx(m)
    assert [o.name for o in g.topological_ops()] == ["attn.scores", "attn.scaled", "attn.causal", "attn.probs", "attn"]
    assert g.op("attn.scaled").attr("scalar") == 0.5 and g.tensor("attn.causal_mask").shape == (6, 6)
    assert g.macs == 2 * (4 * 6 * 6 * 8) and g.op("attn.scores").extents["b1"] == 2  # two key/value heads
    packed = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn3", q_num_heads=4,
                                      kv_num_heads=2)],
                    [_vi("q", [1, 6, 32]), _vi("k", [1, 6, 16]), _vi("v", [1, 6, 16])], [_vi("y", [1, 6, 32])])
    resize = _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="rs", mode="nearest")],
                    [_vi("x", [1, 1, 8, 8])], [_vi("y", [1, 1, 4, 4])],
                    [_init("sc", np.array([1, 1, 0.5, 0.5], np.float32))])
    for model, node, why in ((packed, "attn3", "3-D operands"), (resize, "rs", "half_pixel")):
        with pytest.raises(UnsupportedOpError) as ei:
            from_onnx(model)
        (t, loc), = ei.value.items
        assert why in t and node in loc
