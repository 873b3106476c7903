"""COMB: a GA (DEAP) over topological orders, decoded by dynamic programming into dataflow groups.

Chromosome: a topological order of the layer DAG. Fitness: the judge's (simulator's) latency of the decoded plan
(or the decoder's own estimate with ``fitness='decoder'``). Selection: softmax of standardised −latency. Crossover:
pool both parents' groups, keep the high-PE-occupancy ones that are disjoint and whose contraction leaves the DAG
acyclic, freeze them as contiguous blocks and re-sort the rest randomly. Mutation: freeze the top 20% groups by
occupancy of the individual and re-sort the rest randomly. The best individual always survives (elitism; plans
within ``GAConfig.energy_tie`` of the best latency count as tied and the one of least energy is kept), the initial
population starts from priority-order seeds (:func:`seed_orders`), and the population can be checkpointed after
every generation and resumed.
"""
from __future__ import annotations

import hashlib
import heapq
import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Sequence

from deap import base, creator

from .budget import Curve, converged
from .config import GAConfig
from .cost import CostTable
from .decoder import DecodeContext, Group, decode, windows_to_plan
from .parallel import Evaluator, load_checkpoint, save_checkpoint
from .simulator import Plan, Result, fast_tables, simulate
from .soc import SoC
from .workload import Workload

if not hasattr(creator, "SocFitnessMin"):
    creator.create("SocFitnessMin", base.Fitness, weights=(-1.0,))
if not hasattr(creator, "SocOrder"):
    creator.create("SocOrder", list, fitness=creator.SocFitnessMin, groups=None)


@dataclass
class SearchResult:
    """What a searching (or constructive) algorithm returns: its plan judged by the simulator."""

    algorithm: str
    plan: Plan
    result: Result
    search_seconds: float
    generations: int = 0
    evaluations: int = 0
    history: list[float] = field(default_factory=list)
    """Best fitness after each generation (GA) or pass."""
    budget_evaluations: int | None = None
    """The evaluation budget the search ran under (None: none, or a constructive algorithm)."""
    curve: list[list[float]] = field(default_factory=list)
    """Convergence curve: [evaluations, best fitness so far] at each improvement and at the end
    (:meth:`soc_mapper.budget.Curve.as_list`)."""
    converged: bool | None = None
    """The best no longer improved over the last 20% of the budget (:func:`soc_mapper.budget.converged`); None
    for constructive algorithms."""


@dataclass
class CombContext:
    dctx: DecodeContext
    w: Workload
    soc: SoC
    cost: CostTable
    fitness: str
    max_streams: int | None
    algorithm: str
    barriers: bool = True
    dctx1: DecodeContext | None = None
    energy_weight: float = 0.0
    """Fitness = latency + energy_weight × energy / p_ref (see :attr:`GAConfig.energy_weight`)."""
    p_ref: float = 1.0
    """Highest accelerator power of the SoC, W: turns energy into seconds at full power."""
    energy_tie: float = 0.0
    """Relative fitness tolerance within which the lower-energy plan wins (see :attr:`GAConfig.energy_tie`)."""


def _score(c: CombContext, latency: float, energy: float) -> float:
    return latency + c.energy_weight * energy / c.p_ref if c.energy_weight else latency


def prefer(cands: Sequence, tol: float, key_fit=lambda x: x[0], key_energy=lambda x: x[1]):
    """The candidate of least fitness, except that among those within ``tol`` (relative) of the least fitness the
    one of least energy wins: latency ties (up to ``tol``) are broken by energy. ``tol`` = 0: least fitness, then
    least energy."""
    f0 = min(key_fit(c) for c in cands)
    near = [c for c in cands if key_fit(c) <= f0 * (1.0 + tol)]
    return min(near, key=lambda c: (key_energy(c), key_fit(c)))


