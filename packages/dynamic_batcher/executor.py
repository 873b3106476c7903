"""Batched execution with PyTorch kernels: static-block plans and the dynamic-graph executor.

Static block (:class:`BlockPlan`): the block body's nodes are batched among themselves (exact search on the per-type
critical path; linear ops of equal shapes with different weights run as one ``bmm`` over weights stacked once, again
after an in-place update), laid out in per-shape arenas ``[slots, k, *shape]`` (k = instances in the block batch) by
the DyNet or the PQ-tree planner, and executed with views where an argument set is contiguous and in order, gathers
(``index_select``) elsewhere. Dynamic graph (:class:`ExecPlan`): each batch's outputs are one tensor ``(k, ...)`` in
batch order (the DyNet layout); argument sets that are one contiguous run of one batch are views, others are
concatenated from runs (a gather). Every copy is counted in :class:`ExecStats`. When autograd must see a block (grad
mode on, a weight or an input requiring grad) it runs out of place instead (:meth:`BlockPlan._run_grad`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from itertools import chain
from typing import Any

from .errors import BatcherError, ShapeMismatchError
from .graph import DynGraph, GraphView
from .ir import Block
from .planner import BatchSpec, dynet_layout, pq_layout
from .policies import TypewiseLB, exact_optimum

F32 = 4
STAGE_LIMIT_BYTES = 4096  # per instance: larger distinct block inputs are not copied together to batch an op


@dataclass
class ExecStats:
    """Counters of one or more executions."""

    kernels: int = 0
    """Kernel launches (batched ops, block-internal ops included)."""
    gathers: int = 0
    """Argument sets copied at the dynamic-graph level."""
    gather_bytes: int = 0
    """Bytes copied by those gathers."""
    block_gathers: int = 0
    """Argument sets copied inside static blocks."""
    block_gather_bytes: int = 0
    """Bytes copied inside static blocks (gathers + output scatters): what the PQ layout targets."""
    staged_bytes: int = 0
    """Block inputs copied into block arenas (same for both layouts)."""

    def add(self, o: "ExecStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(o, f.name))

    @property
    def copied_bytes(self) -> int:
        return self.gather_bytes + self.block_gather_bytes + self.staged_bytes

    def as_dict(self) -> dict[str, int]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["copied_bytes"] = self.copied_bytes
        return d


def _inner_sig(n) -> tuple:
    # inside a block, linear ops of equal shapes batch across different weights (stacked once), so the weight
    # identity is not part of the block-internal signature
    return (n.kind, tuple(p.shape for p in n.params), n.attrs, n.shape)


class BlockPlan:
    """Internal schedule + memory layout + pre-stacked weights of one static block (cached per block/layout)."""

    def __init__(self, block: Block, layout: str = "pq", max_states: int = 100_000, device: Any = None):
        if layout not in ("pq", "dynet"):
            raise BatcherError(f"block {block.name}: layout must be 'pq' or 'dynet', got {layout!r}")
        import torch

        self.block = block
        self.layout_name = layout
        self.device = torch.device(device if device is not None else "cpu")
        T = block.template
        nodes = T.nodes
        comp = [n.idx for n in nodes if n.kind != "input"]
        inputs = [n.idx for n in nodes if n.kind == "input"]
        batches = self._schedule(nodes, comp, max_states)
        # shape classes
        cls = {n.idx: n.shape for n in nodes}
        self.class_shapes = sorted(set(cls.values()))
        cid = {s: i for i, s in enumerate(self.class_shapes)}
        specs = []
        for b in batches:
            nargs = len(nodes[b[0]].args)
            w = [math.prod(nodes[nodes[b[0]].args[j]].shape) * F32 for j in range(nargs)]
            specs.append(BatchSpec(list(b), [[nodes[v].args[j] for v in b] for j in range(nargs)], w))
        lay = pq_layout(cls, specs) if layout == "pq" else dynet_layout(cls, inputs, specs)
        self.layout = lay
        self.sizes = [0] * len(self.class_shapes)
        for v, p in lay.pos.items():
            c = cid[cls[v]]
            self.sizes[c] = max(self.sizes[c], p + 1)
        in_index = {v: nodes[v].attrs[0][1] for v in inputs}
        groups = self._groups(specs, lay.order, cls, in_index, layout)
        # which inputs must be staged into the arena (they appear in a multi-item argument set)
        staged: set[int] = set()
        self.steps = [self._step(nodes, b, idx, order, cls, cid, in_index, staged) for b, idx, order in groups]
        self.batches = [list(o) for _, _, o in groups]
        self.stage = [(in_index[v], cid[cls[v]], lay.pos[v], math.prod(cls[v]) * F32) for v in sorted(staged)]
        self.stage_slot = {i: (c, p) for i, c, p, _ in self.stage}
        """Input index -> (shape class, slot) of the inputs copied into the arena."""
        self.outputs = [(cid[cls[o]], lay.pos[o]) for o in T.outputs]
        self.n_internal = len(comp)
        self.wparams = [st[4] for st in self.steps]
        self.params = list({id(p): p for n in nodes for p in n.params}.values())
        self._wstate: tuple = ()
        self.weights: list = []
        self._gw_key: Any = None
        self._gw: list = []

    def _schedule(self, nodes, comp: list[int], max_states: int) -> list[list[int]]:
        """The block's internal batches: the exact optimum when small enough, else the type-wise heuristic."""
        local = {v: i for i, v in enumerate(comp)}
        sigs: dict[tuple, int] = {}
        types, preds = [], []
        for v in comp:
            s = _inner_sig(nodes[v])
            types.append(sigs.setdefault(s, len(sigs) + 1))
            preds.append(tuple(local[a] for a in nodes[v].args if a in local))
        keys = ["unbatchable"] + [f"{s[0]}{list(s[3])}#{t}" for s, t in sorted(sigs.items(), key=lambda x: x[1])]
        view = GraphView(types, preds, keys, names=[nodes[v].label for v in comp])
        sched = exact_optimum(view, max_states) if view.n <= 62 else None
        self.exact = sched is not None
        if sched is None:
            sched = TypewiseLB().schedule(view)
        self.lower_bound = view.lower_bound()
        return [[comp[i] for i in b] for b in sched]

    @staticmethod
    def _groups(specs: list, orders: list, cls: dict, in_index: dict, layout: str) -> list[tuple]:
        """(batch, its output index, the outputs run together) per kernel call, in order."""
        groups = []
        for b, order in zip(specs, orders):
            idx = {o: i for i, o in enumerate(b.outs)}
            # cost guard: batching k-instance ops whose argument set is several distinct *large* block inputs
            # would copy them all into the arena (e.g. MV-RNN's H×H matrices) to save one kernel launch; run
            # such batches op by op on the inputs in place instead
            big = any(len(set(a)) > 1 and any(x in in_index for x in a)
                      and math.prod(cls[a[0]]) * F32 > STAGE_LIMIT_BYTES for a in b.args)
            if big and len(order) > 1:
                groups.extend((b, idx, [o]) for o in order)
                continue
            if layout == "pq" and len(order) > 1:
                # an argument set that repeats a node next to others ([h, h, hw]: two gates read h, one reads
                # hw) can never be a view (a duplicate has no place of its own in the arena); when the repeats
                # are adjacent in the planned order, run the batch as consecutive sub-batches per distinct
                # argument instead (a broadcast and views: one more kernel launch, no copy)
                dup = [j for j, a in enumerate(b.args) if 1 < len(set(a)) < len(a)]
                if len(dup) == 1:
                    a = [b.args[dup[0]][idx[o]] for o in order]
                    cuts = [i for i in range(1, len(a)) if a[i] != a[i - 1]]
                    if len(cuts) + 1 == len(set(a)):  # each distinct argument is one consecutive run
                        edges = [0] + cuts + [len(order)]
                        groups.extend((b, idx, order[x:y]) for x, y in zip(edges, edges[1:]))
                        continue
            groups.append((b, idx, order))
        return groups

    def _step(self, nodes, b, idx: dict, order: list[int], cls: dict, cid: dict, in_index: dict,
              staged: set) -> tuple:
        """One kernel call: (kind, attrs, argument accesses, output access, stacked weights, shape); block inputs
        read through a gather are added to ``staged``."""
        import torch

        lay = self.layout
        rep = nodes[order[0]]
        m = len(order)
        args = []
        for j in range(len(b.args)):
            a = [b.args[j][idx[o]] for o in order]
            c = cid[cls[a[0]]]
            numel = math.prod(cls[a[0]])
            if len(set(a)) == 1:
                if a[0] in in_index:
                    args.append(("ext", in_index[a[0]], m, 0))
                else:
                    args.append(("bcast", c, lay.pos[a[0]], m, 0))
                continue
            for x in a:
                if x in in_index:
                    staged.add(x)
            ps = [lay.pos[x] for x in a]
            if ps == list(range(ps[0], ps[0] + m)):
                args.append(("view", c, ps[0], m, 0))
            else:
                # the positions twice: as an index on the device (inference) and as a list (the grad path)
                args.append(("gather", c, torch.tensor(ps, device=self.device), m, m * numel * F32, ps))
        oc = cid[rep.shape]
        ps = [lay.pos[o] for o in order]
        if ps == list(range(ps[0], ps[0] + m)):
            out = ("view", oc, ps[0], m, 0)
        else:
            out = ("scatter", oc, torch.tensor(ps, device=self.device), m, m * math.prod(rep.shape) * F32, ps)
        return rep.kind, dict(rep.attrs), args, out, self._weight_params(nodes, rep, order), rep.shape

    @staticmethod
    def _weight_params(nodes, rep, order: list[int]):
        """The Params of a linear batch: (weights, biases or None, vector op?); None for other kinds."""
        if rep.kind != "linear":
            return None
        bias = [nodes[o].params[1] for o in order] if len(rep.params) > 1 else None
        return [nodes[o].params[0] for o in order], bias, len(rep.shape) == 1

    @staticmethod
    def _stack(wp):
        """The batch's weights (and biases) stacked into one tensor each (differentiable when they need grad)."""
        import torch

        if wp is None:
            return None
        ws, bs, vec = wp
        if vec:
            W = torch.stack([p.tensor.t() for p in ws])  # (m, in, out)
        else:
            W = torch.stack([p.tensor for p in ws]).unsqueeze(1)  # (m, 1, out, in)
        bias = None if bs is None else torch.stack([p.tensor for p in bs]).unsqueeze(1)
        return W, bias

    def _weight_state(self) -> tuple:
        # identity + in-place version of every weight: an optimizer step bumps the version
        return tuple((id(p.tensor), p.tensor._version) for p in self.params)

    def _fresh_weights(self) -> None:
        """Restack the inference path's weights when a parameter changed since they were stacked."""
        import torch

        state = self._weight_state()
        if state != self._wstate:
            with torch.no_grad():
                self.weights = [self._stack(wp) for wp in self.wparams]
            self._wstate = state

    def needs_grad(self, inputs: list) -> bool:
        """Whether autograd must see this run: grad mode on and a weight or an input requires grad."""
        import torch

        return torch.is_grad_enabled() and (any(p.tensor.requires_grad for p in self.params)
                                            or any(x.requires_grad for x in inputs))

    def arena(self, k: int) -> list:
        """Uninitialised arenas of one run over ``k`` instances: per shape class, (slots, k, *shape)."""
        import torch

        return [torch.empty((s, k) + shp, device=self.device) for s, shp in zip(self.sizes, self.class_shapes)]

    def run(self, inputs: list, stats: ExecStats, ar: list | None = None, placed: set | None = None,
            flush: Any = None) -> list:
        """Outputs of one batched run. ``ar``/``placed``: an arena from :meth:`arena` whose staging slots of the
        inputs in ``placed`` already hold them (the executor gathered them there: one copy, not two). ``flush``:
        a token of the current flush; the differentiable path stacks its weights once per flush, not per run."""
        import torch

        if self.needs_grad(inputs):
            return self._run_grad(inputs, stats, flush)
        self._fresh_weights()
        k = inputs[0].shape[0]
        if ar is None:
            ar = self.arena(k)
        for i, c, p, nb in self.stage:
            if placed is None or i not in placed:
                ar[c][p].copy_(inputs[i])
            stats.staged_bytes += nb * k
        for (kind, attrs, args, out, _, shape), W in zip(self.steps, self.weights):
            xs = []
            for a in args:
                t = a[0]
                if t == "view":
                    xs.append(ar[a[1]][a[2]:a[2] + a[3]])
                elif t == "ext":
                    x = inputs[a[1]].unsqueeze(0)
                    xs.append(x.expand((a[2],) + tuple(x.shape[1:])) if a[2] > 1 else x)
                elif t == "bcast":
                    x = ar[a[1]][a[2]].unsqueeze(0)
                    xs.append(x.expand((a[3],) + tuple(x.shape[1:])) if a[3] > 1 else x)
                else:
                    xs.append(ar[a[1]].index_select(0, a[2]))
                    stats.block_gathers += 1
                    stats.block_gather_bytes += a[4] * k
            m = out[3]
            if out[0] == "view":
                o = ar[out[1]][out[2]:out[2] + m]
            else:
                o = torch.empty((m, k) + shape, device=self.device)
            _block_kernel(kind, attrs, xs, W, o)
            stats.kernels += 1
            if out[0] == "scatter":
                ar[out[1]].index_copy_(0, out[2], o)
                stats.block_gathers += 1
                stats.block_gather_bytes += out[4] * k
        return [ar[c][p] for c, p in self.outputs]

    def _grad_weights(self, flush: Any) -> list:
        """Differentiable stacks of the batch weights, shared by every run of one flush (one autograd graph)."""
        key = (flush, self._weight_state())
        if flush is None or self._gw_key != key:
            self._gw = [self._stack(wp) for wp in self.wparams]
            self._gw_key = key if flush is not None else None
        return self._gw

    def _run_grad(self, inputs: list, stats: ExecStats, flush: Any = None) -> list:
        """The same schedule with out-of-place ops (autograd cannot record ``out=`` writes): each arena slot
        refers to (tensor, row) of the kernel output that produced it; a run of rows of one output is a view,
        anything else is stacked."""
        k = inputs[0].shape[0]
        slots: list[list] = [[None] * s for s in self.sizes]
        for i, c, p, _ in self.stage:
            slots[c][p] = (inputs[i].unsqueeze(0), 0, (inputs[i],))
        for (kind, attrs, args, out, _, _), W in zip(self.steps, self._grad_weights(flush)):
            xs = []
            for a in args:
                t = a[0]
                if t == "ext":
                    x = inputs[a[1]].unsqueeze(0)
                    xs.append(x.expand((a[2],) + tuple(x.shape[1:])) if a[2] > 1 else x)
                elif t == "bcast":
                    x = _rows(slots[a[1]], [a[2]])
                    xs.append(x.expand((a[3],) + tuple(x.shape[1:])) if a[3] > 1 else x)
                elif t == "view":
                    xs.append(_rows(slots[a[1]], range(a[2], a[2] + a[3])))
                else:
                    xs.append(_rows(slots[a[1]], a[5]))
                    stats.block_gathers += 1
                    stats.block_gather_bytes += a[4] * k
            y = _block_op(kind, attrs, xs, W)
            stats.kernels += 1
            ps = range(out[2], out[2] + out[3]) if out[0] == "view" else out[5]
            sl = slots[out[1]]
            parts = y.unbind(0)
            for r, p in enumerate(ps):
                sl[p] = (y, r, parts)
        return [slots[c][p][2][slots[c][p][1]] for c, p in self.outputs]


