"""Generated kernels against PyTorch: every benchmark shape at reduced size, random small chains, odd sizes."""
import pytest
import torch
from chain_fuser.kernel import build_kernel, random_inputs, reference
from chain_fuser.planner import plan_chain
from chain_fuser.spec import ConvChain, GemmChain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("tvm")


def check(spec, fused=True, rank=0, rtol=2e-4):
    plans = plan_chain(spec, top_k=rank + 1)
    k = build_kernel(spec, plans[min(rank, len(plans) - 1)], fused, use_cache=False)
    ins = random_inputs(spec, seed=1)
    got, ref = k(*ins), reference(spec, *ins)
    assert got.shape == ref.shape
    scale = float(ref.abs().max()) + 1e-6
    err = float((got - ref).abs().max()) / scale
    assert err < rtol, f"{spec.key}: relative error {err:.3g}"
    return k


def _reduced(spec):
    """A benchmark shape at test size: batch <= 2, M and L / 16 (208 -> 13: odd sizes stay odd), N and K kept;
    convs: channels / 16, feature maps 9x10. The structure (glue, layouts, 3x3 vs 1x1) is kept."""
    from dataclasses import replace

    if isinstance(spec, GemmChain):
        return replace(spec, batch=min(spec.batch, 2), M=max(1, spec.M // 16), L=max(1, spec.L // 16))
    return replace(spec, C=max(2, spec.C // 16), K1=max(2, spec.K1 // 16), K2=max(2, spec.K2 // 16), H=9, W=10)


def _bench_shapes():
    from chain_fuser.bench import shapes

    seen, out = set(), []
    for it in shapes("small"):
        r = _reduced(it["spec"])
        if r.key not in seen:
            seen.add(r.key)
            # conv shapes compile slowest: two run by default, all with -m slow
            slow = isinstance(r, ConvChain) and it["name"] not in ("YOLO-2", "ResNet-50-3x3-3x3")
            out.append(pytest.param(r, id=it["name"], marks=[pytest.mark.slow] if slow else []))
    return out


@pytest.mark.parametrize("spec", _bench_shapes())
def test_every_benchmark_shape_at_reduced_size(spec):
    check(spec)


def test_fused_and_unfused_same_micro_kernel_agree():
    spec = GemmChain(2, 48, 32, 16, 40, glue="relu")
    a = check(spec, fused=True)
    b = check(spec, fused=False)
    assert a.plan.micro == b.plan.micro


@pytest.mark.parametrize("spec", [GemmChain(2, 64, 64, 64, 96, glue="softmax", scale=0.125),
                                  GemmChain(1, 37, 20, 16, 45, glue="softmax", scale=0.3),
                                  GemmChain(1, 33, 17, 9, 50, glue="gelu")])
def test_attention_and_glue(spec):
    check(spec)


def test_odd_sizes_196_49_are_padded_and_sliced():
    k = check(GemmChain(1, 49, 24, 16, 196, glue="relu"))
    assert k.plan.micro.mr >= 1
    out = k(*random_inputs(k.spec))
    assert tuple(out.shape) == (1, 49, 24)


def test_several_block_orders_are_realised_correctly():
    spec = GemmChain(1, 64, 32, 24, 96)
    plans = plan_chain(spec, top_k=4)
    from dataclasses import replace

    base = plans[0]
    for order in (("l", "m", "n", "k"), ("m", "n", "l", "k"), ("k", "m", "l", "n")):
        lp = replace(base.fused, order=order, tiles={"m": 16, "l": 32, "k": 8, "n": 32, "b": 1})
        levels = tuple(lp if x.level == base.fusion_level else x for x in base.levels)
        p = replace(base, levels=levels)
        k = build_kernel(spec, p, True, use_cache=False)
        ins = random_inputs(spec)
        torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=2e-4, atol=2e-4)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 2), M=st.integers(1, 40), N=st.integers(1, 40), K=st.integers(1, 24), L=st.integers(1, 40),
       glue=st.sampled_from(["none", "relu", "softmax"]))
def test_random_small_chains(b, M, N, K, L, glue):
    check(GemmChain(b, M, N, K, L, glue=glue, scale=0.5 if glue == "softmax" else 1.0))


@pytest.mark.parametrize("spec", [ConvChain(1, 8, 10, 9, 16, 3, 3, 12, 1, 1, glue="relu"),
                                  ConvChain(2, 3, 9, 7, 20, 3, 3, 17, 3, 3, bias1=True, bias2=True, glue="relu")])
def test_conv_chains(spec):
    check(spec)


def test_conv_unfused_variant():
    check(ConvChain(1, 4, 6, 6, 8, 3, 3, 8, 3, 3), fused=False)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(8, 512, 64, 64, 512), (16, 208, 80, 80, 208), (1, 1024, 64, 64, 512)])
