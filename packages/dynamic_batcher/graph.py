"""The merged dynamic graph of a minibatch and the analyses the policies share.

Nodes are stored column-wise (plain lists) because a minibatch has thousands of them and per-node objects
would dominate the construction time. Type 0 is "unbatchable"; types 1.. are interned batching signatures.
"""
from __future__ import annotations

from array import array
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import BatcherError, CycleError
from .ir import UNBATCHABLE_KINDS

_TYPE_KEYS: dict[tuple, str] = {}  # signature -> text key, shared by every minibatch (formatting is per flush)


class DynGraph:
    """A DAG of typed nodes. Node i: kind, args [(src node, output index)], params, attrs, output shapes, data."""

    def __init__(self):
        self.kind: list[str] = []
        self.args: list[tuple] = []
        self.params: list[tuple] = []
        self.attrs: list[tuple] = []
        self.shapes: list[tuple] = []
        self.data: list[Any] = []
        self.type: list[int] = []
        self._label_of: dict[int, str] = {}  # the few nodes with a user label
        self.sig_to_type: dict[tuple, int] = {}
        self.type_sig: list[tuple | None] = [None]  # type 0: unbatchable
        self.preds: list[tuple] = []  # distinct argument nodes
        self._h = 0  # rolling hash of the structure (types + argument references), updated per node
        self.argflat: list[int] = []  # every argument as (src node, output index), flattened: planning converts it
        self.arity: list[int] = []  # to numpy in one call instead of walking the nested tuples per minibatch
        self.sources: list[int] = []  # nodes without arguments (the initial frontier)
        # successors and in-degrees are derived when a flush first needs them: appending them per node while
        # recording was a fifth of the recording's own cost, and the compiled simulator reads argflat instead
        self._succ: list[list[int]] | None = None
        self.results: Any = None  # set by the executor after a flush
        self.failed: dict[int, tuple] = {}  # node -> (node that raised, error) of a flush where an instance failed
        self.error: BaseException | None = None  # why the flush of this graph failed as a whole
        self._frozen: "GraphView | None" = None
        self._np: dict = {}  # numpy forms of type / arity / argflat, built once per flush (shared by sim and planner)

    @property
    def n(self) -> int:
        return len(self.kind)

    def add(self, kind: str, args: tuple, params: tuple, attrs: tuple, shapes: tuple, data: Any = None,
            label: str = "") -> int:
        i = len(self.kind)
        sh = self.shapes
        try:
            ashapes = tuple([sh[a][o] for a, o in args])
        except (IndexError, TypeError):
            ashapes = None
        if ashapes is None:
            self._bad_argument(i, kind, args, params, data, label)
        if kind in UNBATCHABLE_KINDS:
            t = 0
        else:
            # signature = op kind + argument shapes + parameter identities + attrs (+ output shapes)
            sig = (kind, params, ashapes, attrs, shapes)
            t = self.sig_to_type.get(sig)
            if t is None:
                t = len(self.type_sig)
                self.sig_to_type[sig] = t
                self.type_sig.append(sig)
        self.kind.append(kind)
        self.args.append(args)
        self.params.append(params)
        self.attrs.append(attrs)
        self.shapes.append(shapes)
        self.data.append(data)
        self.type.append(t)
        self._h = hash((self._h, t, args))
        if label:
            self._label_of[i] = label
        na = len(args)
        self.arity.append(na)
        if na == 1:
            self.preds.append((args[0][0],))
            self.argflat += args[0]
        elif na:
            self.preds.append(tuple(dict.fromkeys(a for a, _ in args)))
            af = self.argflat
            for a in args:
                af += a
        else:
            self.preds.append(())
            self.sources.append(i)
        if self._frozen is not None or self._np or self._succ is not None:
            self._frozen = None
            self._np = {}
            self._succ = None
        return i

    @property
    def succ(self) -> list[list[int]]:
        """Distinct successor nodes of every node (derived from ``preds`` on first use after recording)."""
        if self._succ is None:
            self._succ = _successors(self.preds)
        return self._succ

    def _bad_argument(self, i: int, kind: str, args: tuple, params: tuple, data: Any, label: str) -> None:
        """Raise for the first argument of a node-to-be that is not an output of an earlier node."""
        from .ir import _label

        name = label or _label(kind, i, params, f"<{data.name}>" if kind == "block" else "")
        for j, ref in enumerate(args):
            a, o = ref if isinstance(ref, tuple) and len(ref) == 2 else (ref, 0)
            if a == i:
                raise CycleError(name, [name])
            if not isinstance(a, int) or not 0 <= a < i:
                raise BatcherError(f"node {name}: argument {j} refers to node {a}, which is not an earlier node "
                                   f"of the graph (arguments are recorded before their users)")
            if not isinstance(o, int) or not 0 <= o < len(self.shapes[a]):
                raise BatcherError(f"node {name}: argument {j} refers to output {o} of node {self.label(a)}, "
                                   f"which has {len(self.shapes[a])} output(s)")
        raise BatcherError(f"node {name}: malformed arguments {args!r}")

    def _np_of(self, name: str, code: str, dtype) -> Any:
        """``self.<name>`` (a list of ints) as numpy, cached until the next node is added; ``array()`` converts a
        list ~1.6x faster than ``np.array`` and ``frombuffer`` is zero-copy."""
        a = self._np.get(name)
        if a is None:
            a = self._np[name] = np.frombuffer(array(code, getattr(self, name)), dtype=dtype)
        return a

    def np_types(self):
        """Type id per node as int32 numpy (cached)."""
        return self._np_of("type", "i", np.int32)

    def np_arity(self):
        """Argument count per node as int32 numpy (cached)."""
        return self._np_of("arity", "i", np.int32)

    def np_argflat(self):
        """Every argument's (source node, output index), flattened, as int64 numpy (cached)."""
        return self._np_of("argflat", "q", np.int64)

    def label(self, i: int) -> str:
        from .ir import _label

        extra = f"<{self.data[i].name}>" if self.kind[i] == "block" else ""
        return self._label_of.get(i) or _label(self.kind[i], i, self.params[i], extra)

    def type_key(self, t: int) -> str:
        """A stable text key of a type (the same signature in another minibatch gets the same key)."""
        if t == 0:
            return "unbatchable"
        sig = self.type_sig[t]
        key = _TYPE_KEYS.get(sig)
        if key is None:
            key = _TYPE_KEYS[sig] = self._format_key(sig)
        return key

    @staticmethod
    def _format_key(sig: tuple) -> str:
        kind, params, ashapes, attrs, shapes = sig
        params = [p.name for p in params]
        a = ",".join(f"{k}={v}" for k, v in attrs if k != "fn")
        return f"{kind}[{'|'.join(params)}]{list(ashapes)}{('{' + a + '}') if a else ''}->{list(shapes)}"

    def view(self) -> "GraphView":
        if self._frozen is None:
            # node ids of a recorded graph are a topological order (arguments exist before their users)
            self._frozen = GraphView(self.type, self.preds, [self.type_key(t) for t in range(len(self.type_sig))],
                                     names=None, labels=self, succ=self._succ, topo=range(self.n),
                                     sources=self.sources, trusted=True)
            self._frozen.dyn = self  # the recorded graph: its flat numpy arrays feed the compiled simulator
        return self._frozen

    def structure_key(self) -> tuple:
        """Hashable key of the graph's shape (types and edges, not data), O(1): a rolling hash kept while
        recording. Use :meth:`same_structure` to confirm a cache hit (hash collisions)."""
        return (self.n, self._h, len(self.type_sig))

    def same_structure(self, other: Any) -> bool:
        """Exact check (list comparisons run in C) that two graphs have the same types and edges."""
        return (self.n == other.n and self.type == other.type and self.args == other.args
                and self.type_sig == other.type_sig)