def _rows(slots: list, ps) -> Any:
    """Slots ``ps`` as one (len(ps), k, ...) tensor: the producing output itself when they are all its rows in
    order, else a stack of its rows from one ``unbind`` per output. Why not slices and selects: the backward of
    each allocates and zero-fills its whole source, once per consumer (a Tree-LSTM step made ~190 of them,
    10 % of it); an unbind's backward stacks the rows' gradients once."""
    import torch

    t0, r0, parts = slots[ps[0]]
    n = len(ps)
    if r0 == 0 and n == t0.shape[0] and all(slots[p][0] is t0 and slots[p][1] == i for i, p in enumerate(ps)):
        return t0
    if n == 1:
        return parts[r0].unsqueeze(0)
    return torch.stack([slots[p][2][slots[p][1]] for p in ps])


def _block_op(kind: str, attrs: dict, xs: list, W: Any) -> Any:
    """Out-of-place twin of :func:`_block_kernel` (differentiable)."""
    import torch

    if kind == "linear":
        w, b = W
        x = xs[0]
        if x.dim() == 3:  # vectors: (m, k, in) @ (m, in, out)
            return torch.bmm(x, w) if b is None else torch.baddbmm(b, x, w)
        return torch.matmul(w, x)  # matrices: (m, 1, out, in) @ (m, k, in, n)
    if kind in ("add", "sub", "mul"):
        return getattr(torch, kind)(xs[0], xs[1])
    if kind == "scale":
        return xs[0] * attrs["s"]
    if kind in ("tanh", "sigmoid", "relu"):
        return getattr(torch, kind)(xs[0])
    if kind == "concat":
        return torch.cat(xs, dim=2)
    if kind == "matmul":
        if xs[1].dim() == xs[0].dim():
            return torch.matmul(xs[0], xs[1])
        return torch.matmul(xs[0], xs[1].unsqueeze(-1)).squeeze(-1)
    if kind == "log_softmax":
        return torch.log_softmax(xs[0], dim=-1)
    raise BatcherError(f"no block kernel for op kind {kind!r}")


