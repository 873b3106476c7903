"""The workload: the compute layers of several models (with copies) as one DAG.

Only compute-intensive ops (conv2d, linear, matmul, batch_matmul) become layers, as in the reference; the
elementwise/pool/view ops between them are contracted, so an edge u→v means v reads (through them) what u
wrote. Sizes come from the ``shared_ir`` ops (MACs from the loop nest, tensor element counts); the SoC computes
in int8 (``elem_bytes`` = 1) whatever dtype the traced graph carries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from shared_ir import Graph, Op, OpKind, TensorRole
from shared_ir.workload import GRAPH_SUFFIXES

from .errors import MapperError

LAYER_KINDS = frozenset({OpKind.conv2d, OpKind.linear, OpKind.matmul, OpKind.batch_matmul})

# Workload mixes of the reference (soc_mapper.md): (model, zoo kwargs) and copies of each.
_VISION = [("resnet18", {}), ("resnet50", {}), ("yolov5s", {}), ("googlenet", {})]
_NLP = [("bert_base", {}), ("lstm_lm", {"layers": 4})]
_MIXED = [("googlenet", {}), ("yolov5s", {}), ("bert_base", {}), ("lstm_lm", {"layers": 4}), ("mobilenet_v2", {})]
MIXES: dict[str, tuple[list[tuple[str, dict]], int]] = {
    "vision1": (_VISION, 2), "vision2": (_VISION, 8),
    "nlp1": (_NLP, 2), "nlp2": (_NLP, 4),
    "mixed1": (_MIXED, 2), "mixed2": (_MIXED, 4), "mixed3": (_MIXED, 8),
}


@dataclass
class Layer:
    """One compute layer: what the cost model and the schedulers need."""

    name: str
    """Unique name ``<model>#<copy>/<op>``."""
    model: str
    """The model copy it belongs to (``resnet18#0``)."""
    op_kind: str
    """shared_ir op kind (conv2d, linear, matmul, batch_matmul)."""
    dims: dict[str, int]
    """Canonical extents: convs B G K C P Q R S (per group); GEMMs B M N K."""
    macs: int
    """Multiply-accumulates (from the loop nest)."""
    in_bytes: int
    """Activation input bytes (int8)."""
    weight_bytes: int
    """Weight bytes (int8)."""
    out_bytes: int
    """Output bytes (int8)."""
    stride: tuple[int, int] = (1, 1)
    """Conv (row, column) stride; (1, 1) for GEMMs (the MAESTRO cost model reads it)."""

    @property
    def is_depthwise(self) -> bool:
        return self.op_kind == "conv2d" and self.dims["C"] == 1 and self.dims["G"] > 1

    @property
    def is_conv(self) -> bool:
        return self.op_kind == "conv2d"


@dataclass
class Workload:
    """Layers (indexed 0..L-1 in a topological order) and the DAG between them."""

    name: str
    layers: list[Layer]
    preds: list[list[int]]
    succs: list[list[int]]
    edge_bytes: dict[tuple[int, int], int] = field(default_factory=dict)
    """Bytes moved along u→v (int8)."""

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def names(self) -> list[str]:
        return [l.name for l in self.layers]

    def nx(self):
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.layers)))
        g.add_edges_from(self.edge_bytes)
        return g

    def is_topological(self, order: Sequence[int]) -> bool:
        pos = {v: i for i, v in enumerate(order)}
        return len(pos) == len(self.layers) and all(pos[u] < pos[v] for u, v in self.edge_bytes)

    def subset(self, keep: Iterable[int], name: str | None = None) -> "Workload":
        """The layers in ``keep`` (edges among them) as a workload: small instances for the exact solver."""
        keep = sorted(set(keep))
        m = {v: i for i, v in enumerate(keep)}
        preds = [[m[p] for p in self.preds[v] if p in m] for v in keep]
        succs = [[m[s] for s in self.succs[v] if s in m] for v in keep]
        eb = {(m[u], m[v]): b for (u, v), b in self.edge_bytes.items() if u in m and v in m}
        return Workload(name or f"{self.name}[{len(keep)}]", [self.layers[v] for v in keep], preds, succs, eb)


def _canonical_dims(op: Op) -> dict[str, int]:
    e = op.extents
    if op.kind == OpKind.conv2d:
        return {"B": e["b"], "G": e.get("g", 1), "K": e["k"], "C": e["c"], "P": e["p"], "Q": e["q"],
                "R": e["r"], "S": e["s"]}
    batch = math.prod(v for k, v in e.items() if k.startswith("b") and k[1:].isdigit())
    return {"B": batch, "M": e.get("m", 1), "N": e["n"], "K": e["k"]}


def _stride(op: Op) -> tuple[int, int]:
    st = op.attr("stride", 1) if op.kind == OpKind.conv2d else 1
    return (int(st), int(st)) if isinstance(st, int) else (int(st[0]), int(st[1]))


