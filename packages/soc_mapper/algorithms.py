"""The registry of algorithms: name -> function(workload, soc, cost, run_config) -> SearchResult.

Names say whose algorithm it is: ``comb`` (this package; ``comb_barriers``: the reference's decoder with a
barrier after every window, j ≤ 20, plans run with the barriers), ``magma`` (as its authors' code runs it) and
``h2h`` (as published), ``magma_comb_simplified`` and ``h2h_wave_greedy`` (ablations: the simplified versions
COMB's own experiments used under those names), ``fcfs``/``heft``/``round_robin``/``greedy`` (list heuristics),
``exact`` (CP-SAT, small only). With ``RunConfig.budget_evaluations`` every search gets that many fitness
evaluations; otherwise the GAs get ``RunConfig.time_budget_s`` seconds.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .comb import SearchResult, comb_search
from .config import ALGORITHM_NAMES


def _budgets(rc, generations: int) -> dict:
    """The search budget of ``rc`` as config fields: evaluations (lifting the generation cap so that it binds)
    when ``rc.budget_evaluations`` is set, else seconds."""
    if rc.budget_evaluations is not None:
        return dict(max_evaluations=rc.budget_evaluations, time_budget_s=None,
                    generations=max(generations, rc.budget_evaluations))
    return dict(time_budget_s=rc.time_budget_s)


def _comb(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, **_budgets(rc, rc.ga.generations))
    return comb_search(w, soc, cost, ga, "comb")


def _comb_barriers(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, barriers=True, max_window=20, window_work=None,
                             **_budgets(rc, rc.ga.generations))
    return comb_search(w, soc, cost, ga, "comb_barriers")


def _magma_simplified(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, max_streams=1, **_budgets(rc, rc.ga.generations))
    return comb_search(w, soc, cost, ga, "magma_comb_simplified")


def _magma(w, soc, cost, rc) -> SearchResult:
    from .baselines.magma import magma

    return magma(w, soc, cost, dataclasses.replace(rc.magma, seed=rc.seed, **_budgets(rc, rc.magma.generations)))


def _h2h(w, soc, cost, rc) -> SearchResult:
    from .baselines.h2h import h2h

    # no wall-clock deadline: H2H runs until its passes converge, capped only by the shared evaluation budget
    return h2h(w, soc, cost, dataclasses.replace(rc.h2h, max_evaluations=rc.budget_evaluations))


def _simple(name: str) -> Callable:
    def run(w, soc, cost, rc) -> SearchResult:
        from .baselines import h2h, heuristics

        fn = {"h2h_wave_greedy": h2h.h2h_wave_greedy, "fcfs": heuristics.fcfs, "heft": heuristics.heft,
              "round_robin": heuristics.round_robin, "greedy": heuristics.greedy}[name]
        return fn(w, soc, cost)

    return run


def _exact(w, soc, cost, rc) -> SearchResult:
    from .exact import solve_exact

    return solve_exact(w, soc, cost, time_limit_s=rc.time_budget_s)


ALGORITHMS: dict[str, Callable] = {
    "comb": _comb, "comb_barriers": _comb_barriers, "magma": _magma, "h2h": _h2h,
    "magma_comb_simplified": _magma_simplified,
    "h2h_wave_greedy": _simple("h2h_wave_greedy"), "fcfs": _simple("fcfs"), "heft": _simple("heft"),
    "round_robin": _simple("round_robin"), "greedy": _simple("greedy"), "exact": _exact,
}
if tuple(ALGORITHMS) != ALGORITHM_NAMES:  # pragma: no cover - caught by the first import in any test
    raise ImportError(f"soc_mapper.config.ALGORITHM_NAMES {ALGORITHM_NAMES} != the registry {tuple(ALGORITHMS)}")
