"""``chain_fuser.compile``: trace a PyTorch function or module with the shared frontend, fuse every chain a
template covers, and return a callable on torch tensors.

The shared_ir graph (``shared_ir.frontends.from_torch``) finds the chains and says what they are; the same module
traced by ``torch.fx`` is rewritten: each fused chain's nodes are replaced by one call of the compiled kernel
(inputs passed zero-copy through DLPack). A chain no template covers (an unsupported op between the compute ops,
a dtype without kernels, a shape the templates do not take) is left as it was, and the reason is recorded in
:attr:`CompiledModule.decisions` and emitted as a warning.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .errors import ChainDTypeError, ChainFuserError, ChainShapeError, UnsupportedChainError
from .spec import GemmChain, spec_from_chain


@dataclass
class ChainDecision:
    """What compile() did with one chain (or near-chain) of the graph."""

    ops: tuple[str, ...]
    fused: bool
    reason: str
    spec: Any = None
    kernel: Any = None
    report: Any = None
    gain: float | None = None
    """Eager ms / fused ms of the chain timed alone (None where not measured)."""

    def __str__(self) -> str:
        what = "fused" if self.fused else "NOT fused"
        return f"{'→'.join(self.ops)}: {what} ({self.reason})"


class _FnModule:
    """Wraps a plain function as an nn.Module (built lazily so torch is imported only when needed)."""

    @staticmethod
    def wrap(fn: Callable, n_inputs: int):
        import inspect

        import torch

        try:
            params = [p.name for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:n_inputs]
        except (TypeError, ValueError):
            params = []
        if len(params) != n_inputs or not all(p.isidentifier() for p in params):
            params = [f"x{i}" for i in range(n_inputs)]
        # fx cannot trace *args: give forward the function's own parameter names
        ns: dict[str, Any] = {}
        exec(f"def forward(self, {', '.join(params)}):\n    return self.f({', '.join(params)})\n", ns)

        class FnModule(torch.nn.Module):
            def __init__(self, f):
                super().__init__()
                self.f = f

            forward = ns["forward"]

        return FnModule(fn)


def _signature(args) -> tuple:
    """What a compiled graph depends on in its inputs: each tensor's shape, dtype, device and layout."""
    import torch

    return tuple((tuple(a.shape), a.dtype, a.device, a.layout) if isinstance(a, torch.Tensor) else type(a)
                 for a in args)


def _describe(sig) -> str:
    return f"{list(sig[0])} {sig[1]} on {sig[2]}" if isinstance(sig, tuple) else f"a {sig.__name__}"


class CompiledModule:
    """The rewritten module: call it like the original (inference: runs under ``torch.no_grad``).

    The kernels are compiled for the example inputs' shapes, dtypes and devices: a call whose positional inputs
    differ runs the original module eagerly instead (the reason is warned once and listed by :meth:`report`)."""

    def __init__(self, gm, decisions: list[ChainDecision], original, signature: tuple | None = None):
        self.gm = gm
        self.decisions = decisions
        self.original = original
        self.signature = signature
        self.fallbacks: dict[str, int] = {}
        """Why calls ran eagerly (another input shape, dtype or device) -> how many calls."""

    @property
    def fused(self) -> list[ChainDecision]:
        return [d for d in self.decisions if d.fused]

    @property
    def unfused(self) -> list[ChainDecision]:
        return [d for d in self.decisions if not d.fused]

    def _mismatch(self, args) -> str | None:
        if self.signature is None:
            return None
        got = _signature(args)
        if got == self.signature:
            return None
        if len(got) != len(self.signature):
            return f"called with {len(got)} inputs, compiled for {len(self.signature)}"
        i = next(i for i, (g, e) in enumerate(zip(got, self.signature)) if g != e)
        return f"input {i} is {_describe(got[i])}, compiled for {_describe(self.signature[i])}"

    def __call__(self, *args, **kwargs):
        import torch

        if not self.fused:  # nothing fused: the user's module itself, without the traced graph's call overhead
            with torch.no_grad():
                return self.original(*args, **kwargs)
        why = self._mismatch(args)
        with torch.no_grad():
            if why is None:
                return self.gm(*args, **kwargs)
            if why not in self.fallbacks:
                warnings.warn(f"chain_fuser: {why}: ran the original module eagerly", stacklevel=2)
            self.fallbacks[why] = self.fallbacks.get(why, 0) + 1
            return self.original(*args, **kwargs)

    def report(self) -> str:
        lines = [str(d) for d in self.decisions] or ["no chains of compute-intensive ops found"]
        lines += [f"ran eagerly {n} time(s): {why}" for why, n in self.fallbacks.items()]
        return "\n".join(lines)


