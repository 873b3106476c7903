"""Workload generators (no downloads): chains, trees and lattices written against the define-by-run API.

Sizes follow corpus statistics (figures from the corpus papers; no data is read):

* Trees (TreeLSTM, TreeGRU, MV-RNN): sentence length ~ a log-normal fitted to the Stanford Sentiment Treebank
  (Socher et al., EMNLP 2013: 11,855 sentences, mean ≈ 19 tokens; we use mean 19, sd 9, clipped to [2, 60]);
  binary trees drawn by uniform random splits (SST trees are binarised constituency parses).
* Chains (BiLSTM tagger, LSTM LM): Penn Treebank WSJ §02–21 (Marcus et al., 1993: 39,832 sentences, ~950k
  tokens, mean ≈ 23.9 tokens; we use mean 24, sd 11, clipped to [2, 60]).
* Lattices (LatticeLSTM/GRU, Zhang & Yang, ACL 2018): character sequences with mean 30, sd 12 (our choice, in
  the range of the Chinese NER corpora used there; not a measured figure) and lexicon-word edges: at each
  character a word starts with probability 0.35, of length 2 / 3 / 4 with probability 0.6 / 0.25 / 0.15.

Every model emits a per-position output (tag/sentiment log-probabilities), as in the reference's benchmarks.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

from .errors import ConfigError
from .ir import Model, Ops

VOCAB = 1000
CHAR_VOCAB = 500
WORD_VOCAB = 1000
MAT_VOCAB = 64  # MV-RNN word matrices (H×H each): a small table keeps memory in check
N_CLASSES = 5
N_TAGS = 16

FAMILIES = {"bilstm_tagger": "chain", "lstm_lm": "chain", "treelstm": "tree", "treegru": "tree", "mvrnn": "tree",
            "lattice_lstm": "lattice", "lattice_gru": "lattice"}


def _lognormal_len(rng: random.Random, mean: float, sd: float, lo: int = 2, hi: int = 60) -> int:
    s2 = math.log(1 + (sd / mean) ** 2)
    mu = math.log(mean) - s2 / 2
    return max(lo, min(hi, int(round(rng.lognormvariate(mu, math.sqrt(s2))))))


# --- instances ----------------------------------------------------------------------------------------------------
def random_tree(rng: random.Random, n_leaves: int) -> Any:
    """Binary tree as nested tuples; leaves are word ids."""
    def build(n: int) -> Any:
        if n == 1:
            return rng.randrange(VOCAB)
        k = rng.randint(1, n - 1)
        return (build(k), build(n - k))
    return build(n_leaves)


def random_lattice(rng: random.Random, n_chars: int) -> tuple[list[int], list[tuple[int, int, int]]]:
    chars = [rng.randrange(CHAR_VOCAB) for _ in range(n_chars)]
    words = []
    for b in range(n_chars):
        if rng.random() < 0.35:
            L = rng.choices((2, 3, 4), (0.6, 0.25, 0.15))[0]
            if b + L - 1 < n_chars:
                words.append((b, b + L - 1, rng.randrange(WORD_VOCAB)))
    return chars, words


# --- cells (static blocks) ---------------------------------------------------------------------------------------
def _lstm_gates(m: Model, pre: str, D: int, H: int, gates: str = "ifou"):
    return {g: (m.param(f"{pre}.W{g}", (H, D)), m.param(f"{pre}.U{g}", (H, H)), m.param(f"{pre}.b{g}", (H,), "zeros"))
            for g in gates}


def lstm_block(m: Model, name: str, D: int, H: int):
    P = _lstm_gates(m, name, D, H)

    def cell(ops: Ops, x, h, c):
        pre = {g: ops.add(ops.linear(W, x, b), ops.linear(U, h)) for g, (W, U, b) in P.items()}
        i, f, o = ops.sigmoid(pre["i"]), ops.sigmoid(pre["f"]), ops.sigmoid(pre["o"])
        u = ops.tanh(pre["u"])
        c2 = ops.add(ops.mul(f, c), ops.mul(i, u))
        return ops.mul(o, ops.tanh(c2)), c2

    return m.block(name, cell, [(D,), (H,), (H,)]), P


def gru_block(m: Model, name: str, D: int, H: int):
    P = _lstm_gates(m, name, D, H, "zrn")

    def cell(ops: Ops, x, h):
        Wz, Uz, bz = P["z"]
        Wr, Ur, br = P["r"]
        Wn, Un, bn = P["n"]
        z = ops.sigmoid(ops.add(ops.linear(Wz, x, bz), ops.linear(Uz, h)))
        r = ops.sigmoid(ops.add(ops.linear(Wr, x, br), ops.linear(Ur, h)))
        n = ops.tanh(ops.add(ops.linear(Wn, x, bn), ops.linear(Un, ops.mul(r, h))))
        return ops.add(n, ops.mul(z, ops.sub(h, n)))

    return m.block(name, cell, [(D,), (H,)])


@dataclass
class Workload:
    """A model plus an instance generator and a forward function usable with any :class:`Ops` back end."""

    name: str
    family: str
    model: Model
    sample: Callable[..., Any]
    """``sample(rng, n=None)``: one instance (of size n, or of a size drawn from the corpus statistics)."""
    forward: Callable[[Ops, Any], list]
    hidden: int

    def minibatch(self, rng: random.Random, batch: int, length: int | None = None) -> list:
        """``batch`` instances; ``length`` fixes the size (tokens / leaves / characters) instead of sampling it."""
        return [self.sample(rng, length) for _ in range(batch)]


def _classifier(m: Model, H: int, n_out: int, pre: str = "out"):
    W, b = m.param(f"{pre}.W", (n_out, H)), m.param(f"{pre}.b", (n_out,), "zeros")
    return lambda ops, h: ops.log_softmax(ops.linear(W, h, b))


def user_workload(ref: str, hidden: int, embed: int | None, seed: int, where: str = "workload.name") -> Workload:
    """The user's own workload: ``ref`` = ``"package.module:factory"``, a callable
    ``factory(hidden=, embed=, seed=)`` returning a :class:`Workload` (a :class:`Model` with its parameters and
    blocks, an instance sampler and a forward function written against :class:`Ops`, as the built-in ones are)."""
    import importlib

    mod_name, _, attr = ref.partition(":")
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(where, f"cannot load the workload factory {ref!r} (module:function): {e}") from e
    wl = factory(hidden=hidden, embed=embed, seed=seed)
    if not isinstance(wl, Workload):
        raise ConfigError(where, f"{ref} returned {type(wl).__name__}, not a dynamic_batcher.workloads.Workload")
    if wl.family not in ("chain", "tree", "lattice"):
        raise ConfigError(where, f"{ref}: family must be chain, tree or lattice, got {wl.family!r}")
    return wl


def is_user_workload(name: str) -> bool:
    """``module:function`` names a factory of the user's (:func:`user_workload`)."""
    return ":" in name


