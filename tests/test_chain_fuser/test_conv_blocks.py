"""Conv register blocks that divide the halo'd widths, and the unfused kernel as a measured candidate."""
import pytest
import torch
from chain_fuser.conv import _block_rows, conv_kernel_shape
from chain_fuser.kernel import random_inputs, reference, tune
from chain_fuser.planner import plan_chain, unfused_competitive
from chain_fuser.spec import ConvChain, GemmChain

from .test_codegen import check

pytest.importorskip("tvm")


def test_block_rows_divide_the_halo_width():
    # conv1 of a fused 3x3→3x3 tile of 28 columns computes 30: blocks of 10, not 3 predicated blocks of 14
    assert _block_rows(30, 14, 32, 16) == 10
    assert _block_rows(28, 14, 32, 16) == 14  # mr divides: kept
    assert _block_rows(14, 12, 32, 16) == 14  # Inception: 12 + 2 columns in one block of 14
    assert _block_rows(58, 14, 32, 16) == 14  # 58 = 2 x 29: no usable divisor, predicated tail kept
    assert all(30 % _block_rows(30, mr, 32, 16) == 0 for mr in (6, 8, 10, 12, 14))


def test_unfused_intermediate_width_is_whole_blocks():
    spec = ConvChain(1, 4, 12, 30, 32, 3, 3, 32, 3, 3, glue="relu")
    p = plan_chain(spec, top_k=1)[0]
    ks = conv_kernel_shape(spec, p)
    assert ks.Wt % ks.mr == 0 and ks.Wt >= ks.Wp + 2


@pytest.mark.parametrize("fused", [True, False])
def test_conv_3x3_3x3_halo_blocks_correct(fused):
    check(ConvChain(1, 4, 12, 30, 32, 3, 3, 32, 3, 3, glue="relu"), fused=fused)


def test_tune_measures_unfused_candidate(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(tmp_path))
    spec = ConvChain(1, 4, 8, 14, 32, 3, 3, 32, 3, 3, glue="relu")
    k, rep = tune(spec, top_k=2, number=1, repeat=2, include_unfused=True, winograd=())
    fused_flags = [c["fused"] for c in rep.candidates]
    assert fused_flags[-1] is False and all(fused_flags[:-1])
    ms = [c["measured_ms"] for c in rep.candidates]
    assert ms[rep.chosen] == min(ms)  # never slower than our own unfused kernel
    assert k.fused == rep.chosen_fused
    assert rep.best_fused_kernel is not None and rep.best_fused_kernel.fused
    assert rep.unfused_kernel is not None and not rep.unfused_kernel.fused
    assert rep.model_pick_vs_best >= 1.0  # over the fused top K only
    ins = random_inputs(spec)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=1e-4, atol=1e-4)
    k2, rep2 = tune(spec, top_k=2, number=1, repeat=2, include_unfused=True, winograd=())
    assert rep2.from_cache and k2.fused == k.fused and rep2.best_fused_kernel.fused


def test_unfused_not_a_candidate_where_fusion_binds():
    big = GemmChain(1, 4096, 8, 8, 4096)  # 64 MiB intermediate, 8 flops per byte of it: memory bound unfused
    assert not unfused_competitive(big, plan_chain(big, top_k=1)[0])
    conv = ConvChain(1, 64, 56, 56, 64, 3, 3, 64, 3, 3, glue="relu")  # 0.8 MiB intermediate, compute bound
    assert unfused_competitive(conv, plan_chain(conv, top_k=1)[0])


@pytest.mark.parametrize("spec", [ConvChain(1, 8, 9, 12, 16, 3, 3, 32, 1, 1, glue="relu", bias2=True),
                                  ConvChain(2, 5, 7, 10, 16, 3, 3, 64, 3, 3, glue="relu"),
                                  ConvChain(1, 6, 9, 12, 16, 3, 3, 20, 1, 1, glue="relu")])  # 20: a partial panel
@pytest.mark.parametrize("fused", [True, False])
def test_unpack_in_panels_matches_torch_on_ragged_tiles(monkeypatch, spec, fused):
    """The output unpack in (channel panel, row, column block) order with vector stores: correct with a ragged last
    row tile (9 rows in tiles of 4), column tiles that divide the width, biases, and channel counts that are not
    whole panels (left in the plain order). The schedule vectorises the unpack where it can."""
    from chain_fuser.conv import _tiles
    from chain_fuser.kernel import _schedule, build_kernel

    plan = plan_chain(spec, top_k=1)[0]
    ks = conv_kernel_shape(spec, plan)
    T = dict(_tiles(spec, plan, ks), p=4, q=ks.W // 2 if ks.W % 2 == 0 else ks.Wp)
    monkeypatch.setattr("chain_fuser.conv._tiles", lambda *a: T)
    if spec.K2 % plan.micro.nr == 0:
        above = _schedule(spec, plan, fused).script().split('T.sblock("O")')[0].splitlines()
        assert "T.unroll" in above[-3] and "T.vectorized" in above[-2]  # channels unrolled, columns in vectors
    k = build_kernel(spec, plan, fused, use_cache=False)
    ins = random_inputs(spec, seed=2)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=2e-4, atol=2e-4)


