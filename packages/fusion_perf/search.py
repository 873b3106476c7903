"""Search: MCTS over tile factors (and loop permutations) with feasibility pruning, and named fusion templates.

The templates build mapping trees with free factors for a producer→(elementwise)→consumer chain:

* ``layerwise`` — each op tiled on its own under a Sequential root; intermediates go through DRAM.
* ``flat`` — FLAT-like row granularity: only the outer non-reduction dims (batch, rows ``m``) are shared above a
  Sequential scope; a full row block of the intermediate stays on chip.
* ``chimera`` — Chimera-like: every shared dim (incl. the consumer's reduction ``l``) is tiled above a Sharing
  scope, so the consumer's output accumulates on chip across the shared loops.
* ``fused`` — fully fused: shared loops above a Sequential scope, intermediates on chip.
* ``tileflow`` — TileFlow-like: shared loops above a Pipeline scope (producer and consumer overlap), the
  permutation of the shared loops searched too.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .arch import Arch, load_arch
from .errors import MappingError
from .mapping import Node, OpLeaf, Scope, Tile, substitute
from .model import Compiled, compile_tree
from .problem import Problem

TEMPLATES = ("layerwise", "flat", "chimera", "fused", "tileflow")


def _divs(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class FactorSpace:
    """The free variables of a compiled tree and how to draw valid (loop-count-exact) assignments."""

    def __init__(self, comp: Compiled):
        self.c = comp
        P = comp.problem
        self.vars: list[str] = []
        info: dict[str, dict] = {}
        for g, (d, sp, node, f) in enumerate(comp.loops):
            if isinstance(f, str):
                if f not in info:
                    info[f] = {"dim": d, "gids": [], "ops": set(comp.nodes[node].ops)}
                    self.vars.append(f)
                info[f]["gids"].append(g)
        self.info = info
        self.rem0: dict[tuple[str, str], int] = {}
        self.last: dict[str, bool] = {v: False for v in self.vars}
        for o, loops in comp.oploops.items():
            for d in P.op_dims(o):
                fixed = 1
                lastv = None
                for g in loops:
                    dd, _, _, f = comp.loops[g]
                    if dd != d:
                        continue
                    if isinstance(f, str):
                        lastv = f
                    else:
                        fixed *= f
                if P.dims[d] % fixed:
                    raise MappingError(f"mapping (op {o}, dim {d})", f"fixed factors {fixed} do not divide {P.dims[d]}")
                if lastv is None and fixed != P.dims[d]:
                    raise MappingError(f"mapping (op {o}, dim {d})", f"fixed factors give {fixed}, extent is "
                                       f"{P.dims[d]}, and no free variable can take the rest")
                if lastv is not None:
                    self.last[lastv] = True
                self.rem0[(o, d)] = P.dims[d] // fixed
        # spatial variables share their node's fan-out budget (pruning: never draw more PEs than exist)
        self.budget0: dict[int, int] = {}
        for v in self.vars:
            g = info[v]["gids"][0]
            _, sp, node, _ = comp.loops[g]
            info[v]["node"] = node if sp else None
            if sp:
                fx, fy = comp.arch.fanout(comp.nodes[node].level)
                self.budget0[node] = fx * fy
        self.choice_vars = [v for v in self.vars if not self.last[v]]

    def complete(self, rng: np.random.Generator, n: int, prefix: Mapping[str, int] | None = None) -> np.ndarray:
        """``n`` factor vectors [n, loops]: fixed factors, ``prefix`` values, random divisors for the other free
        variables, and the rest of each extent for the innermost variable of every (op, dim)."""
        c = self.c
        X = np.empty((n, len(c.loops)), dtype=np.int64)
        for g, (_, _, _, f) in enumerate(c.loops):
            if not isinstance(f, str):
                X[:, g] = f
        rem = {k: np.full(n, v, dtype=np.int64) for k, v in self.rem0.items()}
        budget = {k: np.full(n, v, dtype=np.int64) for k, v in self.budget0.items()}
        prefix = prefix or {}
        for v in self.vars:
            inf = self.info[v]
            d = inf["dim"]
            o0 = next(iter(inf["ops"]))
            r = rem[(o0, d)]
            if v in prefix:
                f = np.broadcast_to(np.asarray(prefix[v], dtype=np.int64), (n,))
                f = np.where(r % f == 0, f, 1)
            elif self.last[v]:
                f = r.copy()
            else:
                f = np.empty(n, dtype=np.int64)
                node = inf["node"]
                if node is None:
                    for val in np.unique(r):
                        idx = np.nonzero(r == val)[0]
                        dv = np.array(_divs(int(val)))
                        # uniform over divisors: log-uniform tile sizes for power-of-two extents
                        f[idx] = dv[rng.integers(0, len(dv), len(idx))]
                else:
                    # spatial: divisors within the remaining fan-out, half the time the largest one (fill the PEs)
                    bud = budget[node]
                    for val, bv in set(zip(r.tolist(), bud.tolist())):
                        idx = np.nonzero((r == val) & (bud == bv))[0]
                        dv = np.array([x for x in _divs(int(val)) if x <= bv] or [1])
                        pick = dv[rng.integers(0, len(dv), len(idx))]
                        f[idx] = np.where(rng.random(len(idx)) < 0.5, dv[-1], pick)
            if inf.get("node") is not None:
                budget[inf["node"]] = budget[inf["node"]] // f
            for o in inf["ops"]:
                rem[(o, d)] = rem[(o, d)] // f
            for g in inf["gids"]:
                X[:, g] = f
        return X

    def candidates(self, v: str, prefix: Mapping[str, int]) -> list[int]:
        inf = self.info[v]
        d = inf["dim"]
        o0 = next(iter(inf["ops"]))
        r = self.rem0[(o0, d)]
        bud = self.budget0.get(inf.get("node"), math.inf)
        for u in self.vars:
            if u == v:
                break
            if u in prefix and self.info[u]["dim"] == d and o0 in self.info[u]["ops"]:
                r //= prefix[u]
            if u in prefix and inf.get("node") is not None and self.info[u].get("node") == inf["node"]:
                bud //= prefix[u]
        return [x for x in _divs(r) if x <= bud] or [1]

    def values(self, x: Sequence[int]) -> dict[str, int]:
        return {v: int(x[self.info[v]["gids"][0]]) for v in self.vars}


@dataclass
class SearchResult:
    """Best mapping found."""

    tree: Node
    """The best tree with every factor filled in."""
    cycles: float
    energy_pj: float
    evaluations: int
    template: str = ""
    history: list = field(default_factory=list)


class _MNode:
    __slots__ = ("children", "n", "w", "untried", "dead")

    def __init__(self, untried):
        self.children: dict = {}
        self.n = 0
        self.w = 0.0
        self.untried = list(untried)
        self.dead = False


def refine(comp: Compiled, space: FactorSpace, x: np.ndarray, key: str = "cycles", sweeps: int = 8,
           rng: np.random.Generator | None = None) -> tuple[float, np.ndarray, int]:
    """Coordinate descent from ``x``: each sweep tries every candidate value of every choice variable with the
    others fixed (one vectorised evaluation per sweep) and moves to the best; stops when nothing improves."""
    rng = rng or np.random.default_rng(0)
    cur = space.values(x)
    best_x = np.asarray(x)
    best = float(getattr(comp.evaluate(best_x[None, :], batched=True), key)[0])
    evals = 1
    # pairs of choice variables over one dim on a shared path: moving a prime factor between them keeps the
    # product (the residual variable is untouched)
    pairs = [(a, b) for i, a in enumerate(space.choice_vars) for b in space.choice_vars[i + 1:]
             if space.info[a]["dim"] == space.info[b]["dim"] and space.info[a]["ops"] & space.info[b]["ops"]]
    for _ in range(sweeps):
        rows = []  # full assignments of the choice variables, completed in one vectorised call
        for i, v in enumerate(space.choice_vars):
            pre = {u: cur[u] for u in space.choice_vars[:i]}
            for cand in space.candidates(v, pre):
                if cand != cur[v]:
                    p = dict(cur)
                    p[v] = cand
                    rows.append([p[u] for u in space.choice_vars])
        for a, b in pairs:
            for src, dst in ((a, b), (b, a)):
                f = cur[src]
                pf = next((q for q in range(2, f + 1) if f % q == 0), None)
                if pf:
                    p = dict(cur)
                    p[src], p[dst] = f // pf, cur[dst] * pf
                    rows.append([p[u] for u in space.choice_vars])
        if not rows:
            break
        M = np.array(rows, dtype=np.int64)
        X = space.complete(rng, len(M), {u: M[:, j] for j, u in enumerate(space.choice_vars)})
        vals = getattr(comp.evaluate(X, batched=True), key)
        evals += len(X)
        i = int(np.argmin(vals))
        if not vals[i] < best * (1 - 1e-12):
            break
        best, best_x = float(vals[i]), X[i].copy()
        cur = space.values(best_x)
    return best, best_x, evals


def search(problem: Problem, arch: Any, trees: Node | Sequence[Node], objective: str = "cycles",
           iterations: int = 200, rollouts: int = 64, seed: int = 0, c_explore: float = 1.0,
           refine_sweeps: int = 30) -> SearchResult:
    """MCTS over the free factors of one tree or over several alternative trees (e.g. permutations), maximising
    −log10(cycles or energy). Each iteration selects by UCB, expands one value of the next variable, completes
    ``rollouts`` random assignments and evaluates them in one vectorised call; infeasible completions (capacity,
    fan-out) score nothing and subtrees whose completions are all infeasible are pruned. The best point is then
    refined by coordinate descent (:func:`refine`)."""
    arch = load_arch(arch)
    trees = [trees] if isinstance(trees, (Tile, Scope, OpLeaf)) else list(trees)
    comps = [compile_tree(problem, arch, t) for t in trees]
    spaces = [FactorSpace(c) for c in comps]
    rng = np.random.default_rng(seed)
    key = "cycles" if objective == "cycles" else "energy_pj"
    best = (math.inf, None, None)  # (score, tree index, x)
    per_tree: dict[int, tuple] = {}  # best (score, x) of each alternative tree, refined at the end
    evals = 0
    root = _MNode(range(len(trees)))
    history = []

    def rollout(ti: int, prefix: dict) -> float:
        nonlocal best, evals
        X = spaces[ti].complete(rng, rollouts, prefix)
        br = comps[ti].evaluate(X, batched=True)
        evals += len(X)
        vals = getattr(br, key)
        i = int(np.argmin(vals))
        if vals[i] < best[0]:
            best = (float(vals[i]), ti, X[i].copy())
        if vals[i] < per_tree.get(ti, (math.inf,))[0]:
            per_tree[ti] = (float(vals[i]), X[i].copy())
        return -math.log10(vals[i]) if math.isfinite(vals[i]) else None

    lo, hi = None, None
    for it in range(iterations):
        node, path = root, []
        ti, prefix = None, {}
        # selection / expansion
        while True:
            depth = len(path)
            if node.untried:
                val = node.untried.pop(int(rng.integers(len(node.untried))))
                if ti is None:
                    ti_new = val
                    nxt = spaces[ti_new].choice_vars
                    child = _MNode(spaces[ti_new].candidates(nxt[0], {}) if nxt else [])
                else:
                    sp = spaces[ti]
                    p2 = dict(prefix)
                    p2[sp.choice_vars[depth - 1]] = val
                    k = depth
                    child = _MNode(sp.candidates(sp.choice_vars[k], p2) if k < len(sp.choice_vars) else [])
                node.children[val] = child
                path.append((node, val))
                node = child
                if ti is None:
                    ti = val
                else:
                    prefix[spaces[ti].choice_vars[depth - 1]] = val
                break
            live = [(v, ch) for v, ch in node.children.items() if not ch.dead]
            if not live:
                break
            tot = max(1, node.n)
            scale = (hi - lo) if (hi is not None and hi > lo) else 1.0

            def ucb(item):
                v, ch = item
                if ch.n == 0:
                    return math.inf
                return (ch.w / ch.n - (lo or 0)) / scale + c_explore * math.sqrt(math.log(tot) / ch.n)

            val, child = max(live, key=ucb)
            path.append((node, val))
            if ti is None:
                ti = val
            else:
                prefix[spaces[ti].choice_vars[len(path) - 2]] = val
            node = child
        if ti is None:
            break
        r = rollout(ti, prefix)
        if r is None:
            node.dead = not node.untried and all(ch.dead for ch in node.children.values())
            if node.n >= 2:
                node.dead = True
            r_b = (lo if lo is not None else -20.0)
        else:
            lo = r if lo is None else min(lo, r)
            hi = r if hi is None else max(hi, r)
            r_b = r
        node.n += 1
        node.w += r_b
        for nd, _ in path:
            nd.n += 1
            nd.w += r_b
        history.append(best[0])
    if best[1] is None:
        raise MappingError("search", "no feasible mapping found (every completion violates capacity or fan-out)")
    ti, x = best[1], best[2]
    if refine_sweeps:
        # refine the best point of the (up to) three most promising trees; keep the overall best
        cands = sorted(per_tree.items(), key=lambda kv: kv[1][0])[:3]
        top = math.inf
        for tj, (_, xj) in cands:
            v, xr, n = refine(comps[tj], spaces[tj], xj, key, refine_sweeps, rng)
            evals += n
            if v < top:
                top, ti, x = v, tj, xr
    values = spaces[ti].values(x)
    tree = substitute(trees[ti], values)
    res = comps[ti].evaluate(x, batched=False, check=False)
    return SearchResult(tree, res.cycles, res.energy_pj, evals, history=history)


# --- templates ----------------------------------------------------------------------------------------------
def _chain(problem: Problem) -> tuple[list[str], list[str]]:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(problem.op_names)
    for t, p in problem.producer.items():
        for c in problem.consumers.get(t, []):
            g.add_edge(p, c)
    order = list(nx.topological_sort(g))
    shared = [d for d in problem.op_dims(order[0]) if all(d in problem.op_dims(o) for o in order)]
    return order, shared


def _v(d: str, tag: str) -> tuple[str, str]:
    return (d, f"{d}@{tag}")


def _branch(problem: Problem, arch: Arch, op: str, tag: str, top_dims: Sequence[str], bypass0: Sequence[str],
            outer_tiles: bool = True) -> Node:
    """One op's subtree: [DRAM temporal over top_dims] → spatial to the next level → per inner level a temporal
    tile and a spatial tile → the innermost level → op."""
    o = problem.op(op)
    dims = [d.name for d in o.dims]
    out = [d for d in dims if d not in o.reduction_dims]
    # spatial loops only over dims no index combines with another (no conv window: halos defeat multicast)
    mixed = {d for (oo, _), acc in problem.access.items() if oo == op for kt in acc.terms if len(kt) > 1
             for d, _ in kt}
    par = [d for d in dims if d not in mixed]
    names = [lv.name for lv in arch.levels]
    inner = names[-1]
    node: Node = OpLeaf(op)
    # a PE's register file holds one element of each operand; intermediates are read from the level above
    node = Tile(inner, [(d, 1) for d in dims], node, bypass=tuple(t for t in problem.intermediates()
                                                                   if t in [a.tensor.name for a in o.accesses]))
    for lv in reversed(names[1:-1]):
        sdims = [d for d in par if d not in out[:-2]] if len(out) > 2 else par  # not the batch dims
        node = Tile(lv, [_v(d, f"{tag}.{lv}.r") for d in dims], node)  # innermost: takes the rest of each extent
        node = Tile(lv, [_v(d, f"{tag}.{lv}.s") for d in sdims], node, "spatial")
        if outer_tiles:
            node = Tile(lv, [_v(d, f"{tag}.{lv}") for d in dims], node)
    node = Tile(names[0], [_v(d, f"{tag}.{names[0]}.s") for d in [d for d in out if d in par][:2]], node, "spatial")
    if top_dims:
        node = Tile(names[0], [_v(d, f"{tag}.{names[0]}") for d in top_dims], node, bypass=tuple(bypass0))
    elif bypass0:
        node = Tile(names[0], [], node, bypass=tuple(bypass0))
    return node


def template(problem: Problem, arch: Any, name: str, perm: Sequence[str] | None = None) -> Node:
    """A named fusion-structure template with free factors (see the module docstring)."""
    arch = load_arch(arch)
    order, shared = _chain(problem)
    inter = list(problem.intermediates())
    if name == "layerwise":
        return Scope("sequential", [_branch(problem, arch, o, o, problem.op_dims(o), ()) for o in order])
    last = problem.op(order[-1])
    if name == "flat":
        top = [d for d in shared if d not in last.reduction_dims]
        scope = "sequential"
    elif name in ("chimera", "fused", "tileflow"):
        top = list(shared)
        scope = {"chimera": "sharing", "fused": "sequential", "tileflow": "pipeline"}[name]
    else:
        raise MappingError("template", f"unknown template {name!r}; choose from {list(TEMPLATES)}", name)
    if perm is not None:
        top = [d for d in perm if d in top] + [d for d in top if d not in perm]
    branches = []
    for o in order:
        priv = [d for d in problem.op_dims(o) if d not in top]
        branches.append(_branch(problem, arch, o, o, priv, inter))
    return Tile(arch.levels[0].name, [_v(d, "root") for d in top], Scope(scope, branches))


def search_template(problem: Problem, arch: Any, name: str, iterations: int = 150, rollouts: int = 64,
                    seed: int = 0, objective: str = "cycles", permutations: bool = True) -> SearchResult:
    """Search one template's tiles (and, with ``permutations``, the order of its shared outer loops)."""
    arch = load_arch(arch)
    base = template(problem, arch, name)
    trees = [base]
    if permutations and isinstance(base, Tile) and len(base.loops) > 1:
        dims = [d for d, _ in base.loops]
        trees = [template(problem, arch, name, list(p)) for p in itertools.permutations(dims)]
    r = search(problem, arch, trees, objective, iterations, rollouts, seed)
    r.template = name
    return r


def explore(problem: Problem, arch: Any, templates: Sequence[str] = TEMPLATES, **kw) -> dict[str, SearchResult]:
    """Every template searched; {name: SearchResult}."""
    out = {}
    for t in templates:
        try:
            out[t] = search_template(problem, arch, t, **kw)
        except MappingError as e:
            out[t] = SearchResult(None, math.inf, math.inf, 0, t, [str(e)])
    return out


__all__ = ["FactorSpace", "SearchResult", "search", "refine", "template", "search_template", "explore", "TEMPLATES"]