def make_workload(name: str, hidden: int = 128, embed: int | None = None, seed: int = 0) -> Workload:
    """Build a workload by name (see :data:`FAMILIES`), or the user's own from ``"module:factory"``
    (:func:`user_workload`); hidden = embedding = 128 by default."""
    if is_user_workload(name):
        return user_workload(name, hidden, embed, seed)
    if name not in FAMILIES:
        raise ConfigError("workload.name", f"unknown workload {name!r}; expected one of {sorted(FAMILIES)}")
    if hidden < 1:
        raise ConfigError("workload.hidden", f"must be >= 1, got {hidden}")
    H = int(hidden)
    D = int(embed or hidden)
    m = Model(name, seed=seed)
    fam = FAMILIES[name]
    fn = globals()[f"_build_{name}"]
    sample, forward = fn(m, H, D)
    return Workload(name, fam, m, sample, forward, H)


def _chain_len(rng: random.Random) -> int:
    return _lognormal_len(rng, 24.0, 11.0)


def _tree_len(rng: random.Random) -> int:
    return _lognormal_len(rng, 19.0, 9.0)


def _build_bilstm_tagger(m: Model, H: int, D: int):
    E = m.param("emb", (VOCAB, D), "normal")
    Z = m.param("zero", (1, H), "zeros")
    fwd, _ = lstm_block(m, "fwd", D, H)
    bwd, _ = lstm_block(m, "bwd", D, H)
    W1, b1 = m.param("mlp.W", (H, 2 * H)), m.param("mlp.b", (H,), "zeros")
    clf = _classifier(m, H, N_TAGS)

    def forward(ops: Ops, sent: list[int]) -> list:
        xs = [ops.lookup(E, w) for w in sent]
        h = c = ops.lookup(Z, 0)
        hf = []
        for x in xs:
            h, c = ops.call(fwd, x, h, c)
            hf.append(h)
        h = c = ops.lookup(Z, 0)
        hb = [None] * len(xs)
        for t in range(len(xs) - 1, -1, -1):
            h, c = ops.call(bwd, xs[t], h, c)
            hb[t] = h
        return [clf(ops, ops.tanh(ops.linear(W1, ops.concat([a, b]), b1))) for a, b in zip(hf, hb)]

    return (lambda rng, n=None: [rng.randrange(VOCAB) for _ in range(n or _chain_len(rng))]), forward


