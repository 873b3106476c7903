"""Booth–Lueker PQ-trees (J. Comput. Syst. Sci. 13, 1976): all permutations of a universe in which each of a
family of subsets is consecutive.

* a P-node's children may be permuted arbitrarily, a Q-node's children only reversed;
* :meth:`PQTree.reduce` adds one subset by the bottom-up template matching of the paper (templates L1, P1–P6,
  Q1–Q3 named in the code) and raises :class:`PQInfeasible` when no permutation satisfies the family any more
  (the tree is then unusable: use :meth:`PQTree.try_reduce`, which restores the tree on failure);
* :meth:`PQTree.frontier` is one admissible order; :meth:`PQTree.frontiers` enumerates all (tests).

This implementation finds the pertinent subtree by walking up from the subset's leaves (O(|S|·height) per
reduction, not the paper's linear-time bookkeeping); the trees built by the memory planner are small.
"""
from __future__ import annotations

import itertools
from typing import Any, Hashable, Iterable, Iterator

from .errors import PQInfeasible

EMPTY, PARTIAL, FULL = 0, 1, 2


class PQNode:
    __slots__ = ("kind", "children", "parent", "leaf", "frozen")

    def __init__(self, kind: str, children: list["PQNode"] | None = None, leaf: Hashable = None):
        self.kind = kind  # "P", "Q" or "L"
        self.children: list[PQNode] = []
        self.parent: PQNode | None = None
        self.leaf = leaf
        self.frozen = False  # used by the order-preserving extension: children order fixed
        for c in children or ():
            self.add(c)

    def add(self, c: "PQNode") -> None:
        c.parent = self
        self.children.append(c)

    def set_children(self, cs: list["PQNode"]) -> None:
        self.children = list(cs)
        for c in cs:
            c.parent = self

    def leaves(self) -> list[Hashable]:
        if self.kind == "L":
            return [self.leaf]
        out: list[Hashable] = []
        stack = [self]
        while stack:
            n = stack.pop()
            if n.kind == "L":
                out.append(n.leaf)
            else:
                stack.extend(reversed(n.children))
        return out

    def __repr__(self) -> str:
        if self.kind == "L":
            return repr(self.leaf)
        o, c = ("[", "]") if self.kind == "Q" else ("(", ")")
        return o + " ".join(map(repr, self.children)) + c


def _group(kind: str, nodes: list[PQNode]) -> PQNode | None:
    """One node standing for ``nodes``: the node itself if single, else a new P-node over them."""
    if not nodes:
        return None
    if len(nodes) == 1:
        return nodes[0]
    return PQNode(kind, nodes)


