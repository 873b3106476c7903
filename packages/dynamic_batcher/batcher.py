"""The define-by-run batcher: record instances lazily, then schedule, plan and execute them in batches.

    bt = Batcher(model, policy="typewise_lb")
    outs = [workload_fn(bt, inst) for inst in minibatch]   # lazy Values
    bt.flush()                                              # or read any value: it flushes
    outs[0].value()                                         # torch tensor of instance 0

Reading a value whose node is still pending (data-dependent control flow) flushes everything pending first, so
the answer is always right. A value from an earlier flush used in a later graph enters it as a constant.
"""
from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

from .errors import BatcherError, ConfigError, InstanceError, ShapeMismatchError
from .executor import BlockPlan, ExecPlan, ExecStats, execute
from .graph import DynGraph
from .ir import KIND_TO_IR, Block, Model, Ops, Value, _label, _same_shape
from .policies import POLICIES, Policy, check_schedule, make_policy

CLOCK = [time.perf_counter]  # phase timer; the benchmark may switch it to process CPU time

@dataclass
class Timings:
    """Seconds spent per phase (accumulated over flushes)."""

    build_s: float = 0.0
    """Recording the graph (user code + node creation)."""
    sched_s: float = 0.0
    """Policy scheduling (graph analysis + choosing batches), zero on a cache hit."""
    plan_s: float = 0.0
    """Execution planning (argument resolution); block plans are built once per block and layout."""
    exec_s: float = 0.0
    """Running the batched kernels."""
    flushes: int = 0
    cache_hits: int = 0
    batches: int = 0
    nodes: int = 0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class TypeReport:
    type: str
    kind: str
    ir_kind: str | None
    nodes: int = 0
    batches: int = 0
    unbatched: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