def _build_lstm_lm(m: Model, H: int, D: int):
    E = m.param("emb", (VOCAB, D), "normal")
    Z = m.param("zero", (1, H), "zeros")
    cell, _ = lstm_block(m, "cell", D, H)
    clf = _classifier(m, H, VOCAB)

    def forward(ops: Ops, sent: list[int]) -> list:
        h = c = ops.lookup(Z, 0)
        out = []
        for w in sent:
            h, c = ops.call(cell, ops.lookup(E, w), h, c)
            out.append(clf(ops, h))
        return out

    return (lambda rng, n=None: [rng.randrange(VOCAB) for _ in range(n or _chain_len(rng))]), forward


def _build_treelstm(m: Model, H: int, D: int):
    E = m.param("emb", (VOCAB, D), "normal")
    LP = _lstm_gates(m, "leaf", D, H, "iou")

    def leaf(ops: Ops, x):
        i = ops.sigmoid(ops.linear(LP["i"][0], x, LP["i"][2]))
        o = ops.sigmoid(ops.linear(LP["o"][0], x, LP["o"][2]))
        u = ops.tanh(ops.linear(LP["u"][0], x, LP["u"][2]))
        c = ops.mul(i, u)
        return ops.mul(o, ops.tanh(c)), c

    # binary Tree-LSTM (Tai et al., 2015): gates i, f_l, f_r, o, u from both children
    G = {g: (m.param(f"node.UL{g}", (H, H)), m.param(f"node.UR{g}", (H, H)), m.param(f"node.b{g}", (H,), "zeros"))
         for g in ("i", "fl", "fr", "o", "u")}

    def node(ops: Ops, hl, cl, hr, cr):
        pre = {g: ops.add(ops.linear(UL, hl, b), ops.linear(UR, hr)) for g, (UL, UR, b) in G.items()}
        i, fl, fr, o = (ops.sigmoid(pre[g]) for g in ("i", "fl", "fr", "o"))
        u = ops.tanh(pre["u"])
        c = ops.add(ops.add(ops.mul(i, u), ops.mul(fl, cl)), ops.mul(fr, cr))
        return ops.mul(o, ops.tanh(c)), c

    bleaf = m.block("leaf", leaf, [(D,)])
    bnode = m.block("node", node, [(H,), (H,), (H,), (H,)])
    clf = _classifier(m, H, N_CLASSES)

    def forward(ops: Ops, tree: Any) -> list:
        out = []

        def rec(t):
            if isinstance(t, tuple):
                hl, cl = rec(t[0])
                hr, cr = rec(t[1])
                h, c = ops.call(bnode, hl, cl, hr, cr)
            else:
                h, c = ops.call(bleaf, ops.lookup(E, t))
            out.append(clf(ops, h))
            return h, c

        rec(tree)
        # `rec` refers to itself through its closure cell: without this the cycle keeps `out`, its Values and the
        # whole recorded graph alive until a full (gen-2) collection, a 100+ ms pause inside a later minibatch
        rec = None  # noqa: F841
        return out

    return (lambda rng, n=None: random_tree(rng, n or _tree_len(rng))), forward


