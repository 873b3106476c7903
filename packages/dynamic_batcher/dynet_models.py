"""The workloads of :mod:`dynamic_batcher.workloads` written once more in DyNet's Python API (DyNet 2.x).

Same math, sizes and weights: a :class:`DynetModel` copies every parameter of the workload's :class:`Model` (so
the seeded initialisation is the same by construction) and builds each instance's graph op by op, as a DyNet user
would. The cells follow DyNet's own ``VanillaLSTMBuilder`` idiom: the gate weights of one cell are stacked into
one matrix, one ``affine_transform`` per cell computes every gate's pre-activation and ``pick_range`` cuts it,
which is DyNet's fastest way to write a cell with its Python API (fewer, larger nodes for its autobatcher).

``dy`` (the imported ``dynet`` module) is passed in: DyNet reads its autobatch strategy when it is first imported,
so only :mod:`dynamic_batcher.dynet_ref`'s child process imports it, after ``dynet_config.set``.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import ConfigError
from .workloads import MAT_VOCAB, Workload

SUPPORTED = ("bilstm_tagger", "lstm_lm", "treelstm", "treegru", "mvrnn", "lattice_lstm", "lattice_gru")


class DynetModel:
    """A DyNet ParameterCollection holding a copy of ``wl``'s weights, and ``forward(inst) -> [Expression]``
    (one log-probability vector per position, as the workload's own forward). Call :meth:`begin` after every
    ``dy.renew_cg()``: it puts the parameters into the new graph."""

    def __init__(self, dy: Any, wl: Workload):
        if wl.name not in SUPPORTED:
            raise ConfigError("workload.name", f"{wl.name!r} has no DyNet twin; one of {SUPPORTED}")
        self.dy = dy
        self.wl = wl
        self.pc = dy.ParameterCollection()
        self.sources: dict[str, tuple[str, ...]] = {}
        """DyNet parameter name -> the workload's parameter names stacked (along the first axis) into it."""
        self.params: dict[str, Any] = {}
        self.lookups: dict[str, Any] = {}
        self.x: dict[str, Any] = {}  # this graph's parameter expressions
        self.forward: Callable[[Any], list] = globals()[f"_{wl.name}"](self)

    # --- weights ---------------------------------------------------------------------------------------------------
    def _np(self, short: str):
        return self.wl.model.params[f"{self.wl.model.name}.{short}"].tensor.detach().cpu().numpy()

    def stack(self, key: str, shorts: list[str]) -> str:
        """A DyNet parameter = the named workload parameters stacked along their first axis."""
        import numpy as np

        arr = np.ascontiguousarray(np.concatenate([self._np(s) for s in shorts], axis=0), dtype=np.float32)
        self.params[key] = self.pc.parameters_from_numpy(arr)
        self.sources[key] = tuple(shorts)
        return key

    def table(self, short: str) -> str:
        """A lookup table (rows = entries); 3-D tables hold one matrix per entry."""
        import numpy as np

        arr = self._np(short).astype(np.float32)
        # lookup_parameters_from_numpy swaps the first and last axes for DyNet's column-major storage, which
        # transposes each entry of a 3-D table: pre-transpose so that entry i is arr[i]
        src = np.ascontiguousarray(arr.transpose(0, 2, 1) if arr.ndim == 3 else arr)
        self.lookups[short] = self.pc.lookup_parameters_from_numpy(src)
        self.sources[short] = (short,)
        return short

    def gates(self, cell: str, gates: str, x_kind: str = "W", h_kind: str | None = "U") -> tuple[str, str, str]:
        """Stacked ``(b, W, U)`` keys of a cell's gates (``U`` None when the cell has no recurrent input)."""
        b = self.stack(f"{cell}.b[{gates}]", [f"{cell}.b{g}" for g in _split(gates)])
        w = self.stack(f"{cell}.{x_kind}[{gates}]", [f"{cell}.{x_kind}{g}" for g in _split(gates)])
        u = self.stack(f"{cell}.{h_kind}[{gates}]", [f"{cell}.{h_kind}{g}" for g in _split(gates)]) if h_kind else None
        return b, w, u

    def begin(self) -> None:
        """Parameter expressions of the current computation graph (once per ``renew_cg``); trainable ones (``expr()``
        alone would be a constant that no update reaches)."""
        self.x = {k: p.expr(True) for k, p in self.params.items()}

    def values(self) -> dict[str, Any]:
        """The current weights by DyNet parameter name (numpy; 3-D lookup tables entry-major)."""
        out = {k: p.as_array() for k, p in self.params.items()}
        for k, lp in self.lookups.items():
            out[k] = lp.as_array()
        return out

    # --- ops --------------------------------------------------------------------------------------------------------
    def look(self, short: str, i: int):
        return self.dy.lookup(self.lookups[short], int(i))

    def affine(self, b: str, *pairs):
        """``b + Σ W x`` over ``(weight key, input)`` pairs, one DyNet node."""
        args = [self.x[b]]
        for w, v in pairs:
            args += [self.x[w], v]
        return self.dy.affine_transform(args)

    def cut(self, pre, k: int, H: int) -> list:
        """The k gate pre-activations of a stacked one (``pick_range``, as ``VanillaLSTMBuilder`` does)."""
        return [self.dy.pick_range(pre, j * H, (j + 1) * H) for j in range(k)]

    def classifier(self, n_out_key: str = "out"):
        b = self.stack(f"{n_out_key}.b", [f"{n_out_key}.b"])
        W = self.stack(f"{n_out_key}.W", [f"{n_out_key}.W"])
        return lambda h: self.dy.log_softmax(self.affine(b, (W, h)))


def _split(gates: str) -> list[str]:
    """Gate names of a gate string: 'ifou' -> i f o u; the Tree-LSTM's 'i,fl,fr,o,u' is comma-separated."""
    return gates.split(",") if "," in gates else list(gates)


def _lstm_cell(m: DynetModel, name: str, H: int):
    """LSTM cell (gates i f o u): h, c = o * tanh(f c + i u), f c + i u."""
    b, W, U = m.gates(name, "ifou")
    dy = m.dy

    def cell(x, h, c):
        i, f, o, u = m.cut(m.affine(b, (W, x), (U, h)), 4, H)
        c2 = dy.cmult(dy.logistic(f), c) + dy.cmult(dy.logistic(i), dy.tanh(u))
        return dy.cmult(dy.logistic(o), dy.tanh(c2)), c2

    return cell


def _gru_cell(m: DynetModel, name: str, H: int):
    """GRU cell: z, r from x and h; n = tanh(Wn x + bn + Un (r h)); h' = n + z (h - n)."""
    bzr, Wzr, Uzr = m.gates(name, "zr")
    bn, Wn, Un = m.gates(name, "n")
    dy = m.dy

    def cell(x, h):
        z, r = (dy.logistic(v) for v in m.cut(m.affine(bzr, (Wzr, x), (Uzr, h)), 2, H))
        n = dy.tanh(m.affine(bn, (Wn, x), (Un, dy.cmult(r, h))))
        return n + dy.cmult(z, h - n)

    return cell


def _bilstm_tagger(m: DynetModel):
    H, dy = m.wl.hidden, m.dy
    m.table("emb")
    m.table("zero")
    fwd, bwd = _lstm_cell(m, "fwd", H), _lstm_cell(m, "bwd", H)
    b1, W1 = m.stack("mlp.b", ["mlp.b"]), m.stack("mlp.W", ["mlp.W"])
    clf = m.classifier()

    def forward(sent) -> list:
        xs = [m.look("emb", w) for w in sent]
        h = c = m.look("zero", 0)
        hf = []
        for x in xs:
            h, c = fwd(x, h, c)
            hf.append(h)
        h = c = m.look("zero", 0)
        hb = [None] * len(xs)
        for t in range(len(xs) - 1, -1, -1):
            h, c = bwd(xs[t], h, c)
            hb[t] = h
        return [clf(dy.tanh(m.affine(b1, (W1, dy.concatenate([a, bb]))))) for a, bb in zip(hf, hb)]

    return forward


def _lstm_lm(m: DynetModel):
    H = m.wl.hidden
    m.table("emb")
    m.table("zero")
    cell = _lstm_cell(m, "cell", H)
    clf = m.classifier()

    def forward(sent) -> list:
        h = c = m.look("zero", 0)
        out = []
        for w in sent:
            h, c = cell(m.look("emb", w), h, c)
            out.append(clf(h))
        return out

    return forward


def _treelstm(m: DynetModel):
    H, dy = m.wl.hidden, m.dy
    m.table("emb")
    lb, lW, _ = m.gates("leaf", "iou", h_kind=None)
    nb = m.stack("node.b[i,fl,fr,o,u]", [f"node.b{g}" for g in ("i", "fl", "fr", "o", "u")])
    nUL = m.stack("node.UL[i,fl,fr,o,u]", [f"node.UL{g}" for g in ("i", "fl", "fr", "o", "u")])
    nUR = m.stack("node.UR[i,fl,fr,o,u]", [f"node.UR{g}" for g in ("i", "fl", "fr", "o", "u")])
    clf = m.classifier()

    def leaf(x):
        i, o, u = m.cut(m.affine(lb, (lW, x)), 3, H)
        c = dy.cmult(dy.logistic(i), dy.tanh(u))
        return dy.cmult(dy.logistic(o), dy.tanh(c)), c

    def node(hl, cl, hr, cr):
        i, fl, fr, o, u = m.cut(m.affine(nb, (nUL, hl), (nUR, hr)), 5, H)
        c = (dy.cmult(dy.logistic(i), dy.tanh(u)) + dy.cmult(dy.logistic(fl), cl)) + dy.cmult(dy.logistic(fr), cr)
        return dy.cmult(dy.logistic(o), dy.tanh(c)), c

    def forward(tree) -> list:
        out: list = []
        _post_order(tree, lambda t: leaf(m.look("emb", t)), lambda lft, r: node(*lft, *r),
                    lambda s: out.append(clf(s[0])))
        return out

    return forward


def _post_order(tree, leaf, node, emit) -> None:
    """Post-order walk without recursion (left, right, node); ``leaf(t)`` / ``node(l, r)`` return a state,
    ``emit(state)`` sees each node's state in the order the recursive forwards of :mod:`workloads` do."""
    stack, done = [(tree, False)], []
    while stack:
        t, expanded = stack.pop()
        if isinstance(t, (tuple, list)) and not expanded:
            stack += [(t, True), (t[1], False), (t[0], False)]
            continue
        if isinstance(t, (tuple, list)):
            r, lft = done.pop(), done.pop()
            s = node(lft, r)
        else:
            s = leaf(t)
        emit(s)
        done.append(s)


def _treegru(m: DynetModel):
    H, dy = m.wl.hidden, m.dy
    m.table("emb")
    bL, WL = m.stack("leaf.b", ["leaf.b"]), m.stack("leaf.W", ["leaf.W"])
    b3 = m.stack("node.b[z,rl,rr]", ["node.bz", "node.brl", "node.brr"])
    W3 = m.stack("node.W[z,rl,rr]", ["node.Wz", "node.Wrl", "node.Wrr"])
    bn, Wn = m.stack("node.bn", ["node.bn"]), m.stack("node.Wn", ["node.Wn"])
    clf = m.classifier()

    def node(hl, hr):
        z, rl, rr = (dy.logistic(v) for v in m.cut(m.affine(b3, (W3, dy.concatenate([hl, hr]))), 3, H))
        n = dy.tanh(m.affine(bn, (Wn, dy.concatenate([dy.cmult(rl, hl), dy.cmult(rr, hr)]))))
        mean = (hl + hr) * 0.5
        return n + dy.cmult(z, mean - n)

    def forward(tree) -> list:
        out: list = []
        _post_order(tree, lambda t: dy.tanh(m.affine(bL, (WL, m.look("emb", t)))), node,
                    lambda h: out.append(clf(h)))
        return out

    return forward


def _mvrnn(m: DynetModel):
    dy = m.dy
    m.table("emb")
    m.table("emb_mat")
    b, W, WM = m.stack("node.b", ["node.b"]), m.stack("node.W", ["node.W"]), m.stack("node.WM", ["node.WM"])
    clf = m.classifier()

    def node(left, right):
        (a, A), (bb, B) = left, right
        p = dy.tanh(m.affine(b, (W, dy.concatenate([B * a, A * bb]))))
        return p, m.x[WM] * dy.concatenate([A, B], d=0)

    def forward(tree) -> list:
        out: list = []
        _post_order(tree, lambda t: (m.look("emb", t), m.look("emb_mat", t % MAT_VOCAB)), node,
                    lambda s: out.append(clf(s[0])))
        return out

    return forward


def _lattice_words(words) -> dict[int, list]:
    by_start: dict[int, list] = {}
    for (b, e, w) in words:
        by_start.setdefault(b, []).append((e, w))
    return by_start


def _lattice_lstm(m: DynetModel):
    H, dy = m.wl.hidden, m.dy
    for t in ("char_emb", "word_emb", "zero"):
        m.table(t)
    char = _lstm_cell(m, "char", H)
    wb, wW, wU = m.gates("word", "ifu")
    gb, gW, gU = m.gates("merge", "ifou")
    gbg, gWg, gUg = m.gates("merge", "g")
    clf = m.classifier()

    def word(x, h, c):
        i, f, u = m.cut(m.affine(wb, (wW, x), (wU, h)), 3, H)
        return dy.cmult(dy.logistic(f), c) + dy.cmult(dy.logistic(i), dy.tanh(u))

    def merge(x, h, c, cw):
        i, f, o, u = m.cut(m.affine(gb, (gW, x), (gU, h)), 4, H)
        g = dy.logistic(m.affine(gbg, (gWg, x), (gUg, cw)))
        c2 = (dy.cmult(dy.logistic(f), c) + dy.cmult(dy.logistic(i), dy.tanh(u))) + dy.cmult(g, cw)
        return dy.cmult(dy.logistic(o), dy.tanh(c2)), c2

    def forward(lat) -> list:
        chars, words = lat
        by_start, ends = _lattice_words(words), {}
        h = c = m.look("zero", 0)
        out = []
        for j, ch in enumerate(chars):
            x = m.look("char_emb", ch)
            if j in ends:
                cw = ends[j][0]
                for extra in ends[j][1:]:
                    cw = cw + extra
                h, c = merge(x, h, c, cw)
            else:
                h, c = char(x, h, c)
            out.append(clf(h))
            for e, w in by_start.get(j, ()):
                ends.setdefault(e, []).append(word(m.look("word_emb", w), h, c))
        return out

    return forward


def _lattice_gru(m: DynetModel):
    H, dy = m.wl.hidden, m.dy
    for t in ("char_emb", "word_emb", "zero"):
        m.table(t)
    char, word = _gru_cell(m, "char", H), _gru_cell(m, "word", H)
    bzr, Wzr, Uzr = m.gates("merge", "zr")
    bn, Wn, Un = m.gates("merge", "n")
    bg, Wg, Ug = m.gates("merge", "g")
    clf = m.classifier()

    def merge(x, h, hw):
        z, r = (dy.logistic(v) for v in m.cut(m.affine(bzr, (Wzr, x), (Uzr, h)), 2, H))
        g = dy.logistic(m.affine(bg, (Wg, x), (Ug, hw)))
        n = dy.tanh(m.affine(bn, (Wn, x), (Un, dy.cmult(r, h))))
        h2 = n + dy.cmult(z, h - n)
        return h2 + dy.cmult(g, hw - h2)

    def forward(lat) -> list:
        chars, words = lat
        by_start, ends = _lattice_words(words), {}
        h = m.look("zero", 0)
        out = []
        for j, ch in enumerate(chars):
            x = m.look("char_emb", ch)
            if j in ends:
                hw = ends[j][0]
                for extra in ends[j][1:]:
                    hw = hw + extra
                h = merge(x, h, hw)
            else:
                h = char(x, h)
            out.append(clf(h))
            for e, w in by_start.get(j, ()):
                ends.setdefault(e, []).append(word(m.look("word_emb", w), h))
        return out

    return forward


__all__ = ["DynetModel", "SUPPORTED"]
