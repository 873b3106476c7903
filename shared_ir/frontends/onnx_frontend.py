"""ONNX frontend: an ONNX model (file or ``onnx.ModelProto``) + ``onnx.shape_inference`` → :class:`shared_ir.Graph`.

Coverage is exactly the keys of :data:`ONNX_OPS` (ONNX op types, default domain; any node whose inputs are all
constants is folded whatever its type), building ops with :mod:`shared_ir.ops` as the PyTorch frontends do. Tested on
what ``torch.onnx.export`` emits for the model zoo (TorchScript exporter, ``dynamo=False``) and for small Hugging Face
models (GPT-2, Llama, Qwen2, BERT, ViT, T5, Whisper), a CNN with every conv kind and an audio front end (dynamo
exporter, ``dynamo=True``: opset 20 by default, 23 for ``Attention`` / ``RMSNormalization`` nodes), with the MACs of
the PyTorch frontends:

- GEMMs, convs, attention: ``MatMul``, ``Gemm``, ``Conv`` (1-, 2- and 3-d: ``conv1d`` / ``conv2d`` / ``conv3d``;
  stride, dilation, groups, symmetric padding), ``ConvTranspose`` (1-3-d, groups, dilation, output_padding:
  ``conv_transpose``), ``Attention`` (opset 23 on 4-D operands: :func:`shared_ir.ops.attention`, the Q·Kᵀ, scale,
  masks, softmax, ·V chain; fewer key/value heads read in place; is_causal adds a constant mask), ``LSTM`` (forward,
  unrolled over its static sequence length).
- Norms and softmax: ``BatchNormalization``, ``LayerNormalization``, ``RMSNormalization`` and onnxruntime's
  ``SimplifiedLayerNormalization`` (``rms_norm``), ``GroupNormalization`` (per-channel scale and bias),
  ``Softmax``, ``LogSoftmax``.
- Elementwise: ``Relu``, ``Sigmoid``, ``Tanh``, ``Erf``, ``Sqrt``, ``Exp``, ``Log``, ``Neg``, ``Abs``,
  ``Reciprocal``, ``HardSwish``, ``HardSigmoid``, ``LeakyRelu``, ``Elu``, ``Softplus``, ``Gelu``, ``Sin``, ``Cos``,
  ``Mish``, ``Clip``, ``Add``, ``Sub``, ``Mul``, ``Div``, ``Pow``, ``Where``, ``IsNaN``, ``Cast``.
- Reductions: ``ReduceMean``, ``ReduceSum``, ``ReduceMax``, ``ReduceMin``.
- Data movement: ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Transpose``, ``Concat``, ``Split``,
  ``Slice``, ``Gather`` (from a constant table: an embedding; constant indices: a select / slice), ``Expand``.
- Pooling and resampling: ``MaxPool``, ``AveragePool``, ``GlobalAveragePool``, ``GlobalMaxPool`` (2-d), ``Resize`` /
  ``Upsample`` (nearest by an integer factor per axis; linear over 1-3 spatial axes: ``interpolate``).
- No op: ``Identity``, ``Dropout``, a same-type ``Cast``, constants (below), and the dynamo exporter's NaN guard
  after attention's softmax, ``Where(IsNaN(p), 0, p)``: p itself (it differs from p only on NaN, and leaving it would
  give p a second reader, which cuts the GEMM-softmax-GEMM chain).

Conventions
- Initializers are ``weight`` tensors under their initializer name; graph inputs that are not initializers are
  ``input`` s; graph outputs are ``output`` s. Tensor names are the ONNX value names, op names the node names.
- Constant sub-computations (``Constant``, ``Shape`` of a statically shaped tensor, and any node whose inputs are
  all constants: the ``Shape → Gather → Concat → Reshape`` chains exporters emit) are folded with numpy /
  ``onnx.reference`` and leave no op; a folded value used as an operand becomes a weight tensor.
- ``Identity``/``Dropout``/same-type ``Cast`` alias their input. ``MatMul`` by a constant [K, N] matrix is a
  ``matmul``/``batch_matmul`` (same MACs as the ``linear`` the PyTorch frontend emits for ``nn.Linear``); ``Gemm``
  with ``transB=1`` is a ``linear``. An erf-based GELU stays a handful of elementwise ops.
- Every node that cannot be translated is collected and reported at the end in one
  :class:`shared_ir.UnsupportedOpError` (op type, node name and index, and the exporter's source note if any).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from .. import ops as O
from ..affine import AffineExpr
from ..dtypes import DType
from ..errors import GraphError, IRError, UnsupportedOpError, ValidationError
from ..graph import Graph
from ..op import Op, Tensor, TensorRole
from ..ops import expand_op, resize_nearest_op, select_op, slice_op, strided_view
from .torch_fx import UNARY_FLOPS, _retag

_ONNX_DTYPES = {1: DType.float32, 10: DType.float16, 16: DType.bfloat16, 11: DType.float64, 3: DType.int8,
                2: DType.uint8, 5: DType.int16, 6: DType.int32, 7: DType.int64, 9: DType.bool}

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt", "Exp": "exp",
          "Log": "log", "Neg": "neg", "Abs": "abs", "Reciprocal": "reciprocal", "HardSwish": "hardswish",
          "HardSigmoid": "hardsigmoid", "LeakyRelu": "leaky_relu", "Elu": "elu", "Softplus": "softplus",
          "Gelu": "gelu", "Sin": "sin", "Cos": "cos", "Mish": "mish"}
_BINARY = {"Add": "add", "Mul": "mul", "Sub": "sub", "Div": "div", "Pow": "pow"}
_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min"}
_ALIAS = {"Identity", "Dropout"}


class _Unsupported(Exception):
    pass


def from_onnx(path_or_model: Any, name: str | None = None) -> Graph:
    """Translate an ONNX model (path or ``ModelProto``) into a Graph; shapes come from ONNX shape inference."""
    if isinstance(path_or_model, (str, os.PathLike)):
        source = os.fspath(path_or_model)
        model = _load(source)
        default_name = os.path.splitext(os.path.basename(source))[0]
    else:
        model = path_or_model
        source = default_name = model.graph.name or "onnx"
    try:
        translator = _Translator(model)
    except IRError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx's shape inference on a malformed model raises many types
        raise ValidationError(source, f"is not a valid ONNX model ({type(e).__name__}: {e})") from None
    return translator.run(name or default_name, source)


def _load(path: str) -> Any:
    """``onnx.load`` of a file whose every failure (empty, not protobuf) is a ValidationError naming it."""
    import onnx
    from google.protobuf.message import DecodeError

    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValidationError(path, "is empty (0 bytes), not an ONNX model")
    try:
        return onnx.load(path)
    except (DecodeError, RuntimeWarning, ValueError, TypeError) as e:
        raise ValidationError(path, f"is not a valid ONNX model (protobuf does not parse: {e})") from None


def _infer(model: Any) -> Any:
    """Shape inference on a light copy: big initializers become typed graph inputs (inference serialises the model,
    which for BERT's 440 MB of weights costs seconds); small ones (shape constants) keep their data."""
    import onnx

    g = onnx.GraphProto()
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    have = {i.name for i in model.graph.input}
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        if n <= 4096:
            g.initializer.append(init)
        elif init.name not in have:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    light = onnx.helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version)
    return onnx.shape_inference.infer_shapes(light, data_prop=True)