def _build_treegru(m: Model, H: int, D: int):
    E = m.param("emb", (VOCAB, D), "normal")
    WL, bL = m.param("leaf.W", (H, D)), m.param("leaf.b", (H,), "zeros")
    # binary Tree-GRU: gates from [h_l; h_r], reset gates per child, h = n + z * (mean(h_l, h_r) - n)
    Wz, bz = m.param("node.Wz", (H, 2 * H)), m.param("node.bz", (H,), "zeros")
    Wrl, brl = m.param("node.Wrl", (H, 2 * H)), m.param("node.brl", (H,), "zeros")
    Wrr, brr = m.param("node.Wrr", (H, 2 * H)), m.param("node.brr", (H,), "zeros")
    Wn, bn = m.param("node.Wn", (H, 2 * H)), m.param("node.bn", (H,), "zeros")

    def leaf(ops: Ops, x):
        return ops.tanh(ops.linear(WL, x, bL))

    def node(ops: Ops, hl, hr):
        x = ops.concat([hl, hr])
        z = ops.sigmoid(ops.linear(Wz, x, bz))
        rl = ops.sigmoid(ops.linear(Wrl, x, brl))
        rr = ops.sigmoid(ops.linear(Wrr, x, brr))
        n = ops.tanh(ops.linear(Wn, ops.concat([ops.mul(rl, hl), ops.mul(rr, hr)]), bn))
        mean = ops.scale(ops.add(hl, hr), 0.5)
        return ops.add(n, ops.mul(z, ops.sub(mean, n)))

    bleaf = m.block("leaf", leaf, [(D,)])
    bnode = m.block("node", node, [(H,), (H,)])
    clf = _classifier(m, H, N_CLASSES)

    def forward(ops: Ops, tree: Any) -> list:
        out = []

        def rec(t):
            if isinstance(t, tuple):
                h = ops.call(bnode, rec(t[0]), rec(t[1]))[0]
            else:
                h = ops.call(bleaf, ops.lookup(E, t))[0]
            out.append(clf(ops, h))
            return h

        rec(tree)
        # `rec` refers to itself through its closure cell: without this the cycle keeps `out`, its Values and the
        # whole recorded graph alive until a full (gen-2) collection, a 100+ ms pause inside a later minibatch
        rec = None  # noqa: F841
        return out

    return (lambda rng, n=None: random_tree(rng, n or _tree_len(rng))), forward


def _build_mvrnn(m: Model, H: int, D: int):
    E = m.param("emb", (VOCAB, H), "normal")
    EM = m.param("emb_mat", (MAT_VOCAB, H, H), "normal")
    W, b = m.param("node.W", (H, 2 * H)), m.param("node.b", (H,), "zeros")
    WM = m.param("node.WM", (H, 2 * H))

    # MV-RNN (Socher et al., 2012): p = tanh(W [B a; A b] + bias), P = W_M [A; B]
    def node(ops: Ops, a, A, bb, B):
        p = ops.tanh(ops.linear(W, ops.concat([ops.matmul(B, a), ops.matmul(A, bb)]), b))
        P = ops.linear(WM, ops.concat([A, B]))
        return p, P

    bnode = m.block("node", node, [(H,), (H, H), (H,), (H, H)])
    clf = _classifier(m, H, N_CLASSES)

    def forward(ops: Ops, tree: Any) -> list:
        out = []

        def rec(t):
            if isinstance(t, tuple):
                a, A = rec(t[0])
                bb, B = rec(t[1])
                p, P = ops.call(bnode, a, A, bb, B)
            else:
                p, P = ops.lookup(E, t), ops.lookup(EM, t % MAT_VOCAB)
            out.append(clf(ops, p))
            return p, P

        rec(tree)
        # `rec` refers to itself through its closure cell: without this the cycle keeps `out`, its Values and the
        # whole recorded graph alive until a full (gen-2) collection, a 100+ ms pause inside a later minibatch
        rec = None  # noqa: F841
        return out

    return (lambda rng, n=None: random_tree(rng, n or _tree_len(rng))), forward


def _lattice_len(rng: random.Random) -> int:
    return _lognormal_len(rng, 30.0, 12.0)


