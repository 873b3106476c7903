"""Search: templates, MCTS (beats random sampling at equal budget, finds the exhaustive optimum on a tiny
space), tasks writing their tables and plots."""

import numpy as np
import pytest
from fusion_perf import (
    TEMPLATES,
    FactorSpace,
    attention,
    compile_tree,
    evaluate,
    gemm_chain,
    load_arch,
    search,
    search_template,
    template,
)
from fusion_perf.mapping import free_variables
from fusion_perf.tasks import attention_dse, conv_chain


def test_templates_search_to_feasible_trees():
    p = attention(4, 64, 16, 64, 16)
    arch = load_arch("edge_accel")
    seen = {}
    for name in TEMPLATES:
        r = search_template(p, arch, name, iterations=15, rollouts=32)
        assert not free_variables(r.tree)
        res = evaluate(p, arch, r.tree)  # feasible: no constraint error
        assert res.cycles == pytest.approx(r.cycles)
        assert res.cycles >= p.points / arch.num_pes  # never faster than the compute bound
        seen[name] = res
    # layer-by-layer sends the intermediates through DRAM; the fused templates never do
    assert seen["layerwise"].level("dram").total("updates") > seen["tileflow"].level("dram").total("updates")
    for name in ("flat_hgran", "flat_rgran", "chimera", "fused", "tileflow"):
        assert all(t not in seen[name].level("dram").tensors for t in ("S", "P")), name


def test_mcts_matches_exhaustive_optimum_on_tiny_space():
    from fusion_perf import OpLeaf, S, Scope, T

    p = gemm_chain(8, 4, 8, 4)
    arch = load_arch("edge_accel")
    tree = T("dram", "m=mr l=lr", Scope("sequential", [
        T("l1", "m=m1 k=k1 l=l1", S("l1", "m=ms l=ls", T("l1", "m=m1r l=l1r k=k1r",
                                                        T("l0", "m=1 l=1 k=1", OpLeaf("GEMM1"))))),
        T("l1", "m=m2 l=l2 n=4", T("l0", "m=1 l=1 n=1", OpLeaf("GEMM2")))]), bypass=["C"])
    c = compile_tree(p, arch, tree)
    fs = FactorSpace(c)
    cands = []

    def rec(i, prefix):
        if i == len(fs.choice_vars):
            cands.append(dict(prefix))
            return
        for v in fs.candidates(fs.choice_vars[i], prefix):
            prefix[fs.choice_vars[i]] = v
            rec(i + 1, prefix)
            del prefix[fs.choice_vars[i]]

    rec(0, {})
    assert 50 < len(cands) < 5000
    X = np.concatenate([fs.complete(np.random.default_rng(0), 1, pr) for pr in cands])
    best = c.evaluate(X, batched=True).cycles.min()
    r = search(p, arch, tree, iterations=150, rollouts=16, seed=0)
    assert r.cycles == pytest.approx(best), (r.cycles, best, len(cands))


def test_mcts_beats_random_at_equal_budget():
    p = attention(8, 128, 32, 128, 32)
    arch = load_arch("edge_accel")
    tree = template(p, arch, "tileflow")
    c = compile_tree(p, arch, tree)
    r = search(p, arch, tree, iterations=40, rollouts=32, seed=1)
    X = FactorSpace(c).complete(np.random.default_rng(1), r.evaluations)
    rnd = c.evaluate(X, batched=True).cycles.min()
    assert r.cycles <= rnd * 1.0001


def test_energy_objective():
    p = gemm_chain(16, 8, 16, 8)
    arch = load_arch("edge_accel")
    tree = template(p, arch, "chimera")
    rc = search(p, arch, tree, "cycles", iterations=30, rollouts=32)
    re_ = search(p, arch, tree, "energy", iterations=30, rollouts=32)
    assert re_.energy_pj <= rc.energy_pj * 1.0001


def test_tasks_write_tables_and_plots(tmp_path):
    s = attention_dse(hardware=None, out_dir=str(tmp_path / "a"), shapes=["ViT-Base/16"], iterations=3, rollouts=16,
                     top_k=2, kicks=0)
    assert set(s) >= {"geomean_speedup_vs_layerwise", "geomean_speedup_vs_flat_hgran", "geomean_speedup_vs_flat_rgran",
                      "geomean_speedup_vs_flat", "best"}
    assert s["reference_1_8x_compares_to"] == "flat_hgran"
    for f in ("attention_dse.csv", "attention_dse_best.csv", "attention_dse.png", "best_ViT-Base_16.yaml"):
        assert (tmp_path / "a" / f).stat().st_size > 0
    rows = (tmp_path / "a" / "attention_dse.csv").read_text().splitlines()
    assert rows[0].startswith("shape,template,cycles") and len(rows) == 1 + len(TEMPLATES)
    best = (tmp_path / "a" / "attention_dse_best.csv").read_text().splitlines()
    assert best[0].endswith("best_structure,evaluations") and "->" in best[1]
    s = conv_chain(hardware="edge_accel", out_dir=str(tmp_path / "c"), shapes=["ResNet50-like"], iterations=3,
                   rollouts=16, templates=["layerwise", "flat"], top_k=2, kicks=0)
    assert (tmp_path / "c" / "conv_chain.csv").exists() and s["best"]
    assert s["geomean_vs_fused_layer"] > 0  # "flat" (old name) is the Fused-Layer structure on conv chains


