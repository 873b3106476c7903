"""DeepSpeed's CPU Adam as the peer of ours: the same Adam on the same flat buffer, or a stated reason it is absent."""
import os
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


def _cfg(method, out_dir=None):
    from offload_trainer.config import from_dict

    return from_dict({"model": {"source": "llama", "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4,
                                "gradient_checkpointing": False},
                      "data": {"source": "synthetic", "seq_len": 16, "max_examples": 64, "eval_examples": 4,
                               "calib_examples": 4},
                      "train": {"method": method, "steps": 3, "batch": 4, "lr": 1e-3, "progress": False},
                      "device": "cpu", "out_dir": out_dir})


def test_deepspeed_method_names_what_is_missing(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from offload_trainer.errors import ConfigError
    from offload_trainer.trainer import Trainer

    with pytest.raises(ConfigError, match="out_dir"):
        Trainer(_cfg("deepspeed_zero_offload", str(tmp_path)))
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(ConfigError, match="train.method.*needs deepspeed"):
        Trainer(_cfg("deepspeed_zero_offload"))


@pytest.mark.slow
def test_deepspeed_zero_offload_trains_exactly_as_full_fine_tuning():
    """DeepSpeed ZeRO-2 with the optimizer on the CPU (its CPU Adam) against torch Adam: the same weights."""
    pytest.importorskip("deepspeed")
    pytest.importorskip("transformers")
    from offload_trainer.trainer import Trainer

    weights = {}
    for m in ("full_ft", "deepspeed_zero_offload"):
        tr = Trainer(_cfg(m))
        tr.train()
        weights[m] = {n.removeprefix("module."): p.detach().clone() for n, p in tr.model.named_parameters()}
        tr.close()
    a, b = weights["full_ft"], weights["deepspeed_zero_offload"]
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5


def test_the_one_rank_launcher_variables_do_not_outlive_the_engine(monkeypatch):
    """Left set, RANK/LOCAL_RANK/MASTER_PORT would make a later HF Trainer child process join a process group on a
    port this process holds."""
    from offload_trainer.ds_zero import _rank0_env

    for k in ("MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    with _rank0_env():
        assert os.environ["LOCAL_RANK"] == "0" and os.environ["WORLD_SIZE"] == "1"
        assert int(os.environ["MASTER_PORT"]) > 0 and os.environ["MASTER_ADDR"] == "10.0.0.1"
    assert not {"MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"} & set(os.environ)
    assert os.environ["MASTER_ADDR"] == "10.0.0.1"