def comb_evaluate(c: CombContext, order: Sequence[int]
                  ) -> tuple[float, list[tuple[tuple[int, ...], float]], float]:
    """(fitness latency, [(group layers, occupancy)], energy) of one chromosome.

    Without barriers the decoder is run twice, with windows up to ``max_window`` and with single-layer windows
    (j = 1, the DP's degenerate chain), and the chromosome gets the better plan: grouping pays off when the SoC
    is contended and costs little time, but the DP's choice between window sizes is myopic on critical-path
    bound mixes, where the j = 1 chain is better. Of the two, the plan of lower fitness wins unless the other is
    within ``energy_tie`` of it and uses less energy (with ``fitness='decoder'`` energy is not known: inf)."""
    cands = _decodes(c, order)
    fit, energy, windows = prefer(cands, c.energy_tie)
    return fit, [(g.layers, g.occupancy) for win in windows for g in win], energy


def _decodes(c: CombContext, order: Sequence[int]) -> list[tuple[float, float, list]]:
    from . import fastsim

    out = []
    for dctx in ([c.dctx, c.dctx1] if c.dctx1 is not None else [c.dctx]):
        fast = fastsim.decode(order, dctx, c.barriers)  # the Python decoder's result to the last bit, compiled
        if fast is not None and c.fitness != "simulator":
            out.append((fast.est, math.inf, fast.windows(Group)))
            continue
        if fast is not None:
            judged = fastsim.judge(fast, fast_tables(c.w, c.soc, c.cost), c.w, c.soc, c.cost, c.max_streams,
                                   c.barriers)
            if judged is not None:
                out.append((_score(c, *judged), judged[1], fast.windows(Group)))
                continue
        est, windows, _ = decode(order, dctx, c.barriers)
        fit, energy = est, math.inf
        if c.fitness == "simulator":
            plan = windows_to_plan(windows, dctx.L, c.max_streams, c.algorithm, c.barriers)
            res = simulate(plan, c.w, c.soc, c.cost, validate=False)
            fit, energy = _score(c, res.latency, res.energy), res.energy
        out.append((fit, energy, windows))
    return out


def best_decode(c: CombContext, order: Sequence[int]):
    """The windows of the decoder run that :func:`comb_evaluate` picked for this order."""
    return prefer(_decodes(c, order), c.energy_tie)[2]