def layers_of_graph(g: Graph, elem_bytes: int = 1) -> tuple[list[Layer], dict[tuple[int, int], int]]:
    """The compute layers of one graph (topological order) and the contracted edges with their bytes."""
    order = g.topological_ops()
    idx: dict[str, int] = {}
    layers: list[Layer] = []
    for op in order:
        if op.kind not in LAYER_KINDS:
            continue
        acts = [a.tensor for a in op.inputs if a.tensor.role != TensorRole.weight]
        wts = [a.tensor for a in op.inputs if a.tensor.role == TensorRole.weight]
        if op.kind in (OpKind.matmul, OpKind.batch_matmul) and not wts:
            wts = []  # activation @ activation (attention): both operands are activations
        idx[op.name] = len(layers)
        layers.append(Layer(op.name, g.name, op.kind.value, _canonical_dims(op), op.macs,
                            sum(t.numel for t in acts) * elem_bytes, sum(t.numel for t in wts) * elem_bytes,
                            sum(a.tensor.numel for a in op.outputs) * elem_bytes, _stride(op)))
    # compute sources of each tensor, looking through non-compute ops (memoised)
    memo: dict[str, frozenset[int]] = {}

    def sources(tensor: str) -> frozenset[int]:
        if tensor in memo:
            return memo[tensor]
        stack, out, seen = [tensor], set(), set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in memo:
                out |= memo[t]
                continue
            p = g.producer(t)
            if p is None:
                continue
            if p.name in idx:
                out.add(idx[p.name])
            else:
                stack.extend(a.tensor.name for a in p.inputs if a.tensor.role != TensorRole.weight)
        memo[tensor] = frozenset(out)
        return memo[tensor]

    edges: dict[tuple[int, int], int] = {}
    for op in order:
        if op.name not in idx:
            continue
        v = idx[op.name]
        for a in op.inputs:
            if a.tensor.role == TensorRole.weight:
                continue
            for u in sources(a.tensor.name):
                if u != v:
                    b = min(layers[u].out_bytes, a.tensor.numel * elem_bytes)
                    edges[(u, v)] = max(edges.get((u, v), 0), b)
    return layers, _reduce(len(layers), edges)


