"""Real DyNet as the reference: each workload's DyNet twin computes what the PyTorch model computes (same weights,
same minibatch), before and after one SGD step, and the timing child runs the parent's minibatches."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dynet_config")

from dynamic_batcher import dynet_ref  # noqa: E402
from dynamic_batcher.dynet_models import SUPPORTED  # noqa: E402
from dynamic_batcher.ir import Eager  # noqa: E402
from dynamic_batcher.workloads import make_workload  # noqa: E402

HIDDEN, SEED, BATCH, LENGTH = 8, 3, 3, None


@pytest.fixture(scope="module")
def dynet_check():
    try:
        doc, _ = dynet_ref.run_child(["check", "--workloads", *SUPPORTED, "--hidden", str(HIDDEN), "--seed",
                                      str(SEED), "--batch", str(BATCH), "--strategy", "1"], timeout=600)
    except dynet_ref.DynetUnavailable as e:
        pytest.skip(str(e))
    return doc


def _ours(name):
    wl = make_workload(name, hidden=HIDDEN, seed=SEED)
    for p in wl.model.params.values():
        p.tensor.requires_grad_(True)
    mb = dynet_ref.check_minibatch(wl, SEED, BATCH, LENGTH)
    with torch.no_grad():
        outs = torch.stack([o.value() for inst in mb for o in wl.forward(Eager(wl.model), inst)])
    tg = dynet_ref.targets(len(outs), dynet_ref.n_outputs(wl), SEED, 0)
    loss = dynet_ref.train_step(wl, None, mb, tg)
    return wl, mb, outs.numpy(), loss


@pytest.mark.parametrize("name", SUPPORTED)
def test_the_dynet_twin_computes_the_same_outputs_loss_and_sgd_step(dynet_check, name):
    wl, mb, outs, loss = _ours(name)
    arrays, meta = dynet_check["arrays"], dynet_check["result"][name]
    assert meta["digest"] == dynet_ref.minibatch_digest([mb])  # the same instances on both sides
    np.testing.assert_allclose(arrays[f"{name}/out"], outs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(arrays[f"{name}/loss"]), loss, rtol=1e-4)
    for key, shorts in meta["sources"].items():
        want = np.concatenate([wl.model.params[f"{wl.model.name}.{s}"].tensor.detach().numpy() for s in shorts])
        got = arrays[f"{name}/param/{key}"].reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key} after one SGD step")


def test_the_timing_child_runs_the_parents_minibatches_and_reports_both_clocks():
    wl = make_workload("treelstm", hidden=16, seed=0)
    digest = dynet_ref.minibatch_digest(dynet_ref.timing_minibatches(wl, 0, 4, 3))
    try:
        res = dynet_ref.measure("treelstm", 16, 0, 4, 2, digest, strategies=(1, 2), counts=True)
    except dynet_ref.DynetUnavailable as e:
        pytest.skip(str(e))
    assert set(res["strategies"]) == {"agenda", "depth"} and res["best_strategy"] in res["strategies"]
    for row in res["strategies"].values():
        assert row["inference_ms"]["cpu"] > 0 and row["train_ms"]["wall"] > 0 and row["batches"] > 0
        assert len(row["inference_all_s"]["wall"]) == 2 and len(row["train_losses"]) == 2
    with pytest.raises(dynet_ref.BatcherError, match="other minibatches"):
        dynet_ref.measure("treelstm", 16, 0, 4, 2, "0" * 16, strategies=(1,), train=False)
