import pytest
from soc_mapper.algorithms import ALGORITHMS
from soc_mapper.config import GAConfig, RunConfig
from soc_mapper.errors import MapperError

from .helpers import problem

pytest.importorskip("ortools")


def test_exact_is_a_lower_bound_of_every_algorithm():
    from soc_mapper.exact import solve_exact

    w, soc, c = problem(cnn=1, tf=0, br=2)  # 6 + 3 + 3 = 12 layers on the 2x2 SoC
    assert len(w) <= 15
    ex = solve_exact(w, soc, c, time_limit_s=30)
    assert ex.optimal
    opt = min(ex.result.latency, ex.solver_latency)
    assert ex.result.latency == pytest.approx(ex.solver_latency, rel=1e-3)
    rc = RunConfig(time_budget_s=3, ga=GAConfig(population=8, generations=10))
    for name in ("comb", "heft", "greedy", "h2h_wave_greedy", "fcfs"):
        r = ALGORITHMS[name](w, soc, c, rc)
        assert r.result.latency >= opt * (1 - 1e-3), name
    comb = ALGORITHMS["comb"](w, soc, c, rc)
    assert comb.result.latency <= opt * 1.10  # gap on a tiny instance (the bench reports the exact figure)


def test_exact_refuses_large_instances():
    from soc_mapper.exact import solve_exact

    w, soc, c = problem(cnn=3, tf=2, br=2)
    with pytest.raises(MapperError, match="exact.layers"):
        solve_exact(w, soc, c)
