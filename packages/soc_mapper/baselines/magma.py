"""MAGMA (Kao & Krishna, HPCA 2022: an optimization framework for mapping multiple DNNs on multiple
accelerator cores), adapted to a layer DAG.

Genome: two rows over the jobs (layers): the accelerator of each job, and a float priority. Decoding: each core
runs its jobs one at a time in priority order; with dependencies, the global dispatch order is the priority-
driven topological order (Kahn's algorithm taking the ready job of smallest priority), so per-core orders never
deadlock. MAGMA's fitness is its own analytical makespan model: a job has a no-stall latency and a required
bandwidth (its bytes / that latency, from the per-core lookup table); while the running jobs together demand
more than the system bandwidth, every one of them slows down in proportion. Operators: the three crossovers
(general single-point on both rows, range crossover copying a span of both rows, accelerator-row-only range
crossover), per-gene mutation of either row, elitism (5%). The final plan is judged by the shared simulator
with one stream per accelerator (MAGMA's cores run one job at a time).

Also here: ``magma_1stream_comb_ga``, what COMB's experiments called "MAGMA": COMB's own GA limited to one
stream per accelerator (see :func:`soc_mapper.comb.comb_search` with ``max_streams=1``).
"""
from __future__ import annotations

import heapq
import math
import random
import time

import numpy as np

from ..comb import SearchResult
from ..config import MagmaConfig
from ..cost import CostTable
from ..simulator import Plan, simulate
from ..soc import SoC
from ..workload import Workload


class MagmaModel:
    """MAGMA's lookup table (latency, required bandwidth per (job, core)) and its shared-bandwidth makespan."""

    def __init__(self, w: Workload, soc: SoC, cost: CostTable, system_bandwidth: float | None = None):
        self.w, self.soc, self.cost = w, soc, cost
        self.L, self.A = len(w.layers), soc.n
        self.lat = cost.latency
        nbytes = np.array([l.in_bytes + l.weight_bytes + l.out_bytes for l in w.layers], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.req = np.where(cost.supported, nbytes[:, None] / cost.latency, 0.0)
        self.bw = system_bandwidth or soc.nn_bandwidth * soc.n
        self.sup = [np.flatnonzero(cost.supported[v]) for v in range(self.L)]

    def order(self, prio: np.ndarray) -> list[int]:
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

    def makespan(self, accel: np.ndarray, order: list[int]) -> float:
        """Event simulation: per core a queue in dispatch order; the head runs once its producers are done;
        progress rate = min(1, system bandwidth / Σ required bandwidth of the running jobs)."""
        queues: list[list[int]] = [[] for _ in range(self.A)]
        for v in order:
            queues[accel[v]].append(v)
        head = [0] * self.A
        done = np.zeros(self.L, dtype=bool)
        remaining = np.zeros(self.A)  # remaining no-stall seconds of the running job per core
        running = [-1] * self.A
        t = 0.0
        left = self.L
        while left:
            for a in range(self.A):
                if running[a] < 0 and head[a] < len(queues[a]):
                    v = queues[a][head[a]]
                    if all(done[u] for u in self.w.preds[v]):
                        running[a] = v
                        remaining[a] = self.lat[v, a]
            act = [a for a in range(self.A) if running[a] >= 0]
            if not act:  # cannot happen with a topological dispatch order
                return math.inf
            demand = sum(self.req[running[a], a] for a in act)
            rate = min(1.0, self.bw / demand) if demand > 0 else 1.0
            step = min(remaining[a] for a in act) / rate
            t += step
            for a in act:
                remaining[a] -= step * rate
                if remaining[a] <= 1e-15:
                    v = running[a]
                    done[v] = True
                    running[a] = -1
                    head[a] += 1
                    left -= 1
        return t


def magma(w: Workload, soc: SoC, cost: CostTable, cfg: MagmaConfig | None = None) -> SearchResult:
    cfg = cfg or MagmaConfig()
    t0 = time.perf_counter()
    rng = random.Random(cfg.seed)
    nrng = np.random.default_rng(cfg.seed)
    m = MagmaModel(w, soc, cost, cfg.system_bandwidth)
    L = m.L

    def rand_accel() -> np.ndarray:
        return np.array([s[nrng.integers(len(s))] for s in m.sup], dtype=np.int64)

    def fitness(g: tuple[np.ndarray, np.ndarray]) -> float:
        return m.makespan(g[0], m.order(g[1]))

    def repair(acc: np.ndarray) -> np.ndarray:
        bad = ~cost.supported[np.arange(L), acc]
        for v in np.flatnonzero(bad):
            acc[v] = m.sup[v][nrng.integers(len(m.sup[v]))]
        return acc

    # MAGMA starts from random genomes; one is seeded with each job on its fastest core (its lookup table)
    pop = [(rand_accel(), nrng.random(L)) for _ in range(cfg.population - 1)]
    pop.append((np.argmin(cost.latency, axis=1).astype(np.int64), np.arange(L) / max(1, L)))
    fits = [fitness(g) for g in pop]
    history = [min(fits)]
    n_elite = max(1, int(round(cfg.elite_ratio * cfg.population)))
    gens = 0
    last = 0.0
    for gen in range(cfg.generations):
        if cfg.time_budget_s is not None and time.perf_counter() - t0 + last > cfg.time_budget_s:
            break
        tg = time.perf_counter()
        rank = np.argsort(fits)
        elite = [pop[i] for i in rank[:n_elite]]
        parents = [pop[i] for i in rank[:max(2, cfg.population // 2)]]  # mating pool: the better half
        children = []
        while len(children) < cfg.population - n_elite:
            (a1, p1), (a2, p2) = rng.sample(parents, 2)
            ca, cp = a1.copy(), p1.copy()
            if rng.random() < cfg.crossover_rate:
                kind = rng.randrange(3)
                if kind == 0:  # general: single point, both rows
                    k = rng.randrange(1, L) if L > 1 else 0
                    ca[k:], cp[k:] = a2[k:], p2[k:]
                else:
                    i, j = sorted(rng.sample(range(L + 1), 2)) if L > 1 else (0, L)
                    ca[i:j] = a2[i:j]
                    if kind == 1:  # range: both rows
                        cp[i:j] = p2[i:j]
            mut = nrng.random(L) < cfg.mutation_rate
            for v in np.flatnonzero(mut):
                if rng.random() < 0.5:
                    ca[v] = m.sup[v][nrng.integers(len(m.sup[v]))]
                else:
                    cp[v] = nrng.random()
            children.append((repair(ca), cp))
        pop = elite + children
        fits = [fits[i] for i in rank[:n_elite]] + [fitness(g) for g in children]
        history.append(min(fits))
        gens = gen + 1
        last = time.perf_counter() - tg
    best = pop[int(np.argmin(fits))]
    plan = Plan([int(a) for a in best[0]], m.order(best[1]), None, 1, None, "magma")
    return SearchResult("magma", plan, simulate(plan, w, soc, cost), time.perf_counter() - t0, gens,
                        len(history) and (cfg.population + gens * (cfg.population - n_elite)), history)