def _block_kernel(kind: str, attrs: dict, xs: list, W: Any, o: Any) -> None:
    import torch

    if kind == "linear":
        w, b = W
        x = xs[0]
        if x.dim() == 3:  # vectors: (m, k, in) @ (m, in, out)
            if b is not None:
                torch.baddbmm(b, x, w, out=o)
            else:
                torch.bmm(x, w, out=o)
        else:  # matrices: (m, 1, out, in) @ (m, k, in, n)
            torch.matmul(w, x, out=o)
    elif kind == "add":
        torch.add(xs[0], xs[1], out=o)
    elif kind == "sub":
        torch.sub(xs[0], xs[1], out=o)
    elif kind == "mul":
        torch.mul(xs[0], xs[1], out=o)
    elif kind == "scale":
        torch.mul(xs[0], attrs["s"], out=o)
    elif kind == "tanh":
        torch.tanh(xs[0], out=o)
    elif kind == "sigmoid":
        torch.sigmoid(xs[0], out=o)
    elif kind == "relu":
        torch.clamp_min(xs[0], 0.0, out=o)
    elif kind == "concat":
        torch.cat(xs, dim=2, out=o)
    elif kind == "matmul":
        if xs[1].dim() == o.dim() and xs[1].dim() == xs[0].dim():
            torch.matmul(xs[0], xs[1], out=o)
        else:
            torch.matmul(xs[0], xs[1].unsqueeze(-1), out=o.unsqueeze(-1))
    elif kind == "log_softmax":
        o.copy_(torch.log_softmax(xs[0], dim=-1))
    else:
        raise BatcherError(f"no block kernel for op kind {kind!r}")


