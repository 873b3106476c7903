"""MAGMA (Kao & Krishna, HPCA 2022: an optimization framework for mapping multiple DNNs on multiple accelerator
cores) as its authors' code runs it (``maestro-project/magma``, ``src/scheuler_GA.py``, ``SchedulerGA``),
adapted to a layer DAG.

* **Encoding** (``create_pop``): a 2 × jobs array; row 0 the core (accelerator) of each job, row 1 a float
  priority in [0, 1). Random cores are drawn among the accelerators that can run the layer (the reference's
  cores run every job).
* **Decoding**: each core runs its jobs one at a time in priority order (``get_core_stat``); with dependencies
  the dispatch order is the priority-driven topological order (the ready job of smallest priority first), so the
  per-core orders never deadlock.
* **Fitness** (``evaluate`` / ``post_process``): MAGMA's makespan model (per-core queues; while the running jobs
  need more than the shared bandwidth, all slow down in proportion), here with each job also waiting for its
  producers' outputs to cross the mesh, as the simulator charges them (``MagmaConfig.fitness='model'``); or the
  simulator's latency of the decoded plan (``'simulator'``).
* **Selection** (``sel_parents``): sort by fitness; parents = the fittest ``parent_ratio`` (10 %), each pair
  drawn without replacement with probability ∝ (worst parent latency − latency + 1 unit); elite = the fittest
  5 %, carried over unchanged.
* **Crossovers**, in the reference's order on one set of children: ``crossover`` (every pair; with probability
  0.9 one row, chosen at random, takes the other parent's prefix before a random point in the first half of the
  genome, or its suffix after one in the second half); ``crossover_rg`` (probability 0.1 per pair: both rows
  before a random point from one parent, after it from the other); ``crossover_acc`` (probability 0.1 per
  child: every job the second parent runs on one random accelerator runs there, with the second parent's
  priority unless the first parent had it there too; the first parent's other jobs on it move to random
  accelerators). The reference writes each swap as a tuple assignment on NumPy
  views, so the first child takes the second parent's segment while the second child stays a copy of the
  second parent (``crossover``), and both children come out as the same genome (``crossover_rg``); the port
  does what that code does.
* **Mutation** (``mutate``): every gene of both rows, with probability 0.05, is redrawn.
* **Elitism**: the next population is the elite plus the children; the fittest ``population`` survive.

Differences, all because of the budget or the DAG: the initial population is evaluated before the first
selection (the reference's resume path; its fresh path selects the first parents from unevaluated genomes), an
evaluation budget may cut the last generation, elite genomes are not evaluated again (their fitness is known),
and with ``MagmaConfig.seeded`` the population starts with the seeds COMB gets (:func:`soc_mapper.comb.
seed_orders`, placed by earliest finish under the fitness's rules). The final plan is judged by the shared
simulator with one stream per accelerator (MAGMA's cores run one job at a time).

COMB's own experiments called something else "MAGMA": COMB's GA limited to one stream per accelerator; that
ablation is ``magma_comb_simplified`` (:func:`soc_mapper.comb.comb_search` with ``max_streams=1``).
"""
from __future__ import annotations

import heapq
import math
import time

import numpy as np

from ..budget import Curve, converged
from ..comb import SearchResult, seed_orders
from ..config import MagmaConfig
from ..cost import CostTable
from ..simulator import Plan, SimState, fast_tables, simulate
from ..soc import SoC
from ..workload import Workload

Genome = np.ndarray
"""A 2 × L float array: row 0 the accelerator of each layer, row 1 its priority."""


