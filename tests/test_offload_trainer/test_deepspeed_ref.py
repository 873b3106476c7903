"""DeepSpeed's CPU Adam as the peer of ours: the same Adam on the same flat buffer, or a stated reason it is absent."""
import sys

import pytest

torch = pytest.importorskip("torch")

from offload_trainer import deepspeed_ref  # noqa: E402


def test_without_deepspeed_the_comparison_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed now raises ImportError
    monkeypatch.setitem(sys.modules, "deepspeed.ops.adam", None)
    res = deepspeed_ref.cpu_adam_vs_deepspeed(1 << 12, repeats=1, threads=1)
    assert "deepspeed.ops.adam does not import" in res["deepspeed_unavailable"]


@pytest.mark.slow
def test_ours_and_deepspeeds_cpu_adam_compute_the_same_steps():
    """First use builds DeepSpeed's extension (about a minute on 2 cores)."""
    pytest.importorskip("deepspeed")
    res = deepspeed_ref.cpu_adam_vs_deepspeed(1 << 16, repeats=3, threads=1)
    assert "deepspeed_unavailable" not in res, res
    assert res["max_abs_param_diff_vs_deepspeed"] is not None and res["max_abs_param_diff_vs_deepspeed"] < 1e-5
    assert res["cpu_adam_vs_deepspeed"] > 0 and res["ms"]["deepspeed"] > 0 and res["deepspeed_version"]