class ExecPlan:
    """Argument resolution of every batch of a scheduled dynamic graph (depends only on the graph's structure,
    so it is cached per structure key together with the schedule)."""

    def __init__(self, g: DynGraph, batches: list[list[int]], reorder: bool = False):
        n = g.n
        lb = [0] * n
        lr = [0] * n
        if reorder:
            # order-preserving at the dynamic level (greedy): the order inside a batch is free, so sort each
            # batch by where its heaviest argument lives; runs from one earlier batch then come out contiguous
            # and in order (views) and other argument sets need fewer pieces
            args, shapes = g.args, g.shapes
            out = []
            for bi, b in enumerate(batches):
                a0 = args[b[0]]
                if len(b) > 1 and a0:
                    j = max(range(len(a0)), key=lambda j: math.prod(shapes[a0[j][0]][a0[j][1]]))
                    b = sorted(b, key=lambda v: (lb[args[v][j][0]], args[v][j][1], lr[args[v][j][0]]))
                out.append(b)
                for r, v in enumerate(b):
                    lb[v] = bi
                    lr[v] = r
            batches = out
        W = n << 16
        lens = flat = lba = lra = None
        if not reorder:
            # one compiled pass (inside the simulator that made the schedule) where available
            fast = _resolve_compiled(g, batches)
            if fast is not None:
                self.loc_b, self.loc_r, self.steps = fast
                self.batches = batches
                return
            # batch and row of every node, vectorised (a Python loop here costs ~0.2 µs per node per minibatch)
            import numpy as np

            lens, flat = _flatten(batches)
            starts = np.cumsum(lens) - lens
            bi = np.repeat(np.arange(len(batches), dtype=np.int64), lens)
            ri = np.arange(len(flat), dtype=np.int64) - np.repeat(starts, lens)
            lba = np.zeros(n, dtype=np.int64)
            lra = np.zeros(n, dtype=np.int64)
            lba[flat] = bi
            lra[flat] = ri
            lb, lr = lba.tolist(), lra.tolist()
            base = (lba * W + lra).tolist()
        else:
            base = [b * W + r for b, r in zip(lb, lr)]
        self.loc_b, self.loc_r = lb, lr
        self.batches = batches
        # one integer key per (node, output) location: key(u, o) = base[u] + o * n, with base[u] = lb[u] * W + lr[u]
        # (W = n << 16 > o * n + every row index), so an argument set is one in-order run of one batch output (a
        # view) exactly when its keys are consecutive integers; only the rest needs the per-element run split
        if reorder:
            self.steps = _resolve_python(g, batches, lb, lr, base)
        else:
            self.steps = _resolve_vectorized(g, batches, lens, flat, lba, lra)