def test_reference_gemm_chains_full_size(shape):
    check(GemmChain(*shape))


@pytest.mark.slow
def test_attention_full_size():
    check(GemmChain(2, 2048, 64, 64, 2048, glue="softmax", scale=0.125, bt=True))


def _with_order(spec, order, tiles):
    from dataclasses import replace

    base = plan_chain(spec, top_k=1)[0]
    lp = replace(base.fused, order=order, tiles=tiles)
    return replace(base, levels=tuple(lp if x.level == base.fusion_level else x for x in base.levels))


@pytest.mark.parametrize("spec", [GemmChain(2, 40, 24, 16, 100, glue="softmax", scale=0.2, bt=True),
                                  GemmChain(1, 30, 64, 64, 256, glue="softmax", scale=0.125)])
def test_online_softmax_attention_with_l_tiled(spec):
    # l in the fused prefix: the scores exist one Tm×Tl block at a time; blocks are rescaled and combined
    p = _with_order(spec, ("m", "l", "k", "n"), {"m": 16, "l": 32, "k": spec.K, "n": spec.N, "b": 1})
    k = build_kernel(spec, p, True, use_cache=False)
    ins = random_inputs(spec)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=2e-4, atol=2e-5)


def test_mlp_spec_with_transposed_weights_and_biases():
    check(GemmChain(1, 37, 20, 12, 45, glue="relu", bt=True, dt=True, bias1=True, bias2=True))


@pytest.mark.parametrize("spec", [GemmChain(1, 64, 32, 24, 96), GemmChain(1, 48, 20, 16, 45, glue="relu", bias1=True),
                                  GemmChain(3, 32, 16, 8, 40, glue="gelu")])
