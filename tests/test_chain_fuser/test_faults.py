"""Faults a user meets with compiled chains: special values, inputs of another shape, a damaged kernel cache. Each
is propagated as eager PyTorch would, run eagerly with the reason recorded, or rebuilt with a warning."""
import json
import math
import os
import subprocess
import sys
import warnings

import pytest

pytest.importorskip("tvm")
torch = pytest.importorskip("torch")

import chain_fuser  # noqa: E402
from chain_fuser import cache  # noqa: E402
from chain_fuser.kernel import _kernel_key, build_kernel, random_inputs, reference, tune  # noqa: E402
from chain_fuser.planner import plan_chain  # noqa: E402
from chain_fuser.spec import GemmChain  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128)).eval()


def _compiled(module, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = chain_fuser.compile(module, (x,), tune=False)
    assert cm.fused, cm.report()
    return cm


def test_nan_in_an_input_row_and_in_a_weight_written_after_compiling_propagate_through_relu():
    m, x = _mlp(), torch.randn(64, 128)
    cm = _compiled(m, x)
    x[3, 5] = math.nan
    with torch.no_grad():
        assert cm(x).isnan().sum() == m(x).isnan().sum() == 128
        m[0].weight[7, 0] = math.nan  # in place, as an optimiser step would
        xf = torch.randn(64, 128)
        assert m(xf).isnan().all()
        assert cm(xf).isnan().all()


def test_an_input_of_another_shape_runs_eagerly_and_says_why():
    a, b, d = torch.randn(64, 128), torch.randn(128, 96), torch.randn(96, 32)

    def f(a, b, d):
        return (a @ b) @ d

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = chain_fuser.compile(f, (a, b, d), tune=False)
    assert cm.fused, cm.report()
    row = a[:1]
    with pytest.warns(UserWarning, match=r"input 0 is \[1, 128\].*compiled for \[64, 128\]"):
        got = cm(row, b, d)
    assert got.shape == (1, 32)
    torch.testing.assert_close(got, f(row, b, d))
    assert "ran eagerly 1 time(s): input 0 is [1, 128]" in cm.report()
    with pytest.raises(RuntimeError):  # what eager raises for shapes that do not multiply
        cm(torch.randn(64, 100), b, d)
    torch.testing.assert_close(cm(a, b, d), f(a, b, d), rtol=1e-4, atol=1e-4)  # the compiled shape still fused


SPEC = GemmChain(1, 24, 16, 16, 40, glue="relu", name="fault_cache")
DAMAGE = {"truncated": lambda data: data[: len(data) // 3], "empty": lambda data: b"",
          "garbage": lambda data: os.urandom(4096)}


def _entry(spec=SPEC):
    plan = plan_chain(spec, top_k=1)[0]
    return plan, cache.entry_path(_kernel_key(spec, plan, True), ".so")


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cached_kernel_is_rebuilt_with_a_warning(damage):
    spec = GemmChain(1, 25 + sorted(DAMAGE).index(damage), 16, 16, 40, glue="relu", name=f"fault_{damage}")
    plan, so = _entry(spec)
    build_kernel(spec, plan)
    data = open(so, "rb").read()
    os.remove(so)  # a new file: one this process has mapped must not shrink under it
    with open(so, "wb") as f:
        f.write(DAMAGE[damage](data))
    with pytest.warns(UserWarning, match="is damaged"):
        k = build_kernel(spec, plan)
    assert not k.from_cache
    ins = random_inputs(spec)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=1e-4, atol=1e-4)
    assert build_kernel(spec, plan).from_cache  # the rebuilt entry is intact


def test_a_truncated_kernel_never_reaches_dlopen_in_a_fresh_process():
    """A truncated object mapped by dlopen ends the process with SIGBUS; the loader must check it first."""
    plan, so = _entry()
    build_kernel(SPEC, plan)
    data = open(so, "rb").read()
    os.remove(so)
    open(so, "wb").write(data[: len(data) // 2])
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from chain_fuser.kernel import build_kernel\nfrom chain_fuser.planner import plan_chain\n"
            "from chain_fuser.spec import GemmChain\n"
            f"s = {SPEC!r}\nk = build_kernel(s, plan_chain(s, top_k=1)[0])\nprint('from_cache', k.from_cache)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "from_cache False" in r.stdout


def test_a_tuning_record_of_another_structure_is_tuned_again():
    spec = GemmChain(1, 24, 16, 16, 40, name="fault_tune")
    before = set(os.listdir(cache.cache_dir()))
    tune(spec, top_k=1, repeat=1)
    rec = [p for p in set(os.listdir(cache.cache_dir())) - before
           if p.endswith(".json") and "chosen_signature" in open(os.path.join(cache.cache_dir(), p)).read()]
    assert len(rec) == 1
    with open(os.path.join(cache.cache_dir(), rec[0]), "w") as f:
        json.dump({"candidates": "?", "chosen": 3}, f)
    with pytest.warns(UserWarning, match="another structure"):
        k, rep = tune(spec, top_k=1, repeat=1)
    assert not rep.from_cache and k.measured_ms > 0