def _reduce(n: int, edges: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """Transitive reduction: an edge implied by a longer path is dropped. Through elementwise chains (an LSTM's
    cell state) every earlier layer is a source of every later one; the precedence is kept by the path, and the
    bytes of the dropped edge travel along it in the real network anyway."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    red = nx.transitive_reduction(g)
    return {(u, v): edges[(u, v)] for u, v in red.edges}


def build_workload(models: Sequence[tuple[str, Graph, int]], name: str = "workload",
                   elem_bytes: int = 1) -> Workload:
    """Merge ``copies`` of each graph into one workload. Copies get distinct names ``<label>#<i>/<op>``
    (the same convention as ``shared_ir.Graph.merge``); the layer DAG of a model is extracted once and
    replicated, which is much faster than merging traced graphs of eight copies."""
    if not models:
        raise MapperError("workload.models", "needs at least one model")
    layers: list[Layer] = []
    edges: dict[tuple[int, int], int] = {}
    seen_labels: dict[str, int] = {}
    for mi, (label, g, copies) in enumerate(models):
        if copies < 1:
            raise MapperError(f"workload.models[{mi}].copies", f"must be >= 1, got {copies}", copies)
        ls, es = layers_of_graph(g, elem_bytes)
        if not ls:
            raise MapperError(f"workload.models[{mi}]", f"model {label!r} has no compute layers")
        for c in range(copies):
            k = seen_labels.get(label, 0)
            seen_labels[label] = k + 1
            prefix = f"{label}#{k}"
            off = len(layers)
            for l in ls:
                layers.append(Layer(f"{prefix}/{l.name}", prefix, l.op_kind, dict(l.dims), l.macs, l.in_bytes,
                                    l.weight_bytes, l.out_bytes, l.stride))
            for (u, v), b in es.items():
                edges[(u + off, v + off)] = b
    n = len(layers)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in sorted(edges):
        preds[v].append(u)
        succs[u].append(v)
    return Workload(name, layers, preds, succs, edges)


def workload_from_graph(g: Graph, elem_bytes: int = 1) -> Workload:
    """A workload from one (possibly already merged) graph; model label = the op name's prefix before '/'."""
    ls, es = layers_of_graph(g, elem_bytes)
    if not ls:
        raise MapperError(f"graph({g.name})", "has no compute layers (conv2d/linear/matmul/batch_matmul)")
    for l in ls:
        l.model = l.name.split("/", 1)[0] if "/" in l.name else g.name
    n = len(ls)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in sorted(es):
        preds[v].append(u)
        succs[u].append(v)
    return Workload(g.name, ls, preds, succs, es)


def mix_models(mix: str, copies: int | None = None) -> list[tuple[str, dict, int]]:
    """(zoo name, zoo kwargs, copies) of a reference mix; ``copies`` overrides the mix's count (smaller runs)."""
    if mix not in MIXES:
        raise MapperError("workload.mix", f"unknown mix {mix!r}; known: {sorted(MIXES)}", mix)
    models, n = MIXES[mix]
    return [(m, dict(kw), copies if copies is not None else n) for m, kw in models]


_GRAPH_CACHE: dict[tuple, Graph] = {}


def zoo_graph(name: str, **kw) -> Graph:
    """A zoo model traced once per process (tracing dominates the setup time of a benchmark)."""
    key = (name, tuple(sorted(kw.items())))
    if key not in _GRAPH_CACHE:
        from shared_ir.zoo import graph

        _GRAPH_CACHE[key] = graph(name, batch=1, **kw)
    return _GRAPH_CACHE[key]


def load_mix(mix: str, copies: int | None = None, elem_bytes: int = 1,
             models: Mapping[str, Graph] | None = None) -> Workload:
    """The workload of a reference mix with models from ``shared_ir.zoo`` (or from ``models`` by name)."""
    spec = []
    for m, kw, c in mix_models(mix, copies):
        g = models[m] if models is not None and m in models else zoo_graph(m, **kw)
        spec.append((m, g, c))
    return build_workload(spec, name=mix if copies is None else f"{mix}x{copies}", elem_bytes=elem_bytes)


def _load_graph(cfg: object, where: str) -> Graph:
    """A graph through shared_ir's workload loader (files, zoo, Hugging Face, the user's code); a config error at
    the loader's ``workload.<field>`` becomes a MapperError at ``<where>.<field>``."""
    from shared_ir.errors import ConfigFieldError
    from shared_ir.workload import load_workload

    try:
        return load_workload(cfg)
    except ConfigFieldError as err:
        field = err.path.removeprefix("workload").lstrip(".")
        raise MapperError(f"{where}.{field}" if field else where, err.problem, err.value) from None


def _mix_entry(e: object, where: str, copies: int | None) -> tuple[str, Graph, int]:
    """(label, graph, copies) of one entry of a user's mix: a zoo name, a graph file, or a mapping
    ``{model: <zoo name>, kwargs: {...}, copies: n}`` / ``{path: <file>, name: <label>, copies: n}`` /
    ``{workload: <any workload config>, name: <label>, copies: n}`` (e.g. ``{source: hf, name: gpt2, config:
    {n_layer: 2}}``: any model shared_ir imports, see :mod:`shared_ir.workload`)."""
    from shared_ir.zoo import MODELS

    d = dict(e) if isinstance(e, Mapping) else ({"path": e} if str(e).lower().endswith(GRAPH_SUFFIXES)
                                               else {"model": e})
    unknown = sorted(set(d) - {"model", "kwargs", "copies", "path", "name", "workload"})
    if unknown or sum(k in d for k in ("model", "path", "workload")) != 1:
        raise MapperError(where, "must be a zoo model name, a graph file (.yaml/.json/.onnx) or a mapping with "
                                 f"`model` (and `kwargs`), `path` or `workload`, and optionally `copies`/`name`; "
                                 f"got {e!r}", e)
    n = d.get("copies", copies if copies is not None else 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise MapperError(f"{where}.copies", f"must be an integer >= 1, got {n!r}", n)
    if "workload" in d:
        g = _load_graph(d["workload"], f"{where}.workload")
        return str(d.get("name") or g.name), g, n
    if "path" in d:
        g = _load_graph({"source": "file", "path": str(d["path"])}, where)
        return str(d.get("name") or g.name), g, n
    name = str(d["model"])
    if name not in MODELS:
        raise MapperError(where, f"unknown zoo model {name!r}; known: {sorted(MODELS)} (or give a graph file)", name)
    return str(d.get("name") or name), zoo_graph(name, **dict(d.get("kwargs") or {})), n


def load_user_mix(mix: str | Sequence[object], copies: int | None = None, elem_bytes: int = 1,
                  where: str = "task.mix") -> Workload:
    """A reference mix by name (:data:`MIXES`), or the user's own: a list of zoo model names, graph files
    (shared_ir YAML/JSON or ONNX) or mappings (see :func:`_mix_entry`); ``copies`` is each entry's default count
    (1 when not given). A single model name or file is a one-model mix."""
    if isinstance(mix, str) and mix in MIXES:
        return load_mix(mix, copies=copies, elem_bytes=elem_bytes)
    if not isinstance(mix, (str, Mapping, list, tuple)):
        raise MapperError(where, f"must be a mix name, a model, a graph file or a list of those, got {mix!r}", mix)
    entries = [mix] if isinstance(mix, (str, Mapping)) else list(mix)
    if not entries:
        raise MapperError(where, f"needs at least one model (or a reference mix: {sorted(MIXES)})", mix)
    if isinstance(mix, str) and not mix.lower().endswith(GRAPH_SUFFIXES):
        from shared_ir.zoo import MODELS

        if mix not in MODELS:
            raise MapperError(where, f"unknown mix {mix!r}: a reference mix {sorted(MIXES)}, a zoo model "
                                     f"{sorted(MODELS)}, a graph file, or a list of those", mix)
    spec = [_mix_entry(e, f"{where}[{i}]" if not isinstance(mix, (str, Mapping)) else where, copies)
            for i, e in enumerate(entries)]
    labels = [lab for lab, _, _ in spec]
    dup = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dup:
        raise MapperError(where, f"models {dup} appear twice: give one entry with `copies`, or a `name` each", dup)
    return build_workload(spec, name="+".join(labels), elem_bytes=elem_bytes)