def test_single_batch_chains_pack_per_thread(spec, monkeypatch):
    """With fewer batches than threads (or a remainder), each thread packs B and D for itself inside its parallel
    unit; the kernel stays equal to PyTorch. Whole batches per thread need no per-thread copy."""
    from chain_fuser.codegen import _pack_per_thread, _tiles, kernel_shape
    from chain_fuser.kernel import _schedule

    import shared_ir.hostinfo

    monkeypatch.setattr(shared_ir.hostinfo, "num_cores", lambda: 2)
    plan = plan_chain(spec, top_k=1)[0]
    ks = kernel_shape(spec, plan.micro)
    order, T = _tiles(spec, plan, ks)
    threads = _pack_per_thread(spec, ks, order, T, True)
    units = ks.batch * -(-ks.Mp // T["m"])
    m_leads = [d for d in order if d in "mnl"][0] == "m"
    assert threads == (2 if m_leads and units % 2 == 0 else 0)
    assert _pack_per_thread(spec, ks, order, T, False) == 0  # the unfused variant keeps its own loops
    text = _schedule(spec, plan, True).script()
    if threads:
        assert "T.parallel(2)" in text
    check(spec)
    if threads:  # the same chain with two batches: one per thread, no per-thread copy needed
        from dataclasses import replace

        two = replace(spec, batch=2)
        assert _pack_per_thread(two, kernel_shape(two, plan.micro), order, T, True) == 0


@pytest.mark.parametrize("spec", [GemmChain(4, 32, 16, 8, 40), GemmChain(2, 24, 16, 16, 45, glue="relu"),
                                  GemmChain(2, 1024, 16, 16, 1024)])
def test_batched_chains_pack_each_batch_in_the_parallel_iteration_that_computes_it(spec, monkeypatch):
    """When an iteration of the parallel loop is one whole batch, B and D are packed inside it (no packing loop of
    their own: one parallel loop in the kernel); else (m tiled under the batch) in their own parallel loop. Equal to
    PyTorch either way."""
    from chain_fuser.codegen import _pack_per_batch, _tiles, kernel_shape
    from chain_fuser.kernel import _schedule

    import shared_ir.hostinfo

    monkeypatch.setattr(shared_ir.hostinfo, "num_cores", lambda: 2)
    plan = plan_chain(spec, top_k=1)[0]
    ks = kernel_shape(spec, plan.micro)
    order, T = _tiles(spec, plan, ks)
    per_batch = _pack_per_batch(spec, ks, order, T, True)
    assert per_batch == ([d for d in order if d in "mnl"][0] != "m" or T["m"] >= ks.Mp)
    assert not _pack_per_batch(spec, ks, order, T, False)  # the unfused variant keeps its own loops
    assert _schedule(spec, plan, True).script().count("T.parallel(") == (1 if per_batch else 3)
    check(spec)


def test_single_image_conv_chain_packs_per_thread(monkeypatch):
    """One image, an even number of spatial tiles: each thread pads its rows of the input and packs both weights
    inside its parallel unit; the result equals PyTorch's. Two images (one per thread) keep the shared loops."""
    from chain_fuser.conv import _pack_per_thread, _tiles, conv_kernel_shape
    from chain_fuser.kernel import _schedule

    import shared_ir.hostinfo

    monkeypatch.setattr(shared_ir.hostinfo, "num_cores", lambda: 2)
    spec = ConvChain(1, 8, 12, 10, 16, 3, 3, 12, 3, 3, glue="relu", bias1=True)
    plan = plan_chain(spec, top_k=1)[0]
    ks = conv_kernel_shape(spec, plan)
    T = dict(_tiles(spec, plan, ks), p=6)  # two row tiles
    monkeypatch.setattr("chain_fuser.conv._tiles", lambda *a: T)
    assert _pack_per_thread(ks, T, spec) == 2
    assert "T.parallel(2)" in _schedule(spec, plan, True).script()
    k = build_kernel(spec, plan, True, use_cache=False)
    ins = random_inputs(spec, seed=1)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=2e-4, atol=2e-4)
    from dataclasses import replace

    two = replace(spec, N=2)
    assert _pack_per_thread(conv_kernel_shape(two, plan), T, two) == 0


