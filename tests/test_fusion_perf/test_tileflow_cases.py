"""TileFlow's own test cases replayed (fusion_perf.tileflow_cases): the printed mapping's factors go back into the
case's mapping unchanged otherwise, every op's loops then cover its problem dims, and the comparison with the
case's result CSV reports every count it gives."""
import pytest
from fusion_perf.errors import InputFormatError
from fusion_perf.tileflow_cases import CASES, compare_case, fill_factors, printed_tiles
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


def test_the_replay_compares_cycles_energy_and_every_count_of_the_csv():
    row = compare_case(CASE, "attention-fused")
    assert row["tileflow_cycles"] == 2490368 and row["counts"] == 90
    tiles = printed_tiles((CASE / "result" / "attention-fused.mapping.txt").read_text(encoding="utf-8"), "f")
    assert tiles[0] == {"M": 2, "H": 3, "B": 1} and tiles[4] == {"A": 1, "L": 1}  # root loops; ProduceC at L0
    assert row["cycles"] > 0 and 0 <= row["counts_equal"] <= row["counts"]