class PQTree:
    """A PQ-tree over a universe of hashable items (initially one P-node: every permutation)."""

    def __init__(self, universe: Iterable[Hashable]):
        items = list(universe)
        if len(set(items)) != len(items):
            raise ValueError("PQTree: universe items must be distinct")
        self.leaf: dict[Hashable, PQNode] = {x: PQNode("L", leaf=x) for x in items}
        if len(items) == 1:
            self.root: PQNode | None = self.leaf[items[0]]
        elif items:
            self.root = PQNode("P", [self.leaf[x] for x in items])
        else:
            self.root = None

    # --- copying (for transactional reduction) ------------------------------------------------------------------
    def clone(self) -> "PQTree":
        t = PQTree.__new__(PQTree)
        t.leaf = {}

        def cp(n: PQNode) -> PQNode:
            if n.kind == "L":
                m = PQNode("L", leaf=n.leaf)
                t.leaf[n.leaf] = m
            else:
                m = PQNode(n.kind, [cp(c) for c in n.children])
            m.frozen = n.frozen
            return m

        t.root = cp(self.root) if self.root is not None else None
        return t

    def _assign(self, other: "PQTree") -> None:
        self.root, self.leaf = other.root, other.leaf

    # --- reduction -----------------------------------------------------------------------------------------------
    def try_reduce(self, subset: Iterable[Hashable]) -> bool:
        """Add the constraint; on infeasibility leave the tree unchanged and return False."""
        backup = self.clone()
        try:
            self.reduce(subset)
            return True
        except PQInfeasible:
            self._assign(backup)
            return False

    def reduce(self, subset: Iterable[Hashable]) -> None:
        S = set(subset)
        for x in S:
            if x not in self.leaf:
                raise KeyError(f"PQTree.reduce: {x!r} is not in the universe")
        if len(S) <= 1 or len(S) == len(self.leaf):
            return
        # pertinent counts: number of subset leaves below each node
        cnt: dict[int, int] = {}
        nodes: dict[int, PQNode] = {}
        for x in S:
            n = self.leaf[x]
            while n is not None:
                k = id(n)
                cnt[k] = cnt.get(k, 0) + 1
                nodes[k] = n
                n = n.parent
        root = self.leaf[next(iter(S))]
        while cnt[id(root)] < len(S):
            root = root.parent
        # post-order over the pertinent subtree
        order: list[PQNode] = []
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            stack.append((n, True))
            for c in n.children:
                if id(c) in cnt:
                    stack.append((c, False))
        label: dict[int, int] = {}
        for n in order:
            is_root = n is root
            if n.kind == "L":  # template L1
                label[id(n)] = FULL
                continue
            lab = [label.get(id(c), EMPTY) for c in n.children]
            if n.kind == "P":
                label[id(n)] = self._p_templates(n, lab, is_root)
            else:
                label[id(n)] = self._q_templates(n, lab, is_root)
            if is_root:
                break

    def _replace(self, old: PQNode, new: PQNode) -> None:
        p = old.parent
        new.parent = p
        if p is None:
            self.root = new
        else:
            p.children[p.children.index(old)] = new

    def _p_templates(self, X: PQNode, lab: list[int], is_root: bool) -> int:
        F = [c for c, l in zip(X.children, lab) if l == FULL]
        E = [c for c, l in zip(X.children, lab) if l == EMPTY]
        Pp = [c for c, l in zip(X.children, lab) if l == PARTIAL]
        if not E and not Pp:  # P1: all children full
            return FULL
        if is_root:
            if not Pp:  # P2: gather the full children under one P-node
                if len(F) >= 2:
                    X.set_children(E + [PQNode("P", F)])
                return PARTIAL
            if len(Pp) == 1:  # P4: full children join the full end of the partial Q-node
                Q = Pp[0]
                nf = _group("P", F)
                if nf is not None:
                    Q.add(nf)
                if E:
                    X.set_children(E + [Q])
                else:
                    self._replace(X, Q)
                return PARTIAL
            if len(Pp) == 2:  # P6: merge both partial Q-nodes around the full children
                Q1, Q2 = Pp
                nf = _group("P", F)
                seq = list(Q1.children) + ([nf] if nf is not None else []) + list(reversed(Q2.children))
                Q1.set_children(seq)
                if E:
                    X.set_children(E + [Q1])
                else:
                    self._replace(X, Q1)
                return PARTIAL
            raise PQInfeasible(f"P-node root with {len(Pp)} partial children")
        if not Pp:  # P3: becomes a partial Q-node [empties, fulls]
            X.kind = "Q"
            X.set_children([_group("P", E), _group("P", F)])
            return PARTIAL
        if len(Pp) == 1:  # P5: [empties] + partial child's children (empty..full) + [fulls]
            Q = Pp[0]
            ne, nf = _group("P", E), _group("P", F)
            seq = ([ne] if ne is not None else []) + list(Q.children) + ([nf] if nf is not None else [])
            X.kind = "Q"
            X.set_children(seq)
            return PARTIAL
        raise PQInfeasible(f"non-root P-node with {len(Pp)} partial children")

    def _q_templates(self, X: PQNode, lab: list[int], is_root: bool) -> int:
        if all(l == FULL for l in lab):  # Q1
            return FULL
        if not is_root:  # Q2: empties, at most one partial, fulls (either direction)
            if not self._q2_ok(lab):
                lab = lab[::-1]
                X.children.reverse()
                if not self._q2_ok(lab):
                    raise PQInfeasible("non-root Q-node whose pertinent children are not at one end")
            self._splice(X, lab, full_side_right=True)
            return PARTIAL
        # Q3 (root): empties, [partial], fulls, [partial], empties
        i, n = 0, len(lab)
        while i < n and lab[i] == EMPTY:
            i += 1
        j = n - 1
        while j >= 0 and lab[j] == EMPTY:
            j -= 1
        mid = lab[i:j + 1]
        inner = mid[1:-1] if len(mid) >= 2 else []
        ok = bool(mid) and all(l == FULL for l in inner)
        if len(mid) == 1 and mid[0] != FULL:
            ok = False
        if not ok:
            raise PQInfeasible("root Q-node whose pertinent children are not consecutive")
        self._splice(X, lab, full_side_right=None)
        return PARTIAL

    @staticmethod
    def _q2_ok(lab: list[int]) -> bool:
        i = 0
        while i < len(lab) and lab[i] == EMPTY:
            i += 1
        if i < len(lab) and lab[i] == PARTIAL:
            i += 1
        while i < len(lab) and lab[i] == FULL:
            i += 1
        return i == len(lab)

    @staticmethod
    def _splice(X: PQNode, lab: list[int], full_side_right: bool | None) -> None:
        """Replace partial children by their children, oriented so that full leaves meet the full run."""
        seq: list[PQNode] = []
        first_pert = next(k for k, l in enumerate(lab) if l != EMPTY)
        for k, (c, l) in enumerate(zip(X.children, lab)):
            if l != PARTIAL:
                seq.append(c)
                continue
            # a partial child is oriented empty..full; on the left boundary of the pertinent run keep it,
            # on the right boundary (root case) reverse it
            kids = list(c.children)
            if full_side_right is None and k != first_pert:
                kids.reverse()
            seq.extend(kids)
        X.set_children(seq)

    # --- reading ---------------------------------------------------------------------------------------------------
    def frontier(self) -> list[Hashable]:
        return self.root.leaves() if self.root is not None else []

    def frontiers(self) -> Iterator[tuple]:
        """Every permutation the tree admits (exponential: for tests on small universes)."""
        def gen(n: PQNode) -> Iterator[tuple]:
            if n.kind == "L":
                yield (n.leaf,)
                return
            if n.kind == "P":
                orders = itertools.permutations(n.children)
            else:
                orders = ([tuple(n.children), tuple(reversed(n.children))] if len(n.children) > 1
                          else [tuple(n.children)])
            seen = set()
            for o in orders:
                for parts in itertools.product(*[list(gen(c)) for c in o]):
                    f = tuple(x for p in parts for x in p)
                    if f not in seen:
                        seen.add(f)
                        yield f

        if self.root is None:
            return iter([()])
        return gen(self.root)

    def __repr__(self) -> str:
        return f"PQTree({self.root!r})"


def consecutive_ones_order(universe: Iterable[Hashable], subsets: Iterable[Iterable[Hashable]]) -> list | None:
    """An order of ``universe`` in which every subset is consecutive, or None (consecutive-ones test)."""
    t = PQTree(universe)
    try:
        for s in subsets:
            t.reduce(s)
    except PQInfeasible:
        return None
    return t.frontier()


__all__ = ["PQNode", "PQTree", "PQInfeasible", "consecutive_ones_order"]
_ = Any