def _resolve_python(g: DynGraph, batches: list[list[int]], lb: list[int], lr: list[int], base: list[int]) -> list:
    """Argument specs per batch, element by element (reference implementation of :func:`_resolve_vectorized`)."""
    n = g.n
    steps = []
    args, shapes = g.args, g.shapes
    for b in batches:
        v0 = b[0]
        k = len(b)
        if not args[v0]:
            steps.append(())
            continue
        if k == 1:
            steps.append(tuple(("view", lb[u], o, lr[u], lr[u] + 1) for u, o in args[v0]))
            continue
        specs = []
        for j, srcs in enumerate(zip(*[args[v] for v in b])):
            u0, so = srcs[0]
            sb, r0 = lb[u0], lr[u0]
            keys = [base[u] + o * n for u, o in srcs]
            k0 = keys[0]
            if keys[-1] == k0 + k - 1 and keys == list(range(k0, k0 + k)):
                specs.append(("view", sb, so, r0, r0 + k))
                continue
            if keys[1] == k0 and keys.count(k0) == k:
                specs.append(("bcast", sb, so, r0, k))
                continue
            runs = []  # [batch, out, r_start, r_end]
            cur = [sb, so, r0, r0 + 1]
            prev = k0
            for kk, (u, o) in zip(keys[1:], srcs[1:]):
                if kk == prev + 1:
                    cur[3] += 1
                else:
                    runs.append(cur)
                    cur = [lb[u], o, lr[u], lr[u] + 1]
                prev = kk
            runs.append(cur)
            nb = math.prod(shapes[u0][so]) * F32
            specs.append(("gather", [tuple(r) for r in runs], k * nb))
        steps.append(specs)
    return steps



def _flatten(batches) -> tuple[Any, Any]:
    """(nodes per batch, every batch's nodes in order) as int64 numpy; a schedule from the compiled simulator is
    already flat."""
    import numpy as np

    if getattr(batches, "flat", None) is not None:
        return batches.lens.astype(np.int64), batches.flat.astype(np.int64)
    lens = np.fromiter(map(len, batches), dtype=np.int64, count=len(batches))
    return lens, np.fromiter(chain.from_iterable(batches), dtype=np.int64, count=int(lens.sum()))


