"""The learned FSM policy: tabular n-step Q-learning over frontier-type states (ED-Batch).

State encodings (keys are stable type-signature strings, so a table trained on one minibatch applies to others):

* ``set``      — the set of types with a non-empty frontier (sorted);
* ``sorted``   — those types sorted by frontier size, largest first;
* ``set_max``  — the set plus the type with the largest frontier;
* ``set_full`` — the set, each type flagged whether its whole type-wise frontier is ready (frontier size =
  typewise_frontier_cnt, i.e. the batch would earn reward 0);
* ``counts_tw`` — per ready type its frontier size and type-wise count (fine-grained: a table over it describes
  one graph closely and does not transfer to other minibatches).

The last two need the type-wise counts, so an FSM using them runs on the Python simulator (no compiled fast path).

Reward of a step choosing type t: ``-1 + |frontier_t| / typewise_frontier_cnt[t]`` (0 when the batch takes every
type-t node that could ever be batched now). Hyper-parameters follow the reference: n = 10, α = 0.4, γ = 1, Q
initialised to 0, ε = 0.5 decaying ×0.9 per episode to 0.05, up to 1000 episodes, the greedy policy scored every
50 episodes and the best table kept, early stop when batches < 1.01 × lower bound.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, PolicyFileError
from .graph import GraphView
from .policies import BeamSearch, CriticalPath, Policy, Sim, TypewiseLB

REFERENCE_ENCODINGS = ("set", "sorted", "set_max")
TYPEWISE_ENCODINGS = ("set_full", "counts_tw")
ENCODINGS = REFERENCE_ENCODINGS + TYPEWISE_ENCODINGS
FALLBACKS = {"typewise": TypewiseLB, "critical": CriticalPath}
FORMAT = "dynamic_batcher.fsm/1"
SEARCH_WIDTH = 20
"""Default beam width of the FSM's search step: on six 32-lattice minibatches 20 finds what 24-48 find (sums of
661, 660, 660, 658 batches; 16: 669) in ~1.1 ms (32: ~1.6 ms), keeping scheduling under 10 % of execution."""


def encode(sim: Sim, ready: list[int], encoding: str) -> tuple:
    """State key of a frontier (``sim``: the Python :class:`Sim` or the compiled ``FastSim``)."""
    keys = sim.g.type_keys
    if encoding == "set":
        return tuple(sorted(keys[t] for t in ready))
    cnt = sim.count
    if encoding == "sorted":
        return tuple(keys[t] for t in sorted(ready, key=lambda t: (-cnt(t), keys[t])))
    if encoding == "set_max":
        big = min(ready, key=lambda t: (-cnt(t), keys[t]))
        return (tuple(sorted(keys[t] for t in ready)), keys[big])
    if encoding in TYPEWISE_ENCODINGS:
        sim.enable_typewise()  # lazy on the inference simulator; training simulators keep the counts anyway
        tw = sim.twcnt
        if encoding == "set_full":
            return tuple(sorted((keys[t], cnt(t) == tw[t]) for t in ready))
        return tuple(sorted((keys[t], cnt(t), tw[t]) for t in ready))
    raise ConfigError("fsm.encoding", f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")


@dataclass
class QConfig:
    """Hyper-parameters of tabular n-step Q-learning (defaults = the reference's)."""

    n_step: int = 10
    """n of n-step returns."""
    alpha: float = 0.4
    """Learning rate."""
    gamma: float = 1.0
    """Discount."""
    eps_start: float = 0.5
    """Initial ε of ε-greedy."""
    eps_decay: float = 0.9
    """ε multiplier per episode."""
    eps_min: float = 0.05
    """ε floor."""
    max_episodes: int = 1000
    """Episode budget."""
    eval_every: int = 50
    """Score the greedy policy (and keep the best table) every this many episodes."""
    stop_ratio: float = 1.01
    """Stop early when greedy batches < stop_ratio × lower bound."""
    seed: int = 0
    """RNG seed of exploration."""
    demo: str = "none"
    """Demonstration that seeds the table before Q-learning: ``none`` (the reference: an empty table) or
    ``rollout`` (the pilot-method schedule, computed once per training graph, skipped above ``demo_max_nodes``).
    On lattices the type-set states alias so much that a replayed demonstration does worse than the fallback
    (e.g. 170-205 vs 121 batches on a 32-lattice minibatch, 31 vs 29 on 2 × 12 chars), hence off by default."""
    demo_max_nodes: int = 20_000
    """Largest graph on which the rollout demonstration is computed (it costs |ready| simulations per step)."""

    def __post_init__(self):
        checks = [("n_step", self.n_step >= 1), ("alpha", 0 < self.alpha <= 1), ("gamma", 0 <= self.gamma <= 1),
                  ("eps_start", 0 <= self.eps_start <= 1), ("eps_decay", 0 < self.eps_decay <= 1),
                  ("eps_min", 0 <= self.eps_min <= 1), ("max_episodes", self.max_episodes >= 1),
                  ("eval_every", self.eval_every >= 1), ("stop_ratio", self.stop_ratio >= 1),
                  ("demo", self.demo in ("rollout", "none")), ("demo_max_nodes", self.demo_max_nodes >= 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"qlearning.{name}", f"invalid value {getattr(self, name)!r}")


@dataclass
class TrainStats:
    episodes: int = 0
    seconds: float = 0.0
    best_batches: int = 0
    lower_bound: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)  # (episode, greedy batches)
    states_seen: int = 0
    table_rows: int = 0
    """Rows of the kept (best) table: 0 when no trained table beat the empty one (every lookup then misses and
    the fallback decides, although the states themselves recur: see :meth:`FSMPolicy.visited_states`)."""
    visited: set = field(default_factory=set, repr=False)
    """State keys visited while learning (not saved)."""
    fallback_batches: int = 0
    """Batches of the empty table (pure fallback heuristic): the best table is never worse."""
    fallback: str = ""
    """The fallback heuristic chosen for unseen states (``critical`` or ``typewise``)."""
    demo_batches: int = 0
    """Batches of the demonstration schedule (0: none used)."""
    demo_table_batches: int = 0
    """Greedy batches of the table seeded from the demonstration alone (state aliasing can make it differ)."""
    search_batches: int | None = None
    """Batches the search step finds on the training graph (None: the table's schedule reached the lower bound
    and the search did not run); the policy's schedule is the shorter of the two."""


class FSMPolicy(Policy):
    """A learned state → type table; unseen states fall back to the type-wise lower-bound heuristic (whose
    counts are only computed once a state misses, so a well-covered graph pays for table lookups only)."""

    typewise = False

    def __init__(self, encoding: str = "sorted", table: dict | None = None, model_fingerprint: str = "",
                 model_name: str = "", fallback: str = "typewise", search_width: int = SEARCH_WIDTH,
                 search_power: int = 6):
        if search_width < 0:
            raise ConfigError("fsm.search_width", f"must be >= 0 (0: no search), got {search_width!r}")
        if encoding not in ENCODINGS:
            raise ConfigError("fsm.encoding", f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")
        if fallback not in FALLBACKS:
            raise ConfigError("fsm.fallback", f"unknown fallback {fallback!r}; expected one of {sorted(FALLBACKS)}")
        self.encoding = encoding
        self.name = f"fsm_{encoding}"
        self.table: dict[Any, dict[str, float]] = table or {}
        self.model_fingerprint = model_fingerprint
        self.model_name = model_name
        self.fallback_name = fallback
        self.fallback = FALLBACKS[fallback]()
        self.lookups = 0
        self.misses = 0
        self._prepared = None
        self.stats = TrainStats()
        self._memo: list = [None, {}]  # [graph, {ready type ids: chosen type}] of table hits ("set" encoding)
        self._last_hit = False
        self.search = BeamSearch(search_width, search_power) if search_width else None
        self.last_search: dict | None = None
        """The last schedule's search step: batches of the table (+ fallback), the lower bound it was checked against,
        and the batches after the search (None: not run, the table's schedule reached the bound)."""

    def prepare(self, g: GraphView) -> None:
        self._prepared = None

    def _fallback_ready(self, sim: Sim) -> None:
        if self._prepared is not sim.g:
            self.fallback.prepare(sim.g)
            self._prepared = sim.g
        if self.fallback.typewise:
            sim.enable_typewise()

    def greedy(self, sim: Sim, ready: list[int], table: dict | None = None, fast: bool = False) -> int:
        """Best action of the table for this frontier (``fast``: ``sim`` is the compiled ``FastSim`` and a miss goes
        to the fallback's compiled chooser)."""
        if table is None and self.encoding == "set":
            # inference fast path: the "set" state depends only on the ready type ids, so the decision of a
            # state is memoised per graph by those ids (no key strings, no Q row per step)
            memo = self._memo
            if memo[0] is not sim.g:
                memo[0], memo[1] = sim.g, {}
            k = tuple(ready)
            t = memo[1].get(k)
            if t is None:
                t = self._greedy(sim, ready, self.table, fast)
                memo[1][k] = t if self._last_hit else -1  # a miss is remembered too: straight to the fallback
            elif t < 0:
                self.lookups += 1
                self.misses += 1
                if fast:
                    return self.fallback.choose_fast(sim, ready)
                self._fallback_ready(sim)
                return self.fallback.choose(sim, ready)
            else:
                self.lookups += 1
            return t
        return self._greedy(sim, ready, self.table if table is None else table, fast)

    def _greedy(self, sim: Sim, ready: list[int], table: dict, fast: bool = False) -> int:
        s = encode(sim, ready, self.encoding)
        row = table.get(s)
        self.lookups += 1
        self._last_hit = row is not None
        if row is None:
            self.misses += 1
            if fast:
                return self.fallback.choose_fast(sim, ready)
            self._fallback_ready(sim)
            return self.fallback.choose(sim, ready)
        keys = sim.g.type_keys
        # max Q; unseen actions count as Q = 0 (the initial value); ties broken by the heuristic's order
        qs = [row.get(keys[t], 0.0) for t in ready]
        best = max(qs)
        cand = [t for t, q in zip(ready, qs) if q == best]
        if len(cand) == 1:
            return cand[0]
        # ties: larger frontier first (cheap; the type-wise counts are only paid for on a miss)
        cnt = sim.count
        return min(cand, key=lambda t: (-cnt(t), keys[t]))

    def choose(self, sim: Sim, ready: list[int]) -> int:
        return self.greedy(sim, ready)

    def schedule(self, g: GraphView) -> list[list[int]]:
        """The table's schedule (unseen states: the fallback); when it is above the type-wise lower bound, a beam
        search over type sequences (:class:`BeamSearch`) tries to shorten it and the shorter one is kept. Why: on
        lattices the frontier-type states alias (the ready set is almost always {char, word, merge}), so no table
        over them, and no one-step rule, gets below ~1.2 × the bound; the search does (~1.05 ×) in about a
        millisecond of compiled code. Chains and trees reach the bound from the table alone and never search."""
        if not self.table and isinstance(self.fallback, CriticalPath):
            # an empty table (learning never beat the fallback, e.g. on lattices): every lookup misses, so the
            # schedule is the fallback's own (compiled: one call, no per-decision Python round trip)
            sched = self.fallback.schedule(g)
            self.lookups += self.fallback.decisions
            self.misses += self.fallback.decisions
        else:
            sched = super().schedule(g)
        self.last_search = None
        if self.search is None:
            return sched
        lb, alt = self.search.search(g, threshold=len(sched), like=sched)
        if alt is None:  # the table's schedule reached the bound
            return sched
        self.last_search = {"table": len(sched), "lower_bound": lb, "search": len(alt)}
        return alt if len(alt) < len(sched) else sched

    # --- compiled simulator (inference) -------------------------------------------------------------------------
    def fast_kwargs(self, g: GraphView) -> dict | None:
        # the type-wise fallback and encodings need the reduced per-type graphs: Python simulator only
        if self.fallback.typewise or self.encoding in TYPEWISE_ENCODINGS:
            return None
        return {"heights": True}

    def choose_fast(self, fs, ready: list[int]) -> int:
        return self.greedy(fs, ready, fast=True)

    # --- training ---------------------------------------------------------------------------------------------
    def _rollout(self, g: GraphView, table: dict, eps: float, rng: random.Random, cfg: QConfig | None) -> int:
        """One episode; learns into ``table`` when cfg is given (ε-greedy), else greedy scoring. Returns #batches."""
        sim = Sim(g, typewise=True)
        keys = g.type_keys
        visited = self.stats.visited if cfg is not None else set()
        S: list[Any] = []
        A: list[str] = []
        R: list[float] = []
        batches = 0

        def update(tau: int, boot: float) -> None:
            G = 0.0
            disc = 1.0
            for r in R[tau:tau + cfg.n_step]:
                G += disc * r
                disc *= cfg.gamma
            G += disc * boot
            row = table.setdefault(S[tau], {})
            q = row.get(A[tau], 0.0)
            row[A[tau]] = q + cfg.alpha * (G - q)

        while True:
            batches += len(sim.drain_unbatchable())
            if not sim.ready:
                break
            ready = sorted(sim.ready)
            s = encode(sim, ready, self.encoding)
            if cfg is not None:
                t_now = len(S)
                if t_now - cfg.n_step >= 0:
                    row = table.get(s, {})
                    boot = max(row.get(keys[t], 0.0) for t in ready)
                    update(t_now - cfg.n_step, boot)
                if rng.random() < eps:
                    t = rng.choice(ready)
                else:
                    t = self.greedy(sim, ready, table)
                R.append(-1.0 + sim.ratio(t))
                S.append(s)
                visited.add(s)
                A.append(keys[t])
            else:
                t = self.greedy(sim, ready, table)
            sim.step(t)
            batches += 1
        if cfg is not None:
            for tau in range(max(0, len(S) - cfg.n_step), len(S)):
                update(tau, 0.0)
        return batches

    def _demo_table(self, g: GraphView, batches: list[list[int]]) -> dict:
        """A table that replays a demonstration: the demo's type sequence is replayed with "every ready node of the
        chosen type" batches (never more batches than the demo), and each visited state gets Q = +1 for the demo's
        action (rewards are ≤ 0, so Q-learning lowers it wherever the action turns out worse)."""
        keys = g.type_keys
        seq = [g.types[b[0]] for b in batches if g.types[b[0]]]
        sim = Sim(g)
        table: dict = {}
        i = 0
        while True:
            sim.drain_unbatchable()
            if not sim.ready:
                break
            while i < len(seq) and seq[i] not in sim.ready:
                i += 1  # the type already ran (its nodes were taken earlier): an empty step
            ready = sorted(sim.ready)
            t = seq[i] if i < len(seq) else ready[0]
            table[encode(sim, ready, self.encoding)] = {keys[t]: 1.0}
            sim.step(t)
            i += 1  # this demo batch is done (without it a type that is ready again would be replayed twice)
        return table

    def train(self, g: GraphView, cfg: QConfig | None = None,
              demo: list[list[int]] | None = None) -> TrainStats:
        """Learn the table on one graph (the first minibatch). ``demo``: a schedule to seed the table with (e.g.
        an exact optimum); by default ``cfg.demo`` decides (the rollout schedule)."""
        cfg = cfg or QConfig()
        self.prepare(g)
        self.stats = TrainStats()  # collects the visited states
        t0 = time.perf_counter()
        rng = random.Random(cfg.seed)
        lb = g.lower_bound()
        table: dict = {}
        best_table: dict = {}
        # fallback for unseen states: the better of the two heuristics on this graph (ties: the cheap
        # critical-path one, which needs no reduced per-type graphs at inference)
        scores = {}
        for fb in ("critical", "typewise"):
            self.fallback_name, self.fallback, self._prepared = fb, FALLBACKS[fb](), None
            scores[fb] = self._rollout(g, best_table, 0.0, rng, None)  # empty table = pure fallback
        fb = min(scores, key=lambda f: (scores[f], f != "critical"))
        self.fallback_name, self.fallback, self._prepared = fb, FALLBACKS[fb](), None
        best = scores[fb]
        st = TrainStats(lower_bound=lb, best_batches=best, history=[(0, best)], fallback=fb)
        if demo is None and cfg.demo == "rollout" and g.n <= cfg.demo_max_nodes:
            demo = getattr(g, "_rollout_demo", None)  # shared by the encodings trained on one graph
            if demo is None:
                from .policies import Rollout

                demo = g._rollout_demo = Rollout().schedule(g)
        if demo:
            dt = self._demo_table(g, demo)
            score = self._rollout(g, dt, 0.0, rng, None)
            st.demo_batches, st.demo_table_batches = len(demo), score
            if score <= best:
                best, best_table = score, dt
                table = {k: dict(r) for k, r in dt.items()}  # Q-learning continues from the demonstration
        eps = cfg.eps_start
        ep = 0
        while ep < cfg.max_episodes and (ep < cfg.eval_every or not best < cfg.stop_ratio * lb):
            self._rollout(g, table, eps, rng, cfg)
            ep += 1
            eps = max(cfg.eps_min, eps * cfg.eps_decay)
            if ep % cfg.eval_every == 0 or ep == cfg.max_episodes:
                score = self._rollout(g, table, 0.0, rng, None)
                st.history.append((ep, score))
                if score <= best:  # ties: prefer the trained table over the empty one
                    best = score
                    best_table = {s: dict(r) for s, r in table.items()}
        self.table = best_table
        self._memo = [None, {}]
        st.episodes = ep
        st.best_batches = best
        st.states_seen = len(table)
        st.table_rows = len(best_table)
        st.visited = self.stats.visited
        st.fallback_batches = st.history[0][1]
        if self.search is not None:
            self.schedule(g)
            st.search_batches = self.last_search["search"] if self.last_search else None
        st.seconds = time.perf_counter() - t0
        self.stats = st
        self.lookups = self.misses = 0
        return st

    def visited_states(self, g: GraphView, batches: list[list[int]]) -> list:
        """The state keys of a schedule's decisions (replayed on the Python simulator): with the training's
        ``stats.visited`` this measures whether the states of an unseen minibatch recur."""
        seq = [g.types[b[0]] for b in batches if g.types[b[0]]]
        sim = Sim(g)
        out = []
        for t in seq:
            sim.drain_unbatchable()
            ready = sorted(sim.ready)
            if len(ready) > 1:
                out.append(encode(sim, ready, self.encoding))
            sim.step(t)
        return out

    # --- persistence ------------------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        from shared_ir import atomic_write_text

        rows = [[_jsonable(s), r] for s, r in self.table.items()]
        doc = {"format": FORMAT, "model": self.model_name, "fingerprint": self.model_fingerprint,
               "encoding": self.encoding, "fallback": self.fallback_name, "table": rows,
               "search": {"width": self.search.width if self.search else 0,
                          "power": self.search.power if self.search else 6},
               "train": {"episodes": self.stats.episodes, "seconds": self.stats.seconds,
                         "best_batches": self.stats.best_batches, "lower_bound": self.stats.lower_bound}}
        atomic_write_text(str(path), json.dumps(doc))

    @classmethod
    def load(cls, path: str, model: Any = None) -> "FSMPolicy":
        """Load a saved table; with ``model`` given, refuse a file trained for another model."""
        if not os.path.exists(path):
            raise PolicyFileError(path, "no such file")
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:  # ValueError: bad JSON or bytes that are not UTF-8
            raise PolicyFileError(path, f"unreadable ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise PolicyFileError(path, f"not a dynamic_batcher FSM policy "
                                        f"(format {doc.get('format') if isinstance(doc, dict) else None!r}, "
                                        f"expected {FORMAT!r})")
        if model is not None and doc.get("fingerprint") != model.fingerprint():
            raise PolicyFileError(path, f"was trained for model {doc.get('model')!r} (fingerprint "
                                        f"{doc.get('fingerprint')}), not for model {model.name!r} (fingerprint "
                                        f"{model.fingerprint()})")
        try:
            table = {_hashable(s): {str(k): float(v) for k, v in r.items()} for s, r in doc["table"]}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PolicyFileError(path, "its 'table' is not a list of [state, {batch type: Q value}] rows") from None
        fb = doc.get("fallback", "typewise")
        if not isinstance(fb, str) or fb not in FALLBACKS:
            raise PolicyFileError(path, f"unknown fallback {fb!r}; expected one of {sorted(FALLBACKS)}")
        search = doc.get("search", {})
        try:
            width, power = int(search.get("width", SEARCH_WIDTH)), int(search.get("power", 6))
        except (TypeError, ValueError, AttributeError):
            raise PolicyFileError(path, f"invalid search settings {search!r}") from None
        if doc.get("encoding") not in ENCODINGS:
            raise PolicyFileError(path, f"unknown encoding {doc.get('encoding')!r}; expected one of {list(ENCODINGS)}")
        p = cls(doc["encoding"], table, str(doc.get("fingerprint", "")), str(doc.get("model", "")), fallback=fb,
                search_width=width, search_power=power)
        tr = doc.get("train", {})
        try:
            p.stats = TrainStats(episodes=int(tr.get("episodes", 0)), seconds=float(tr.get("seconds", 0.0)),
                                 best_batches=int(tr.get("best_batches", 0)), lower_bound=int(tr.get("lower_bound", 0)))
        except (AttributeError, TypeError, ValueError):
            raise PolicyFileError(path, f"invalid 'train' record {tr!r}") from None
        return p


def _jsonable(s: Any) -> Any:
    return [_jsonable(x) for x in s] if isinstance(s, tuple) else s


def _hashable(s: Any) -> Any:
    return tuple(_hashable(x) for x in s) if isinstance(s, list) else s


def train_fsm(g: GraphView, encoding: str = "sorted", cfg: QConfig | None = None, model: Any = None) -> FSMPolicy:
    p = FSMPolicy(encoding, model_fingerprint=model.fingerprint() if model is not None else "",
                  model_name=model.name if model is not None else "")
    p.train(g, cfg)
    return p


__all__ = ["ENCODINGS", "REFERENCE_ENCODINGS", "TYPEWISE_ENCODINGS", "FALLBACKS", "encode", "QConfig", "TrainStats",
           "FSMPolicy", "train_fsm"]
