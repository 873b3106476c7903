"""Fuzz of chain_fuser's input formats: a chain given as a mapping of fields (experiment YAML, user shapes) either
builds or raises a ValidationError/ChainFuserError naming the field, never a raw exception."""
from chain_fuser.config import user_chain
from chain_fuser.errors import ChainFuserError
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_ir.errors import ValidationError

FIELDS = ["batch", "M", "N", "K", "L", "glue", "scale", "dtype", "name", "bt", "dt", "bias1", "bias2",
          "C", "H", "W", "K1", "R1", "S1", "K2", "R2", "S2", "N ", "m", ""]
VALUES = st.one_of(st.integers(-3, 300), st.floats(allow_nan=True), st.text(max_size=8), st.booleans(), st.none(),
                   st.lists(st.integers(), max_size=2), st.sampled_from(["relu", "gelu", "softmax", "float16"]))


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=10), st.text(max_size=5),
                 st.integers(), st.lists(st.integers(), max_size=3)))
def test_a_chain_mapping_builds_or_names_the_field(fields):
    try:
        spec = user_chain(fields, "task.shapes[0]")
    except (ValidationError, ChainFuserError) as e:
        assert "task.shapes[0]" in str(e) or getattr(e, "chain", None) is not None or "dtype" in str(e)
        return
    assert all(v >= 1 for k, v in vars(spec).items() if isinstance(v, int) and not isinstance(v, bool))