def _resolve_compiled(g: DynGraph, batches: list[list[int]]):
    """The same argument specs as :func:`_resolve_vectorized`, from the compiled simulator library's one-pass
    resolver (None when the library is unavailable or the graph was not recorded). A schedule that the compiled
    simulator produced for this graph is resolved inside it (no arrays cross the boundary)."""
    from . import fastsim, policies

    if not (policies.FAST[0] and hasattr(g, "np_argflat") and len(g.arity) == g.n and fastsim.available()):
        return None
    fs = getattr(batches, "fs", None)
    if fs is not None and fs.dyn_ref() is g:
        out = fs.steps(g.shapes)  # specs built in C
        if out is not None:
            return out
        r = fs.resolve()
    else:
        lens, flat = _flatten(batches)
        r = fastsim.resolve(g.n, flat, lens, g.np_arity(), g.np_argflat())
    lb, lr, (gb, gk, gr, gn, gs, gu), runs = r
    steps: list = [[] for _ in range(len(batches))]
    shapes = g.shapes
    for b, kind, f, m, k, u0 in zip(gb, gk, gr, gn, gs, gu):
        if kind == 0:
            steps[b].append(("view",) + runs[f])
        elif kind == 1:
            x = runs[f]
            steps[b].append(("bcast", x[0], x[1], x[2], k))
        else:
            steps[b].append(("gather", runs[f:f + m], k * math.prod(shapes[u0][runs[f][1]]) * F32))
    # locations stay numpy arrays (read per result, not per node)
    return lb, lr, steps


def _resolve_vectorized(g: DynGraph, batches: list[list[int]], lens: Any, flat: Any, lba: Any, lra: Any) -> list:
    """Argument specs per batch with whole-graph numpy passes: every (batch, argument position) is a group of k
    argument slots; a group is a view when its location keys are consecutive, a broadcast when all equal, else a
    gather of its runs. Python then only touches groups and runs, not nodes (the per-node loop was most of the
    planning time)."""
    from itertools import chain

    import numpy as np

    n = g.n
    args, shapes = g.args, g.shapes
    nb = len(batches)
    if nb == 0:
        return []
    if hasattr(g, "np_argflat") and len(g.arity) == n:  # flattened while recording (numpy form cached per graph)
        arity = g.np_arity().astype(np.int64)
        pairs = g.np_argflat().reshape(-1, 2)
    else:
        arity = np.fromiter(map(len, args), dtype=np.int64, count=n)
        pairs = np.fromiter(chain.from_iterable(chain.from_iterable(args)), dtype=np.int64,
                            count=2 * int(arity.sum())).reshape(-1, 2)
    aptr = np.cumsum(arity) - arity
    starts = np.cumsum(lens) - lens
    ab = arity[flat[starts]]  # arity of each batch
    G = int(ab.sum())
    steps: list = [[] for _ in range(nb)]
    if G == 0:
        return steps
    g_batch = np.repeat(np.arange(nb, dtype=np.int64), ab)
    g_j = np.arange(G, dtype=np.int64) - np.repeat(np.cumsum(ab) - ab, ab)
    g_size = lens[g_batch]
    g_start = np.cumsum(g_size) - g_size
    S = int(g_size.sum())
    s_group = np.repeat(np.arange(G, dtype=np.int64), g_size)
    s_row = np.arange(S, dtype=np.int64) - g_start[s_group]
    node = flat[starts[g_batch[s_group]] + s_row]
    slot = aptr[node] + g_j[s_group]
    src, out = pairs[slot, 0], pairs[slot, 1]
    sb, sr = lba[src], lra[src]
    keys = (sb * (n << 16) + sr) + out * n
    d = np.diff(keys)
    inner = s_group[1:] == s_group[:-1]
    brk = inner & (d != 1)  # a new run starts at slot i + 1
    nbrk = np.bincount(s_group[1:][brk], minlength=G)
    neq = np.bincount(s_group[1:][inner & (d == 0)], minlength=G)
    # run starts: group starts and breaks
    is_start = np.ones(S, dtype=bool)
    is_start[1:] = ~inner | brk
    rs = np.flatnonzero(is_start)
    rlen = np.diff(np.append(rs, S))
    r_b, r_o, r_r = sb[rs].tolist(), out[rs].tolist(), sr[rs].tolist()
    r_e = (sr[rs] + rlen).tolist()
    g_first = np.searchsorted(rs, g_start).tolist()  # index of each group's first run
    gb, gs, nbr, nq = g_batch.tolist(), g_size.tolist(), nbrk.tolist(), neq.tolist()
    for gi in range(G):
        k = gs[gi]
        f = g_first[gi]
        if nbr[gi] == 0:
            steps[gb[gi]].append(("view", r_b[f], r_o[f], r_r[f], r_e[f]))
        elif nq[gi] == k - 1:
            steps[gb[gi]].append(("bcast", r_b[f], r_o[f], r_r[f], k))
        else:
            m = nbr[gi] + 1
            runs = list(zip(r_b[f:f + m], r_o[f:f + m], r_r[f:f + m], r_e[f:f + m]))
            u0 = int(src[g_start[gi]])
            nbytes = math.prod(shapes[u0][r_o[f]]) * F32
            steps[gb[gi]].append(("gather", runs, k * nbytes))
    return steps


