"""Memory layouts for batched execution: the DyNet layout and the PQ-tree layout (ED-Batch).

The problem: items (node outputs) live in per-shape-class arenas, one slot each. A batch runs over its output
items and reads, for each argument position j, the argument set A_j (the j-th argument of each output, in the
same order). An argument set can be used in place (a view, zero copy) iff its items occupy consecutive slots in
the same order as the batch's outputs; otherwise it is gathered (copied).

* DyNet layout: slots are handed out in execution order, each batch's outputs consecutively in batch order.
* PQ layout: one PQ-tree per shape class; every batch's output set is reduced (always feasible: output sets are
  disjoint), then every argument set, heaviest first; an argument set whose reduction fails is dropped (gathered).
  The order-preserving extension then fixes P-node orders and Q-node directions so that each argument set is
  ordered like its batch's outputs (mapping o_i -> a_i); nodes fixed by an earlier constraint are frozen, and a
  constraint that would need to move a frozen node is dropped. The frontiers are the layout. Whatever the
  heuristics did, :func:`check_layout` classifies every argument set from the final positions (ground truth).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from .pqtree import PQNode, PQTree


@dataclass
class BatchSpec:
    """One batch for planning: output items (in the schedule's order) and per-position argument items."""

    outs: list[Hashable]
    args: list[list[Hashable]]  # args[j][i] = j-th argument of outs[i]
    weight: list[int] = field(default_factory=list)  # bytes per item of each argument position


@dataclass
class Layout:
    """Slot of each item in its class, and each batch's output order (execution order)."""

    pos: dict[Hashable, int]
    order: list[list[Hashable]]
    constraints: int = 0
    """Argument sets that could be zero-copy at all (≥ 2 distinct items, no duplicates)."""
    reduced: int = 0
    """Of those, how many were consecutive-feasible in the PQ-tree."""
    ordered: int = 0
    """Of those, how many ended up contiguous and in matching order (zero copy)."""


def dynet_layout(cls: dict[Hashable, Hashable], first: list[Hashable], batches: list[BatchSpec]) -> Layout:
    """Slots in execution order: ``first`` (e.g. block inputs) then each batch's outputs in batch order."""
    nxt: dict[Hashable, int] = {}
    pos: dict[Hashable, int] = {}
    for x in list(first) + [o for b in batches for o in b.outs]:
        c = cls[x]
        pos[x] = nxt.get(c, 0)
        nxt[c] = pos[x] + 1
    lay = Layout(pos, [list(b.outs) for b in batches])
    _count(lay, batches)
    return lay


def _candidate(b: BatchSpec, j: int) -> bool:
    a = b.args[j]
    return len(a) >= 2 and len(set(a)) == len(a)


def pq_layout(cls: dict[Hashable, Hashable], batches: list[BatchSpec]) -> Layout:
    """PQ-tree layout with the order-preserving extension (see module doc)."""
    classes: dict[Hashable, list[Hashable]] = {}
    for x, c in cls.items():
        classes.setdefault(c, []).append(x)
    trees = {c: PQTree(items) for c, items in classes.items()}
    for b in batches:
        trees[cls[b.outs[0]]].reduce(b.outs)  # disjoint output sets: always feasible
    cons = [(b.weight[j] * len(b.outs) if b.weight else len(b.outs), bi, j)
            for bi, b in enumerate(batches) for j in range(len(b.args)) if _candidate(b, j)]
    cons.sort(key=lambda x: (-x[0], x[1], x[2]))
    ok = []
    for _, bi, j in cons:
        b = batches[bi]
        a = b.args[j]
        c = cls[a[0]]
        if any(cls[x] != c for x in a):
            continue
        if trees[c].try_reduce(a):
            ok.append((bi, j))
    # order-preserving extension: make each argument set ordered like its outputs
    for bi, j in ok:
        b = batches[bi]
        ta, to = trees[cls[b.args[j][0]]], trees[cls[b.outs[0]]]
        omap = dict(zip(b.outs, b.args[j]))
        amap = dict(zip(b.args[j], b.outs))
        o_order = [x for x in _order_within(to, b.outs)]
        want_a = [omap[o] for o in o_order]
        if _arrange_checked(ta, want_a, extra=(to, o_order)):
            continue
        a_order = _order_within(ta, b.args[j])
        _arrange_checked(to, [amap[a] for a in a_order], extra=(ta, a_order))
    pos: dict[Hashable, int] = {}
    for c, t in trees.items():
        for i, x in enumerate(t.frontier()):
            pos[x] = i
    order = [sorted(b.outs, key=pos.__getitem__) for b in batches]
    lay = Layout(pos, order, constraints=len(cons), reduced=len(ok))
    _count(lay, batches)
    return lay


def _order_within(t: PQTree, items: list[Hashable]) -> list[Hashable]:
    s = set(items)
    return [x for x in t.frontier() if x in s]


def _arrange_checked(t: PQTree, want: list[Hashable], extra: tuple[PQTree, list[Hashable]]) -> bool:
    """Arrange ``want`` (consecutive leaves) into exactly that order, freezing what it touches, and freeze the
    other side's current order (``extra``). Transactional: on failure nothing changes."""
    backup = t.clone()
    other, other_order = extra
    backup_o = other.clone() if other is not t else None
    if _arrange(t, want) and _arrange(other, other_order) and _order_within(t, want) == want:
        return True
    t._assign(backup)
    if backup_o is not None:
        other._assign(backup_o)
    return False


def _arrange(t: PQTree, want: list[Hashable]) -> bool:
    if len(want) < 2:
        return True
    rank = {x: i for i, x in enumerate(want)}
    # lowest common ancestor of the wanted leaves
    cnt: dict[int, int] = {}
    for x in want:
        n = t.leaf[x]
        while n is not None:
            cnt[id(n)] = cnt.get(id(n), 0) + 1
            n = n.parent
    top = t.leaf[want[0]]
    while cnt[id(top)] < len(want):
        top = top.parent

    def span(n: PQNode) -> tuple[int, int] | None:
        rs = [rank[x] for x in n.leaves() if x in rank]
        return (min(rs), max(rs)) if rs else None

    def fix(n: PQNode) -> bool:
        if n.kind == "L":
            return True
        spans = [span(c) for c in n.children]
        keyed = [i for i, s in enumerate(spans) if s is not None]
        if len(keyed) >= 2:
            cur = [spans[i] for i in keyed]
            srt = sorted(cur)
            for a, b in zip(srt, srt[1:]):
                if a[1] >= b[0]:
                    return False  # interleaved ranks: no order of the children can give the wanted order
            if n.kind == "Q":
                if cur == srt:
                    pass
                elif cur == srt[::-1] and not n.frozen:
                    n.children.reverse()
                else:
                    return False
            else:
                if cur != srt:
                    if n.frozen:
                        return False
                    kids = sorted((n.children[i] for i in keyed), key=lambda c: span(c)[0])
                    new = list(n.children)
                    for slot, c in zip(keyed, kids):
                        new[slot] = c
                    n.children = new
            n.frozen = True
        for c in n.children:
            s = span(c)
            if s is not None and s[1] > s[0] and not fix(c):
                return False
        return True

    return fix(top)


def check_layout(lay: Layout, b_order: list[Hashable], args: list[Hashable]) -> str:
    """How an argument set is read: 'view' (consecutive, in order), 'bcast' (one item), or 'gather'."""
    if len(set(args)) == 1:
        return "bcast"
    p0 = lay.pos[args[0]]
    for i, x in enumerate(args):
        if lay.pos[x] != p0 + i:
            return "gather"
    return "view"


def _count(lay: Layout, batches: list[BatchSpec]) -> None:
    n = 0
    for b, order in zip(batches, lay.order):
        idx = {o: i for i, o in enumerate(b.outs)}
        for j in range(len(b.args)):
            if _candidate(b, j):
                a = [b.args[j][idx[o]] for o in order]
                if check_layout(lay, order, a) == "view":
                    n += 1
    lay.ordered = n
    if not lay.constraints:
        lay.constraints = sum(1 for b in batches for j in range(len(b.args)) if _candidate(b, j))


__all__ = ["BatchSpec", "Layout", "dynet_layout", "pq_layout", "check_layout"]
