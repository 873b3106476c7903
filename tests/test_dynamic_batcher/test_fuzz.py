"""Fuzz of dynamic_batcher's input formats: a typed DAG description (graph_from_spec) and a saved FSM policy file
either load or raise a BatcherError naming the node, field or file, never a raw exception."""
import json

from dynamic_batcher import BatcherError, graph_from_spec
from dynamic_batcher.rl import FORMAT, FSMPolicy
from hypothesis import given, settings
from hypothesis import strategies as st

NAMES = st.sampled_from(["a", "b", "c", "d", "e", ""])
NODE = st.one_of(st.fixed_dictionaries({"type": st.one_of(st.sampled_from(["x", "y", "", "unbatchable"]),
                                                          st.integers()),
                                        "args": st.one_of(st.lists(NAMES, max_size=3), st.text(max_size=3),
                                                          st.integers())}),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.integers(), st.none())


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(NAMES, NODE, max_size=6))
def test_a_dag_description_loads_or_names_the_node(spec):
    try:
        g = graph_from_spec(spec)
    except BatcherError:
        return
    assert g.n == len(spec) and g.lower_bound() >= (1 if spec else 0)


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.binary(max_size=64),
                 st.dictionaries(st.sampled_from(["encoding", "table", "fallback", "search", "train", "fingerprint"]),
                                 st.one_of(st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                                           st.lists(st.lists(st.integers(), max_size=2), max_size=2),
                                           st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                                           st.none()), max_size=6)
                 .map(lambda d: json.dumps({"format": FORMAT, **d}).encode())))
def test_a_policy_file_loads_or_names_the_file(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("pol") / "fsm.json"
    p.write_bytes(data)
    try:
        FSMPolicy.load(str(p))
    except BatcherError as e:
        assert "fsm.json" in str(e)