def execute(g: DynGraph, plan: ExecPlan, block_plans: dict[str, BlockPlan], stats: ExecStats,
            failed: dict | None = None, device: Any = None) -> list:
    """Run every batch; returns the per-batch output tensors (list of lists of (k, *shape) tensors).

    With ``failed`` (a dict) a batch that raises does not stop the others: its outputs are zeros and each of its
    nodes, and every node downstream of them, maps to (the node that raised, the error) in ``failed``. Batched
    ops are row-wise, so the other instances' rows of later batches stay exact. Without it the error propagates.
    """
    import torch

    store: list = [None] * len(plan.batches)
    kinds = g.kind
    batches = plan.batches
    firsts = batches.first() if hasattr(batches, "first") else [b[0] for b in batches]
    dev = torch.device(device if device is not None else "cpu")
    rows = _RowTable.of(g, firsts) if dev.type == "cpu" else None  # host pointers: CPU tensors only
    plan_token = object()  # identifies this flush to the blocks (weights stacked once per flush)
    for bi, (v0, specs) in enumerate(zip(firsts, plan.steps)):
        if failed and v0 in failed and kinds[v0] == "custom":
            store[bi] = _zeros(g, v0, 1, dev)  # user code never sees the inputs of an instance that already failed
            continue
        try:
            bp = block_plans[g.data[v0].name] if kinds[v0] == "block" else None
            # a block input that the block stages into its arena is gathered straight into its slot
            ar = bp.arena(len(batches[bi])) if bp is not None and rows is not None and bp.stage_slot else None
            placed: set = set()
            xs = []
            for j, s in enumerate(specs):
                if s[0] == "view":
                    xs.append(store[s[1]][s[2]][s[3]:s[4]])
                elif s[0] == "bcast":
                    x = store[s[1]][s[2]][s[3]:s[3] + 1]
                    xs.append(x.expand((s[4],) + tuple(x.shape[1:])))
                else:
                    slot = bp.stage_slot.get(j) if ar is not None else None
                    dst = ar[slot[0]][slot[1]] if slot is not None else None
                    x = rows.gather(store, s, dst) if rows is not None else None
                    if dst is not None and x is dst:
                        placed.add(j)
                    xs.append(torch.cat([store[r[0]][r[1]][r[2]:r[3]] for r in s[1]]) if x is None else x)
                    stats.gathers += 1
                    stats.gather_bytes += s[2]
            if bp is not None:
                store[bi] = bp.run(xs, stats, ar, placed, flush=plan_token)
            else:
                stats.kernels += 1
                store[bi] = [_batch_kernel(g, v0, batches[bi], xs)]
            if rows is not None:
                rows.put(bi, store[bi])
        except Exception as e:
            if failed is None:
                raise
            nodes = list(batches[bi])
            store[bi] = _zeros(g, v0, len(nodes), dev)
            _poison(g, nodes, e, failed)
    return store


class _RowTable:
    """Where each batch output's rows live, for the compiled gather: one call copies every run of an argument set
    (a Tree-LSTM minibatch has ~2,500 runs in ~90 gathers; a slice each through torch cost ~3 ms of ~12, and in
    training each slice's backward allocated a zero tensor of its whole source: ~45 ms of a ~100 ms step)."""

    __slots__ = ("lib", "mo", "ptrs", "rows", "grad", "pa", "ra", "ga", "n")

    @classmethod
    def of(cls, g: DynGraph, firsts) -> "_RowTable | None":
        from . import fastsim

        lib = fastsim.load()
        if lib is None or not lib.pylist:
            return None
        return cls(lib, max((len(g.shapes[v]) for v in firsts), default=1), len(firsts))

    def __init__(self, lib, mo: int, nb: int):
        import numpy as np

        self.lib, self.mo, self.n = lib, mo, nb * mo
        self.ptrs = np.zeros(self.n, dtype=np.int64)
        self.rows = np.zeros(self.n, dtype=np.int64)
        self.grad = np.zeros(self.n, dtype=np.int8)
        self.pa, self.ra, self.ga = self.ptrs.ctypes.data, self.rows.ctypes.data, self.grad.ctypes.data

    def put(self, bi: int, outs: list) -> None:
        """Record batch ``bi``'s outputs that are plain contiguous fp32 rows (and which of them need grad)."""
        import torch

        base = bi * self.mo
        for o, t in enumerate(outs):
            if t.dtype == torch.float32 and t.is_contiguous() and t.dim() > 0:
                self.ptrs[base + o] = t.data_ptr()
                self.rows[base + o] = t.shape[0]
                self.grad[base + o] = t.requires_grad

    def _shape(self, store: list, spec: tuple) -> tuple | None:
        """(rows, row bytes, row shape) of a gather spec, None when its first source is not in the table."""
        b, o = spec[1][0][0], spec[1][0][1]
        if not self.ptrs[b * self.mo + o]:
            return None
        t0 = store[b][o]
        rb = t0.stride(0) * 4 if t0.dim() > 1 else 4
        k = spec[2] // rb if spec[2] else sum(r[3] - r[2] for r in spec[1])
        return k, rb, tuple(t0.shape[1:])

    def call(self, runs, ptrs: int, buf: int, rb: int, k: int, mode: int) -> int:
        return self.lib.dbx_gather(runs, ptrs, self.ra, self.ga, self.n, self.mo, buf, rb, k, mode)

    def gather(self, store: list, spec: tuple, dst: Any = None) -> Any:
        """The argument set of a ``("gather", runs, bytes)`` spec as one tensor (``dst`` when given: contiguous
        fp32 of the right shape), differentiable when a source needs grad and grad mode is on; None when the
        compiled gather cannot take it (then torch gathers it)."""
        import torch

        sh = self._shape(store, spec)
        if sh is None:
            return None
        k, rb, rest = sh
        if dst is not None and (tuple(dst.shape) != (k,) + rest or not dst.is_contiguous()):
            return None
        x = torch.empty((k,) + rest) if dst is None else dst
        got = self.call(spec[1], self.pa, x.data_ptr(), rb, k, 0)
        if got == k:
            return x
        if got == -2 and torch.is_grad_enabled():
            keys = list(dict.fromkeys((r[0], r[1]) for r in spec[1]))  # distinct sources, in first-use order
            return _gather_rows().apply(self, spec[1], keys, k, rb, rest, *[store[b][o] for b, o in keys])
        return None