class MagmaModel:
    """MAGMA's lookup table (latency and required bandwidth per (job, core)) and its makespan model, with the
    mesh transfers of the simulator between a producer and its consumer."""

    def __init__(self, w: Workload, soc: SoC, cost: CostTable, system_bandwidth: float | None = None):
        self.w, self.soc, self.cost = w, soc, cost
        self.L, self.A = len(w.layers), soc.n
        self.lat = cost.latency
        nbytes = np.array([l.in_bytes + l.weight_bytes + l.out_bytes for l in w.layers], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            req = np.where(cost.supported & (cost.latency > 0), nbytes[:, None] / cost.latency, 0.0)
        self.bw = math.inf if system_bandwidth is None else float(system_bandwidth)
        self.sup = [np.flatnonzero(cost.supported[v]) for v in range(self.L)]
        self._sup_pad = np.array([np.resize(s, self.A) for s in self.sup], dtype=np.int64).reshape(self.L, self.A)
        self._nsup = np.array([len(s) for s in self.sup], dtype=np.int64)
        tb = fast_tables(w, soc, cost)
        self._lat, self._req, self._preds, self._inv = tb.lat, req.tolist(), tb.preds, tb.inv_bw

    def random_accels(self, rng: np.random.Generator, layers: np.ndarray) -> np.ndarray:
        """A uniformly random supporting accelerator for each of ``layers``."""
        k = np.floor(rng.random(len(layers)) * self._nsup[layers]).astype(np.int64)
        return self._sup_pad[layers, k]

    def order(self, prio: np.ndarray) -> list[int]:
        """The priority-driven topological order: of the ready layers, the one of smallest priority first."""
        indeg = [len(p) for p in self.w.preds]
        heap = [(prio[v], v) for v in range(self.L) if indeg[v] == 0]
        heapq.heapify(heap)
        out = []
        while heap:
            _, v = heapq.heappop(heap)
            out.append(v)
            for s in self.w.succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (prio[s], s))
        return out

    def _ready(self, v: int, a: int, accel, fin: list[float]) -> float:
        """When ``v``'s inputs are on ``a`` (inf while a producer runs)."""
        r = 0.0
        for u, b in self._preds[v]:
            f = fin[u]
            if f == math.inf:
                return math.inf
            x = f + b * self._inv[accel[u]][a]
            if x > r:
                r = x
        return r

    def earliest_finish_placement(self, order: list[int]) -> list[int]:
        """Each layer, in ``order``, on the accelerator where it would finish first under the model's rules (a
        core runs its queue in order; inputs arrive over the mesh), ignoring bandwidth sharing."""
        free = [0.0] * self.A
        fin = [math.inf] * self.L
        accel = [-1] * self.L
        for v in order:
            best = None
            for a in self.sup[v]:
                f = max(free[a], self._ready(v, a, accel, fin)) + self._lat[v][a]
                if best is None or f < best[0]:
                    best = (f, int(a))
            fin[v], accel[v] = best
            free[best[1]] = best[0]
        return accel

    def makespan(self, accel, order: list[int]) -> float:
        """Event simulation (``post_process``): per core a queue in dispatch order; its head starts once its
        inputs arrived; progress rate = min(1, shared bandwidth / Σ required bandwidth of the running jobs)."""
        accel = [int(a) for a in accel]
        A = self.A
        queues: list[list[int]] = [[] for _ in range(A)]
        for v in order:
            queues[accel[v]].append(v)
        head, running = [0] * A, [-1] * A
        rem, wake = [0.0] * A, [math.inf] * A
        fin = [math.inf] * self.L
        t, left = 0.0, self.L
        while left:
            for a in range(A):
                if running[a] < 0 and head[a] < len(queues[a]):
                    v = queues[a][head[a]]
                    r = self._ready(v, a, accel, fin)
                    if r <= t:
                        running[a], rem[a], wake[a] = v, self._lat[v][a], math.inf
                    else:
                        wake[a] = r
            act = [a for a in range(A) if running[a] >= 0]
            nxt = min(wake)
            if not act:
                if nxt == math.inf:  # cannot happen with a topological dispatch order
                    return math.inf
                t = nxt
                continue
            demand = sum(self._req[running[a]][a] for a in act)
            rate = self.bw / demand if demand > self.bw else 1.0
            step = min(rem[a] for a in act) / rate
            if nxt - t < step:  # a waiting head's inputs arrive first
                step, t = nxt - t, nxt
            else:
                t += step
            for a in act:
                rem[a] -= step * rate
                v = running[a]
                if rem[a] <= 1e-12 * self._lat[v][a]:
                    fin[v], running[a] = t, -1
                    head[a] += 1
                    left -= 1
        return t


