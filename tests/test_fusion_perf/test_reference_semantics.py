"""The reference's rules (Timeloop v0.2 / TileFlow): input reading (YAML 1.2 names, permutation order),
bandwidth ports, vector-access energies and energy tables, nested tiles, and counts equal to the trace simulator's."""
import math
import random
import shutil

import numpy as np
import pytest
from fusion_perf import ArchError, InputFormatError, evaluate, load_mapping
from fusion_perf.energy import BUILTIN, load_table, pat_dram, pat_sram
from fusion_perf.mapping import dump_mapping
from fusion_perf.model import compile_tree, tree_factors
from fusion_perf.randtree import make_arch, random_problem, random_tree
from fusion_perf.semantics import PROJECT, REFERENCE, as_semantics
from fusion_perf.tileflow_io import load_inputs, yaml_load
from fusion_perf.tracesim import simulate
from fusion_perf.validation import HERE

MACROS = "macro: {M: 16, N: 64, K: 16, MO: 1, MM: 1, NO: 4, NI: 16, KO: 1, KM: 1}\n"


def _timeloop(tmp_path, arch_edit=None, extra=""):
    for f in ("arch.yaml", "map.yaml", "prob.yaml"):
        shutil.copy(HERE / "timeloop" / f, tmp_path / f)
    if arch_edit:
        text = (tmp_path / "arch.yaml").read_text()
        assert arch_edit[0] in text
        (tmp_path / "arch.yaml").write_text(text.replace(*arch_edit, 1))
    (tmp_path / "macro.yaml").write_text(MACROS + extra)
    return load_inputs([str(tmp_path / f) for f in ("arch.yaml", "map.yaml", "prob.yaml", "macro.yaml")])


def test_yaml_12_booleans_keep_tileflow_names():
    assert yaml_load("macro: {NO: 4, yes: 1, on: 2}\nflag: false\n", "x") == {
        "macro": {"NO": 4, "yes": 1, "on": 2}, "flag": False}


def test_permutation_lists_the_innermost_loop_first():
    node = ("node-type: Tile\nfactors: M=2 N=3 K=4\npermutation: KMN\ntarget: l1\nsubtree:\n"
            "- node-type: Tile\n  type: spatial\n  factors: M=2 K=2\n  permutation: KM\n  split: 1\n  target: l1\n"
            "  subtree:\n  - {node-type: Op, name: GEMM}\n")
    t = load_mapping(node)
    assert [d for d, _ in t.loops] == ["N", "M", "K"]  # outermost first
    assert [d for d, _ in t.child.loops] == ["K", "M"] and t.child.split == 1  # spatial: the first `split` on x
    back = load_mapping(dump_mapping(t))
    assert back.loops == t.loops and back.child.loops == t.child.loops
    nop = load_mapping(node.replace("permutation: KMN\n", ""))
    assert [d for d, _ in nop.loops] == ["M", "N", "K"]  # no permutation: as the factors list them


def test_shared_bandwidth_bounds_reads_plus_writes(tmp_path):
    prob, arch, tree, _ = _timeloop(tmp_path, ("read_bandwidth: 4.3", "read_bandwidth: 4.3\n        "
                                                                     "shared_bandwidth: 3"))
    # reads 2304 + writes 1024 through one 3 words/cycle port
    assert evaluate(prob, arch, tree).cycles == math.ceil((2304 + 1024) / 3)
    prob, arch, tree, _ = _timeloop(tmp_path, ("read_bandwidth: 4.3", "bandwidth: 8.6"))
    # Timeloop's deprecated `bandwidth` is half read, half write: reads 2304 / 4.3, writes 1024 / 2.9 unchanged
    assert evaluate(prob, arch, tree).cycles == 536


def test_energy_is_per_vector_access_of_the_block():
    """DRAM blocks of 16384 words: A, B and C's read and C's update are one vector access each (4 x 3.2768 uJ);
    the cache's PAT energy follows its 3 x 262144-bit array."""
    assert BUILTIN["timeloop-pat"].storage("x", "DRAM", 16, 16384, None)["read"] == pat_dram(16 * 16384) == 3_276_800
    assert math.isclose(pat_sram(3, 16 * 16384), 95_010.8, rel_tol=1e-6)
    assert math.isclose(pat_sram(1, 48), 2.925507, rel_tol=1e-6)


def test_energy_table_from_a_file_and_from_an_ert(tmp_path):
    prob, arch, tree, _ = _timeloop(tmp_path)
    base = evaluate(prob, arch, tree)
    cheap = "energy_table:\n  technology: mine\n  components:\n    MainMemory: {read: 0, write: 0}\n"
    prob, arch2, tree, _ = _timeloop(tmp_path, extra=cheap)
    # 4 DRAM vector accesses at 3,276,800 pJ each are gone
    assert math.isclose(base.energy_pj - evaluate(prob, arch2, tree).energy_pj, 4 * 3_276_800, rel_tol=1e-9)
    ert = ("ERT:\n  version: 0.3\n  tables:\n  - name: System.PE.mac[0..255]\n    actions:\n"
           "    - {name: mac_random, arguments: null, energy: 2.0}\n")
    prob, arch3, tree, _ = _timeloop(tmp_path, extra=ert)
    assert arch3.mac_energy == 2.0
    assert math.isclose(evaluate(prob, arch3, tree).energy_pj - base.energy_pj, 16 * 64 * 16, rel_tol=1e-9)
    (tmp_path / "table.yaml").write_text(cheap)
    prob, arch4, tree, _ = _timeloop(tmp_path, extra="energy_table: table.yaml\n")  # a file beside the inputs
    assert arch4.levels[0].read_energy == 0 and arch4.levels[1] == arch.levels[1]
    _, arch5, _, _ = _timeloop(tmp_path, extra="energy_table: project-16nm\n")
    assert math.isclose(arch5.levels[0].read_energy, 64.0 * 16384) and arch5.mac_energy == 0.3
    t = load_table({"energy_table": {"classes": {"DRAM": {"read": 100, "write": 50}}}})
    assert t.storage("x", "DRAM", 16, 2, None) == {"read": 200.0, "fill": 100.0, "update": 100.0}
    with pytest.raises(InputFormatError) as e:
        _timeloop(tmp_path, extra="energy_table:\n  classes:\n    DRAM: {erase: 1}\n")
    assert "classes.DRAM.erase" in str(e.value) and "macro.yaml" in str(e.value)