class Batcher(Ops):
    """Lazy builder + scheduler + executor.

    ``policy``: a policy name (see :data:`dynamic_batcher.policies.POLICIES`) or a :class:`Policy` (e.g. a
    trained :class:`dynamic_batcher.rl.FSMPolicy`). ``blocks``: ``"block"`` keeps static blocks as single nodes
    (ED-Batch), ``"inline"`` records their ops into the dynamic graph (what DyNet sees). ``layout``: ``"pq"`` or
    ``"dynet"`` memory layout inside blocks. ``cache``: reuse schedule + plan for a graph of the same structure.
    ``threads``: torch's intra-op threads while a flush runs (restored after); None: one. A flush runs thousands
    of small kernels, where waking an OpenMP team per kernel costs more than it saves (Tree-LSTM, hidden 128, 32
    trees, 2 cores: 35 ms a minibatch on one thread, 155 ms on two).
    """

    def __init__(self, model: Model, policy: str | Policy = "typewise_lb", blocks: str = "block",
                 layout: str = "pq", cache: bool = True, check: bool = False, cache_size: int = 64,
                 threads: int | None = None):
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise ConfigError("batcher.threads", f"must be an integer >= 1 or None (one thread), got {threads!r}")
        self.threads = threads or 1
        if blocks not in ("block", "inline"):
            raise ConfigError("batcher.blocks", f"must be 'block' or 'inline', got {blocks!r}")
        if layout not in ("pq", "dynet"):
            raise ConfigError("batcher.layout", f"must be 'pq' or 'dynet', got {layout!r}")
        self.model = model
        self.policy: Policy = _policy(policy)
        self.blocks = blocks
        self.layout = layout
        self.cache_on = cache
        self.check = check
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self.block_plans: dict[str, BlockPlan] = {}
        self.stats = ExecStats()
        self.times = Timings()
        self.last_schedule: list[list[int]] | None = None
        self.last_graph: DynGraph | None = None
        self._used_blocks: set = set()
        self._block_names: dict[str, Block] = {}
        self.failures: list[BatcherError] = []
        """One error per failed node of the last flush (the instances it names); their values raise it."""
        self._new_graph()

    def _new_graph(self) -> None:
        self.g = DynGraph()
        self._t_start = CLOCK[0]()

    # --- recording ------------------------------------------------------------------------------------------
    def _count(self) -> int:
        return self.g.n

    def _emit(self, kind, args, params, attrs, shapes, data=None, label=""):
        g = self.g
        # the common case, every argument recorded in this graph (only this batcher records into it)
        refs = [(a.node, a.out) for a in args if a.g is g]
        if len(refs) != len(args):
            refs = self._foreign_refs(kind, args, params, label)
        i = g.add(kind, tuple(refs), params, attrs, tuple(shapes), data, label)
        if len(shapes) == 1:  # most nodes: no generator
            return (Value(self, g, i, 0, tuple(shapes[0])),)
        return tuple(Value(self, g, i, o, tuple(s)) for o, s in enumerate(shapes))

    def _foreign_refs(self, kind, args, params, label) -> list:
        """Argument references when some argument is an eager tensor's value or from an earlier flush (both enter
        as constants); a value of another builder is an error."""
        g = self.g
        refs = []
        for a in args:
            if a.b is not self:
                if a.g is None and a._t is not None:  # an eager value: becomes a constant
                    a = self.constant(a._t)
                else:
                    raise BatcherError(f"node {label or _label(kind, g.n, params)}: argument {a!r} belongs to "
                                       "another builder")
            elif a.g is not g:  # computed in an earlier flush: enters this graph as a constant
                a = self.constant(a.value())
            refs.append((a.node, a.out))
        return refs

    def _call_block(self, block: Block, args: list[Value], label: str) -> tuple[Value, ...]:
        if self.blocks == "inline":
            outs = block.fn(self, *args)
            return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        seen = self._block_names.setdefault(block.name, block)
        if seen is not block:
            self._block_clash(block, seen)
        self._used_blocks.add(block)
        return super()._call_block(block, args, label)

    def _block_clash(self, block: Block, seen: Block) -> None:
        # block plans and batching signatures know a block by its name: a second block of that name would run
        # with the first one's plan (wrong shapes or silently wrong weights)
        node = _label("block", self.g.n, (), f"<{block.name}>")

        def desc(b: Block) -> str:
            return f"block {b.name} of model {b.model.name} (inputs {b.input_shapes}, outputs " \
                   f"{[list(s) for s in b.output_shapes]})"

        msg = (f"{desc(block)} is not the {desc(seen)} this batcher already runs; blocks are told apart by name, "
               "so give them different names or use one batcher per model")
        if (block.input_shapes, block.output_shapes) != (seen.input_shapes, seen.output_shapes):
            raise ShapeMismatchError(node, msg)
        raise BatcherError(f"node {node}: {msg}")

    # --- results --------------------------------------------------------------------------------------------
    def materialize(self, v: Value):
        if v._t is not None:
            return v._t
        if v.g is self.g:
            self.flush()
        res = v.g.results
        if res is None:
            err = v.g.error
            if err is not None:
                raise BatcherError(f"value {v!r}: the flush of its graph failed: {type(err).__name__}: {err}") \
                    from err
            raise BatcherError(f"value {v!r} was never computed")
        if v.g.failed and v.node in v.g.failed:
            raise _failure(v.g, v.node)
        store, loc_b, loc_r = res
        t = store[int(loc_b[v.node])][v.out][int(loc_r[v.node])]  # locations may be numpy arrays
        v._t = t
        return t

    def stack(self, values: Sequence[Value]):
        """``torch.stack`` of the values' tensors in a few differentiable ops: one ``index_select`` per batch output
        they come from and one reorder, instead of a select per value. Why: each select's backward allocates its
        whole batch output's gradient; the 2,000 outputs of a Tree-LSTM minibatch made as many autograd nodes.
        Flushes pending work first; constants, eager values and values of another builder are read one by one."""
        import torch

        vals = _same_shape(values)
        if any(v.b is not self or v._t is not None or v.g is None for v in vals):
            return torch.stack([v.value() for v in vals])
        if any(v.g is self.g for v in vals):
            self.flush()
        groups: dict[tuple, tuple] = {}  # (graph, batch, output) -> (batch output, positions, rows)
        for pos, v in enumerate(vals):
            g = v.g
            if g.results is None or (g.failed and v.node in g.failed):
                v.value()  # raises what reading that value raises
            store, loc_b, loc_r = g.results
            key = (id(g), int(loc_b[v.node]), v.out)
            grp = groups.get(key)
            if grp is None:
                groups[key] = grp = (store[key[1]][v.out], [], [])
            grp[1].append(pos)
            grp[2].append(int(loc_r[v.node]))
        parts, order = [], []
        for t, poss, rows in groups.values():
            parts.append(t.index_select(0, torch.tensor(rows, device=t.device)))
            order += poss
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        if order != list(range(len(vals))):
            inv = [0] * len(order)
            for i, p in enumerate(order):
                inv[p] = i
            x = x.index_select(0, torch.tensor(inv, device=x.device))
        return x

    # --- flushing -------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Schedule, plan and run everything recorded so far."""
        if self.g.n == 0:
            return
        from shared_ir.graph import gc_paused

        # the cyclic collector is paused during a flush (every policy alike): a flush allocates few Python objects,
        # and a collection triggered inside it is paid for the recording's garbage; it runs at the next
        # allocations instead (end-to-end times include it either way)
        g = self.g
        with gc_paused(), _torch_threads(self.threads):
            try:
                self._flush()
            except Exception as e:
                # the pending graph is dropped: its values raise this error, later recordings start afresh
                g.error = e
                if self.g is g:
                    self._new_graph()
                self._used_blocks = set()
                raise

    def _flush(self) -> None:
        g = self.g
        t0 = CLOCK[0]()
        self.times.build_s += t0 - self._t_start
        key = g.structure_key() if self.cache_on else None
        hit = self._cache.get(key) if key is not None else None
        if hit is not None and not g.same_structure(hit[2]):
            hit = None
        if hit is not None:
            self._cache.move_to_end(key)
            batches, plan, _ = hit
            self.times.cache_hits += 1
            t1 = t2 = CLOCK[0]()
        else:
            view = g.view()
            batches = self.policy.schedule(view)
            if self.check:
                check_schedule(view, batches)
            t1 = CLOCK[0]()
            plan = ExecPlan(g, batches)
            t2 = CLOCK[0]()
            if key is not None:
                # keep only the structure lists (not the results) to confirm later hits
                self._cache[key] = (batches, plan, SimpleNamespace(n=g.n, type=g.type, args=g.args,
                                                                   type_sig=g.type_sig))
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        dev = self.model.device
        for b in self._used_blocks:
            bp = self.block_plans.get(b.name)
            if bp is None or bp.device != dev:  # built once per block, layout and device, reused by every flush
                self.block_plans[b.name] = BlockPlan(b, self.layout, device=dev)
        self._used_blocks = set()
        t3 = CLOCK[0]()
        store = execute(g, plan, self.block_plans, self.stats, g.failed, dev)
        t4 = CLOCK[0]()
        g.results = (store, plan.loc_b, plan.loc_r)
        if g.failed:
            _name_instances(g)
        self.failures = [_failure(g, v) for v in sorted(g.failed) if g.failed[v][0] == v]
        self.times.sched_s += t1 - t0
        self.times.plan_s += (t2 - t1) + (t3 - t2)
        self.times.exec_s += t4 - t3
        self.times.flushes += 1
        self.times.batches += len(batches)
        self.times.nodes += g.n
        self.last_schedule = batches
        self.last_graph = g
        # the cached view and the graph refer to each other: dropping the view lets refcounting free a finished
        # graph (a cycle would wait for a full collection, a 100+ ms pause in a later minibatch)
        g._frozen = None
        self._new_graph()

    # --- reporting ------------------------------------------------------------------------------------------
    def report(self, g: DynGraph | None = None, batches: list[list[int]] | None = None) -> list[TypeReport]:
        """Per type: nodes, batches, nodes left unbatched and why (of the last flush by default)."""
        g = g or self.last_graph
        batches = batches if batches is not None else self.last_schedule
        if g is None or batches is None:
            return []
        reps: dict[int, TypeReport] = {}
        for b in batches:
            t = g.type[b[0]]
            r = reps.get(t)
            if r is None:
                kind = g.kind[b[0]]
                ir = KIND_TO_IR.get(kind)
                r = reps[t] = TypeReport(g.type_key(t) if t else f"unbatchable:{kind}", kind,
                                         ir.value if ir is not None else None)
            r.nodes += len(b)
            r.batches += 1
            if len(b) == 1:
                r.unbatched += 1
                if t == 0:
                    name = dict(g.attrs[b[0]]).get("fn", kind)
                    why = f"no batching rule (custom op {name!r})"
                else:
                    why = "alone in its batch (no other ready node of its signature)"
                r.reasons[why] = r.reasons.get(why, 0) + 1
        return sorted(reps.values(), key=lambda r: -r.nodes)


    def batching_summary(self) -> dict[str, Any]:
        """Of the last flush: nodes, batches, the lower bound of its graph and the per-type report."""
        g, b = self.last_graph, self.last_schedule
        if g is None or b is None:
            return {}
        return {"nodes": g.n, "batches": len(b), "lower_bound": g.view().lower_bound(),
                "types": [r.__dict__ for r in self.report()]}