# --- the reference's operators, on a population of genomes ------------------------------------------------------
def select(lat: np.ndarray, n_parent: int, n_elite: int, unit: float) -> tuple[np.ndarray, np.ndarray]:
    """``sel_parents``: (indices from fittest to least fit, parent weights). The weights of the fittest
    ``n_parent`` are (their worst latency − latency + ``unit``), normalised."""
    idx = np.argsort(lat, kind="stable")
    w = lat[idx[:n_parent]]
    w = w.max() - w + unit
    return idx, w / w.sum()


def _pick(rng: np.random.Generator, weights: np.ndarray) -> tuple[int, int]:
    i, j = rng.choice(len(weights), 2, p=weights, replace=False)
    return int(i), int(j)


def crossover_one_row(rng, parents: list[Genome], weights, children: list, rate: float) -> None:
    """``crossover``: each pair of children from two parents; with probability ``rate`` one random row of the
    first takes the second's genes before a point in the first half, or from a point in the second half."""
    L = parents[0].shape[1]
    for idx in range(0, len(children), 2):
        i, j = _pick(rng, weights)
        dad, mom = parents[i].copy(), parents[j].copy()
        if rng.random() < rate:
            row = 0 if rng.random() < 0.5 else 1
            point = int(rng.integers(0, L))
            if point < L // 2:
                dad[row, :point] = mom[row, :point]
            else:
                dad[row, point:] = mom[row, point:]
        children[idx], children[idx + 1] = dad, mom


def crossover_range(rng, parents: list[Genome], weights, children: list, rate: float) -> None:
    """``crossover_rg``: with probability ``rate`` per pair, both children become the second parent's genes
    (both rows) before a random point and the first's from it."""
    L = parents[0].shape[1]
    for idx in range(0, len(children), 2):
        if rng.random() < rate:
            i, j = _pick(rng, weights)
            dad, mom = parents[i].copy(), parents[j].copy()
            point = int(rng.integers(0, L))
            dad[:, :point] = mom[:, :point]
            mom[:, point:] = dad[:, point:]
            children[idx], children[idx + 1] = dad, mom


def crossover_accel(rng, parents: list[Genome], weights, children: list, rate: float, model: MagmaModel) -> None:
    """``crossover_acc``: with probability ``rate`` per child, a copy of the first parent in which one random
    accelerator runs every job the second parent runs on it (both rows copied, except for the jobs the first
    parent runs there too); the first parent's other jobs on it are redrawn at random."""
    for idx in range(len(children)):
        if rng.random() < rate:
            i, j = _pick(rng, weights)
            dad, mom = parents[i].copy(), parents[j]
            a = int(rng.integers(0, model.A))
            on_mom, on_dad = mom[0] == a, dad[0] == a
            take = on_mom & ~on_dad
            dad[:, take] = mom[:, take]
            redo = np.flatnonzero(on_dad & ~on_mom)
            dad[0, redo] = model.random_accels(rng, redo)
            children[idx] = dad


def mutate(rng, children: list[Genome], rate: float, model: MagmaModel) -> None:
    """``mutate``: every gene of both rows is redrawn with probability ``rate``."""
    for g in children:
        hit = rng.random(g.shape) < rate
        acc = np.flatnonzero(hit[0])
        g[0, acc] = model.random_accels(rng, acc)
        pr = np.flatnonzero(hit[1])
        g[1, pr] = rng.random(len(pr))


def next_children(rng, pop: list[Genome], lat: np.ndarray, cfg: MagmaConfig, model: MagmaModel, unit: float
                  ) -> tuple[list[Genome], np.ndarray, list[Genome]]:
    """One generation of ``SchedulerGA.run``: (elite, elite latencies, children)."""
    n_parent = max(2, int(cfg.population * cfg.parent_ratio))
    n_elite = max(1, int(cfg.population * cfg.elite_ratio))
    idx, weights = select(lat, min(n_parent, len(pop)), n_elite, unit)
    parents = [pop[i] for i in idx[:n_parent]]
    elite = [pop[i].copy() for i in idx[:n_elite]]
    children: list = [None] * cfg.population
    crossover_one_row(rng, parents, weights, children, cfg.crossover_rate)
    crossover_range(rng, parents, weights, children, cfg.range_crossover_rate)
    crossover_accel(rng, parents, weights, children, cfg.accel_crossover_rate, model)
    mutate(rng, children, cfg.mutation_rate, model)
    return elite, lat[idx[:n_elite]], children


