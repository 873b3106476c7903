"""Host-side cost of an LSP layer: operator dispatches per trainable linear per step against native fine-tuning
(counts, not times: deterministic), and the dense-vs-CSR projector products and C-side finiteness check that keep
them low."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from offload_trainer.cpu_adam import CPUAdam  # noqa: E402
from offload_trainer.dispatch import measure, summary_lines, top_level_aten  # noqa: E402
from offload_trainer.lsp_linear import choose_dense, make_lsp_linear  # noqa: E402

TINY = {"source": "llama", "hidden": 32, "intermediate": 64, "layers": 1, "heads": 2}


@pytest.mark.parametrize("proj_mode", ["dense", "csr"])
def test_lsp_dispatches_per_linear_at_most_1_3x_native(proj_mode):
    r = measure(model=TINY, batch=2, seq=16, d=8, r=2, warmup=1, steps=2, timing_steps=0, proj_mode=proj_mode,
                variants=("full_ft", "lsp_overlap", "lsp_sync"))
    v = r["variants"]
    assert all(x["trainable_linears"] == 7 for x in v.values())
    # the overlapped schedule's host jobs are counted (run inline while profiled): the same operators as synchronous
    assert v["lsp_overlap"]["dispatches_per_linear"] == v["lsp_sync"]["dispatches_per_linear"]
    assert v["lsp_overlap"]["profiled_threads"] == 1
    assert v["lsp_sync"]["dense_projections"] == (7 if proj_mode == "dense" else 0)
    assert r["host_dispatch_ratio_lsp_vs_native"] <= 1.3, summary_lines(r)
    assert "Adam(fused=True" in v["full_ft"]["optimizer"]


def test_counts_are_repeatable_and_identical_for_dense_and_csr():
    kw = dict(model=TINY, batch=2, seq=16, d=8, r=2, warmup=1, steps=1, timing_steps=0, variants=("lsp_sync",))
    a = measure(proj_mode="dense", **kw)["variants"]["lsp_sync"]["dispatches_per_linear"]
    b = measure(proj_mode="csr", **kw)["variants"]["lsp_sync"]["dispatches_per_linear"]
    c = measure(proj_mode="csr", **kw)["variants"]["lsp_sync"]["dispatches_per_linear"]
    assert a == b == c


def test_top_level_counts_nested_operators_once():
    from torch.profiler import ProfilerActivity, profile

    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.linear(x, w)  # aten::linear → aten::t, aten::matmul → aten::mm, ...
        x.add_(1)
    top = [e.name for e in top_level_aten(prof.events())]
    assert top == ["aten::linear", "aten::add_"]


def test_dense_and_csr_products_agree():
    torch.manual_seed(0)
    W, b = torch.randn(48, 40), torch.randn(48)
    x = torch.randn(2, 5, 40, requires_grad=True)
    dy = torch.randn(2, 5, 48)
    delta = torch.randn(8, 8)
    out = {}
    for mode in ("dense", "csr"):
        lin = make_lsp_linear(W, b, 8, 2, weight_dtype=torch.float32, proj_mode=mode)
        x.grad = None
        lin(x).backward(dy)
        g = lin.take_grad()
        lin.apply_update(delta, 0.1)
        out[mode] = (g, x.grad.clone(), lin.weight.detach().clone(), lin.dense_proj)
        ref = lin.P.dense().t() @ (dy.reshape(-1, 48).t() @ x.detach().reshape(-1, 40)) @ lin.Q.dense()
        assert torch.allclose(g, ref, atol=1e-4)
        w_ref = W - 0.1 * lin.P.dense() @ delta @ lin.Q.dense().t()
        assert torch.allclose(lin.weight, w_ref, atol=1e-5)
    assert out["dense"][3] is True and out["csr"][3] is False
    for a, b2 in zip(out["dense"][:3], out["csr"][:3]):
        assert torch.allclose(a, b2, atol=1e-5)


def test_auto_mode_keeps_csr_when_dense_forms_exceed_the_memory_cap():
    # bf16 weight 64×48 (6 KiB); dense P and Q in fp32 would take (64 + 48)·32·4 = 14 KiB
    lin = make_lsp_linear(torch.randn(64, 48), None, 32, 2, weight_dtype=torch.bfloat16, proj_mode="auto")
    assert choose_dense(lin, 16) is False and "memory cap" in lin.proj_timings["reason"]
    # within the cap the choice is a measurement (either answer is valid); timings are recorded
    lin = make_lsp_linear(torch.randn(256, 256), None, 8, 2, weight_dtype=torch.float32, proj_mode="auto")
    lin(torch.randn(1, 16, 256, requires_grad=True)).sum().backward()
    assert lin.dense_proj in (True, False) and set(lin.proj_timings) == {"dense", "csr"}


@pytest.mark.parametrize("kernel", [True, False])
def test_cpu_adam_finiteness_check_changes_nothing_on_nan(kernel):
    adam = CPUAdam(threads=1, use_kernel=kernel)
    n = 300
    m, v, out = torch.ones(n), torch.ones(n), torch.zeros(n)
    g = torch.randn(n)
    g[7] = float("nan")
    assert adam.delta(g, m, v, out, 1, check_finite=True) is False
    assert (m == 1).all() and (v == 1).all() and (out == 0).all()
    g[7] = float("inf")
    assert adam.delta(g, m, v, out, 1, check_finite=True) is False
    g[7] = 0.0
    assert adam.delta(g, m, v, out, 1, check_finite=True) is True
    assert not torch.equal(m, torch.ones(n)) and torch.isfinite(out).all()
    adam.close()