def test_task_config_errors_name_field():
    from shared_ir.errors import ValidationError

    with pytest.raises(ValidationError) as e:
        attention_dse(out_dir="/tmp/unused", iterations=0)
    assert "task.iterations" in str(e.value)
    with pytest.raises(ValidationError) as e:
        attention_dse(out_dir="/tmp/unused", shapes=["GPT-9"])
    assert "task.shapes[0]" in str(e.value)
    with pytest.raises(ValidationError) as e:
        attention_dse(out_dir="/tmp/unused", kicks=-1)
    assert "task.kicks" in str(e.value)


def test_complete_keeps_extents_and_fanout():
    """The vectorised random completion: every row keeps each op's factor product = extent, spatial draws stay
    within their fan-out budget, and prefix values that no longer divide the rest shrink to what still divides."""
    p = attention(4, 64, 16, 48, 16)
    arch = load_arch("edge_accel")
    for name in TEMPLATES:
        c = compile_tree(p, arch, template(p, arch, name))
        fs = FactorSpace(c)
        rng = np.random.default_rng(0)
        for X in (fs.complete(rng, 400), fs.complete(rng, 50, {v: 3 for v in fs.choice_vars}),
                  fs.complete(rng, 50, {v: 4 for v in fs.choice_vars[: len(fs.choice_vars) // 2]})):
            for o, dl in c.opdim.items():
                for d, gs in dl.items():
                    prod = np.prod(X[:, gs], axis=1) if gs else np.ones(len(X), dtype=np.int64)
                    assert (prod == p.dims[d]).all(), (name, o, d)
            for node, budget in fs.budget0.items():
                gs = [fs.info[v]["gids"][0] for v in fs.vars if fs.info[v].get("node") == node]
                assert (np.prod(X[:, gs], axis=1) <= budget).all(), (name, node)
        assert c.evaluate(fs.complete(rng, 400), batched=True).feasible.any(), name


def test_search_is_deterministic_and_restarts_help_or_tie():
    from fusion_perf import dump_mapping

    p = gemm_chain(32, 16, 32, 16)
    arch = load_arch("edge_accel")
    tree = template(p, arch, "fused")
    a = search(p, arch, tree, iterations=24, rollouts=16, seed=3, restarts=3, top_k=4)
    b = search(p, arch, tree, iterations=24, rollouts=16, seed=3, restarts=3, top_k=4)
    assert a.cycles == b.cycles and dump_mapping(a.tree) == dump_mapping(b.tree) and a.evaluations == b.evaluations
    assert evaluate(p, arch, a.tree).cycles == pytest.approx(a.cycles)


def test_pair_moves_never_worse_than_single_moves():
    from fusion_perf.search import refine

    p = attention(4, 64, 16, 64, 16)
    arch = load_arch("edge_accel")
    c = compile_tree(p, arch, template(p, arch, "chimera"))
    fs = FactorSpace(c)
    X = fs.complete(np.random.default_rng(5), 2000)
    v = c.evaluate(X, batched=True).cycles
    for i in np.argsort(v)[:3]:
        single = refine(c, fs, X[i], "cycles", 30, np.random.default_rng(0), pair_moves=False)
        pair = refine(c, fs, X[i], "cycles", 30, np.random.default_rng(0), pair_moves=True)
        assert pair[0] <= single[0] * (1 + 1e-12) and pair[0] <= v[i]
        # the refined point is a real, feasible mapping with that cost
        assert c.evaluate(pair[1], check=True).cycles == pytest.approx(pair[0])


def test_compare_gives_every_template_the_same_budget():
    from fusion_perf.dse import DSE_SEARCH, compare

    p = attention(4, 64, 16, 64, 16, name="tiny")
    r = compare(p, "edge_accel", ["layerwise", "flat", "fused"], iterations=4, rollouts=8, top_k=2)
    assert r["budget"] == {"iterations": 4, "rollouts": 8, "seed": 0, **DSE_SEARCH, "top_k": 2}
    assert set(r["evaluations_per_template"]) == {"layerwise", "flat", "fused"}
    assert all(n > 0 for n in r["evaluations_per_template"].values())
    assert r["best_structure"] and r["cycles"][r["best"]] == min(r["cycles"].values())


def _root_loops(tree):
    from fusion_perf.mapping import Tile

    out, n = [], tree
    while isinstance(n, Tile):
        out.append((n.kind, [d for d, _ in n.loops]))
        n = n.child
    return out


def test_flat_hgran_shares_only_heads_and_spills_when_a_head_does_not_fit():
    from fusion_perf.search import batch_dims

    arch = load_arch("edge_accel")
    small = attention(4, 64, 16, 64, 16)   # one head's S and P fit one L1 buffer
    big = attention(2, 512, 64, 512, 64)   # 512x512 scores per head: no on-chip level holds them
    assert batch_dims(small) == ["b"]
    # temporal loops above the scope over the heads only; the heads are spread over the buffer instances (TileFlow's
    # map/flat.yaml); the split variant spreads one head's rows instead
    assert _root_loops(template(small, arch, "flat_hgran")) == [("temporal", ["b"]), ("spatial", ["b"])]
    assert _root_loops(template(small, arch, "flat_hgran_split")) == [("temporal", ["b"]), ("spatial", ["m"])]
    assert [d for _, d in _root_loops(template(small, arch, "flat_rgran"))][0] == ["b", "m"]
    r = search_template(small, arch, "flat_hgran", iterations=8, rollouts=32, top_k=2)
    assert r.variant == "on_chip"
    assert not {"S", "P"} & set(evaluate(small, arch, r.tree).level("dram").tensors)
    r = search_template(big, arch, "flat_hgran", iterations=8, rollouts=32, top_k=2)
    assert r.variant == "spilled"   # FLAT cannot fuse at head granularity here: S/P go through DRAM
    assert {"S", "P"} <= set(evaluate(big, arch, r.tree).level("dram").tensors)


def test_flat_hgran_needs_a_head_in_one_buffer_the_split_variant_in_all_four():
    arch = load_arch("edge_accel")
    # ViT-x/16 sized head: S is 208x208 16-bit words = 84.5 KiB > one 64 KiB L1, < the four together
    p = attention(4, 208, 64, 208, 64)
    kw = dict(iterations=4, rollouts=32, top_k=2, restarts=1)
    pub = search_template(p, arch, "flat_hgran", **kw)
    split = search_template(p, arch, "flat_hgran_split", **kw)
    assert (pub.variant, split.variant) == ("spilled", "on_chip")
    assert split.cycles < pub.cycles


def test_flat_alias_is_row_granularity():
    from fusion_perf.config import DSEConfig

    p = attention(4, 64, 16, 64, 16)
    assert repr(template(p, "edge_accel", "flat")) == repr(template(p, "edge_accel", "flat_rgran"))
    assert DSEConfig(templates=["flat", "layerwise"]).templates == ["flat", "layerwise"]


def test_block_sweep_never_worse_and_takes_out_seed_dependence():
    from fusion_perf.search import search

    p = attention(4, 64, 16, 64, 16)
    arch = load_arch("edge_accel")
    trees = [template(p, arch, "chimera", perm) for perm in (["b", "m", "l"], ["m", "b", "l"])]
    kw = dict(iterations=4, rollouts=16, restarts=2, top_k=2, kicks=0)
    plain = [search(p, arch, trees, seed=s, **kw).cycles for s in (0, 1)]
    swept = [search(p, arch, trees, seed=s, sweep=3, **kw).cycles for s in (0, 1)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(plain, swept))
    assert (max(swept) - min(swept)) / min(swept) <= (max(plain) - min(plain)) / min(plain) + 1e-12


def test_conv3x3_chain_fuses_with_halo_and_reports_fused_layer():
    from fusion_perf.dse import compare
    from fusion_perf.problem import conv_chain

    p = conv_chain(8, 8, 8, 8, 3, 8, R2=3)
    assert p.access[("CONV2", "O1")].terms != p.access[("CONV1", "O1")].terms  # the consumer reads a window
    r = compare(p, "edge_accel", ["layerwise", "flat_rgran", "fused"], iterations=4, rollouts=16, top_k=2,
                kicks=0, sweep=1)
    assert r["best_fused"] in ("flat_rgran", "fused")
    assert r["speedup_vs_fused_layer"] == pytest.approx(r["cycles"]["flat_rgran"] / r["best_fused_cycles"])
    res = evaluate(p, "edge_accel", r["trees"]["flat_rgran"])
    assert "O1" not in res.level("dram").tensors   # the intermediate (with its halo) stays on chip