class GraphView:
    """Adjacency and analyses of a typed DAG (types[i], preds[i]); validates acyclicity on construction."""

    def __init__(self, types: list[int], preds: list[tuple], type_keys: list[str], names: list[str] | None = None,
                 labels: Any = None, succ: list[list[int]] | None = None, topo: Any = None,
                 sources: list[int] | None = None, trusted: bool = False):
        self.n = len(types)
        self.types = types
        self.type_keys = type_keys
        self.ntypes = len(type_keys)
        self._names = names
        self._labels = labels
        self._succ = succ
        if trusted or succ is not None:  # trusted: deduplicated preds in a topological order (succ built lazily)
            self.preds = preds
        else:
            self.preds = [tuple(dict.fromkeys(p)) for p in preds]  # dedupe, keep order
            for v, ps in enumerate(self.preds):
                for p in ps:
                    if not 0 <= p < self.n:
                        raise BatcherError(f"node {self.name(v)}: argument refers to unknown node {p}")
        self.indeg = list(map(len, self.preds))
        self.sources = sources if sources is not None else [v for v, d in enumerate(self.indeg) if not d]
        self.topo = topo if topo is not None else self._toposort()
        self._depth = None
        self._height = None
        self._lb = None
        self._gt = None
        self.dyn: "DynGraph | None" = None  # set for views of recorded graphs (ids are a topological order)

    @property
    def succ(self) -> list[list[int]]:
        """Distinct successors of every node (built on first use)."""
        if self._succ is None:
            self._succ = _successors(self.preds)
        return self._succ

    def name(self, v: int) -> str:
        if self._names is not None:
            return self._names[v]
        if self._labels is not None:
            return self._labels.label(v)
        return f"node{v}"

    def _toposort(self) -> list[int]:
        indeg = list(self.indeg)
        order = [v for v in range(self.n) if indeg[v] == 0]
        i = 0
        while i < len(order):
            for s in self.succ[order[i]]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    order.append(s)
            i += 1
        if len(order) != self.n:
            left = {v for v in range(self.n) if indeg[v] > 0}
            # walk predecessors inside the leftover set until a node repeats: that is a cycle
            v = min(left)
            seen: dict[int, int] = {}
            path: list[int] = []
            while v not in seen:
                seen[v] = len(path)
                path.append(v)
                v = next(p for p in self.preds[v] if p in left)
            cyc = path[seen[v]:][::-1]
            raise CycleError(self.name(v), [self.name(c) for c in cyc])
        return order

    # --- depth (longest path from a source; sources have depth 0) --------------------------------------------
    @property
    def depth(self) -> list[int]:
        if self._depth is None:
            d = [0] * self.n
            preds = self.preds
            for v in self.topo:
                ps = preds[v]
                if ps:
                    m = 0
                    for p in ps:
                        if d[p] > m:
                            m = d[p]
                    d[v] = m + 1
            self._depth = d
        return self._depth

    @property
    def height(self) -> list[int]:
        """Longest path (in edges) from each node to a sink: the critical-path priority of the cheap heuristic."""
        if self._height is None:
            h = [0] * self.n
            succ = self.succ
            for v in reversed(self.topo):
                ss = succ[v]
                if ss:
                    h[v] = 1 + max(map(h.__getitem__, ss))
            self._height = h
        return self._height

    # --- lower bound ------------------------------------------------------------------------------------------
    def lower_bound(self) -> int:
        """#unbatchable nodes + Σ_t max number of type-t nodes on any path."""
        if self._lb is None:
            self._lb = self.lower_bound_of(range(self.n))
        return self._lb

    def lower_bound_of(self, nodes: Iterable[int]) -> int:
        """Lower bound of the subgraph induced by ``nodes`` (used by the exact search on remaining nodes)."""
        keep = set(nodes)
        unb = sum(1 for v in keep if self.types[v] == 0)
        return unb + sum(self._maxpath_counts(keep).values())

    def _maxpath_counts(self, nodes: Iterable[int]) -> dict[int, int]:
        """Per batchable type: the largest number of its nodes on one path of the subgraph induced by ``nodes``."""
        keep = nodes if isinstance(nodes, (set, range)) else set(nodes)
        tset = sorted({self.types[v] for v in keep if self.types[v] != 0})
        if not tset:
            return {}
        col = {t: j for j, t in enumerate(tset)}
        cnt = np.zeros((self.n, len(tset)), dtype=np.int32)
        for v in self.topo:
            if v not in keep:
                continue
            ps = [p for p in self.preds[v] if p in keep]
            if ps:
                row = cnt[ps].max(axis=0) if len(ps) > 1 else cnt[ps[0]].copy()
            else:
                row = np.zeros(len(tset), dtype=np.int32)
            t = self.types[v]
            if t:
                row[col[t]] += 1
            cnt[v] = row
        return dict(zip(tset, cnt.max(axis=0).tolist()))

    def scs_lower_bound(self, max_types: int = 6) -> tuple[int, list[str]]:
        """A tighter lower bound for recurrences of differently typed cells (lattices): for a set S of cell types
        whose nodes form one dependency chain per instance (connected component), the batches of S-types form a
        common supersequence of every instance's S-type sequence, so they number at least the longest pairwise
        shortest common supersequence (exact O(|a||b|) DP); the other types keep their max-on-a-path counts.
        Tries every subset S of the static-block types (at most ``max_types`` of them); returns the best bound
        and its S (empty when nothing beats :meth:`lower_bound`)."""
        import itertools

        lb = self.lower_bound()
        cand = [t for t in range(1, self.ntypes) if self.type_keys[t].startswith("block")]
        if not cand or len(cand) > max_types:
            return lb, []
        per_type = self._maxpath_counts(range(self.n))
        comp = [0] * self.n  # instance (weakly connected component) of each node
        for c, nodes in enumerate(self.components()):
            for v in nodes:
                comp[v] = c
        best, best_s = lb, []
        for r in range(1, len(cand) + 1):
            for S in itertools.combinations(cand, r):
                ss = set(S)
                seqs: dict[int, list[int]] = {}
                for v in range(self.n):  # node ids are a topological order
                    if self.types[v] in ss:
                        seqs.setdefault(comp[v], []).append(v)
                if not all(b in self.succ[a] for q in seqs.values() for a, b in zip(q, q[1:])):
                    continue  # not one chain per instance
                ts = sorted(([self.types[v] for v in q] for q in seqs.values()), key=len, reverse=True)
                sc = len(ts[0]) if ts else 0
                for i in range(len(ts)):
                    for j in range(i + 1, len(ts)):
                        if len(ts[i]) + len(ts[j]) <= sc:
                            break  # sorted by length: no later pair can beat sc
                        sc = max(sc, _scs_len(ts[i], ts[j]))
                bound = lb - sum(per_type.get(t, 0) for t in S) + sc
                if bound > best:
                    best, best_s = bound, [self.type_keys[t] for t in S]
        return best, best_s

    def components(self) -> list[list[int]]:
        """Weakly connected components (one per instance of a minibatch), node lists in topological order."""
        root = list(range(self.n))

        def find(x: int) -> int:
            while root[x] != x:
                root[x] = root[root[x]]
                x = root[x]
            return x

        for v, ps in enumerate(self.preds):
            for p in ps:
                a, b = find(v), find(p)
                if a != b:
                    root[a] = b
        comps: dict[int, list[int]] = {}
        for v in range(self.n):  # ids are a topological order for recorded graphs; sorted below otherwise
            comps.setdefault(find(v), []).append(v)
        pos = {v: i for i, v in enumerate(self.topo)} if not isinstance(self.topo, range) else None
        out = list(comps.values())
        if pos is not None:
            out = [sorted(c, key=pos.__getitem__) for c in out]
        return out

    def _instance_automaton(self, nodes: list[int], kpreds: dict[int, list[int]]
                            ) -> tuple[list[dict[int, int]], int]:
        """Reachable states of one instance under "run every ready node of type t" moves: state i -> {t: j}.

        ``nodes``: the instance's kept nodes (topological order), ``kpreds``: their kept predecessors (through
        dropped nodes). A state is the executed set (a bitmask over ``nodes``). Returns the transition list
        (state 0 is the start) and the index of the final state."""
        loc = {v: i for i, v in enumerate(nodes)}
        types = [self.types[v] for v in nodes]
        pm = [0] * len(nodes)
        succ: list[list[int]] = [[] for _ in nodes]
        for i, v in enumerate(nodes):
            for p in kpreds[v]:
                pm[i] |= 1 << loc[p]
                succ[loc[p]].append(i)
        full = (1 << len(nodes)) - 1
        index = {0: 0}
        states = [(0, tuple(i for i in range(len(nodes)) if not pm[i]))]  # (executed mask, ready nodes)
        trans: list[dict[int, int]] = []
        k = 0
        while k < len(states):
            m, ready = states[k]
            moves: dict[int, list[int]] = {}
            for i in ready:
                moves.setdefault(types[i], []).append(i)
            tr = {}
            for t, run in moves.items():
                nm = m
                for i in run:
                    nm |= 1 << i
                j = index.get(nm)
                if j is None:
                    nr = [i for i in ready if types[i] != t]
                    for i in run:
                        for s in succ[i]:
                            if pm[s] & ~nm == 0 and not nm >> s & 1 and s not in nr:
                                nr.append(s)
                    j = index[nm] = len(states)
                    states.append((nm, tuple(nr)))
                tr[t] = j
            trans.append(tr)
            k += 1
        return trans, index[full]

    def _kept(self, keep_types: set[int]) -> dict[int, list[int]]:
        """Kept-type predecessors of every kept node, through dropped nodes (transitive edges)."""
        types, preds = self.types, self.preds
        anc: dict[int, set[int]] = {}  # dropped node -> its nearest kept ancestors
        kp: dict[int, list[int]] = {}
        for v in self.topo:
            s: set[int] = set()
            for p in preds[v]:
                if types[p] in keep_types:
                    s.add(p)
                else:
                    s |= anc[p]
            if types[v] in keep_types:
                kp[v] = sorted(s)
            else:
                anc[v] = s
        return kp

    def subset_exact(self, comps: list[list[int]], keep_types: set[int] | None = None,
                     max_states: int = 200_000) -> int | None:
        """Exact minimum #batches of the types ``keep_types`` (default: all batchable types) in the subgraph made
        of the components ``comps``, dependencies through other nodes kept as transitive edges, by breadth-first
        search over the product of per-instance automata (taking every ready node of the chosen type is never
        worse). Restricting any schedule of the whole graph to those nodes and types gives a schedule of that
        problem, so this never exceeds the batches of those types in the whole graph's optimum.
        Returns None past ``max_states`` product states."""
        if keep_types is None:
            keep_types = set(range(1, self.ntypes))
        keep_types = set(keep_types) - {0}
        kp = self._kept(keep_types)
        autos = [self._instance_automaton([v for v in c if v in kp], kp) for c in comps]
        goal = tuple(f for _, f in autos)
        trans = [a for a, _ in autos]
        start = tuple(0 for _ in autos)
        seen = {start}
        front = [start]
        level = 0
        while front:
            if goal in seen:
                return level
            nxt = []
            for st in front:
                ts: set[int] = set()
                for tr, s in zip(trans, st):
                    ts.update(tr[s])
                for t in ts:
                    ns = tuple(tr[s].get(t, s) for tr, s in zip(trans, st))
                    if ns not in seen:
                        seen.add(ns)
                        nxt.append(ns)
            if len(seen) > max_states:
                return None
            front = nxt
            level += 1
        return None  # unreachable goal: cannot happen on a DAG

    def lower_bounds(self, max_states: int = 20_000, top: int = 4, deep_states: int = 0) -> dict[str, Any]:
        """Every valid lower bound we compute, and the tightest (``best``).

        * ``typewise``: #unbatchable + Σ_t max type-t nodes on a path (the reference's bound);
        * ``scs``: the chain-aware bound :meth:`scs_lower_bound` (pairwise shortest common supersequence of the
          cell chains);
        * ``instance_exact``: the types K with ≥ 2 nodes on some path are kept; their batches number at least the
          exact optimum (:meth:`subset_exact`) of K on small sets of instances — each instance alone, then pairs
          and a triple of those with the largest single optimum (the whole graph when it is ≤ 3 small
          instances); the other types add their max-on-a-path counts and unbatchable nodes one batch each. It
          sees dependency paths between types (a word cell must run between two chain cells, a pair of chains
          of different type sequences) that the other two bounds ignore. With ``deep_states`` > 0 the ``top``
          largest instances are also searched together, with that state budget (a 4-lattice product takes ~3-6M
          states, ~9 s): worth it only where a schedule is above the cheaper bounds.
        """
        tw = self.lower_bound()
        scs, scs_types = self.scs_lower_bound()
        out: dict[str, Any] = {"typewise": tw, "scs": scs, "scs_types": scs_types}
        per_type = self._maxpath_counts(range(self.n))
        keep = {t for t, c in per_type.items() if c >= 2}
        inst = None
        if keep:
            rest = tw - sum(per_type[t] for t in keep)  # unbatchable + dropped types
            comps = self.components()
            whole = self.subset_exact(comps, keep, max_states) if len(comps) <= 3 else None
            if whole is not None:
                inst, how = whole, f"all {len(comps)} instances"
            else:
                singles = []
                # the largest instances (most kept nodes) are the likely binding ones; the rest are not searched
                kc = lambda c: sum(1 for v in c if self.types[v] in keep)  # noqa: E731
                for c in sorted(comps, key=kc, reverse=True)[:2 * top]:
                    v = self.subset_exact([c], keep, max_states)
                    if v is not None:
                        singles.append((v, len(c), c))
                singles.sort(key=lambda x: (-x[0], -x[1]))
                best_c = singles[:top]
                if best_c:
                    inst, how = best_c[0][0], "1 instance"
                cs = [c for _, _, c in best_c]
                subsets = [[a, b] for i, a in enumerate(cs) for b in cs[i + 1:]] + ([cs[:3]] if len(cs) >= 3 else [])
                for sub in subsets:
                    v = self.subset_exact(sub, keep, max_states)
                    if v is not None and v > (inst or 0):
                        inst, how = v, f"{len(sub)} instances"
                if deep_states and len(cs) > 3:
                    v = self.subset_exact(cs, keep, deep_states)
                    if v is not None and v > (inst or 0):
                        inst, how = v, f"{len(cs)} instances"
            if inst is not None:
                inst += rest
                out["instance_exact"] = inst
                out["instance_exact_of"] = how
                out["instance_exact_types"] = sorted(self.type_keys[t] for t in keep)
        cands = {"typewise": tw, "scs": scs, "instance_exact": inst if inst is not None else -1}
        out["best_source"] = max(cands, key=lambda k: (cands[k], k == "typewise"))
        out["best"] = cands[out["best_source"]]
        return out

    # --- reduced per-type graphs G_t ---------------------------------------------------------------------------
    def typewise_preds(self) -> list[list[int]]:
        """For each node v of type t: its predecessors in G_t (nearest type-t ancestors through other types).

        Forward search from each type-t node through other types, pruned to nodes from which a type-t node is
        reachable at all (a bitmask of the types below each node), so sources such as lookups cost nothing."""
        if self._gt is None:
            types, succ = self.types, self.succ
            below = [0] * self.n  # bit t set: a type-t node is reachable strictly below
            for v in reversed(self.topo):
                m = 0
                for s in succ[v]:
                    m |= below[s] | (1 << types[s])
                below[v] = m
            gpred: list[list[int]] = [[] for _ in range(self.n)]
            for u in self.topo:
                t = types[u]
                if not t:
                    continue
                bit = 1 << t
                if not below[u] & bit:
                    continue
                stack = list(succ[u])
                seen = set()
                while stack:
                    w = stack.pop()
                    if w in seen:
                        continue
                    seen.add(w)
                    if types[w] == t:
                        gpred[w].append(u)
                    elif below[w] & bit:
                        stack.extend(succ[w])
            self._gt = gpred
        return self._gt


