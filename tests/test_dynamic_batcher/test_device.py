"""The executor on another device: the same batched execution on CUDA equals per-instance eager PyTorch on the CPU
(outputs and gradients). The CPU checks run everywhere; the CUDA ones are marked ``gpu``."""
import random

import pytest
import torch
from dynamic_batcher import Batcher, Eager
from dynamic_batcher.workloads import FAMILIES, make_workload

NAMES = ["bilstm_tagger", "treelstm", "mvrnn", "lattice_lstm"]


def _outputs_and_grads(wl, ops, mb, targets):
    outs = [o for inst in mb for o in wl.forward(ops, inst)]
    lp = torch.stack([o.value() for o in outs])
    loss = -lp.gather(1, torch.tensor(targets[:len(outs)], device=lp.device)[:, None]).sum()
    loss.backward()
    grads = {}
    for n, p in wl.model.params.items():
        grads[n] = None if p.tensor.grad is None else p.tensor.grad.detach().cpu()
        p.tensor.grad = None
    return lp.detach().cpu(), grads


def _check(name: str, device: str):
    wl = make_workload(name, hidden=16)
    for p in wl.model.params.values():
        p.tensor.requires_grad_(True)
    rng = random.Random(2)
    mb = [wl.sample(rng, rng.randint(3, 7)) for _ in range(4)]
    targets = [rng.randrange(5) for _ in range(300)]
    want, gwant = _outputs_and_grads(wl, Eager(wl.model), mb, targets)
    wl.model.to(device)
    assert all(p.tensor.device.type == device and p.tensor.requires_grad for p in wl.model.params.values())
    bt = Batcher(wl.model)
    with torch.no_grad():
        out = [o for inst in mb for o in wl.forward(bt, inst)]
        assert out[0].value().device.type == device
        torch.testing.assert_close(torch.stack([o.value() for o in out]).cpu(), want, atol=1e-5, rtol=1e-5)
    got, ggot = _outputs_and_grads(wl, bt, mb, targets)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    reached = [n for n in gwant if gwant[n] is not None]
    assert len(reached) >= 3
    for n in reached:
        torch.testing.assert_close(ggot[n], gwant[n], atol=2e-5, rtol=1e-4, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("name", NAMES)
def test_batcher_follows_the_model_device_on_cpu(name):
    _check(name, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_batcher_on_cuda_equals_eager_on_cpu(name):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check(name, "cuda")


def test_moving_the_model_rebuilds_block_plans_for_the_new_device():
    wl = make_workload("treelstm", hidden=8)
    bt = Batcher(wl.model)
    mb = wl.minibatch(random.Random(0), 3)
    with torch.no_grad():
        [wl.forward(bt, t) for t in mb]
        bt.flush()
    assert {bp.device.type for bp in bt.block_plans.values()} == {"cpu"}
    if not torch.cuda.is_available():
        return
    wl.model.to("cuda")
    with torch.no_grad():
        outs = [wl.forward(bt, t) for t in mb]
        assert outs[0][0].value().device.type == "cuda"
    assert {bp.device.type for bp in bt.block_plans.values()} == {"cuda"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_no_tensor_is_left_on_the_cpu_when_the_model_is_elsewhere(name):
    # torch's "meta" device computes shapes only and refuses to mix with CPU tensors: any arena, index or constant
    # the executor created on the CPU instead of the model's device raises here, without a GPU
    wl = make_workload(name, hidden=8)
    wl.model.to("meta")
    for p in wl.model.params.values():
        p.tensor.requires_grad_(True)
    bt = Batcher(wl.model)
    mb = wl.minibatch(random.Random(0), 4)
    with torch.no_grad():
        outs = [o for t in mb for o in wl.forward(bt, t)]
        assert {o.value().device.type for o in outs} == {"meta"}
    outs = [o for t in mb for o in wl.forward(bt, t)]  # the differentiable path
    loss = torch.stack([o.value() for o in outs]).sum()
    loss.backward()
    assert all(p.tensor.grad is None or p.tensor.grad.device.type == "meta" for p in wl.model.params.values())
