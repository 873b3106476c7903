"""The FSM's search step: beam search over type sequences (compiled and Python twins), the head/tail types it
leaves out, the C type-wise bound, and the FSM keeping the shorter schedule."""
import json
import random

import pytest
from dynamic_batcher import Batcher, fastsim, policies
from dynamic_batcher.errors import ConfigError, PolicyFileError
from dynamic_batcher.graph import graph_from_spec
from dynamic_batcher.policies import (
    BeamSearch,
    beam_types_py,
    check_schedule,
    exact_optimum,
    head_tail_types,
    make_policy,
)
from dynamic_batcher.rl import FSMPolicy, QConfig
from dynamic_batcher.workloads import make_workload

from .test_fast_paths import _graph

needs_cc = pytest.mark.skipif(not fastsim.available(), reason="no C compiler: only the Python twin runs")


def _lattices(k, L, name="lattice_gru", seed=7):
    wl = make_workload(name, hidden=8)
    bt = Batcher(wl.model)
    for t in wl.minibatch(random.Random(seed), k, L):
        wl.forward(bt, t)
    return bt.g.view()


@needs_cc
@pytest.mark.parametrize("name,blocks", [("lattice_gru", "block"), ("lattice_lstm", "inline"),
                                         ("treelstm", "block"), ("bilstm_tagger", "block")])
def test_compiled_beam_equals_python_twin(name, blocks):
    g = _graph(name, blocks=blocks, seed=3).view()
    for width, power in ((1, 6), (5, 4), (16, 6)):
        c = fastsim.FastSim(g).beam(width, power)
        assert c == beam_types_py(g, width, power), (width, power)
        policies.FAST[0] = False
        try:
            slow = BeamSearch(width, power).schedule(g)
        finally:
            policies.FAST[0] = True
        fast = BeamSearch(width, power).schedule(g)
        assert [list(b) for b in slow] == [list(b) for b in fast]
        check_schedule(g, fast)


def _random_dag(rng, n, ntypes):
    spec = {}
    for v in range(n):
        args = sorted(rng.sample(range(v), k=min(v, rng.choice((0, 1, 1, 2, 3)))))
        spec[f"n{v}"] = {"type": f"t{rng.randrange(ntypes)}" if rng.random() > 0.05 else "unbatchable",
                         "args": [f"n{a}" for a in args]}
    return graph_from_spec(spec)


@needs_cc
@pytest.mark.parametrize("seed", range(6))
def test_beam_on_random_dags_valid_and_twins_agree(seed):
    rng = random.Random(seed)
    g = _random_dag(rng, rng.randint(5, 60), rng.randint(1, 5))
    seq = fastsim.FastSim(g).beam(8, 6)
    assert seq == beam_types_py(g, 8, 6)
    s = BeamSearch(8).schedule(g)
    check_schedule(g, s)
    assert fastsim.FastSim(g).search(1, 6, threshold=0) == (g.lower_bound(), None)  # the C bound, no search
    assert len(s) >= g.lower_bound()
    if g.n <= 20:  # the search is not exact in general, but never below the optimum
        ex = exact_optimum(g, max_states=50_000)
        if ex is not None:
            assert len(s) >= len(ex)


def test_head_and_tail_types():
    g = _lattices(3, 8)
    heads, tails = head_tail_types(g)
    keys = g.type_keys
    assert {keys[t].split("[")[0] for t in heads} == {"lookup"}  # embeddings and the zero state: sources only
    assert [keys[t].split("[")[0] for t in tails] == ["linear", "log_softmax"]  # the classifier, in order
    # a type cycle across instances (A -> B in one, B -> A in the other): each type once per path, but no order
    # runs both in one batch each, so neither is a tail type
    spec = {"a1": {"type": "A", "args": []}, "b1": {"type": "B", "args": ["a1"]},
            "x": {"type": "X", "args": []}, "b2": {"type": "B", "args": ["x"]}, "a2": {"type": "A", "args": ["b2"]}}
    g2 = graph_from_spec(spec)
    assert head_tail_types(g2)[1] == []
    s = BeamSearch(4).schedule(g2)
    check_schedule(g2, s)
    assert len(s) == len(exact_optimum(g2))


@pytest.mark.parametrize("k,L,exact", [(2, 12, 27), (4, 10, 25)])
def test_beam_reaches_the_cpsat_optimum_on_small_lattices(k, L, exact):
    """The exact optima (CP-SAT, OPTIMAL) of the bench's small lattice minibatches: the one-step heuristics miss
    them (critical path 29 on both), the search finds them."""
    wl = make_workload("lattice_gru", hidden=128, seed=0)
    bt = Batcher(wl.model)
    for t in wl.minibatch(random.Random(7), k, L):
        wl.forward(bt, t)
    g = bt.g.view()
    assert len(BeamSearch(24).schedule(g)) == exact
    assert len(make_policy("critical_path").schedule(g)) > exact


def test_fsm_search_step_keeps_the_shorter_schedule(tmp_path):
    g = _lattices(8, 12)
    plain = FSMPolicy("set", search_width=0)
    plain.train(g, QConfig(max_episodes=50))
    p = FSMPolicy("set")
    st = p.train(g, QConfig(max_episodes=50))
    s = p.schedule(g)
    check_schedule(g, s)
    assert p.last_search["table"] == len(plain.schedule(g)) == st.best_batches
    assert p.last_search["lower_bound"] == g.lower_bound()
    assert len(s) == min(st.best_batches, st.search_batches) < st.best_batches  # lattices: the search wins
    p.save(str(tmp_path / "f.json"))
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["search"] == {"width": p.search.width, "power": p.search.power}
    assert len(FSMPolicy.load(str(tmp_path / "f.json")).schedule(g)) == len(s)
    doc["search"] = {"width": "wide"}
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyFileError, match="bad.json.*search"):
        FSMPolicy.load(str(tmp_path / "bad.json"))


def test_fsm_does_not_search_when_the_table_reaches_the_bound():
    g = _graph("lstm_lm", n=6).view()
    p = FSMPolicy("set")
    st = p.train(g, QConfig(max_episodes=20))
    assert len(p.schedule(g)) == g.lower_bound() and p.last_search is None and st.search_batches is None


def test_bad_search_settings():
    with pytest.raises(ConfigError, match="beam.width"):
        BeamSearch(0)
    with pytest.raises(ConfigError, match="fsm.search_width"):
        FSMPolicy("set", search_width=-1)