class _GemmCall:
    """Replacement of a fused GEMM chain node: reshape to (batch, M, K) etc., call the kernel, reshape back."""

    def __init__(self, kernel, out_shape: Sequence[int]):
        self.kernel = kernel
        self.out_shape = tuple(out_shape)
        self.__name__ = f"chain_fuser_{kernel.spec.name}"

    def __call__(self, a, b, d, *bias):
        s = self.kernel.spec
        A = _as3(a, s.batch, s.M, s.K, f"{s.name}.A")
        B = _as3(b, s.batch, s.L, s.K, f"{s.name}.B") if s.bt else _as3(b, s.batch, s.K, s.L, f"{s.name}.B")
        D = _as3(d, s.batch, s.N, s.L, f"{s.name}.D") if s.dt else _as3(d, s.batch, s.L, s.N, f"{s.name}.D")
        return self.kernel(A, B, D, *(t.detach() for t in bias)).reshape(self.out_shape)


def _as3(t, batch, r, c, what: str = "operand"):
    """``t`` as a contiguous (batch, r, c) tensor: its leading dims flattened into batch × r rows (a Linear's input),
    or r rows shared by every batch entry; any other shape is the compiled chain's error, never a silent broadcast
    to another result shape."""
    t = t.detach()
    rows = math.prod(t.shape[:-1]) if t.dim() >= 2 else 0
    if t.dim() < 2 or t.shape[-1] != c or rows not in (r, batch * r):
        raise ChainShapeError(what, f"shape {list(t.shape)} does not match the compiled chain's {[batch, r, c]}")
    return t.reshape(rows // r, r, c).expand(batch, r, c).contiguous()


class _ConvCall:
    def __init__(self, kernel):
        self.kernel = kernel
        self.__name__ = f"chain_fuser_{kernel.spec.name}"

    def __call__(self, x, *params):
        return self.kernel(x.detach(), *(p.detach() for p in params))


def _near_chains(g, in_chain: set[str]) -> list[tuple[list[str], str]]:
    """Compute op → (up to 3 single-consumer non-compute ops) → compute op pairs not in any chain: the op that
    broke the chain and why."""
    out = []
    for op in g.topological_ops():
        if not op.kind.compute_intensive or len(op.outputs) != 1:
            continue
        path, cur = [op.name], op
        for _ in range(4):
            users = g.consumers(cur.output_names[0])
            if len(users) != 1 or cur.output_names[0] in g.outputs:
                break
            nxt = users[0]
            path.append(nxt.name)
            if nxt.kind.compute_intensive:
                if not (op.name in in_chain and nxt.name in in_chain):
                    mids = [g.op(n) for n in path[1:-1]]
                    bad = [m for m in mids if m.kind.value not in ("elementwise", "softmax")]
                    why = (f"op {bad[0].name!r} ({bad[0].kind.value}"
                           f"{'/' + str(bad[0].attr('fn')) if bad[0].attr('fn') else ''}) "
                           "between the compute ops has no fused template") if bad else "not a single-consumer chain"
                    out.append((path, why))
                break
            if len(nxt.outputs) != 1:
                break
            cur = nxt
    return out


EAGER_MARGIN = 0.10
"""A tuned fused kernel is used only where it measured faster than eager PyTorch on the same chain; a result
within this fraction of a tie is measured again, longer, before deciding."""


def sdpa_eager(spec):
    """What eager PyTorch runs for an attention chain captured from one ``scaled_dot_product_attention`` call: that
    call (its fused CPU kernel), on the chain's operands (A = Q, B = K in its own layout, D = V)."""
    import torch

    def run(A, B, D):
        return torch.nn.functional.scaled_dot_product_attention(A, B, D, is_causal=spec.causal, scale=spec.scale)

    return run


def measure_vs_eager(spec, kernel, use_cache: bool = True, repeat: int = 7, eager=None,
                     eager_name: str = "chain", remeasure: bool = False) -> tuple[float, float]:
    """(fused ms, eager ms) of one chain on random inputs of its shape, timed as the benchmark times its variants
    (``timing.time_interleaved``: interleaved repeats, each after untimed calls of the same variant, medians).
    Cached on disk with the tuning (a second compile measures nothing; ``remeasure`` measures and replaces it).
    ``eager``: what PyTorch runs instead of the chain (default its op-by-op form,
    :func:`chain_fuser.kernel.reference`), named by ``eager_name`` in the cache.

    Why the untimed calls: right after a torch call, torch's OpenMP workers spin on the cores (libgomp's default
    wait policy) and a TVM kernel started then runs at a fraction of its speed; timed back to back, a Mixer-S token
    MLP measured 3.99 ms fused against 0.58 ms eager, and 0.21 ms against 0.43 ms once each had the cores."""
    from . import cache
    from .kernel import _CODEGEN_VERSION, _WINOGRAD_VERSION, plan_signature, random_inputs, reference
    from .timing import time_interleaved

    extra = () if kernel.algorithm == "direct" else (kernel.algorithm, _WINOGRAD_VERSION)
    extra += () if eager_name == "chain" else (eager_name,)
    key = cache.entry_key("vs_eager_warm", spec.key, plan_signature(kernel.plan), kernel.fused,
                          cache.hardware_key(), _CODEGEN_VERSION, *extra)
    saved = cache.load_json(key) if use_cache and not remeasure else None
    if isinstance(saved, dict) and all(isinstance(saved.get(k), (int, float)) for k in ("fused_ms", "eager_ms")):
        return saved["fused_ms"], saved["eager_ms"]  # (a record of another structure is measured again)
    ins = random_inputs(spec)
    eager = eager or (lambda *t: reference(spec, *t))
    ms = time_interleaved({"fused": lambda: kernel(*ins), "eager": lambda: eager(*ins)}, repeat, 0.2)
    if use_cache:
        cache.save_json(key, {"spec": spec.key, "fused_ms": ms["fused"], "eager_ms": ms["eager"]})
    return ms["fused"], ms["eager"]


def compile(fn_or_module, example_inputs, *, top_k: int = 4, tune: bool = True, device: Any = None,
            use_cache: bool = True, verbose: bool = False, name: str | None = None,
            keep_faster_eager: bool = True, winograd: tuple[int, ...] = (2,),
            progress: bool = True) -> CompiledModule:
    """Trace, fuse what the templates cover (GEMM→GEMM, attention, conv→conv), return a callable.

    ``tune=True`` times the model's top ``top_k`` plans and keeps the fastest (cached on disk); ``tune=False``
    builds the model's first choice. With ``tune`` and ``keep_faster_eager``, a chain whose best kernel measures
    more than ``EAGER_MARGIN`` slower than eager PyTorch on the same chain stays eager (the decision gives both
    times); then the rewritten module is timed against the original on the example inputs, and while it is not
    faster, the fused chain with the smallest gain goes back to eager (:func:`measure_module` says why the chains
    alone do not decide). Chains left unfused are listed in the result's ``decisions`` with the reason (and
    warned about).
    ``winograd``: the Winograd tile sizes tried for 3×3 conv chains (``tune``'s argument: ``()`` none, ``(2, 4)``
    adds F(4×4, 3×3), faster, with 15-25× a direct conv's rounding error).
    ``progress``: a line on stderr per candidate kernel compiled for a chain not tuned before (seconds each);
    nothing when every choice comes from the cache."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    module = (fn_or_module if isinstance(fn_or_module, torch.nn.Module)
              else _FnModule.wrap(fn_or_module, len(example_inputs)))
    opt = _Options(top_k, tune, device, use_cache, keep_faster_eager, winograd, _progress_log if progress else None)
    label = name or type(module).__name__
    try:
        gm, near, per_chain = _build(module, example_inputs, label, opt)
        if tune and keep_faster_eager and any(d.fused for d in per_chain):
            gm, per_chain = _keep_if_faster_whole(module, example_inputs, label, opt, gm, per_chain)
    except _CaptureError as e:
        # nothing is fused, but the caller still gets a working callable and the reason
        d = ChainDecision(("<graph>",), False, f"the shared frontend cannot translate the graph: {e}")
        warnings.warn(f"chain_fuser: {d}", stacklevel=2)
        return CompiledModule(module, [d], module)
    decisions = near + per_chain
    for d in decisions:
        if not d.fused:
            warnings.warn(f"chain_fuser: {d}", stacklevel=2)
        elif verbose:
            print(f"chain_fuser: {d}")
    return CompiledModule(gm, decisions, module, _signature(example_inputs))


def _build(module, example_inputs: tuple, label: str, opt: "_Options", chosen: list | None = None):
    """(rewritten GraphModule, near-chain decisions, one decision per chain): capture, then fuse each chain; with
    ``chosen`` (an earlier build's decisions per chain) rewrite with the kernels already built, fusing only the
    chains still marked fused."""
    g, gm = _capture(module, example_inputs, label)
    nodes = {n.name: n for n in gm.graph.nodes}
    chains = g.chains()
    in_chain = {n for c in chains for n in c.names}
    near = [ChainDecision(tuple(path), False, why) for path, why in _near_chains(g, in_chain)]
    per_chain = []
    for i, ch in enumerate(chains):
        try:
            if chosen is None:
                per_chain.append(_fuse_chain(gm, g, ch, f"{g.name}_chain{i}", nodes, opt))
                continue
            if chosen[i].fused:
                _apply(gm, g, ch, f"{g.name}_chain{i}", nodes, chosen[i].kernel)
            per_chain.append(chosen[i])
        except (ChainFuserError, ChainDTypeError) as e:
            per_chain.append(ChainDecision(ch.names, False, str(e)))
    gm.graph.lint()
    gm.recompile()
    return gm, near, per_chain


def measure_module(compiled, original, example_inputs: tuple, repeat: int = 7) -> tuple[float, float]:
    """(rewritten ms, original ms) of the whole module on the example inputs, interleaved in this process.

    Why the whole module: there each fused kernel starts right after torch's ops, while torch's OpenMP workers
    still spin on the cores, and reads its operands in the layouts torch left them in (a BERT-base layer on a
    2-core Zen 3: its MLP kernel 13.2 ms alone, 21.6 ms right after a LayerNorm; its attention 1.2 ms alone,
    9.0 ms in the layer), which timing the chain alone does not see."""
    import torch

    from .timing import time_interleaved

    with torch.no_grad():
        ms = time_interleaved({"fused": lambda: compiled(*example_inputs),
                               "eager": lambda: original(*example_inputs)}, repeat, 0.5)
    return ms["fused"], ms["eager"]


def _whole_is_faster(gm, module, example_inputs) -> tuple[bool, float, float]:
    """Whether the rewritten module is strictly faster than the original; a near tie is timed again, longer."""
    fused_ms, eager_ms = measure_module(gm, module, example_inputs)
    if abs(fused_ms / eager_ms - 1) < EAGER_MARGIN:
        fused_ms, eager_ms = measure_module(gm, module, example_inputs, repeat=21)
    return fused_ms < eager_ms, fused_ms, eager_ms


def _keep_if_faster_whole(module, example_inputs, label, opt, gm, per_chain):
    """Never slower than the user's module: while the rewritten module is not faster than the original, the fused
    chain with the smallest gain measured alone goes back to eager, and the module is rebuilt and timed again."""
    while True:
        faster, fused_ms, eager_ms = _whole_is_faster(gm, module, example_inputs)
        fused = [d for d in per_chain if d.fused]
        if faster or not fused:
            return gm, per_chain
        worst = min(fused, key=lambda d: d.gain if d.gain is not None else math.inf)
        why = (f"kept eager: the whole module took {fused_ms:.3f} ms with it and {len(fused) - 1} other chain(s) "
               f"fused, {eager_ms:.3f} ms eager (alone: {worst.reason})")
        per_chain = [dataclasses.replace(d, fused=False, reason=why) if d is worst else d for d in per_chain]
        gm, _, per_chain = _build(module, example_inputs, label, opt, chosen=per_chain)


@dataclasses.dataclass(frozen=True)
class _Options:
    top_k: int
    tune: bool
    device: Any
    use_cache: bool
    keep_faster_eager: bool
    winograd: tuple[int, ...]
    log: Any = None


def _progress_log(line: str) -> None:
    print(f"chain_fuser: {line}", file=sys.stderr, flush=True)


def _chain_spec(ch, nodes, g, label: str):
    """(spec, transposed-B source node, SDPA node, is a Linear pair) of one chain of the captured graph."""
    spec = spec_from_chain(ch, name=label)
    src = None
    if isinstance(spec, GemmChain) and not spec.dt and ch.names[0] in nodes:
        src = _transposed_source(nodes[ch.names[0]], g)
        if src is not None:
            spec = dataclasses.replace(spec, bt=True)  # read K from its own layout: no transposing copy
    sdpa = _sdpa_node(ch, nodes, g)
    if sdpa is not None:
        spec = dataclasses.replace(spec, bt=True)  # SDPA's k is (…, L, K): read in its own layout
    elif any(n not in nodes for n in ch.names):
        missing = [n for n in ch.names if n not in nodes]
        raise UnsupportedChainError("→".join(ch.names), f"ops {missing} have no single fx node to replace")
    linear = isinstance(spec, GemmChain) and spec.dt
    if linear and spec.bt:
        # Linear weights (out, in) transposed once (and again only when they change, see _Transposed): the
        # kernel then packs them with contiguous loads instead of a strided gather on every call
        # (197×384×1536 MLP, same plan: 4.1 ms transposed, 3.1 ms not)
        spec = dataclasses.replace(spec, bt=False, dt=False)
    return spec, src, sdpa, linear


def _fuse_chain(gm, g, ch, label: str, nodes, opt: _Options) -> ChainDecision:
    """Build (and with ``opt.tune`` time) the chain's kernel, keep eager if that is faster, else rewrite ``gm``."""
    from .kernel import build_kernel
    from .kernel import tune as tune_fn
    from .planner import plan_chain

    spec, _, sdpa, _ = _chain_spec(ch, nodes, g, label)
    if opt.tune:
        kernel, rep = tune_fn(spec, top_k=opt.top_k, device=opt.device, use_cache=opt.use_cache,
                              winograd=opt.winograd, log=opt.log)
    else:
        kernel, rep = build_kernel(spec, plan_chain(spec, opt.device, top_k=1)[0], True, opt.use_cache), None
    gain = None
    if opt.tune and opt.keep_faster_eager:
        why, gain = _eager_is_faster(spec, kernel, sdpa is not None, opt.use_cache)
        if why:
            return ChainDecision(ch.names, False, why, spec, kernel, rep, gain)
    _apply(gm, g, ch, label, nodes, kernel)
    how = (f"{kernel.plan.micro.name}, order {','.join(kernel.plan.fused.order)}"
           if kernel.algorithm == "direct" else f"{kernel.algorithm} ({kernel.plan.micro.name})")
    return ChainDecision(ch.names, True, how, spec, kernel, rep, gain)


def _apply(gm, g, ch, label: str, nodes, kernel) -> None:
    """Replace the chain's nodes in ``gm`` by one call of ``kernel``."""
    spec, src, sdpa, linear = _chain_spec(ch, nodes, g, label)
    if sdpa is not None:
        _rewrite_sdpa(gm, sdpa, kernel, _meta_shape(gm, ch.ops[-1]))
    else:
        _rewrite(gm, ch, spec, kernel, nodes, src, linear)


def _eager_is_faster(spec, kernel, sdpa: bool, use_cache: bool) -> tuple[str | None, float]:
    """(the reason to keep eager PyTorch for this chain or None, eager ms / fused ms). A result within
    ``EAGER_MARGIN`` of a tie is measured again, three times as long, and that measurement decides (and replaces
    the cached one): a single short measurement on a shared machine mistook 0.91× for a win."""
    kw = dict(eager=sdpa_eager(spec), eager_name="sdpa") if sdpa else {}
    fused_ms, eager_ms = measure_vs_eager(spec, kernel, use_cache, **kw)
    if abs(fused_ms / eager_ms - 1) < EAGER_MARGIN:
        fused_ms, eager_ms = measure_vs_eager(spec, kernel, use_cache, repeat=21, remeasure=True, **kw)
    if fused_ms < eager_ms:
        return None, eager_ms / fused_ms
    return f"kept eager: the fused kernel took {fused_ms:.3f} ms, eager PyTorch {eager_ms:.3f} ms", eager_ms / fused_ms


class _CaptureError(Exception):
    pass


def _capture(module, example_inputs: tuple, name: str):
    """(IR graph, fx GraphModule whose node names are the graph's op names). torch.fx symbolic tracing first (its
    graph keeps the user's modules); where it cannot follow the code (most Hugging Face models), ``torch.export``
    lowered to ATen, whose unlifted module is rewritten the same way."""
    import torch.fx as fx

    from shared_ir.errors import IRError
    from shared_ir.frontends import from_torch
    from shared_ir.frontends.torch_export import export_program, graph_from_program

    try:
        return from_torch(module, example_inputs, name=name), fx.symbolic_trace(module)
    except (IRError, fx.proxy.TraceError) as e:
        fx_err = e
    was_training = module.training
    module.eval()
    try:
        ep = export_program(module, example_inputs)
        g = graph_from_program(ep, module, example_inputs, name)
        gm = ep.module()
    except Exception as e:  # noqa: BLE001 - export's failures are many kinds; the caller gets both reasons
        raise _CaptureError(f"{fx_err}; torch.export: {type(e).__name__}: {str(e).strip().splitlines()[0]}") from e
    finally:
        module.train(was_training)
    return g, gm


class _Transposed:
    """``w.t()`` as a contiguous tensor, made on the first call and again only when ``w`` changes (another tensor,
    or its in-place version counter moved, as after an optimiser step)."""

    def __init__(self):
        self.src, self.version, self.out = None, None, None
        self.__name__ = "chain_fuser_transposed_weight"

    def __call__(self, w):
        if self.src is not w or self.version != w._version:
            self.src, self.version = w, w._version
            self.out = w.detach().t().contiguous()
        return self.out


def _rewrite(gm, chain, spec, kernel, nodes, b_src=None, linear: bool = False) -> None:
    ops = [nodes[n] for n in chain.names]
    first, last = ops[0], ops[-1]
    graph = gm.graph
    if linear:  # Linear → Linear
        a, b, b1 = _linear_args(gm, first)
        _, d, b2 = _linear_args(gm, last)
        extra = tuple(t for t in (b1, b2) if t is not None)
        if not spec.dt:  # the weights go in as (in, out), transposed once (see compile)
            with graph.inserting_before(last):  # after both weights' get_attr nodes
                b = graph.call_function(_Transposed(), (b,))
                d = graph.call_function(_Transposed(), (d,))
        with graph.inserting_after(last):
            new = graph.call_function(_GemmCall(kernel, _meta_shape(gm, chain.ops[-1])), (a, b, d, *extra))
    elif isinstance(spec, GemmChain):
        a, b = _mm_args(first)
        _, d = _mm_args(last)
        if spec.bt:
            b = b_src
        out_shape = _meta_shape(gm, chain.ops[-1])
        with graph.inserting_after(last):
            new = graph.call_function(_GemmCall(kernel, out_shape), (a, b, d))
    else:
        x, w1, b1 = _conv_args(gm, first)
        _, w2, b2 = _conv_args(gm, last)
        params = [w1, w2] + [p for p in (b1, b2) if p is not None]
        with graph.inserting_after(last):
            new = graph.call_function(_ConvCall(kernel), (x, *params))
    last.replace_all_uses_with(new)
    for n in reversed(ops):
        if not n.users:
            graph.erase_node(n)


def _sdpa_node(chain, nodes, g):
    """The one exported ``scaled_dot_product_attention`` node a chain was expanded from (its ops are the node and
    ``<node>.<part>``), or None. Raises for what the attention template does not cover (masks, dropout,
    grouped-query heads): those stay eager with the reason (``is_causal`` is the spec's ``causal``)."""
    import torch

    last = chain.names[-1]
    node = nodes.get(last)
    if node is None or node.op != "call_function" or \
            node.target is not torch.ops.aten.scaled_dot_product_attention.default:
        return None
    if not all(n == last or n.startswith(last + ".") for n in chain.names):
        return None
    names = "→".join(chain.names)
    args = dict(zip(("query", "key", "value", "attn_mask", "dropout_p", "is_causal"), node.args))
    args.update(node.kwargs)
    if args.get("attn_mask") is not None:
        raise UnsupportedChainError(names, "attention with a mask has no fused template")
    if args.get("dropout_p"):
        raise UnsupportedChainError(names, f"attention dropout {args['dropout_p']} is not fused")
    q, k = (args[n].meta.get("val") for n in ("query", "key"))
    if q is None or k is None or q.dim() < 3 or q.shape[:-2] != k.shape[:-2]:
        raise UnsupportedChainError(names, "grouped-query heads (fewer key/value heads than query heads)")
    return node


def _rewrite_sdpa(gm, node, kernel, out_shape) -> None:
    args = list(node.args[:3]) + [node.kwargs.get(k) for k in ("query", "key", "value")][len(node.args):]
    with gm.graph.inserting_after(node):
        new = gm.graph.call_function(_GemmCall(kernel, out_shape), tuple(args))
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)
    # the kernel's output is contiguous where eager SDPA's is head-interleaved, so the exported `view`s that merge
    # the heads may need a copy: `reshape` is a view where one exists and a copy otherwise
    view, reshape = torch_ops().view.default, torch_ops().reshape.default
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is view:
            n.target = reshape


def torch_ops():
    import torch

    return torch.ops.aten


def _transposed_source(mm_node, g):
    """If the GEMM's right operand is ``x.transpose(-1, -2)`` (or ``torch.transpose``), the node ``x``."""
    import torch

    if len(mm_node.args) < 2 or not hasattr(mm_node.args[1], "op"):
        return None
    t = mm_node.args[1]
    if t.op == "call_function" and t.target is torch.ops.aten.permute.default and len(t.args) == 2:
        return _swapped_last_two(t)
    is_t = (t.op == "call_method" and t.target == "transpose") or \
        (t.op == "call_function" and t.target in (torch.transpose, torch.ops.aten.transpose.int))
    if not is_t or len(t.args) != 3 or not hasattr(t.args[0], "op"):
        return None
    d1, d2 = t.args[1], t.args[2]
    if not (isinstance(d1, int) and isinstance(d2, int)):
        return None
    nd = None
    if g is not None and t.name in g.tensors:
        nd = len(g.tensor(t.name).shape)
    if nd is None:
        nd = len(mm_node.meta.get("tensor_meta").shape) if mm_node.meta.get("tensor_meta") is not None else None
    if nd is None:
        ok = {d1, d2} == {-1, -2}
    else:
        ok = {d1 % nd, d2 % nd} == {nd - 1, nd - 2}
    return t.args[0] if ok else None


def _swapped_last_two(perm_node):
    """The source of an ATen ``permute`` that swaps exactly its last two dims (as ``k.transpose(-1, -2)`` exports)."""
    src, dims = perm_node.args
    n = len(dims)
    if n < 2 or not hasattr(src, "op") or list(dims) != list(range(n - 2)) + [n - 1, n - 2]:
        return None
    return src


def _meta_shape(gm, op) -> tuple[int, ...]:
    return tuple(op.outputs[0].tensor.shape)


def _mm_args(node):
    import operator

    import torch

    aten = torch.ops.aten
    if node.op != "call_function" or node.target not in (torch.bmm, torch.matmul, operator.matmul,
                                                         aten.matmul.default, aten.bmm.default):
        raise UnsupportedChainError(node.name, f"fx node {node.target} is not a bmm/matmul the rewriter knows")
    return node.args[0], node.args[1]


def _module_args(gm, node, cls):
    """(input, weight, bias) fx nodes of a call to a Linear/Conv2d submodule (bias None when the module has none)."""
    m = gm.get_submodule(node.target)
    if not isinstance(m, cls):
        raise UnsupportedChainError(node.name, f"module {type(m).__name__} is not a {cls.__name__}")
    with gm.graph.inserting_before(node):
        w = gm.graph.get_attr(f"{node.target}.weight")
        b = gm.graph.get_attr(f"{node.target}.bias") if m.bias is not None else None
    return node.args[0], w, b


def _linear_args(gm, node):
    import torch

    if node.op == "call_module":
        return _module_args(gm, node, torch.nn.Linear)
    if node.op == "call_function" and node.target in (torch.nn.functional.linear, torch.ops.aten.linear.default):
        args = list(node.args) + [None] * 2
        return args[0], node.kwargs.get("weight", args[1]), node.kwargs.get("bias", args[2])
    raise UnsupportedChainError(node.name, f"fx node {node.target} is not a linear the rewriter knows")


def _conv_args(gm, node):
    import torch

    if node.op == "call_module":
        return _module_args(gm, node, torch.nn.Conv2d)
    if node.op == "call_function" and node.target is torch.nn.functional.conv2d:
        args = list(node.args) + [None] * 3
        return args[0], args[1], node.kwargs.get("bias", args[2])
    raise UnsupportedChainError(node.name, f"fx node {node.target} is not a conv the rewriter knows")
