"""Fused kernels follow IEEE semantics as eager PyTorch does: NaN and ±inf propagate through every template (ReLU,
GELU, softmax, the padded tails of the tiles), -0.0 and denormals compute as ordinary values.

Three templates may turn more outputs non-finite than eager, never fewer: Winograd's transforms add and subtract
a tile's inputs, so one inf or NaN input makes its whole output tile NaN; GELU(+inf) is +inf here where torch's
erf GELU returns NaN; and a plain chain (no glue stage to mask its padded columns) may turn a row's ±inf outputs
into NaN when A holds an inf."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("tvm")
torch = pytest.importorskip("torch")

from chain_fuser.kernel import build_kernel, random_inputs, reference  # noqa: E402
from chain_fuser.planner import plan_chain  # noqa: E402
from chain_fuser.spec import ConvChain, GemmChain  # noqa: E402

# odd sizes: every template's padded rows, columns and channel blocks are exercised
TEMPLATES = {
    "gemm_none": (GemmChain(1, 13, 11, 9, 21, name="ieee_none"), "direct", True),
    "gemm_relu_bias": (GemmChain(1, 13, 11, 9, 21, glue="relu", bias1=True, bias2=True, name="ieee_relu"),
                       "direct", True),
    "gemm_gelu": (GemmChain(2, 7, 11, 9, 19, glue="gelu", name="ieee_gelu"), "direct", True),
    "attention": (GemmChain(2, 13, 16, 16, 23, glue="softmax", scale=0.25, bt=True, name="ieee_attn"), "direct", True),
    "gemm_relu_unfused": (GemmChain(1, 13, 11, 9, 21, glue="relu", name="ieee_relu_unf"), "direct", False),
    "conv_relu": (ConvChain(1, 5, 6, 7, 9, 3, 3, 6, 1, 1, glue="relu", bias1=True, name="ieee_conv"), "direct", True),
    "conv_unfused": (ConvChain(1, 5, 6, 7, 9, 3, 3, 6, 3, 3, glue="relu", name="ieee_conv_unf"), "direct", False),
    "conv_winograd": (ConvChain(1, 5, 6, 7, 9, 3, 3, 6, 3, 3, glue="relu", name="ieee_wino"), "winograd2", False),
}
NO_LESS_FINITE = {"conv_winograd", "gemm_gelu", "gemm_none"}
SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 1e-40, -3e-39]


@pytest.fixture(scope="module")
def kernels():
    out = {}
    for key, (spec, algorithm, fused) in TEMPLATES.items():
        out[key] = (spec, build_kernel(spec, plan_chain(spec, top_k=1)[0], fused, use_cache=False,
                                       algorithm=algorithm))
    return out


def _same_ieee(got, want, what):
    fin = want.isfinite()
    if what in NO_LESS_FINITE:
        assert not (got.isfinite() & ~fin).any(), f"{what}: a non-finite eager output is finite here"
        fin &= got.isfinite()
    else:
        assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN at {int(got.isnan().sum())} places, eager " \
                                                       f"{int(want.isnan().sum())}"
        assert torch.equal(got.isposinf(), want.isposinf()) and torch.equal(got.isneginf(), want.isneginf()), \
            f"{what}: infinities differ from eager"
    torch.testing.assert_close(got[fin], want[fin], rtol=1e-3, atol=1e-3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(TEMPLATES)), data=st.data())
def test_special_values_propagate_as_in_eager(kernels, key, data):
    spec, k = kernels[key]
    ins = random_inputs(spec, seed=data.draw(st.integers(0, 3)))
    for _ in range(data.draw(st.integers(1, 3))):
        t = ins[data.draw(st.integers(0, len(ins) - 1))]
        flat = t.view(-1)
        flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(st.sampled_from(SPECIAL))
    _same_ieee(k(*[t.clone() for t in ins]), reference(spec, *ins), key)


@pytest.mark.parametrize("key", sorted(TEMPLATES))
def test_a_nan_in_one_input_row_reaches_the_same_outputs(kernels, key):
    spec, k = kernels[key]
    ins = random_inputs(spec, seed=1)
    ins[0].view(-1)[ins[0].numel() // 2] = math.nan
    want = reference(spec, *ins)
    assert want.isnan().any()
    _same_ieee(k(*ins), want, key)
