"""TileFlow's own test cases replayed (fusion_perf.tileflow_cases): the printed mapping's factors go back into the
case's mapping unchanged otherwise, every op's loops then cover its problem dims, and the replay reproduces the
case's result CSV: cycles, energy, slowdowns and every per-level per-tensor count."""
import pytest
from fusion_perf.errors import InputFormatError
from fusion_perf.tileflow_cases import CASE_SEMANTICS, CASES, compare_case, fill_factors, printed_tiles
from fusion_perf.tileflow_io import yaml_load

CASE = CASES / "07-test-fusion-attention"


def _loops(node, prod, out):
    if node.get("node-type") == "Tile":
        prod = dict(prod)
        for f in node["factors"].split():
            d, v = f.split("=")
            prod[d] = prod.get(d, 1) * int(v)
    if node.get("node-type") == "Op":
        out[node["name"]] = prod
    for c in node.get("subtree") or []:
        _loops(c, prod, out)
    return out


@pytest.mark.parametrize("name", ["attention-fused", "attention-nofuse"])
def test_printed_factors_fill_every_tile_and_cover_each_ops_dims(name):
    doc = yaml_load((CASE / f"{name}.yaml").read_text(encoding="utf-8"), name)
    tiles = printed_tiles((CASE / "result" / f"{name}.mapping.txt").read_text(encoding="utf-8"), name)
    loops = _loops(fill_factors(doc["mapping"], tiles, name), {}, {})
    inst = doc["problem"]["instance"]
    assert len(loops) == len(doc["problem"]["ops"]) == 7
    for op, prod in loops.items():
        assert prod == {d: inst[d] for d in prod}, op


def test_a_printed_mapping_of_another_tree_is_rejected_by_name():
    doc = yaml_load((CASE / "attention-fused.yaml").read_text(encoding="utf-8"), "f")
    tiles = printed_tiles((CASE / "result" / "attention-fused.mapping.txt").read_text(encoding="utf-8"), "f")
    with pytest.raises(InputFormatError, match="more Tile nodes"):
        fill_factors(doc["mapping"], tiles[:-1], "f: mapping")
    with pytest.raises(InputFormatError, match="no loops found"):
        printed_tiles("Op: ProduceC", "empty.txt")


@pytest.mark.parametrize("name", ["attention-fused", "attention-nofuse"])
def test_the_replay_reproduces_the_csv(name):
    """Under the rules of the TileFlow commit that wrote the CSVs (4200e63): its cycles, its energy to the 6 digits
    it prints, each level's slowdown and all 90 per-level per-tensor counts."""
    row = compare_case(CASE, name)
    assert row["semantics"] == CASE_SEMANTICS and row["counts"] == 90
    assert row["cycles"] == row["tileflow_cycles"], row
    assert row["counts_equal"] == 90, row["counts_wrong"]
    assert row["energy_rel_err"] <= 5e-6
    for lv, (ours, ref) in row["slowdowns"].items():
        assert abs(ours / ref - 1) <= 5e-6, (lv, ours, ref)


@pytest.mark.parametrize("name, cycles, energy", [("attention-fused", 2_335_187, 1.06318e11),
                                                  ("attention-nofuse", 5_102_083, 1.29779e11)])
def test_the_released_tileflow_prints_other_numbers_on_the_case(name, cycles, energy):
    """What the released TileFlow (d72d278, built from source) prints for the same mappings: its intermediates'
    chains start below the scope and its J and V have their own index maps."""
    row = compare_case(CASE, name, semantics="tileflow")
    assert row["cycles"] == cycles and abs(row["energy_pj"] / energy - 1) <= 5e-6


def test_the_printed_mapping_and_csv_are_read_as_they_are():
    row = compare_case(CASE, "attention-fused")
    assert row["tileflow_cycles"] == 2490368 and row["counts"] == 90
    tiles = printed_tiles((CASE / "result" / "attention-fused.mapping.txt").read_text(encoding="utf-8"), "f")
    assert tiles[0] == {"M": 2, "H": 3, "B": 1} and tiles[4] == {"A": 1, "L": 1}  # root loops; ProduceC at L0