def _simulator_placement(w: Workload, soc: SoC, cost: CostTable, order: list[int]) -> list[int]:
    """Each layer, in ``order``, where it finishes earliest under the simulator's rules with one stream."""
    st = SimState(w, soc, cost, max_streams=1)
    for v in order:
        st.place(v, min((a for a in range(soc.n) if cost.supported[v, a]), key=lambda a: (st.earliest(v, a)[1], a)))
    return st.placement


def seed_genomes(w: Workload, soc: SoC, cost: CostTable, model: MagmaModel | None = None,
                 fitness: str = "model") -> list[Genome]:
    """One genome per priority order of :func:`soc_mapper.comb.seed_orders`: priorities = positions in the
    order, each layer on the accelerator where it finishes earliest under the rules of ``fitness`` (the model's,
    :meth:`MagmaModel.earliest_finish_placement`, or the simulator's), so that the fitness judges each seed by
    the rules it was built with."""
    model = model or MagmaModel(w, soc, cost)
    out = []
    L = len(w.layers)
    for order in seed_orders(w, cost, soc):
        prio = np.zeros(L)
        prio[order] = np.arange(L) / max(1, L)
        pl = (model.earliest_finish_placement(order) if fitness == "model"
              else _simulator_placement(w, soc, cost, order))
        out.append(np.vstack([np.asarray(pl, dtype=float), prio]))
    return out


def initial_population(rng: np.random.Generator, w: Workload, soc: SoC, cost: CostTable, cfg: MagmaConfig,
                       model: MagmaModel) -> list[Genome]:
    """``create_pop`` for each individual (random cores, uniform priorities), after the seeds if ``seeded``."""
    pop = seed_genomes(w, soc, cost, model, cfg.fitness)[:cfg.population] if cfg.seeded else []
    allv = np.arange(model.L)
    while len(pop) < cfg.population:
        pop.append(np.vstack([model.random_accels(rng, allv).astype(float), rng.random(model.L)]))
    return pop


def decode(model: MagmaModel, g: Genome) -> Plan:
    """The genome's plan: its placement, the priority-driven topological order, one stream per accelerator."""
    return Plan([int(a) for a in g[0]], model.order(g[1]), None, 1, None, "magma")


def magma(w: Workload, soc: SoC, cost: CostTable, cfg: MagmaConfig | None = None) -> SearchResult:
    """MAGMA's GA (see the module doc) under ``cfg``'s generation, evaluation and time budgets."""
    cfg = cfg or MagmaConfig()
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    model = MagmaModel(w, soc, cost, cfg.system_bandwidth)
    unit = cfg.weight_unit_s or 1.0 / max(a.frequency_hz for a in soc.accs)
    curve = Curve()

    def fitness(g: Genome) -> float:
        plan = decode(model, g)
        f = (model.makespan(plan.placement, plan.order) if cfg.fitness == "model"
             else simulate(plan, w, soc, cost, validate=False).latency)
        curve.add(f)
        return f

    budget = cfg.max_evaluations
    pop = initial_population(rng, w, soc, cost, cfg, model)[:budget]
    lat = np.array([fitness(g) for g in pop])
    history = [float(lat.min())]
    gens, last = 0, 0.0
    for gen in range(cfg.generations):
        left = None if budget is None else budget - curve.evaluations
        over = cfg.time_budget_s is not None and time.perf_counter() - t0 + last > cfg.time_budget_s
        if over or (left is not None and left <= 0) or len(pop) < 2:
            break
        tg = time.perf_counter()
        elite, elite_lat, children = next_children(rng, pop, lat, cfg, model, unit)
        children = children[:left]  # the budget's last generation is cut to what is left
        pop = elite + children
        lat = np.concatenate([elite_lat, [fitness(g) for g in children]])
        history.append(float(lat.min()))
        gens, last = gen + 1, time.perf_counter() - tg
    plan = decode(model, pop[int(np.argmin(lat))])
    return SearchResult("magma", plan, simulate(plan, w, soc, cost), time.perf_counter() - t0, gens,
                        curve.evaluations, history, budget, curve.as_list(), converged(curve, budget))