def _build_lattice_lstm(m: Model, H: int, D: int):
    C = m.param("char_emb", (CHAR_VOCAB, D), "normal")
    Wd = m.param("word_emb", (WORD_VOCAB, D), "normal")
    Z = m.param("zero", (1, H), "zeros")
    char, _ = lstm_block(m, "char", D, H)
    WP = _lstm_gates(m, "word", D, H, "ifu")
    GP = _lstm_gates(m, "merge", D, H, "ifoug")

    # word cell (Zhang & Yang 2018): c^w = f * c_b + i * u, no output gate
    def word(ops: Ops, x, h, c):
        pre = {g: ops.add(ops.linear(W, x, b), ops.linear(U, h)) for g, (W, U, b) in WP.items()}
        return ops.add(ops.mul(ops.sigmoid(pre["f"]), c), ops.mul(ops.sigmoid(pre["i"]), ops.tanh(pre["u"])))

    # a character where lexicon words end: an extra gate g weighs the summed word cells into the cell state
    def merge(ops: Ops, x, h, c, cw):
        pre = {}
        for g, (W, U, b) in GP.items():
            pre[g] = ops.add(ops.linear(W, x, b), ops.linear(U, cw if g == "g" else h))
        i, f, o, gg = (ops.sigmoid(pre[g]) for g in ("i", "f", "o", "g"))
        c2 = ops.add(ops.add(ops.mul(f, c), ops.mul(i, ops.tanh(pre["u"]))), ops.mul(gg, cw))
        return ops.mul(o, ops.tanh(c2)), c2

    bword = m.block("word", word, [(D,), (H,), (H,)])
    bmerge = m.block("merge", merge, [(D,), (H,), (H,), (H,)])
    clf = _classifier(m, H, N_TAGS)

    def forward(ops: Ops, lat) -> list:
        chars, words = lat
        ends: dict[int, list] = {}
        h = c = ops.lookup(Z, 0)
        hs, cs, out = [], [], []
        by_start: dict[int, list] = {}
        for (b, e, w) in words:
            by_start.setdefault(b, []).append((e, w))
        for j, ch in enumerate(chars):
            x = ops.lookup(C, ch)
            if j in ends:
                cw = ends[j][0]
                for extra in ends[j][1:]:
                    cw = ops.add(cw, extra)
                h, c = ops.call(bmerge, x, h, c, cw)
            else:
                h, c = ops.call(char, x, h, c)
            hs.append(h)
            cs.append(c)
            out.append(clf(ops, h))
            for e, w in by_start.get(j, ()):
                ends.setdefault(e, []).append(ops.call(bword, ops.lookup(Wd, w), h, c)[0])
        return out

    return (lambda rng, n=None: random_lattice(rng, n or _lattice_len(rng))), forward


def _build_lattice_gru(m: Model, H: int, D: int):
    C = m.param("char_emb", (CHAR_VOCAB, D), "normal")
    Wd = m.param("word_emb", (WORD_VOCAB, D), "normal")
    Z = m.param("zero", (1, H), "zeros")
    char = gru_block(m, "char", D, H)
    word = gru_block(m, "word", D, H)
    GP = _lstm_gates(m, "merge", D, H, "zrng")

    def merge(ops: Ops, x, h, hw):
        Wz, Uz, bz = GP["z"]
        Wr, Ur, br = GP["r"]
        Wn, Un, bn = GP["n"]
        Wg, Ug, bg = GP["g"]
        z = ops.sigmoid(ops.add(ops.linear(Wz, x, bz), ops.linear(Uz, h)))
        r = ops.sigmoid(ops.add(ops.linear(Wr, x, br), ops.linear(Ur, h)))
        g = ops.sigmoid(ops.add(ops.linear(Wg, x, bg), ops.linear(Ug, hw)))
        n = ops.tanh(ops.add(ops.linear(Wn, x, bn), ops.linear(Un, ops.mul(r, h))))
        h2 = ops.add(n, ops.mul(z, ops.sub(h, n)))
        return ops.add(h2, ops.mul(g, ops.sub(hw, h2)))

    bmerge = m.block("merge", merge, [(D,), (H,), (H,)])
    clf = _classifier(m, H, N_TAGS)

    def forward(ops: Ops, lat) -> list:
        chars, words = lat
        ends: dict[int, list] = {}
        by_start: dict[int, list] = {}
        for (b, e, w) in words:
            by_start.setdefault(b, []).append((e, w))
        h = ops.lookup(Z, 0)
        out = []
        for j, ch in enumerate(chars):
            x = ops.lookup(C, ch)
            if j in ends:
                hw = ends[j][0]
                for extra in ends[j][1:]:
                    hw = ops.add(hw, extra)
                h = ops.call(bmerge, x, h, hw)[0]
            else:
                h = ops.call(char, x, h)[0]
            out.append(clf(ops, h))
            for e, w in by_start.get(j, ()):
                ends.setdefault(e, []).append(ops.call(word, ops.lookup(Wd, w), h)[0])
        return out

    return (lambda rng, n=None: random_lattice(rng, n or _lattice_len(rng))), forward


__all__ = ["FAMILIES", "Workload", "make_workload", "random_tree", "random_lattice", "lstm_block", "gru_block"]
