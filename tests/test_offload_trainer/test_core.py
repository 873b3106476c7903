"""Projectors, the compressed-gradient linear, the CPU Adam and the layer-wise schedule."""
import pytest

torch = pytest.importorskip("torch")

from offload_trainer.cpu_adam import CPUAdam  # noqa: E402
from offload_trainer.errors import ModelError  # noqa: E402
from offload_trainer.lsp_linear import make_lsp_linear  # noqa: E402
from offload_trainer.projector import SparseProjector, estimation_error, fit_projectors, reproject_moments  # noqa: E402


def test_projector_is_d_r_sparse_and_compact():
    P = SparseProjector(300, 32, 4, seed=3)
    D = P.dense()
    assert D.shape == (300, 32)
    assert ((D != 0).sum(1) == 4).all()  # exactly r non-zeros per row
    assert P.nbytes == 300 * 4 * (4 + 4)  # int32 indices + fp32 values, nothing m×d
    # E[PᵀP] = I: diagonal ≈ 1
    assert abs(torch.diagonal(D.t() @ D).mean().item() - 1.0) < 0.05
    x = torch.randn(7, 300)
    assert torch.allclose(P.right(x), x @ D, atol=1e-5)
    y = torch.randn(300, 5)
    assert torch.allclose(P.t_matmul(y), D.t() @ y, atol=1e-5)
    z = torch.randn(32, 6)
    assert torch.allclose(P.matmul(z), D @ z, atol=1e-5)


def test_compressed_gradient_equals_explicit():
    torch.manual_seed(0)
    W, b = torch.randn(96, 80), torch.randn(96)
    lin = make_lsp_linear(W, b, 16, 4, weight_dtype=torch.float32)
    x = torch.randn(3, 10, 80, requires_grad=True)
    y = lin(x)
    ref_y = torch.nn.functional.linear(x, W, b)
    assert torch.allclose(y, ref_y, atol=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = lin.take_grad()
    gw = dy.reshape(-1, 96).t() @ x.detach().reshape(-1, 80)
    ref = lin.P.dense().t() @ gw @ lin.Q.dense()
    assert ((g - ref).norm() / ref.norm()).item() < 1e-5
    assert torch.allclose(x.grad, dy @ W, atol=1e-4)  # the input gradient is the ordinary one
    assert lin.weight.grad is None and not lin.weight.requires_grad


def _max_alloc_bytes(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0), default=0)


def test_backward_never_materialises_weight_gradient():
    torch.manual_seed(0)
    m = n = 1024
    W = torch.randn(m, n)
    x = torch.randn(16, n, requires_grad=True)
    mn_bytes = m * n * 4
    lin = make_lsp_linear(W, None, 8, 2, weight_dtype=torch.float32)
    y = lin(x)
    dy = torch.randn_like(y)
    peak = _max_alloc_bytes(lambda: y.backward(dy))
    assert lin.take_grad().shape == (8, 8)
    assert peak < mn_bytes / 4, f"an allocation of {peak} B in backward (∇W would be {mn_bytes} B)"
    # the detector does see a dense ∇W (so the check above can fail)
    ref = torch.nn.Linear(n, m, bias=False)
    y2 = ref(x)
    assert _max_alloc_bytes(lambda: y2.backward(dy)) >= mn_bytes


def test_d_larger_than_a_dimension_names_field_and_layer():
    with pytest.raises(ModelError, match=r"lsp\.d.*in_features = 40.*'blk\.mlp'"):
        make_lsp_linear(torch.randn(96, 40), None, 64, 4, name="blk.mlp")


def test_update_is_w_minus_eta_p_delta_qt_in_bf16():
    torch.manual_seed(1)
    W = torch.randn(64, 48)
    lin = make_lsp_linear(W, None, 8, 2)
    assert lin.weight.dtype == torch.bfloat16
    delta = torch.randn(8, 8)
    w0 = lin.weight.float().clone()
    lin.apply_update(delta, 0.1, chunk_elems=100)  # several row chunks
    ref = w0 - 0.1 * lin.P.dense() @ delta @ lin.Q.dense().t()
    assert torch.allclose(lin.weight.float(), ref, atol=0.05)