def test_attention_whole_score_rows_of_an_odd_length_stay_whole_after_padding():
    from chain_fuser.codegen import _fit_tile, kernel_shape
    from chain_fuser.planner import realised

    assert _fit_tile(208, 197, 16) == 16 and _fit_tile(208, 80, 16) == 16 and _fit_tile(512, 200, 16) == 128
    # ViT-B attention's 197 tokens (padded to whole panels): a plan with whole score rows keeps them whole (it was
    # realised as 13 blocks of 16 columns, each with its own max, sum and rescaled partial output); rows (m) keep
    # the dividing rule; a chain without softmax computes whole vectors only (Lv = 208 < Lp = 224: a narrower last
    # block), and then its l is one tile
    spec = GemmChain(2, 197, 64, 64, 197, glue="softmax", scale=0.125, bt=True)
    # a wide top-k: whether whole rows rank in the first four depends on the host's caches and FMA rate
    whole = [p for p in plan_chain(spec, top_k=16) if p.fused.tiles["l"] >= 197]
    assert whole
    ks = kernel_shape(spec, whole[0].micro)
    _, T = realised(spec, whole[0].fused, whole[0].micro)
    assert T["l"] == ks.Lp > 197 and T["m"] == _fit_tile(ks.Mp, whole[0].fused.tiles["m"], ks.mr)
    plain = GemmChain(2, 197, 64, 64, 197)
    p = [p for p in plan_chain(plain, top_k=4) if p.fused.tiles.get("l", 0) >= 197]
    assert p
    ksp = kernel_shape(plain, p[0].micro)
    T = realised(plain, p[0].fused, p[0].micro)[1]
    assert T["l"] == (ksp.Lv if ksp.l_tail else _fit_tile(ksp.Lp, p[0].fused.tiles["l"], ksp.nr))
    from chain_fuser import hw

    lanes = hw.vector_lanes()  # 197 columns padded to whole vectors: 208 with 16 lanes, 200 with 8
    assert ks.Lv == ks.Lp and (ksp.Lv, ksp.Nv) == (-(-197 // lanes) * lanes, 64)
    ins = random_inputs(spec)
    k = build_kernel(spec, whole[0], use_cache=False)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("case", ["l_tail", "n_tail", "both_glue", "all_tail"])
def test_narrower_last_blocks(case, fused):
    # columns that end inside a two-vector panel: the last block is one vector wide (kernel_shape's Lv/Nv), GEMM 2
    # reduces over Lv only, and the output is Nv wide; fused and unfused, with an epilogue and a transposed D
    from chain_fuser import hw
    from chain_fuser.codegen import kernel_shape
    from chain_fuser.model import MicroKernel

    v = hw.vector_lanes()
    mk = MicroKernel(4, 2 * v, v, hw.isa())
    spec = {"l_tail": GemmChain(2, 12, 2 * v, 8, 3 * v),
            "n_tail": GemmChain(2, 12, 3 * v, 8, 4 * v),
            "both_glue": GemmChain(2, 10, 3 * v - 3, 8, 5 * v - 1, glue="gelu", bias1=True, bias2=True, dt=True),
            "all_tail": GemmChain(1, 8, v - 2, 8, v)}[case]
    ks = kernel_shape(spec, mk)
    want = {"l_tail": (v, 0), "n_tail": (0, v), "both_glue": (v, v), "all_tail": (v, v)}[case]
    assert (ks.l_tail, ks.n_tail) == want and ks.Lv % v == 0 and ks.Nv % v == 0
    plan = plan_chain(spec, top_k=1, micro=mk)[0]
    k = build_kernel(spec, plan, fused, use_cache=False)
    ins = random_inputs(spec, seed=2)
    got, ref = k(*ins), reference(spec, *ins)
    torch.testing.assert_close(got, ref, rtol=2e-4, atol=2e-4 * float(ref.abs().max()))
    out = torch.empty_like(ref)  # into a given output tensor too (the kernel's own buffer is Nv wide)
    torch.testing.assert_close(k(*ins, out=out), ref, rtol=2e-4, atol=2e-4 * float(ref.abs().max()))


def test_padded_panels_switch(monkeypatch):
    # codegen.TAILS = False (the A/B switch) builds the whole-panel kernels: correct too, cached under their own key,
    # and a kernel keeps the shapes it was built with when the switch changes afterwards
    from chain_fuser import codegen, hw
    from chain_fuser.kernel import _kernel_key
    from chain_fuser.model import MicroKernel

    v = hw.vector_lanes()
    mk = MicroKernel(4, 2 * v, v, hw.isa())
    spec = GemmChain(2, 12, 3 * v, 8, 3 * v)
    plan = plan_chain(spec, top_k=1, micro=mk)[0]
    tails_key = _kernel_key(spec, plan, True)
    monkeypatch.setattr(codegen, "TAILS", False)
    ks = codegen.kernel_shape(spec, mk)
    assert (ks.Lv, ks.Nv, ks.l_tail, ks.n_tail) == (ks.Lp, ks.Np, 0, 0) == (4 * v, 4 * v, 0, 0)
    assert _kernel_key(spec, plan, True) != tails_key
    k = build_kernel(spec, plan, True, use_cache=False)
    monkeypatch.setattr(codegen, "TAILS", True)
    ins = random_inputs(spec, seed=3)
    ref = reference(spec, *ins)
    torch.testing.assert_close(k(*ins), ref, rtol=2e-4, atol=2e-4 * float(ref.abs().max()))