class _Consts(dict):
    """Constant values by name: initializers converted to numpy on first use, folded values stored directly."""

    def __init__(self, protos: dict[str, Any]):
        super().__init__()
        self.protos = protos

    def __contains__(self, k: object) -> bool:
        return dict.__contains__(self, k) or k in self.protos

    def __getitem__(self, k: str) -> Any:
        if not dict.__contains__(self, k):
            from onnx import numpy_helper

            dict.__setitem__(self, k, numpy_helper.to_array(self.protos[k]))
        return dict.__getitem__(self, k)

    def shape_dtype(self, k: str) -> tuple[tuple[int, ...], DType]:
        if not dict.__contains__(self, k) and k in self.protos:
            p = self.protos[k]
            return tuple(int(d) for d in p.dims), _ONNX_DTYPES.get(p.data_type, DType.float32)
        a = self[k]
        return tuple(int(d) for d in a.shape), _np_dtype(a.dtype)

    def size(self, k: str) -> int:
        n = 1
        for d in self.shape_dtype(k)[0]:
            n *= d
        return n


class _Translator:
    def __init__(self, model: Any):
        import onnx
        self.onnx = onnx
        self.model = model
        self.g = model.graph
        inferred = _infer(model)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.consts = _Consts({i.name: i for i in self.g.initializer})
        self.env: dict[str, Tensor] = {}
        self.weights: dict[str, Tensor] = {}
        self.alias: dict[str, str] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.unsupported: list[tuple[str, str]] = []
        self.info: dict[str, tuple[tuple[int, ...] | None, DType]] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            self.info[vi.name] = _vi_shape(vi)
        self.inputs: list[str] = []
        self.nan_guards = _nan_guards(self.g)
        self._add_inputs()

    def _add_inputs(self) -> None:
        """Graph inputs that are not initializers become ``input`` tensors; their shapes must be static."""
        for vi in self.g.input:
            if vi.name in self.consts:
                continue
            shape, dt = self.info[vi.name]
            if shape is None:
                raise IRError(f"onnx input {vi.name!r} has a dynamic shape; export with static shapes")
            t = Tensor(vi.name, shape, dt, TensorRole.input)
            self.env[vi.name] = t
            self.inputs.append(vi.name)

    # --- values ---------------------------------------------------------------------------------------------------
    def is_const(self, n: str) -> bool:
        return n in self.consts and n not in self.env

    def T(self, n: str) -> Tensor:
        """The IR tensor of a value: an activation, or a (folded) constant as a weight."""
        n = self.alias.get(n, n)
        if n in self.env:
            return self.env[n]
        if n in self.consts:
            t = self.weights.get(n)
            if t is None:
                shape, dt = self.consts.shape_dtype(n)
                t = self.weights[n] = Tensor(n, shape, dt, TensorRole.weight)
            return t
        raise _Unsupported(f"value {n!r} is unknown (produced by an unsupported op?)")

    def out(self, n: str, shape=None) -> Tensor:
        s, dt = self.info.get(n, (None, DType.float32))
        if shape is None:
            if s is None:
                raise _Unsupported(f"shape inference gave no static shape for {n!r}")
            shape = s
        return Tensor(n, tuple(shape), dt)

    def add(self, op: Op, value: str | None = None) -> Tensor:
        self.ops.append(op)
        self.op_names.add(op.name)
        t = op.outputs[0].tensor
        self.env[value or t.name] = t
        return t

    def opname(self, node: Any, i: int, suffix: str = "") -> str:
        base = (node.name or f"{node.op_type}_{i}") + suffix
        n, k = base, 1
        while n in self.op_names:
            n, k = f"{base}_{k}", k + 1
        return n

    # --- main loop ------------------------------------------------------------------------------------------------
    def run(self, name: str, source: str = "onnx") -> Graph:
        for i, node in enumerate(self.g.node):
            try:
                self.translate(node, i)
            except (_Unsupported, IRError, ValueError, TypeError, IndexError, KeyError) as e:
                why = str(e) if isinstance(e, _Unsupported) else f"{type(e).__name__}: {e}"
                self.unsupported.append((f"{node.domain + '.' if node.domain else ''}{node.op_type}"
                                         + (f" ({why})" if why else ""), self.location(node, i)))
                for o in node.output:  # stand-ins keep later nodes checkable
                    if o and o not in self.env and o not in self.consts:
                        s, dt = self.info.get(o, (None, DType.float32))
                        self.env[o] = Tensor(o, s or (1,), dt)
        if self.unsupported:
            raise UnsupportedOpError(self.unsupported)
        if not self.ops and not self.g.output:  # (_finish adds a copy op per output no op produces)
            raise ValidationError(source, "has no ops (an ONNX model without nodes or outputs: an empty or wrong "
                                  "file?)")
        return self._finish(name)

    def _finish(self, name: str) -> Graph:
        """The Graph, its outputs retagged ``output``; a graph output no op produces (an input, a weight) gets a
        ``copy`` op named ``output_<i>``; an op's output listed twice is one graph output."""
        produced = {t for o in self.ops for t in o.output_names}
        retag, names = {}, []
        for i, vi in enumerate(self.g.output):
            try:
                t = self.T(vi.name)
            except _Unsupported as e:  # a graph output no node produces: a malformed model
                raise GraphError(f"outputs[{i}]", str(e), vi.name) from None
            if t.name in names:
                continue
            if t.name in produced:
                retag[t.name] = t.with_role(TensorRole.output)
                names.append(t.name)
            else:
                o = Tensor(f"output_{i}", t.shape, t.dtype, TensorRole.output)
                self.ops.append(O.unary(o.name, t, "copy", o, 0))
                names.append(o.name)
        return Graph([_retag(op, retag) for op in self.ops], inputs=self.inputs, outputs=names, name=name)

    def location(self, node: Any, i: int) -> str:
        loc = f"node #{i} {node.name!r}" if node.name else f"node #{i}"
        if node.doc_string:
            loc += f" ({node.doc_string.strip().splitlines()[0][:200]})"
        return loc

    def attrs(self, node: Any) -> dict[str, Any]:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def fold(self, node: Any) -> bool:
        """Evaluate a node whose inputs are all constants (or a Shape of a static tensor); True when folded."""
        import numpy as np

        ins = [n for n in node.input if n]
        if node.op_type == "Shape":
            s, _ = self.info.get(node.input[0], (None, None))
            if node.input[0] in self.env:
                s = self.env[node.input[0]].shape
            if s is None:
                return False
            a = self.attrs(node)
            self.consts[node.output[0]] = np.array(s[a.get("start", 0):a.get("end", len(s))], dtype=np.int64)
            return True
        if node.op_type == "Size" and node.input[0] in self.env:
            self.consts[node.output[0]] = np.array(self.env[node.input[0]].numel, dtype=np.int64)
            return True
        if node.op_type == "Constant":
            from onnx import numpy_helper

            a = node.attribute[0]
            if a.name == "value":
                v = numpy_helper.to_array(a.t)
            elif a.name in ("value_float", "value_int"):
                v = np.array(self.attrs(node)[a.name], dtype=np.float32 if a.name == "value_float" else np.int64)
            elif a.name in ("value_floats", "value_ints"):
                v = np.array(self.attrs(node)[a.name], dtype=np.float32 if a.name == "value_floats" else np.int64)
            else:
                raise _Unsupported(f"Constant with {a.name}")
            self.consts[node.output[0]] = v
            return True
        if not all(self.is_const(n) for n in ins):
            return False
        if node.op_type in _ALIAS:
            # e.g. an exporter's Identity between initializers it deduplicated: one tensor under the first name
            self.consts[node.output[0]] = self.consts[ins[0]]
            self.alias[node.output[0]] = self.alias.get(ins[0], ins[0])
            return True
        from onnx.reference import ReferenceEvaluator

        try:
            if node.op_type in _NUMPY_FOLD:
                res = [_NUMPY_FOLD[node.op_type](self.attrs(node), *(self.consts[n] for n in ins))]
            else:
                res = ReferenceEvaluator(node, opsets={"": self.opset}).run(None, {n: self.consts[n] for n in ins})
        except Exception as e:  # noqa: BLE001 - onnx's evaluator raises anything for an op it does not know
            raise UnsupportedOpError([(f"{node.op_type or '<no op_type>'} (constant folding: {type(e).__name__}: "
                                       f"{str(e)[:200]})", f"node {node.name or node.output[0]!r}")]) from None
        for o, v in zip(node.output, res):
            if o:
                self.consts[o] = np.asarray(v)
        return True

    def translate(self, node: Any, i: int) -> None:
        """Lower one node: fold it when constant, else hand it to the ``_n_<family>`` handler of its op type."""
        if self.fold(node):
            return
        a = self.attrs(node)
        outn = node.output[0]
        name = self.opname(node, i)
        handler = _NODE_HANDLERS.get(node.op_type)
        if handler is None:
            raise _Unsupported("")
        handler(self, node, i, a, name, outn)

    # --- op lowerings ---------------------------------------------------------------------------------------------
    def derived(self, n: str, value: Any) -> Tensor:
        """A constant the translation makes (an LSTM's per-direction weight, a causal mask), as a weight ``n``."""
        if n not in self.consts:
            dict.__setitem__(self.consts, n, value)
        return self.T(n)

    def _const(self, n: str):
        if not self.is_const(n):
            raise _Unsupported(f"input {n!r} must be a constant")
        return self.consts[n]

    def _view_shape(self, node, a, x) -> tuple[int, ...]:
        """Output shape of Flatten/Reshape/Squeeze/Unsqueeze from the (folded) constant operands."""
        r = len(x.shape)
        op = node.op_type
        if op == "Flatten":
            ax = a.get("axis", 1) % (r + 1) if r else 0
            lead = 1
            for d in x.shape[:ax]:
                lead *= d
            return (lead, x.numel // lead)
        if op == "Reshape":
            want = [int(v) for v in self._const(node.input[1]).reshape(-1)]
            out = [x.shape[i] if v == 0 and not a.get("allowzero", 0) else v for i, v in enumerate(want)]
            if -1 in out:
                known = 1
                for v in out:
                    if v != -1:
                        known *= v
                out[out.index(-1)] = x.numel // known
            return tuple(out)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(v) for v in self._const(node.input[1]).reshape(-1)]
        if op == "Squeeze":
            axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [v % r for v in axes]
            return tuple(d for i, d in enumerate(x.shape) if i not in axes)
        n = r + len(axes)
        axes = sorted(v % n for v in axes)
        it = iter(x.shape)
        return tuple(1 if i in axes else next(it) for i in range(n))

    def _resize_shape(self, node, x) -> tuple[int, ...]:
        ins = list(node.input)
        if len(ins) > 3 and ins[3]:
            return tuple(int(v) for v in self._const(ins[3]).reshape(-1))
        sc = ins[2] if node.op_type == "Resize" and len(ins) > 2 else ins[1] if len(ins) > 1 else ""
        if sc and sc in self.consts and self.consts.size(sc):
            return tuple(int(round(d * float(f))) for d, f in zip(x.shape, self._const(sc).reshape(-1)))
        s, _ = self.info.get(node.output[0], (None, None))
        if s is None:
            raise _Unsupported("Resize without constant scales or sizes")
        return s

    def _scalar(self, n: str) -> float:
        return float(self._const(n).reshape(-1)[0])

    def _binary(self, node, name, fn):
        an, bn = node.input[0], node.input[1]
        outn = node.output[0]
        ca, cb = self.is_const(an), self.is_const(bn)
        for const, other, left in ((bn, an, False), (an, bn, True)):
            if self.is_const(const) and not self.is_const(other) and self.consts.size(const) == 1:
                x = self.T(other)
                o = self.out(outn)
                if tuple(o.shape) != tuple(x.shape):
                    break  # a scalar that broadcasts x up: keep it a binary op
                f = f"{fn}_scalar" if not left or fn in ("add", "mul") else f"r{fn}_scalar"
                u = O.unary(name, x, f, o, 1)
                self.add(dataclasses.replace(u, attrs={**u.attr_dict, "scalar": self._scalar(const)}), outn)
                return
        if ca and cb:
            raise _Unsupported("both operands constant")
        self.add(O.binary(name, self.T(an), self.T(bn), fn, self.out(outn)), outn)

    def _gemm(self, node, name, a):
        """Y = alpha·A·op(B) + beta·C: ``linear`` when transB=1 (nn.Linear's export), else ``matmul``; a bias that
        is not a plain [N] vector (or scaled alpha/beta) becomes elementwise ops after it."""
        if a.get("transA", 0):
            raise _Unsupported("transA=1")
        x, w = self.T(node.input[0]), self.T(node.input[1])
        c = node.input[2] if len(node.input) > 2 and node.input[2] else None
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        outn = node.output[0]
        trans_b = bool(a.get("transB", 0))
        n_out = w.shape[0] if trans_b else w.shape[1]
        fused_bias = trans_b and c is not None and beta == 1.0 and alpha == 1.0 and \
            tuple(self.T(c).shape) == (n_out,)
        last = c is None or fused_bias
        mid = outn if last and alpha == 1.0 else f"{name}.mm"
        op_name = name if mid == outn else f"{name}.mm"
        if trans_b:
            t = self.add(O.linear(op_name, x, w, mid, self.T(c) if fused_bias else None), mid)
        else:
            t = self.add(O.matmul(op_name, x, w, mid), mid)
        if mid == outn:
            return
        if alpha != 1.0:
            nm = name if c is None else f"{name}.alpha"
            u = O.unary(nm, t, "mul_scalar", nm if nm != name else outn, 1)
            t = self.add(dataclasses.replace(u, attrs={**u.attr_dict, "scalar": alpha}))
        if c is not None:
            if beta != 1.0:
                raise _Unsupported("Gemm with beta != 1")
            t = self.add(O.binary(name, t, self.T(c), "add", outn))
        self.env[outn] = t

    def _lstm(self, node, name, a):
        """Unroll a forward ONNX LSTM over its static sequence length, as the PyTorch frontend unrolls nn.LSTM:
        per step two linears (W·x_t + Wb, R·h + Rb) whose weights are the constants W[0], R[0] shared by all steps,
        gate slices in ONNX order (i, o, f, c), c' = σf·c + σi·tanh(g), h' = σo·tanh(c')."""
        import numpy as np

        ins = list(node.input) + [""] * (8 - len(node.input))
        if a.get("direction", b"forward") not in (b"forward", "forward") or a.get("layout", 0) or ins[7] \
                or a.get("clip") is not None or a.get("input_forget", 0) or "activations" in a:
            raise _Unsupported("only forward, layout 0, default activations, no peephole/clip")
        if ins[4] and not self.is_const(ins[4]):
            raise _Unsupported("dynamic sequence_lens")
        x = self.T(ins[0])
        T, B, _ = x.shape
        H = int(a["hidden_size"])

        W, R = self.derived(f"{ins[1]}.0", self._const(ins[1])[0]), self.derived(f"{ins[2]}.0", self._const(ins[2])[0])
        bw = br = None
        if ins[3]:
            b = self._const(ins[3])[0]
            bw, br = self.derived(f"{ins[3]}.w", b[:4 * H]), self.derived(f"{ins[3]}.r", b[4 * H:])

        def init(k: int, tag: str) -> Tensor:
            if ins[k]:
                return self.T(ins[k])
            return self.derived(f"{name}.{tag}", np.zeros((1, B, H), dtype="float32"))  # ONNX default: zero state

        h, c = init(5, "h0"), init(6, "c0")
        hs = []
        for t in range(T):
            p = f"{name}.t{t}"
            xt = self.add(slice_op(f"{p}.x", x, Tensor(f"{p}.x", (1, B, x.shape[2]), x.dtype), 0, t))
            gx = self.add(O.linear(f"{p}.gx", xt, W, f"{p}.gx", bw))
            gh = self.add(O.linear(f"{p}.gh", h, R, f"{p}.gh", br))
            g = self.add(O.binary(f"{p}.gates", gx, gh, "add", f"{p}.gates"))
            gi, go, gf, gc = (self.add(slice_op(f"{p}.g{k}", g, Tensor(f"{p}.g{k}", (1, B, H), g.dtype), -1, j * H))
                              for j, k in enumerate("iofc"))
            c, h = O.lstm_cell_tail(p, gi, gf, gc, go, c, self.add)  # ONNX gate order is i, o, f, c
            hs.append(h)
        outs = list(node.output) + [""] * (3 - len(node.output))
        if outs[0]:
            y = self.add(O.concat(f"{name}.y", hs, 0, f"{name}.y")) if T > 1 else hs[0]
            self.add(O.view(name, y, (T, 1, B, H), outs[0]), outs[0])
        if outs[1]:
            self.alias[outs[1]] = h.name
        if outs[2]:
            self.alias[outs[2]] = c.name

    def _conv(self, node, name, a):
        """Conv (1-3 spatial axes: ``conv1d`` / ``conv2d`` / ``conv3d``) and ConvTranspose (``conv_transpose``,
        with ``output_padding``; an ``output_shape`` must be the one the other attributes give)."""
        x, w = self.T(node.input[0]), self.T(node.input[1])
        n = len(x.shape) - 2
        if n not in (1, 2, 3):
            raise _Unsupported(f"{node.op_type} on a rank-{len(x.shape)} input (1-3 spatial axes)")
        pads = _symmetric_pads(a, n)[:n]
        b = self.T(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        kw = dict(stride=tuple(a.get("strides", [1] * n)), padding=tuple(pads),
                  dilation=tuple(a.get("dilations", [1] * n)), groups=int(a.get("group", 1)))
        if node.op_type == "Conv":
            op = O.conv(name, x, w, node.output[0], b, **kw)
        else:
            op = O.conv_transpose(name, x, w, node.output[0], b, output_padding=tuple(a.get("output_padding",
                                                                                               [0] * n)), **kw)
            if "output_shape" in a and tuple(a["output_shape"]) != op.outputs[0].tensor.shape[2:]:
                raise _Unsupported(f"output_shape {list(a['output_shape'])} differs from the one the pads give")
        self.add(op, node.output[0])

    def _pool(self, node, name, a, fn):
        x = self.T(node.input[0])
        if len(x.shape) != 4:
            raise _Unsupported(f"pool on rank {len(x.shape)}")
        pads = _symmetric_pads(a)
        k = tuple(a["kernel_shape"])
        st, dil = tuple(a.get("strides", [1, 1])), tuple(a.get("dilations", [1, 1]))
        shape = list(x.shape)
        for j in range(2):  # output extent, with ceil_mode's extra window when it starts inside the input/left pad
            span = x.shape[2 + j] + 2 * pads[j] - dil[j] * (k[j] - 1) - 1
            n = (-(-span // st[j]) if a.get("ceil_mode", 0) else span // st[j]) + 1
            if a.get("ceil_mode", 0) and (n - 1) * st[j] >= x.shape[2 + j] + pads[j]:
                n -= 1
            shape[2 + j] = n
        o = self.out(node.output[0], shape)
        op = O.pool2d(name, x, name, k, tuple(a.get("strides", [1, 1])), (pads[0], pads[1]), fn,
                      tuple(a.get("dilations", [1, 1])))
        if tuple(op.outputs[0].tensor.shape) != tuple(o.shape):
            if not a.get("ceil_mode", 0):
                raise _Unsupported(f"pool output {list(o.shape)} differs from {list(op.outputs[0].tensor.shape)}")
            dims = tuple(dataclasses.replace(d, extent=o.shape[2]) if d.name == "p" else
                         dataclasses.replace(d, extent=o.shape[3]) if d.name == "q" else d for d in op.dims)
            op = Op(name, op.kind, dims, op.inputs, (dataclasses.replace(op.outputs[0], tensor=o),),
                    {**op.attr_dict, "padded": True, "ceil_mode": True}, op.flops_per_point)
        else:
            op = dataclasses.replace(op, outputs=(dataclasses.replace(op.outputs[0], tensor=o),))
        self.add(op, node.output[0])

    def _slice(self, node, name):
        x = self.T(node.input[0])
        starts = [int(v) for v in self._const(node.input[1]).reshape(-1)]
        ends = [int(v) for v in self._const(node.input[2]).reshape(-1)]
        axes = [int(v) for v in self._const(node.input[3]).reshape(-1)] if len(node.input) > 3 and node.input[3] \
            else list(range(len(starts)))
        steps = [int(v) for v in self._const(node.input[4]).reshape(-1)] if len(node.input) > 4 and node.input[4] \
            else [1] * len(starts)
        idx = [AffineExpr.dim(f"d{i}") for i in range(len(x.shape))]
        shape = list(x.shape)
        for s, e, ax, st in zip(starts, ends, axes, steps):
            ax %= len(x.shape)
            if st <= 0:
                raise _Unsupported("negative slice step")
            r = range(x.shape[ax])[slice(s, e, st)]
            if not len(r):
                raise _Unsupported("empty slice")
            idx[ax] = AffineExpr.dim(f"d{ax}") * r.step + r.start
            shape[ax] = len(r)
        o = self.out(node.output[0], shape)
        if tuple(o.shape) == tuple(x.shape) and all(str(e) == f"d{i}" for i, e in enumerate(idx)):
            self.env[node.output[0]] = x
            return
        self.add(strided_view(name, x, o, idx, "slice"), node.output[0])

    def _gather(self, node, name, a):
        data, ind = node.input[0], node.input[1]
        axis = a.get("axis", 0)
        if self.is_const(data) and not self.is_const(ind):
            w = self.T(data)
            if axis != 0 or len(w.shape) != 2:
                raise _Unsupported("Gather from a constant that is not an embedding table (axis 0, rank 2)")
            self.add(O.embedding(name, self.T(ind), w, node.output[0]), node.output[0])
            return
        if not self.is_const(ind):
            raise _Unsupported("Gather with data-dependent indices on an activation")
        x = self.T(data)
        axis %= len(x.shape)
        idx = self._const(ind)
        shape = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:])
        o = self.out(node.output[0], shape)
        if idx.ndim == 0:
            self.add(select_op(name, x, o, axis, int(idx) % x.shape[axis]), node.output[0])
            return
        v = [int(i) % x.shape[axis] for i in idx.reshape(-1)]
        if idx.ndim == 1 and v == list(range(v[0], v[0] + len(v))):
            self.add(slice_op(name, x, o, axis, v[0]), node.output[0])
            return
        raise _Unsupported("Gather with non-contiguous constant indices")


# --- node handlers ----------------------------------------------------------------------------------------------
# One per ONNX op family, all called as handler(tr, node, i, a, name, outn) by _Translator.translate: the node's
# index, its attributes, the IR op name to use and its first output's value name.
def _n_alias(tr, node, i, a, name, outn):
    tr.env[outn] = tr.T(node.input[0])


def _n_cast(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    dt = _ONNX_DTYPES.get(a["to"], DType.float32)
    if dt == x.dtype:
        tr.env[outn] = x
        return
    o = tr.out(outn, x.shape)
    o = Tensor(o.name, o.shape, dt)
    tr.add(dataclasses.replace(O.unary(name, x, "cast", o, 1), attrs={"fn": "cast", "dtype": dt.value}), outn)


def _n_unary(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    fn = _UNARY[node.op_type]
    o = O.unary(name, x, fn, tr.out(outn, x.shape), UNARY_FLOPS.get(fn, 1))
    if node.op_type == "LeakyRelu":
        o = dataclasses.replace(o, attrs={**o.attr_dict, "negative_slope": float(a.get("alpha", 0.01))})
    tr.add(o, outn)


def _n_clip(tr, node, i, a, name, outn):
    """``relu6`` for [0, 6], ``relu`` for [0, ∞), else ``clip`` with the bounds that are set."""
    x = tr.T(node.input[0])
    lo = tr._scalar(node.input[1]) if len(node.input) > 1 and node.input[1] else a.get("min")
    hi = tr._scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else a.get("max")
    fn = "relu6" if (lo, hi) == (0.0, 6.0) else "relu" if (lo == 0.0 and hi is None) else "clip"
    o = O.unary(name, x, fn, tr.out(outn, x.shape), 1)
    if fn == "clip":
        bounds = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        o = dataclasses.replace(o, attrs={**o.attr_dict, **bounds})
    tr.add(o, outn)


def _n_binary(tr, node, i, a, name, outn):
    tr._binary(node, name, _BINARY[node.op_type])


def _n_where(tr, node, i, a, name, outn):
    """``Where``: the NaN guard ``Where(IsNaN(x), c, x)`` (the dynamo exporter's after a softmax, for fully masked
    rows; a no-op on finite values) aliases x; one constant branch (the exporters' masked_fill) is a ``masked_fill``
    of the other one; else a three-operand ``where`` (condition, then, else)."""
    cond, x, y = node.input
    if cond in tr.nan_guards:
        tr.env[outn] = tr.T(y)
        return
    act = [n for n in (x, y) if not tr.is_const(n)]
    if len(act) == 1:
        tr.add(O.binary(name, tr.T(act[0]), tr.T(cond), "masked_fill", outn), outn)
        return
    tr.add(O.elementwise(name, [tr.T(n) for n in (cond, x, y)], "where", tr.out(outn)), outn)


def _n_isnan(tr, node, i, a, name, outn):
    """IsNaN: no op when only NaN guards read it (see :func:`_n_where`), else an ``isnan`` elementwise op."""
    if outn in tr.nan_guards:
        return
    x = tr.T(node.input[0])
    tr.add(O.unary(name, x, "isnan", tr.out(outn, x.shape)), outn)


def _n_matmul(tr, node, i, a, name, outn):
    A_, B_ = tr.T(node.input[0]), tr.T(node.input[1])
    if len(A_.shape) < 2 or len(B_.shape) < 2:
        raise _Unsupported("MatMul with a 1-D operand")
    tr.add(O.matmul(name, A_, B_, outn), outn)


def _n_gemm(tr, node, i, a, name, outn):
    tr._gemm(node, name, a)


def _n_conv(tr, node, i, a, name, outn):
    tr._conv(node, name, a)


def _n_batchnorm(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    o = O.affine_channel(name, x, tr.T(node.input[1]), tr.T(node.input[2]), tr.out(outn, x.shape), 1)
    tr.add(dataclasses.replace(o, attrs={**o.attr_dict, "eps": float(a.get("epsilon", 1e-5))}), outn)


def _n_softmax(tr, node, i, a, name, outn):
    """Softmax and LogSoftmax (``log`` attr); the axis default changed from 1 to -1 in opset 13."""
    x = tr.T(node.input[0])
    axis = a.get("axis", -1 if tr.opset >= 13 else 1)
    if tr.opset < 13 and axis % len(x.shape) != len(x.shape) - 1:
        raise _Unsupported("pre-opset-13 Softmax over a non-last axis (flattening semantics)")
    o = O.softmax(name, x, tr.out(outn, x.shape), axis)
    if node.op_type == "LogSoftmax":
        o = dataclasses.replace(o, attrs={**o.attr_dict, "log": True})
    tr.add(o, outn)


def _n_layernorm(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    axis = a.get("axis", -1) % len(x.shape)
    w = tr.T(node.input[1])
    b = tr.T(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    tr.add(O.layernorm(name, x, tr.out(outn, x.shape), w, b, normalized_ndim=len(x.shape) - axis), outn)


def _n_rmsnorm(tr, node, i, a, name, outn):
    """RMSNormalization (opset 23) and onnxruntime's SimplifiedLayerNormalization: ``rms_norm`` over the axes from
    ``axis`` on."""
    x = tr.T(node.input[0])
    axis = a.get("axis", -1) % len(x.shape)
    w = tr.T(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    tr.add(O.rmsnorm(name, x, tr.out(outn, x.shape), w, normalized_ndim=len(x.shape) - axis), outn)


def _n_groupnorm(tr, node, i, a, name, outn):
    """GroupNormalization with a per-channel scale and bias (opset 21; opset 18's per-group ones are refused)."""
    x, w, b = (tr.T(n) for n in node.input[:3])
    if tuple(w.shape) != (x.shape[1],) or tuple(b.shape) != (x.shape[1],):
        raise _Unsupported(f"scale {list(w.shape)} / bias {list(b.shape)} not per channel ({x.shape[1]})")
    tr.add(O.groupnorm(name, x, tr.out(outn, x.shape), int(a["num_groups"]), w, b), outn)


def _n_attention(tr, node, i, a, name, outn):
    """ONNX ``Attention`` (opset 23) on 4-D [batch, heads, seq, head size] operands: :func:`shared_ir.ops.attention`
    (Q·Kᵀ, scale, causal and/or given mask, softmax, ·V; fewer key/value heads are read in place). Past key/values,
    softcap and the qk_matmul output are refused; present key/value outputs alias K and V."""
    import numpy as np

    if node.domain not in ("", "ai.onnx"):
        raise _Unsupported(f"{node.domain} Attention (packed projection weights), not ONNX's")
    ins = list(node.input) + [""] * (7 - len(node.input))
    outs = list(node.output) + [""] * (4 - len(node.output))
    q, k, v = (tr.T(n) for n in ins[:3])
    if any(len(t.shape) != 4 for t in (q, k, v)):
        raise _Unsupported("3-D operands (heads packed in the hidden axis); only 4-D [batch, heads, seq, size]")
    if any(ins[4:]) or outs[3] or a.get("softcap", 0.0):
        raise _Unsupported("past key/values, softcap or the qk_matmul output")
    cm = None
    if a.get("is_causal", 0):
        cm = tr.derived(f"{name}.causal_mask", np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool)))
    mask = tr.T(ins[3]) if ins[3] else None
    for op in O.attention(name, q, k, v, tr.out(outn), mask, a.get("scale"), cm):
        tr.add(op)
    for o, t in ((outs[1], k), (outs[2], v)):
        if o:
            tr.env[o] = t


def _n_reduce(tr, node, i, a, name, outn):
    """Reductions over ``axes`` (an attribute, or an input since opset 13/18; none: all axes); a full reduction
    without keepdims is a ``reduce`` (to [1]) then a ``view`` to the 0-d output."""
    x = tr.T(node.input[0])
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in tr._const(node.input[1]).reshape(-1)]
    if axes is None:
        axes = list(range(len(x.shape)))
    keep = bool(a.get("keepdims", 1))
    fn = _REDUCE[node.op_type]
    if not keep and len(set(ax % len(x.shape) for ax in axes)) == len(x.shape):
        t = tr.add(O.reduce(name + ".r", x, axes, name + ".r", fn, keep))
        tr.add(O.view(name, t, (), Tensor(outn, (), x.dtype)), outn)
    else:
        tr.add(O.reduce(name, x, axes, outn, fn, keep), outn)


def _n_pool(tr, node, i, a, name, outn):
    tr._pool(node, name, a, "max" if node.op_type == "MaxPool" else "avg")


def _n_global_pool(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    if len(x.shape) != 4:
        raise _Unsupported(f"{node.op_type} on rank {len(x.shape)}")
    fn = "avg" if node.op_type == "GlobalAveragePool" else "max"
    tr.add(O.pool2d(name, x, outn, x.shape[2:], 1, 0, fn), outn)


def _n_view(tr, node, i, a, name, outn):
    """Flatten/Reshape/Squeeze/Unsqueeze: a ``view``, or an alias when the shape does not change."""
    x = tr.T(node.input[0])
    o = tr.out(outn, tr._view_shape(node, a, x))
    if tuple(o.shape) == tuple(x.shape):
        tr.env[outn] = x
    else:
        tr.add(O.view(name, x, o.shape, o), outn)


def _n_transpose(tr, node, i, a, name, outn):
    x = tr.T(node.input[0])
    perm = a.get("perm", list(range(len(x.shape)))[::-1])
    tr.add(O.permute(name, x, perm, outn), outn)


def _n_concat(tr, node, i, a, name, outn):
    xs = [tr.T(n) for n in node.input if n]
    if len(xs) == 1:
        tr.env[outn] = xs[0]
    else:
        tr.add(O.concat(name, xs, a["axis"], outn), outn)


def _n_split(tr, node, i, a, name, outn):
    """One ``slice`` per used output, named ``<node>.<k>``; sizes from the ``split`` attribute or input, else
    equal parts."""
    x = tr.T(node.input[0])
    axis = a.get("axis", 0) % len(x.shape)
    if "split" in a:
        sizes = [int(v) for v in a["split"]]
    elif len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in tr._const(node.input[1]).reshape(-1)]
    else:  # equal parts (the last one smaller), opset 18's num_outputs
        k = len(node.output)
        c = -(-x.shape[axis] // k)
        sizes = [min(c, x.shape[axis] - j * c) for j in range(k)]
    off = 0
    for k, (o, ln) in enumerate(zip(node.output, sizes)):
        shape = list(x.shape)
        shape[axis] = ln
        if o:
            tr.add(slice_op(tr.opname(node, i, f".{k}"), x, tr.out(o, shape), axis, off), o)
        off += ln


def _n_slice(tr, node, i, a, name, outn):
    tr._slice(node, name)


def _n_gather(tr, node, i, a, name, outn):
    tr._gather(node, name, a)


def _n_expand(tr, node, i, a, name, outn):
    """An ``expand`` to the broadcast of the input and the constant shape; an alias when that changes nothing."""
    import numpy as np

    x = tr.T(node.input[0])
    o = tr.out(outn, np.broadcast_shapes(tuple(x.shape), tuple(int(v) for v in tr._const(node.input[1]))))
    if tuple(o.shape) == tuple(x.shape):
        tr.env[outn] = x
    else:
        tr.add(expand_op(name, x, o), outn)


def _n_lstm(tr, node, i, a, name, outn):
    tr._lstm(node, name, a)


def _n_resize(tr, node, i, a, name, outn):
    """Resize/Upsample to the size from constant sizes/scales or shape inference: ``nearest`` by an integer factor
    per axis (:func:`shared_ir.ops.resize_nearest_op`; downsampling needs ``asymmetric`` coordinates, torch's), or
    ``linear`` over the 1-3 spatial axes of an [N, C, ...] input (:func:`shared_ir.ops.interpolate`; half_pixel /
    pytorch_half_pixel coordinates are torch's align_corners=False, ``align_corners`` is True)."""
    mode, ctm = _str(a.get("mode", "nearest")), _str(a.get("coordinate_transformation_mode", "half_pixel"))
    x = tr.T(node.input[0])
    o = tr.out(outn, tr._resize_shape(node, x))
    down = any(m < n for n, m in zip(x.shape, o.shape))
    if mode == "nearest" and (ctm == "asymmetric" or not down or node.op_type == "Upsample"):
        tr.add(resize_nearest_op(name, x, o), outn)
        return
    n = len(x.shape) - 2
    if mode != "linear" or n not in _LINEAR_MODES or tuple(o.shape[:2]) != tuple(x.shape[:2]) \
            or a.get("antialias", 0) or ctm not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        raise _Unsupported(f"mode={mode!r}, coordinate_transformation_mode={ctm!r} on {list(x.shape)} (nearest; "
                           "linear on the spatial axes of [N, C, ...] with half_pixel or align_corners coordinates)")
    tr.add(O.interpolate(name, x, o, o.shape[2:], _LINEAR_MODES[n], ctm == "align_corners"), outn)


_LINEAR_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


_NODE_HANDLERS: dict[str, Callable] = {
    **dict.fromkeys(_ALIAS, _n_alias), "Cast": _n_cast, **dict.fromkeys(_UNARY, _n_unary), "Clip": _n_clip,
    **dict.fromkeys(_BINARY, _n_binary), "Where": _n_where, "IsNaN": _n_isnan, "MatMul": _n_matmul, "Gemm": _n_gemm,
    "Conv": _n_conv, "ConvTranspose": _n_conv, "Attention": _n_attention,
    "BatchNormalization": _n_batchnorm, "Softmax": _n_softmax, "LogSoftmax": _n_softmax,
    "LayerNormalization": _n_layernorm, "RMSNormalization": _n_rmsnorm, "SimplifiedLayerNormalization": _n_rmsnorm,
    "GroupNormalization": _n_groupnorm, **dict.fromkeys(_REDUCE, _n_reduce),
    "MaxPool": _n_pool, "AveragePool": _n_pool, "GlobalAveragePool": _n_global_pool, "GlobalMaxPool": _n_global_pool,
    **dict.fromkeys(("Flatten", "Reshape", "Squeeze", "Unsqueeze"), _n_view), "Transpose": _n_transpose,
    "Concat": _n_concat, "Split": _n_split, "Slice": _n_slice, "Gather": _n_gather, "Expand": _n_expand,
    "LSTM": _n_lstm, "Resize": _n_resize, "Upsample": _n_resize,
}


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _nan_guards(g: Any) -> dict[str, str]:
    """IsNaN outputs that only ``Where(<them>, <constant>, x)`` read, x being the IsNaN's input, mapped to x: the
    dynamo exporter's NaN-to-zero after the softmax of attention. Such a Where is x on finite values."""
    const = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    users: dict[str, list] = {}
    for n in g.node:
        for v in n.input:
            users.setdefault(v, []).append(n)
    outs = {o.name for o in g.output}
    guards = {}
    for n in g.node:
        if n.op_type == "IsNaN" and n.output[0] not in outs and users.get(n.output[0]) and all(
                u.op_type == "Where" and list(u.input) == [n.output[0], u.input[1], n.input[0]] and u.input[1] in const
                for u in users[n.output[0]]):
            guards[n.output[0]] = n.input[0]
    return guards


def _gather_elements(a: dict, data: Any, idx: Any) -> Any:
    """GatherElements of constants (onnx.reference's mis-shapes an index smaller than the data off the axis)."""
    import numpy as np

    ax = a.get("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[ax], idx)
    return np.take_along_axis(data[tuple(slice(None) if k == ax else slice(0, n) for k, n in enumerate(idx.shape))],
                              idx, ax)


_NUMPY_FOLD: dict[str, Callable] = {"GatherElements": _gather_elements}


ONNX_OPS: frozenset[str] = frozenset(_NODE_HANDLERS)
"""The ONNX op types translated (besides folded constant nodes). Anything else is unsupported."""


def _vi_shape(vi: Any) -> tuple[tuple[int, ...] | None, DType]:
    tt = vi.type.tensor_type
    dt = _ONNX_DTYPES.get(tt.elem_type, DType.float32)
    if not tt.HasField("shape"):
        return None, dt
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None, dt
        dims.append(int(d.dim_value))
    return tuple(dims), dt


def _np_dtype(d: Any) -> DType:
    try:
        return DType.parse(str(d))
    except IRError:
        return DType.float32


__all__ = ["from_onnx", "ONNX_OPS"]


def _symmetric_pads(a, n: int = 2) -> list[int]:
    """ONNX ``auto_pad``/``pads`` of a window op over ``n`` spatial axes as [begin..., end...] (2-D: [top, left,
    bottom, right]); only explicit symmetric padding (or VALID) maps onto the IR's affine window index."""
    ap = a.get("auto_pad", b"NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    if ap not in ("NOTSET", "VALID"):
        raise _Unsupported(f"auto_pad={ap}")
    pads = list(a.get("pads", [0] * 2 * n)) if ap == "NOTSET" else [0] * 2 * n
    if pads[:n] != pads[n:]:
        raise _Unsupported(f"asymmetric pads {pads}")
    return pads