def test_fit_lowers_error_on_low_rank_gradient_and_reprojects_moments():
    torch.manual_seed(0)
    G = torch.randn(120, 6) @ torch.randn(6, 90) + 0.05 * torch.randn(120, 90)
    P, Q = SparseProjector(120, 16, 4, seed=1), SparseProjector(90, 16, 4, seed=2)
    e0 = estimation_error(P, Q, G)
    P0, Q0 = P.clone(), Q.clone()
    before, after = fit_projectors(P, Q, [G], steps=60, lr=0.1)
    assert abs(before - e0) < 1e-4
    assert after < 0.7 * before
    assert abs(estimation_error(P, Q, G) - after) < 1e-3
    m, v = torch.randn(16, 16), torch.rand(16, 16)
    A = P.dense().t() @ P0.dense()
    B = Q0.dense().t() @ Q.dense()
    m2, v2 = m.clone(), v.clone()
    reproject_moments(m2, v2, P, P0, Q, Q0)
    assert torch.allclose(m2, A @ m @ B, atol=1e-4)
    assert torch.allclose(v2, (A * A) @ v @ (B * B), atol=1e-4)
    assert (v2 >= 0).all()


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("n", [200_003, 200_000])  # 200_000: multiple of 16, the AVX-512 streaming-store path
def test_cpu_adam_matches_reference(kernel, n):
    torch.manual_seed(0)
    adam = CPUAdam((0.9, 0.99), 1e-8, threads=2, use_kernel=kernel)
    m, v, out = torch.zeros(n), torch.zeros(n), torch.empty(n)
    rm, rv = torch.zeros(n), torch.zeros(n)
    for t in range(1, 4):
        g = torch.randn(n)
        adam.delta(g, m, v, out, t)
        rm = 0.9 * rm + 0.1 * g
        rv = 0.99 * rv + 0.01 * g * g
        ref = (rm / (1 - 0.9 ** t)) / ((rv / (1 - 0.99 ** t)).sqrt() + 1e-8)
        assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    # full Adam with a parameter update equals torch.optim.Adam
    p = torch.randn(n)
    tp = torch.nn.Parameter(p.clone())
    opt = torch.optim.Adam([tp], lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    m, v = torch.zeros(n), torch.zeros(n)
    for t in range(1, 4):
        g = torch.randn(n)
        adam.param(p, g, m, v, t, 1e-2)
        tp.grad = g.clone()
        opt.step()
    assert torch.allclose(p, tp.detach(), atol=1e-5)
    adam.close()


def test_cpu_adam_kernel_built_for_the_avx2_cap_matches_the_reference(tmp_path):
    """CHAIN_FUSER_ISA=avx2 builds the kernel without AVX-512 (its own cache entry) and it computes the same Δ."""
    import os
    import subprocess
    import sys

    from shared_ir import hostinfo

    if hostinfo.detected_isa() not in ("avx2", "avx512"):
        pytest.skip("needs an x86 CPU with AVX2")
    code = ("import torch; from offload_trainer.cpu_adam import CPUAdam, kernel_info; n = 4096; "
            "torch.manual_seed(0); g = torch.randn(n); m, v, out = torch.zeros(n), torch.zeros(n), torch.empty(n); "
            "a = CPUAdam((0.9, 0.99), 1e-8, threads=1); a.delta(g, m, v, out, 1); "
            "ref = (0.1 * g / 0.1) / ((0.01 * g * g / 0.01).sqrt() + 1e-8); "
            "print(a.lib is not None, torch.allclose(out, ref, rtol=1e-4, atol=1e-5), "
            "' '.join(kernel_info()['flags']))")
    env = dict(os.environ, CHAIN_FUSER_ISA="avx2", OFFLOAD_TRAINER_CACHE=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    kernel, same, flags = r.stdout.strip().split(" ", 2)
    assert kernel == "True" and same == "True"
    assert ("-mno-avx512f" in flags.split()) == (hostinfo.detected_isa() == "avx512")


def _tiny_llama(ckpt: bool = False, device: str = "cpu"):
    from offload_trainer.config import ModelConfig
    from offload_trainer.lsp_linear import wrap_model
    from offload_trainer.models import build_model

    m, _ = build_model(ModelConfig(source="llama", hidden=32, intermediate=64, layers=2, heads=2), seed=0)
    m.to(device)  # before wrapping: the projectors live where the weights do
    layers = wrap_model(m, ModelConfig().target_modules, 8, 2, seed=0, weight_dtype=torch.float32)
    if ckpt:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.config.use_cache = False
    m.train()
    return m, layers


def _train(overlap: bool, steps: int, ckpt: bool = False, accum: int = 1, device: str = "cpu"):
    from offload_trainer.schedule import LayerwiseScheduler

    m, layers = _tiny_llama(ckpt, device)
    s = LayerwiseScheduler(layers, 5e-2, overlap=overlap, trace=True)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        for k in range(accum):
            ids = torch.randint(0, 259, (2, 12), generator=g).to(device)
            s.begin_step(final_micro_batch=(k == accum - 1))
            out = m(input_ids=ids, labels=ids)
            out.loss.backward()
            losses.append(out.loss.item())
        s.end_step()
    s.flush()
    w = [lay.weight.detach().clone() for lay in layers]
    trace = list(s.trace)
    s.close()
    return w, losses, trace


def test_overlapped_schedule_equals_synchronous_reference():
    wo, lo, tr = _train(True, 4)
    ws, ls, _ = _train(False, 4)
    assert lo == ls  # same losses: no update was stale at any forward
    for a, b in zip(wo, ws):
        assert torch.equal(a, b)
    w0, _, _ = _train(True, 0)
    assert any(not torch.equal(a, b) for a, b in zip(wo, w0))  # training did change the weights
    # tasks are per layer and interleave with the backward: d2h of a shallower layer comes after the update of a
    # deeper one has been scheduled, and every layer gets d2h → process → h2d → update in order
    per = {}
    for task, i in tr:
        per.setdefault(i, []).append(task)
    for i, tasks in per.items():
        assert tasks[:4] == ["d2h", "process", "h2d", "update"], (i, tasks[:4])
    first_d2h = [i for t, i in tr if t == "d2h"][:3]
    assert first_d2h == sorted(first_d2h, reverse=True)  # deepest layer first (backward order)


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("ckpt,accum", [(False, 1), (True, 2)])
@pytest.mark.gpu
@cuda_only
def test_on_cuda_the_overlapped_schedule_equals_the_synchronous_one(ckpt, accum):
    """The CUDA path (streams, events, pinned buffers): the overlapped schedule gives the synchronous one's weights
    and losses, every layer's tasks in order, and the same losses as the CPU run."""
    wo, lo, tr = _train(True, 3, ckpt=ckpt, accum=accum, device="cuda")
    ws, ls, _ = _train(False, 3, ckpt=ckpt, accum=accum, device="cuda")
    assert all(w.is_cuda for w in wo)
    assert lo == pytest.approx(ls, rel=1e-6)
    for a, b in zip(wo, ws):
        assert torch.allclose(a, b, atol=1e-6)
    per: dict = {}
    for task, i in tr:
        per.setdefault(i, []).append(task)
    assert all(tasks[:4] == ["d2h", "process", "h2d", "update"] for tasks in per.values())
    _, lc, _ = _train(False, 3, ckpt=ckpt, accum=accum)
    assert lo[:accum] == pytest.approx(lc[:accum], rel=1e-5)  # before the first update: the same model and data
    # after it, looser: Adam's first steps are ±lr, so a gradient near 0 can flip an element between the devices
    assert lo == pytest.approx(lc, rel=2e-2)


@pytest.mark.gpu
@cuda_only
def test_on_cuda_the_compressed_gradient_equals_the_explicit_one():
    torch.manual_seed(0)
    W, b = torch.randn(96, 80, device="cuda"), torch.randn(96, device="cuda")
    lin = make_lsp_linear(W, b, 16, 4, weight_dtype=torch.float32)
    x = torch.randn(3, 10, 80, device="cuda", requires_grad=True)
    y = lin(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    g = lin.take_grad()
    gw = dy.reshape(-1, 96).t() @ x.detach().reshape(-1, 80)
    ref = lin.P.dense().t() @ gw @ lin.Q.dense()
    assert g.is_cuda and ((g - ref).norm() / ref.norm()).item() < 1e-4


def test_schedule_with_checkpointing_and_accumulation():
    wo, lo, _ = _train(True, 3, ckpt=True, accum=2)
    ws, ls, _ = _train(False, 3, ckpt=False, accum=2)
    assert lo == pytest.approx(ls, rel=1e-6)
    for a, b in zip(wo, ws):
        assert torch.allclose(a, b, atol=1e-6)


def test_trace_form_error_matches_explicit_and_fit_generalises_per_module():
    from offload_trainer.projector import relative_error_sq

    torch.manual_seed(0)
    G = torch.randn(100, 5) @ torch.randn(5, 70) + 0.1 * torch.randn(100, 70)
    P, Q = SparseProjector(100, 20, 3, seed=3), SparseProjector(70, 20, 3, seed=4)
    e = relative_error_sq(P, Q, P.val, Q.val, G / G.norm()).sqrt().item()
    assert abs(e - estimation_error(P, Q, G)) < 1e-4
    # a fit on one noisy draw of a low-rank gradient lowers the error on another draw (held out)
    U, V = torch.randn(100, 4), torch.randn(4, 70)

    def draw():
        return U @ V + 0.2 * torch.randn(100, 70)

    calib, held = draw(), draw()
    r0 = estimation_error(P, Q, held)
    fit_projectors(P, Q, [calib], steps=80, lr=0.1)
    assert estimation_error(P, Q, held) < 0.7 * r0