@functools.cache
def _gather_rows():
    import torch

    class GatherRows(torch.autograd.Function):
        """The compiled gather with its backward: each run's gradient rows added into its source's gradient (one
        zero buffer per distinct source, not one per run)."""

        @staticmethod
        def forward(ctx, table, runs, keys, k, rb, rest, *srcs):
            x = torch.empty((k,) + rest)
            if table.call(runs, table.pa, x.data_ptr(), rb, k, 1) != k:
                raise BatcherError("compiled gather: a run does not fit its source")
            ctx.table, ctx.runs, ctx.keys, ctx.k, ctx.rb = table, runs, keys, k, rb
            ctx.shapes = [tuple(t.shape) for t in srcs]
            return x

        @staticmethod
        def backward(ctx, gx):
            import numpy as np

            t = ctx.table
            gx = gx.contiguous()
            grads = [torch.zeros(s) for s in ctx.shapes]
            gp = np.zeros(t.n, dtype=np.int64)
            for (b, o), gr in zip(ctx.keys, grads):
                gp[b * t.mo + o] = gr.data_ptr()
            if t.call(ctx.runs, gp.ctypes.data, gx.data_ptr(), ctx.rb, ctx.k, 2) != ctx.k:
                raise BatcherError("compiled gather: backward runs do not fit their sources")
            return (None, None, None, None, None, None, *grads)

    return GatherRows


def _zeros(g: DynGraph, v: int, k: int, device: Any = None) -> list:
    import torch

    return [torch.zeros((k,) + tuple(s), device=device) for s in g.shapes[v]]


def _poison(g: DynGraph, nodes: list[int], err: BaseException, failed: dict) -> None:
    """Map ``nodes`` and everything downstream of them to (the node that raised, ``err``)."""
    for v in nodes:
        if v in failed:
            continue
        failed[v] = (v, err)
        stack = list(g.succ[v])
        while stack:
            u = stack.pop()
            if u not in failed:
                failed[u] = (v, err)
                stack.extend(g.succ[u])


def _batch_kernel(g: DynGraph, v0: int, batch, xs: list):
    """One batched op of the dynamic graph (not a block) on its gathered arguments: a (k, *shape) tensor."""
    import torch
    import torch.nn.functional as F

    kind, data = g.kind[v0], g.data
    if kind == "lookup":
        table = g.params[v0][0].tensor
        return table.index_select(0, torch.tensor([data[v] for v in batch], device=table.device))
    if kind == "constant":
        return torch.stack([data[v] for v in batch])
    if kind == "linear":
        p = g.params[v0]
        if xs[0].dim() == 2:
            return F.linear(xs[0], p[0].tensor, p[1].tensor if len(p) > 1 else None)
        return torch.matmul(p[0].tensor, xs[0])
    if kind == "matmul":
        return torch.bmm(xs[0], xs[1]) if xs[1].dim() == 3 else torch.bmm(xs[0], xs[1].unsqueeze(-1)).squeeze(-1)
    if kind in ("add", "sub", "mul"):
        return getattr(torch, kind)(xs[0], xs[1])
    if kind == "scale":
        return xs[0] * g.attrs[v0][0][1]
    if kind in ("tanh", "sigmoid", "relu"):
        return getattr(torch, kind)(xs[0])
    if kind == "log_softmax":
        return F.log_softmax(xs[0], dim=-1)
    if kind == "concat":
        return torch.cat(xs, dim=1)
    if kind == "custom":
        t = data[v0](*[x[0] for x in xs])
        if tuple(t.shape) != tuple(g.shapes[v0][0]):
            raise ShapeMismatchError(g.label(v0), f"custom op returned shape {list(t.shape)}, declared "
                                                  f"{list(g.shapes[v0][0])}")
        return t.unsqueeze(0)
    raise BatcherError(f"node {g.label(v0)}: no batched kernel for op kind {kind!r}")


__all__ = ["ExecStats", "BlockPlan", "ExecPlan", "execute"]
_ = GraphView