def test_tiles_are_whole_rows_before_a_1x1_conv():
    """A 1×1 second conv: the plan's tile area as whole rows (output rows written whole), capped so both stages'
    output tiles take at most a quarter of the level, the count of tiles divisible among the cores. A 3×3 second
    conv keeps the plan's tiles (its halo makes the tile shape a trade-off the model weighs)."""
    from chain_fuser.conv import fit_tiles

    resnet = ConvChain(1, 64, 56, 56, 64, 3, 3, 256, 1, 1, glue="relu")
    # the 19 × 28 plan tile is fitted to 14 × 28 = 7 rows; (64 + 256) channels × 56 × 4 B = 71.7 KB a row: 3 rows
    # fit a quarter of 1 MB, and 56 % 3 != 0 → 2
    assert fit_tiles(resnet, 14, 32, {"p": 19, "q": 28}, 1 << 20, 2) == {"p": 2, "q": 56}
    assert fit_tiles(resnet, 14, 32, {"p": 19, "q": 28}, 4 << 20, 2) == {"p": 7, "q": 56}  # 8 tiles, 4 per core
    assert fit_tiles(resnet, 14, 32, {"p": 19, "q": 28}, 4 << 20, 3) == {"p": 7, "q": 56}  # no count divides by 3
    assert fit_tiles(resnet, 14, 32, {"p": 4, "q": 14}, 32 << 10, 2) == {"p": 1, "q": 56}  # an L1 plan: one row
    three = ConvChain(1, 64, 56, 56, 64, 3, 3, 64, 3, 3, glue="relu")
    assert fit_tiles(three, 14, 32, {"p": 19, "q": 28}, 1 << 20, 2) == {"p": 14, "q": 28}


def test_whole_row_tiles_match_torch(monkeypatch):
    spec = ConvChain(1, 6, 10, 12, 16, 3, 3, 48, 1, 1, glue="relu", bias1=True, bias2=True)
    plan = plan_chain(spec, top_k=1)[0]
    from chain_fuser.conv import _tiles
    from chain_fuser.kernel import build_kernel

    ks = conv_kernel_shape(spec, plan)
    T = _tiles(spec, plan, ks)
    assert T["q"] == ks.Wp and spec.H % T["p"] == 0
    k = build_kernel(spec, plan, True, use_cache=False)
    ins = random_inputs(spec, seed=3)
    torch.testing.assert_close(k(*ins), reference(spec, *ins), rtol=2e-4, atol=2e-4)


def test_unfused_stages_run_row_major_and_packing_splits_panels_by_channel():
    """Unfused: every stage's parallel loop is (image, row, channel panel), so a core computes all channels of its
    rows and the next stage reads rows its own cache holds; the weight packing runs over panels × channels (3 panels
    alone split 2:1 over 2 cores)."""
    import re

    from chain_fuser.kernel import _schedule

    spec = ConvChain(1, 8, 9, 12, 16, 3, 3, 96, 3, 3, glue="relu")
    plan = plan_chain(spec, top_k=1)[0]
    loops = [name for name, _ in re.findall(r"for (\w+) in T.parallel\((\d+)\)", _schedule(spec, plan, False).script())]
    assert loops.count("n_y_ko_fused") == 3 and "n_y_k_0_fused" in loops  # conv1, activation, conv2; the unpack
    assert loops.count("ko_c_fused") == 2  # both weights


@pytest.mark.parametrize("width,bias2,transposed", [(16, False, True), (8, True, True), (24, True, True),
                                                    (7, False, False), (12, True, False)])
@pytest.mark.parametrize("algorithm", ["direct-fused", "direct-unfused", "winograd2"])
def test_unpack_register_transpose_is_exact(width, bias2, transposed, algorithm):
    # the NCHW unpack of conv2's blocked output: a register transpose (shuffles) where the row width is a whole
    # number of 8- or 16-float vectors (with conv2's bias added there), else vector code; the same values either way
    from chain_fuser.conv import schedule_conv_chain
    from chain_fuser.kernel import build_kernel
    from chain_fuser.winograd import plan_for, schedule_winograd_chain

    spec = ConvChain(1, 5, 6, width, 12, 3, 3, 64, 1, 1, glue="relu", bias1=True, bias2=bias2)
    plans = plan_chain(spec, top_k=1)
    if algorithm == "winograd2":
        plan = plan_for(spec, plans)
        mod = schedule_winograd_chain(spec, plan, 2)
    else:
        plan = plans[0]
        mod = schedule_conv_chain(spec, plan, fused=algorithm == "direct-fused")
    assert ("T.Shuffle" in mod.script()) == (transposed and plan.micro.nr % 8 == 0)
    k = build_kernel(spec, plan, fused=algorithm == "direct-fused", use_cache=False,
                     algorithm="winograd2" if algorithm == "winograd2" else "direct")
    ins = random_inputs(spec, seed=3)
    ref = reference(spec, *ins)
    assert float((k(*ins) - ref).abs().max() / ref.abs().max()) < 2e-6


def test_unpack_falls_back_to_vector_code_when_the_transpose_does_not_match(monkeypatch):
    # an intrinsic of the wrong size never matches the marked 8 x 8 blocks: the same loops become vector code
    import chain_fuser.conv as conv
    from chain_fuser.kernel import build_kernel

    spec = ConvChain(1, 5, 6, 8, 12, 3, 3, 64, 1, 1, glue="relu", bias2=True)
    plan = plan_chain(spec, top_k=1)[0]
    real = conv.transpose_intrin
    monkeypatch.setattr(conv, "transpose_intrin", lambda v, bias=False: real(16 if v == 8 else 8, bias))
    assert "T.Shuffle" not in conv.schedule_conv_chain(spec, plan, fused=False).script()
    k = build_kernel(spec, plan, fused=False, use_cache=False)
    ins = random_inputs(spec, seed=3)
    ref = reference(spec, *ins)
    assert float((k(*ins) - ref).abs().max() / ref.abs().max()) < 2e-6