def _successors(preds: list[tuple]) -> list[list[int]]:
    """Successor lists of a DAG given as (deduplicated) predecessor tuples."""
    succ: list[list[int]] = [[] for _ in range(len(preds))]
    for v, ps in enumerate(preds):
        for p in ps:
            succ[p].append(v)
    return succ


def _scs_len(a: list[int], b: list[int]) -> int:
    """Length of a shortest common supersequence of two sequences (DP over one row)."""
    m = len(b)
    prev = list(range(m + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * m
        for j in range(1, m + 1):
            if x == b[j - 1]:
                cur[j] = prev[j - 1] + 1
            else:
                cur[j] = (prev[j] if prev[j] < cur[j - 1] else cur[j - 1]) + 1
        prev = cur
    return prev[m]


def graph_from_spec(spec: Mapping[str, Mapping[str, Any]]) -> GraphView:
    """A typed DAG from a user description ``{name: {"type": str, "args": [names]}}`` (type "" = unbatchable).

    Raises :class:`CycleError` naming a node on a cycle, :class:`BatcherError` for an unknown argument.
    """
    if not isinstance(spec, Mapping):
        raise BatcherError(f"graph description: a mapping {{name: {{'type', 'args'}}}}, got {type(spec).__name__}")
    names = list(spec)
    idx = {n: i for i, n in enumerate(names)}
    keys = ["unbatchable"]
    tid: dict[str, int] = {}
    types, preds = [], []
    for n in names:
        d = spec[n]
        if not isinstance(d, Mapping):
            raise BatcherError(f"node {n!r}: a mapping with 'type' and 'args', got {d!r}")
        t = str(d.get("type", ""))
        if t and t != "unbatchable":
            if t not in tid:
                tid[t] = len(keys)
                keys.append(t)
            types.append(tid[t])
        else:
            types.append(0)
        ps = []
        args = d.get("args", ())
        if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
            raise BatcherError(f"node {n!r}: args must be a list of node names, got {args!r}")
        for a in args:
            if a not in idx:
                raise BatcherError(f"node {n!r}: argument {a!r} is not a node of the graph")
            ps.append(idx[a])
        preds.append(tuple(ps))
    return GraphView(types, preds, keys, names=names)


__all__ = ["DynGraph", "GraphView", "graph_from_spec"]
