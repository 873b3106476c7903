"""Fuzz of soc_mapper's input formats: a user's model mix (names, files, mappings) and the run's config either
load or raise a MapperError/ValidationError naming the field, never a raw exception."""
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from soc_mapper.config import GAConfig, H2HConfig, MagmaConfig, RunConfig
from soc_mapper.workload import load_user_mix

from shared_ir.errors import ValidationError

SCALARS = st.one_of(st.integers(-2, 5), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
                    st.booleans(), st.none())
ENTRY = st.one_of(st.sampled_from(["resnet18", "mobilenet_v2", "nope", "x.onnx", "missing.yaml", ""]),
                  st.dictionaries(st.sampled_from(["model", "path", "copies", "name", "kwargs", "extra"]),
                                  st.one_of(SCALARS, st.sampled_from(["resnet18", "a.json"]),
                                            st.dictionaries(st.text(max_size=3), SCALARS, max_size=2)),
                                  max_size=4),
                  st.integers(), st.none())


@settings(max_examples=60, deadline=None)
@given(st.one_of(ENTRY, st.lists(ENTRY, max_size=3)), st.one_of(st.none(), st.integers(-1, 3)))
def test_a_user_mix_loads_or_names_the_field(mix, copies):
    try:
        w = load_user_mix(mix, copies=copies)
    except ValidationError as e:
        assert "task.mix" in str(e)
        return
    assert w.layers


def _fields(cls):
    return st.fixed_dictionaries({}, optional={f.name: SCALARS for f in dataclasses.fields(cls)})


@settings(max_examples=120, deadline=None)
@given(st.sampled_from([GAConfig, MagmaConfig, H2HConfig, RunConfig]).flatmap(
    lambda cls: st.tuples(st.just(cls), _fields(cls))))
def test_a_config_is_accepted_or_names_the_field(case):
    cls, kw = case
    try:
        cls(**kw)
    except ValidationError as e:
        assert any(k in str(e) for k in kw) or str(e)