def test_semantics_can_be_chosen_by_name_or_flags(tmp_path):
    prob, arch, tree, _ = _timeloop(tmp_path, extra="semantics: {base: reference, psum_round_trip: false}\n")
    assert not arch.semantics.psum_round_trip and arch.semantics.charge_holder
    assert evaluate(prob, arch, tree).level("MainMemory").total("reads") == 1280
    assert as_semantics("timeloop") is REFERENCE and as_semantics("project") is PROJECT
    with pytest.raises(ArchError):
        as_semantics("exact")
    with pytest.raises(InputFormatError):
        _timeloop(tmp_path, extra="semantics: {psum_round_trip: maybe}\n")


@pytest.mark.parametrize("block", range(3))
def test_reference_counts_equal_the_trace_simulators(block):
    """Round-trip partial sums, no drain reads, nested tiles under scopes: the closed form equals enumeration."""
    arch = make_arch().with_semantics("reference")
    bad = []
    for seed in range(20_000 + 40 * block, 20_000 + 40 * block + 40):
        rng = random.Random(seed)
        prob = random_problem(rng)
        tree = random_tree(rng, prob)
        comp = compile_tree(prob, arch, tree)
        x = tree_factors(tree)
        if comp.evaluate(x, check=False).counts() != simulate(comp, x):
            bad.append(seed)
    assert not bad, f"model != simulator for seeds {bad}"


def test_reference_batched_equals_single():
    from fusion_perf import attention
    from fusion_perf.search import FactorSpace, template

    p = attention(2, 16, 8, 16, 8)
    arch = make_arch().with_semantics("reference")
    c = compile_tree(p, arch, template(p, arch, "tileflow"))
    X = FactorSpace(c).complete(np.random.default_rng(3), 64)
    br = c.evaluate(X, batched=True)
    assert br.feasible.any()
    for i in np.flatnonzero(br.feasible)[:8]:
        r = c.evaluate(X[i], check=False)
        assert math.isclose(r.cycles, br.cycles[i], rel_tol=1e-9)
        assert math.isclose(r.energy_pj, br.energy_pj[i], rel_tol=1e-9)


def test_nested_tiles_fill_from_the_root_and_unprofiled_nodes_cost_no_energy(tmp_path):
    """TileFlow's fused map: each op's DRAM tile below the Sequential scope holds its own copy, filled from the
    root's DRAM tile (DRAM fills, on DRAM's write port); `profile: False` keeps them out of the energy."""
    files = []
    for f in ("arch.yaml", "map.yaml", "prob.yaml"):
        shutil.copy(HERE / "accelerator" / f, tmp_path / f)
        files.append(str(tmp_path / f))
    (tmp_path / "m.yaml").write_text("macro: {M: 256, N: 64, K: 64, L: 256, KO: 4, KM: 1, LO: 8, LM: 2, MO: 4, "
                                     "MM: 4, NO: 1, SX: 16, SY: 16}\n")
    prob, arch, tree, _ = load_inputs(files + [str(tmp_path / "m.yaml")], solve_names=True)
    r = evaluate(prob, arch, tree)
    assert r.cycles == 45056  # TileFlow: 45056 (op1's DRAM tile 5120, op2's 6144 per M block, x4)
    dram = r.level("MainMemory").tensors
    assert dram["D"]["fills"] == 4 * 256 * 64 and dram["E"]["fills"] == 256 * 64
    text = (tmp_path / "map.yaml").read_text()
    (tmp_path / "map.yaml").write_text(text.replace("profile: False", "profile: True"))
    prob, arch, tree2, _ = load_inputs(files + [str(tmp_path / "m.yaml")], solve_names=True)
    r2 = evaluate(prob, arch, tree2)
    assert r2.cycles == r.cycles and r2.energy_pj > r.energy_pj


def test_project_rules_and_energies_reproduce_the_earlier_model(tmp_path):
    """`semantics: project` with `energy_table: project-16nm` gives what this package gave for its attention example
    before the reference rules (commit 4cbd98f: 73,728 cycles, 1.57889e+08 pJ), with the permutations of the
    example written innermost first as TileFlow reads them."""
    ex = HERE.parent / "attention"
    files = [str(ex / f) for f in ("arch.yaml", "prob.yaml", "map.yaml")]
    (tmp_path / "m.yaml").write_text((ex / "macro.yaml").read_text().replace("output:", "# output:")
                                     + "semantics: project\nenergy_table: project-16nm\n")
    prob, arch, tree, _ = load_inputs(files + [str(tmp_path / "m.yaml")])
    r = evaluate(prob, arch, tree)
    assert r.cycles == 73728 and math.isclose(r.energy_pj, 1.57889e8, rel_tol=1e-5)
