"""The registry of algorithms: name -> function(workload, soc, cost, run_config) -> SearchResult.

Names say whose algorithm it is: ``comb`` (this package; ``comb_barriers``: the reference's decoder with a
barrier after every window, j ≤ 20, plans run with the barriers), ``magma`` and ``h2h`` (faithful to their papers),
``magma_1stream_comb_ga`` and ``h2h_wave_greedy`` (the simplified versions COMB's own experiments used under
those names), ``fcfs``/``heft``/``round_robin``/``greedy`` (list heuristics), ``exact`` (CP-SAT, small only).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .comb import SearchResult, comb_search
from .config import ALGORITHM_NAMES


def _comb(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, time_budget_s=rc.time_budget_s)
    return comb_search(w, soc, cost, ga, "comb")


def _comb_barriers(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, time_budget_s=rc.time_budget_s, barriers=True,
                             max_window=20, window_work=None)
    return comb_search(w, soc, cost, ga, "comb_barriers")


def _magma_1stream(w, soc, cost, rc) -> SearchResult:
    ga = dataclasses.replace(rc.ga, seed=rc.seed, time_budget_s=rc.time_budget_s, max_streams=1)
    return comb_search(w, soc, cost, ga, "magma_1stream_comb_ga")


def _magma(w, soc, cost, rc) -> SearchResult:
    from .baselines.magma import magma

    return magma(w, soc, cost, dataclasses.replace(rc.magma, seed=rc.seed, time_budget_s=rc.time_budget_s))


def _h2h(w, soc, cost, rc) -> SearchResult:
    from .baselines.h2h import h2h

    return h2h(w, soc, cost, dataclasses.replace(rc.h2h, time_budget_s=rc.time_budget_s))


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
    "magma_1stream_comb_ga": _magma_1stream,
    "h2h_wave_greedy": _simple("h2h_wave_greedy"), "fcfs": _simple("fcfs"), "heft": _simple("heft"),
    "round_robin": _simple("round_robin"), "greedy": _simple("greedy"), "exact": _exact,
}
if tuple(ALGORITHMS) != ALGORITHM_NAMES:  # pragma: no cover - caught by the first import in any test
    raise ImportError(f"soc_mapper.config.ALGORITHM_NAMES {ALGORITHM_NAMES} != the registry {tuple(ALGORITHMS)}")