# --- random topological orders with frozen blocks ---------------------------------------------------------------
def random_topo(w: Workload, rng: random.Random, blocks: Sequence[Sequence[int]] = ()) -> list[int]:
    """A random topological order in which every block of ``blocks`` is contiguous (blocks must be disjoint and
    their contraction acyclic). Block members keep index order (layer indices are topological)."""
    L = len(w.layers)
    node = list(range(L))  # quotient node of each layer
    members: dict[int, list[int]] = {}
    for b in blocks:
        rep = min(b)
        for v in b:
            node[v] = rep
        members[rep] = sorted(b)
    indeg = [0] * L
    for (u, v) in w.edge_bytes:
        if node[u] != node[v]:
            indeg[node[v]] += 1
    heap = [(rng.random(), q) for q in range(L) if node[q] == q and indeg[q] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, q = heapq.heappop(heap)
        ms = members.get(q, [q])
        out.extend(ms)
        for v in ms:
            for s in w.succs[v]:
                ns = node[s]
                if ns != q:
                    indeg[ns] -= 1
                    if indeg[ns] == 0:
                        heapq.heappush(heap, (rng.random(), ns))
    assert len(out) == L, "blocks form a cycle"
    return out


def _creates_cycle(w: Workload, block_of: list[int], blocks: dict[int, list[int]], group: Sequence[int]) -> bool:
    """Would contracting ``group`` (with the blocks already frozen) make a cycle? BFS from the group's exits."""
    gs = set(group)
    seen: set[int] = set()
    stack = [s for v in group for s in w.succs[v] if s not in gs]
    while stack:
        x = stack.pop()
        if x in gs:
            return True
        if x in seen:
            continue
        b = block_of[x]
        xs = blocks[b] if b >= 0 else [x]
        for y in xs:
            seen.add(y)
            if y in gs:
                return True
            for s in w.succs[y]:
                if s not in seen:
                    stack.append(s)
    return False


def _freeze(w: Workload, ranked: Sequence[Sequence[int]]) -> list[list[int]]:
    """Greedily accept groups (best first) that are disjoint from the accepted ones and keep the DAG acyclic."""
    block_of = [-1] * len(w.layers)
    blocks: dict[int, list[int]] = {}
    for g in ranked:
        if any(block_of[v] >= 0 for v in g):
            continue
        if _creates_cycle(w, block_of, blocks, g):
            continue
        bid = len(blocks)
        blocks[bid] = list(g)
        for v in g:
            block_of[v] = bid
    return list(blocks.values())


def crossover(w: Workload, rng: random.Random, g1: list, g2: list, keep_fraction: float,
              max_candidates: int = 64) -> list[int]:
    """Child order from the groups of two parents (see module doc)."""
    pooled = sorted({tuple(sorted(g)): occ for g, occ in list(g1) + list(g2) if len(g) > 1}.items(),
                    key=lambda x: -x[1])
    pooled = pooled[:min(max_candidates, max(1, int(math.ceil(len(pooled) * keep_fraction))))]
    return random_topo(w, rng, _freeze(w, [g for g, _ in pooled]))


def mutate(w: Workload, rng: random.Random, groups: list, freeze_fraction: float) -> list[int]:
    """Freeze the top groups by occupancy, re-sort the rest at random."""
    gs = sorted((g for g in groups if len(g[0]) > 1), key=lambda x: -x[1])
    k = int(math.ceil(len(gs) * freeze_fraction)) if gs else 0
    return random_topo(w, rng, _freeze(w, [g for g, _ in gs[:k]]))


def interleaved_order(w: Workload) -> list[int]:
    """Round robin over the model copies, each in its own order (a topological order: models are disjoint)."""
    by_model: dict[str, list[int]] = {}
    for v, l in enumerate(w.layers):
        by_model.setdefault(l.model, []).append(v)
    queues = list(by_model.values())
    out, k = [], 0
    while len(out) < len(w.layers):
        for q in queues:
            if k < len(q):
                out.append(q[k])
        k += 1
    if not w.is_topological(out):  # models joined by edges: fall back to the index order
        return list(range(len(w.layers)))
    return out


def upward_rank_order(w: Workload, cost: CostTable, soc: SoC, cost_of: str = "mean",
                      transfers: bool = True) -> list[int]:
    """Layers by decreasing upward rank (HEFT's priority: a layer's cost + transfer along the longest path to an
    exit); a topological order, and a good seed because it starts the critical paths first. ``cost_of``: a layer's
    cost is its ``mean`` latency over the supporting accelerators (HEFT) or its ``min`` (the fastest one: the
    path it can take on a heterogeneous SoC); ``transfers``: add the mean transfer time of each edge."""
    import numpy as np

    lat = np.where(cost.supported, cost.latency, np.nan)
    c = (np.nanmin if cost_of == "min" else np.nanmean)(lat, axis=1)
    off = soc.bandwidth[~np.eye(soc.n, dtype=bool)]
    inv = float(np.mean(1.0 / off)) if off.size and transfers else 0.0
    L = len(w.layers)
    rank = [0.0] * L
    for v in reversed(range(L)):
        rank[v] = float(c[v]) + max((w.edge_bytes[(v, s)] * inv + rank[s] for s in w.succs[v]), default=0.0)
    return sorted(range(L), key=lambda v: (-rank[v], v))


def seed_orders(w: Workload, cost: CostTable, soc: SoC) -> list[list[int]]:
    """The seeded part of the initial population, most promising first (the rest is random): upward ranks by the
    fastest accelerator's latency (with and without transfers) and by the mean latency, a round robin over the
    models, the index order. Duplicates dropped."""
    out: list[list[int]] = []
    for o in (upward_rank_order(w, cost, soc, "min"), upward_rank_order(w, cost, soc),
              upward_rank_order(w, cost, soc, "min", transfers=False), interleaved_order(w),
              list(range(len(w.layers)))):
        if o not in out:
            out.append(o)
    return out


def fingerprint(w: Workload, soc: SoC, cfg: GAConfig, algorithm: str) -> str:
    h = hashlib.sha256()
    h.update("\n".join(w.names).encode())
    h.update(repr(sorted(w.edge_bytes.items())).encode())
    h.update(repr([a.name for a in soc.accs]).encode())
    h.update(soc.bandwidth.tobytes())
    h.update(repr((cfg.population, cfg.max_window, cfg.max_streams, cfg.seed, cfg.fitness, cfg.barriers,
                  cfg.energy_weight, cfg.energy_tie, cfg.seeded, algorithm)).encode())
    return h.hexdigest()[:16]


def _ind(order: Sequence[int], fit: float | None = None, groups=None, energy: float = math.inf):
    ind = creator.SocOrder(order)
    ind.energy = energy
    if fit is not None:
        ind.fitness.values = (fit,)
        ind.groups = groups
    return ind


def _elite(cands: Sequence, best_fit: float, tol: float):
    """The individual kept as the best: least energy among those within ``tol`` of the best fitness ever seen
    (anchored there, so repeated ties cannot drift the latency upwards); with ``tol`` = 0 the least fitness."""
    near = [i for i in cands if i.fitness.values[0] <= best_fit * (1.0 + tol)] or list(cands)
    return min(near, key=lambda i: (i.energy, i.fitness.values[0]) if tol > 0 else (i.fitness.values[0], i.energy))


def _save(path: str, fp: str, gen: int, rng: random.Random, history: list, curve: Curve, pop: list, best) -> None:
    save_checkpoint(path, {
        "fingerprint": fp, "generation": gen, "rng": rng.getstate(), "history": history,
        "evaluations": curve.evaluations, "curve": curve.points,
        "population": [(list(i), i.fitness.values[0], i.groups, i.energy) for i in pop],
        "best": (list(best), best.fitness.values[0], best.groups, best.energy)})


PROGRESS_EVERY_S = 5.0
"""A search longer than this logs a line (generation, best latency, seconds) this often (``logging`` INFO)."""
log = logging.getLogger(__name__)


def _initial_population(w: Workload, soc: SoC, cost: CostTable, cfg: GAConfig, rng: random.Random, evaluate,
                        t0: float) -> tuple[list, float]:
    """The seeded orders (:func:`seed_orders`, unless ``cfg.seeded`` is off), then random ones, evaluated in
    batches of the worker count; after the first batch only while the time and evaluation budgets last. Returns
    (population, seconds of the last batch)."""
    seeds = seed_orders(w, cost, soc)[:cfg.population] if cfg.seeded else []
    batch = cfg.workers if cfg.executor != "serial" else 1
    size = cfg.population if cfg.max_evaluations is None else min(cfg.population, cfg.max_evaluations)
    pop: list = []
    last_batch = 0.0
    while len(pop) < size:
        if pop and cfg.time_budget_s is not None and time.perf_counter() - t0 + last_batch > cfg.time_budget_s:
            break
        tb = time.perf_counter()
        k = min(batch, size - len(pop))
        more = [_ind(seeds[len(pop) + i] if len(pop) + i < len(seeds) else random_topo(w, rng)) for i in range(k)]
        evaluate(more)
        pop += more
        last_batch = time.perf_counter() - tb
    return pop, last_batch


def _children(w: Workload, cfg: GAConfig, rng: random.Random, pop: list) -> list:
    """population − 1 children: parents drawn by a softmax of the standardised fitness, crossover, mutation."""
    fits = [i.fitness.values[0] for i in pop]
    mu = sum(fits) / len(fits)
    sd = math.sqrt(sum((f - mu) ** 2 for f in fits) / len(fits)) or 1.0
    weights = [math.exp(-(f - mu) / sd) for f in fits]
    children = []
    while len(children) < cfg.population - 1:
        p1, p2 = rng.choices(pop, weights=weights, k=2)
        if rng.random() < cfg.crossover_rate:
            child = crossover(w, rng, p1.groups, p2.groups, cfg.crossover_keep_fraction)
        else:
            child = list(p1)
        if rng.random() < cfg.mutation_rate:
            grp = p1.groups if child == list(p1) else (p1.groups + p2.groups)
            child = mutate(w, rng, grp, cfg.freeze_fraction)
        children.append(_ind(child))
    return children


def _context(w: Workload, soc: SoC, cost: CostTable, cfg: GAConfig, algorithm: str) -> CombContext:
    J = cfg.max_window if cfg.window_work is None else max(1, min(cfg.max_window, cfg.window_work // len(w.layers)))
    dctx = DecodeContext(w, soc, cost, J, cfg.max_streams)
    dctx1 = None if cfg.barriers or J == 1 else DecodeContext(w, soc, cost, 1, cfg.max_streams)
    return CombContext(dctx, w, soc, cost, cfg.fitness, cfg.max_streams, algorithm, cfg.barriers, dctx1,
                       cfg.energy_weight, max(a.power_w for a in soc.accs) or 1.0, cfg.energy_tie)


def comb_search(w: Workload, soc: SoC, cost: CostTable, cfg: GAConfig | None = None,
                algorithm: str = "comb") -> SearchResult:
    """Run COMB's GA and return the best plan judged by the simulator."""
    cfg = cfg or GAConfig()
    t0 = time.perf_counter()
    rng = random.Random(cfg.seed)
    cctx = _context(w, soc, cost, cfg, algorithm)
    fp = fingerprint(w, soc, cfg, algorithm)
    toolbox = base.Toolbox()
    history: list[float] = []
    curve = Curve()
    with Evaluator(comb_evaluate, cctx, cfg.executor, cfg.workers) as ev:
        toolbox.register("map", ev.map)
        toolbox.register("evaluate", comb_evaluate, cctx)

        def evaluate(inds: list) -> None:
            todo = [i for i in inds if not i.fitness.valid]
            for ind, (fit, groups, energy) in zip(todo, toolbox.map(toolbox.evaluate, todo)):
                ind.fitness.values = (fit,)
                ind.groups = groups
                ind.energy = energy
                curve.add(fit)

        state = load_checkpoint(cfg.checkpoint, fp) if cfg.checkpoint else None
        # a generation evaluates population−1 children: predict it from the initial batches until one ran
        last_gen = 0.0
        if state is not None:
            pop = [_ind(*p) for p in state["population"]]
            best = _ind(*state["best"])
            rng.setstate(state["rng"])
            history = list(state["history"])
            gen0 = state["generation"] + 1
            curve = Curve([tuple(p) for p in state.get("curve", [])], state["evaluations"])
        else:
            pop, last_batch = _initial_population(w, soc, cost, cfg, rng, evaluate, t0)
            best_fit = min(i.fitness.values[0] for i in pop)
            best = _elite(pop, best_fit, cfg.energy_tie)
            best = _ind(list(best), best.fitness.values[0], best.groups, best.energy)
            history.append(best_fit)
            gen0 = 0
            if cfg.checkpoint:  # the evaluated initial population: a resume skips its evaluation
                _save(cfg.checkpoint, fp, -1, rng, history, curve, pop, best)
            batch = cfg.workers if cfg.executor != "serial" else 1
            last_gen = last_batch * math.ceil((cfg.population - 1) / batch)
        gens_done = gen0
        shown = time.perf_counter()
        for gen in range(gen0, cfg.generations):
            el = time.perf_counter() - t0
            if cfg.time_budget_s is not None and el + last_gen > cfg.time_budget_s:
                break
            left = None if cfg.max_evaluations is None else cfg.max_evaluations - curve.evaluations
            if left is not None and left <= 0:
                break
            tg = time.perf_counter()
            children = _children(w, cfg, rng, pop)[:left]  # the budget's last generation is cut to what is left
            evaluate(children)
            pop = [best] + children  # elitism: the best schedule is never lost
            best_fit = min([history[-1]] + [i.fitness.values[0] for i in children])
            cand = _elite(pop, best_fit, cfg.energy_tie)
            if cand is not best:
                best = _ind(list(cand), cand.fitness.values[0], cand.groups, cand.energy)
            history.append(best_fit)
            gens_done = gen + 1
            if cfg.checkpoint:
                _save(cfg.checkpoint, fp, gen, rng, history, curve, pop, best)
            last_gen = time.perf_counter() - tg
            if tg + last_gen - shown >= PROGRESS_EVERY_S:
                shown = tg + last_gen
                log.info("%s: generation %d/%d, best fitness %.6g, %d evaluations, %.0f s", algorithm, gens_done,
                         cfg.generations, best_fit, curve.evaluations, shown - t0)
    windows = best_decode(cctx, list(best))
    plan = windows_to_plan(windows, len(w.layers), cfg.max_streams, algorithm, cfg.barriers)
    res = simulate(plan, w, soc, cost)
    return SearchResult(algorithm, plan, res, time.perf_counter() - t0, gens_done, curve.evaluations, history,
                        cfg.max_evaluations, curve.as_list(), converged(curve, cfg.max_evaluations))
