"""TileFlow's own analysis (``semantics: tileflow``, fusion_perf.nest): TileFlow's printed cycles and energy on its
validation points, its extrapolation against the call-by-call enumeration of fusion_perf.tracesim, and the rules of
its commit 4200e63 that the test cases' CSVs need."""
import math
import random

import numpy as np
import pytest
from fusion_perf.mapping import Scope, Tile
from fusion_perf.model import compile_tree, tree_factors
from fusion_perf.nest import NestAnalysis
from fusion_perf.randtree import make_arch, random_problem, random_tree
from fusion_perf.semantics import REFERENCE, TILEFLOW, TILEFLOW_4200E63, as_semantics
from fusion_perf.tileflow_cases import CASES
from fusion_perf.tileflow_io import parse_arch, parse_problem, yaml_load
from fusion_perf.tracesim import simulate
from fusion_perf.validation import HERE, TILEFLOW_MACROS, TIMELOOP_MACROS, evaluate_point, read_rows

TL_ROWS = read_rows(HERE / "timeloop_single_gemm.csv")
TF_ROWS = read_rows(HERE / "tileflow_fused_gemm_gemm.csv")


def _macros(row, names):
    return {k: int(row[k]) for k in names}


def test_the_rule_sets_are_named():
    assert as_semantics("tileflow") is TILEFLOW and TILEFLOW.nest_calls and not TILEFLOW.early_tileflow
    assert as_semantics("tileflow-4200e63") is TILEFLOW_4200E63 and TILEFLOW_4200E63.early_tileflow
    assert as_semantics("reference") is REFERENCE and not REFERENCE.nest_calls


@pytest.mark.parametrize("kind, rows, names", [("timeloop", TL_ROWS[::48], TIMELOOP_MACROS),
                                               ("accelerator", TF_ROWS[::8], TILEFLOW_MACROS)])
def test_validation_points_give_tileflows_cycles_and_energy(kind, rows, names):
    """A sample of both CSVs (all of them: ``python -m fusion_perf.validation``, 641 of 641): TileFlow's cycles
    exactly and its energy to the 6 digits it prints, the single GEMMs' energy (13% above Timeloop's) included."""
    for row in rows:
        r = evaluate_point(kind, _macros(row, names), "tileflow")
        assert r.cycles == row["tileflow_cycles"], _macros(row, names)
        assert abs(r.energy_pj / row["tileflow_energy"] - 1) <= 5e-6, _macros(row, names)


def test_the_fused_point_the_closed_form_misses_by_two_cycles():
    row = next(r for r in TF_ROWS if r["tileflow_cycles"] == 45058)
    m = _macros(row, TILEFLOW_MACROS)
    assert evaluate_point("accelerator", m).cycles == 45056
    assert evaluate_point("accelerator", m, "tileflow").cycles == 45058


def _halo(prob):
    return any(len(term) > 1 for acc in prob.access.values() for term in acc.terms)


def _scope_feeds_spatial(n, chained=False):
    """A spatial node right below a Sequential/Pipeline scope (handed its previous sibling's state) or right
    above a scope (copied below it)."""
    if isinstance(n, Tile):
        if n.kind == "spatial" and (chained or isinstance(n.child, Scope)):
            return True
        return _scope_feeds_spatial(n.child)
    if isinstance(n, Scope):
        return any(_scope_feeds_spatial(c, n.kind in ("sequential", "pipeline")) for c in n.children)
    return False


@pytest.mark.parametrize("sem", [TILEFLOW, TILEFLOW_4200E63], ids=["released", "4200e63"])
def test_extrapolated_calls_equal_the_enumerated_ones(sem):
    """One call per loop standing for its steps and the first instance translated to the others (TileFlow's
    extrapolation, the model) equal every call enumerated (the trace simulator), before TileFlow's per-call
    truncation, wherever that extrapolation is exact: no sliding windows, no scope handing spatial instances
    states they do not share."""
    arch = make_arch().with_semantics(sem)
    checked, bad = 0, []
    for seed in range(20_000, 20_200):
        rng = random.Random(seed)
        prob = random_problem(rng)
        tree = random_tree(rng, prob)
        if _halo(prob) or _scope_feeds_spatial(tree):
            continue
        comp = compile_tree(prob, arch, tree)
        x = tree_factors(tree)
        na = NestAnalysis(comp, x)
        na.run()
        want = simulate(comp, x)
        if set(na.exact) != set(want) or not all(
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for k in want for a, b in zip(na.exact[k], want[k])):
            bad.append(seed)
        checked += 1
    assert checked >= 80 and not bad, bad


def test_batched_equals_single_under_tileflows_rules():
    from fusion_perf import attention
    from fusion_perf.search import FactorSpace, template

    p = attention(2, 16, 8, 16, 8)
    arch = make_arch().with_semantics("tileflow")
    c = compile_tree(p, arch, template(p, arch, "fused"))
    X = FactorSpace(c).complete(np.random.default_rng(5), 6)
    br = c.evaluate(X, batched=True)
    assert br.feasible.any()
    for i in np.flatnonzero(br.feasible):
        r = c.evaluate(X[i], check=False)
        assert r.cycles == br.cycles[i] and r.energy_pj == br.energy_pj[i]


def _case():
    case = CASES / "07-test-fusion-attention"
    doc = yaml_load((case / "attention-fused.yaml").read_text(encoding="utf-8"), "f")
    arch = parse_arch(yaml_load((case / "edge.yaml").read_text(encoding="utf-8"), "e")["architecture"])
    return parse_problem(doc["problem"], {}, "p"), arch


def test_meshes_are_timeloops():
    """Timeloop v0.2 takes a component's own meshX (an enclosing subtree's range only multiplies the instances):
    the edge accelerator's 4096 register files are 1024 x 4, 256 x 4 below each of the 4 buffers."""
    _, arch = _case()
    assert [(lv.mesh_x, lv.mesh_y) for lv in arch.levels] == [(1, 1), (4, 1), (1024, 4)]
    assert arch.fanout(0) == (4, 1) and arch.fanout(1) == (256, 4)


def test_the_4200e63_projection_bug():
    """TileFlow 4200e63 numbered tensors by first declaration but took the i-th declared data space, repeats
    included, as tensor i's index map: in the attention case J and V got ProduceF's F and E, both [B,H,M,L]."""
    from fusion_perf.mapping import OpLeaf

    prob, arch = _case()
    tree = Scope("sequential", [Tile("L2", [("B", 1)], OpLeaf(o.name)) for o in prob.ops])
    for sem, v_dims in ((TILEFLOW_4200E63, "BHML"), (TILEFLOW, "BHLN")):
        na = NestAnalysis(compile_tree(prob, arch.with_semantics(sem), tree), [1] * len(prob.ops))
        assert "".join(d for term in na.proj["V"] for d, _ in term) == v_dims
        assert "".join(d for term in na.proj["J"] for d, _ in term) == ("BHML" if sem is TILEFLOW_4200E63 else "BHMN")