def _policy(policy: Any) -> Policy:
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ConfigError("batcher.policy", f"unknown policy {policy!r}; expected one of {sorted(POLICIES)} "
                                                "or a Policy object (e.g. a trained FSMPolicy)")
        return make_policy(policy)
    if not callable(getattr(policy, "schedule", None)):
        raise ConfigError("batcher.policy", f"must be a policy name or a Policy object, got "
                                            f"{type(policy).__name__}")
    return policy


def _name_instances(g: DynGraph) -> None:
    """Add to each failed node the index of the instance that raised: its weakly connected component, in
    recording order (components come ordered by their first node)."""
    roots = {r for r, _ in g.failed.values()}
    inst = {}
    for c, nodes in enumerate(g.view().components()):
        for u in roots.intersection(nodes):
            inst[u] = c
    g.failed = {v: (r, e, inst[r]) for v, (r, e) in g.failed.items()}


def _failure(g: DynGraph, v: int) -> BatcherError:
    """The error that reading node ``v`` of a flush where its instance failed raises."""
    root, cause, inst = g.failed[v]
    via = "" if v == root else f"; node {g.label(v)} depends on it"
    if isinstance(cause, ShapeMismatchError):
        err: BatcherError = ShapeMismatchError(cause.node, f"instance {inst}: {cause.message}{via}")
    else:
        kind = g.kind[root]
        op = f"custom op {dict(g.attrs[root]).get('fn', kind)!r}" if kind == "custom" else f"{kind} op"
        err = InstanceError(inst, g.label(root), op, f"{type(cause).__name__}: {cause}{via}")
    err.__cause__ = cause
    return err


def format_report(reps: list[TypeReport]) -> str:
    lines = [f"{'type':70s} {'nodes':>6s} {'batches':>7s} {'unbatched':>9s}"]
    for r in reps:
        lines.append(f"{r.type[:70]:70s} {r.nodes:6d} {r.batches:7d} {r.unbatched:9d}")
        for why, n in r.reasons.items():
            lines.append(f"    {n} × {why}")
    return "\n".join(lines)


__all__ = ["Batcher", "Timings", "TypeReport", "format_report"]
_ = Any
