"""The TileFlow-format command line and clear errors on bad input (each naming the file and field)."""
import subprocess
import sys
from pathlib import Path

import pytest
from fusion_perf import InputFormatError, MappingError, OpLeaf, ProblemError, Scope, T, evaluate, gemm_chain
from fusion_perf.__main__ import main
from fusion_perf.problem import Problem
from fusion_perf.tileflow_io import load_inputs

EX = Path(__file__).resolve().parents[2] / "packages" / "fusion_perf" / "examples"
FILES = ["arch.yaml", "prob.yaml", "map.yaml", "macro.yaml"]


def test_cli_example_writes_csv(attention_files, tmp_path, capsys, monkeypatch):
    files = attention_files
    monkeypatch.chdir(tmp_path)
    assert main(list(reversed(files))) == 0  # any file order
    rows = dict(line.split(",") for line in (tmp_path / "attention-flat.csv").read_text().splitlines()[1:])
    # 8 heads x 256 x 256 x 64 MACs x 2 GEMMs on 1024 PEs: at least the compute bound
    assert float(rows["MAC"]) == 2 * 8 * 256 * 256 * 64
    bound = 2 * 8 * 256 * 256 * 64 / 1024
    # TileFlow files run under the reference's rules: the per-op DRAM tiles below the Sequential scope keep their
    # own copies, filled from the root's DRAM tile on every B·M block (TileFlow's storage per tile node), and
    # those fills share DRAM's write port: DRAM binds at 144,180 cycles. TileFlow itself gives no number for this
    # file (it rejects the spatial M=4 at DRAM without a split over the 2x2 L1 mesh); the bound it asserted
    # before, < 1.5x, holds under this package's own rules (below).
    assert bound <= float(rows["Cycle"]) < 2.5 * bound and float(rows["DRAM::Fill"]) > 0
    assert float(rows["L1::SlowDown"]) > 1  # the PV branch streams V through L1 faster than L1 serves it
    assert float(rows["Energy"]) > 0 and "L1::Read::S" in rows and "DRAM::Update::O" in rows
    assert "S" not in {k.split("::")[-1] for k in rows if k.startswith("DRAM::") and rows[k] != "0"}
    # the project's semantics: L1 binds a little
    assert main([*files, _write(tmp_path, "semantics.yaml", "semantics: project\n")]) == 0
    rows = dict(line.split(",") for line in (tmp_path / "attention-flat.csv").read_text().splitlines()[1:])
    assert bound <= float(rows["Cycle"]) < 1.5 * bound and float(rows["DRAM::Fill"]) == 0
    assert float(rows["L1::SlowDown"]) > 1


def test_cli_subprocess_and_search(attention_files, tmp_path):
    files = attention_files
    files[2] = str(EX / "attention_search" / "map.yaml")
    r = subprocess.run([sys.executable, "-m", "fusion_perf", "--iterations", "10", *files], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "searched" in r.stdout and "Cycle," in r.stdout


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_unparsable_yaml_names_file_and_line(attention_files, tmp_path, capsys):
    files = attention_files
    bad = _write(tmp_path, "map.yaml", "mapping:\n  node-type: Tile\n   target: [oops\n")
    with pytest.raises(InputFormatError) as e:
        load_inputs([files[0], files[1], bad, files[3]])
    assert "map.yaml" in str(e.value) and "line" in str(e.value)
    assert main([files[0], files[1], bad, files[3]]) == 2
    assert "map.yaml" in capsys.readouterr().err


def test_unknown_tensor_in_bypass(attention_files, tmp_path):
    files = attention_files
    text = (EX / "attention" / "map.yaml").read_text().replace("bypass: [S]", "bypass: [Z]", 1)
    files[2] = _write(tmp_path, "map.yaml", text)
    prob, arch, tree, _ = load_inputs(files)
    with pytest.raises(MappingError) as e:
        evaluate(prob, arch, tree)
    assert "bypass" in str(e.value) and "'Z'" in str(e.value)


def test_factor_product_mismatch_names_op_dim_and_nodes(attention_files, tmp_path, capsys):
    files = attention_files
    files[3] = _write(tmp_path, "macro.yaml", (EX / "attention" / "macro.yaml").read_text().replace("LT: 8", "LT: 4"))
    assert main(files) == 2
    err = capsys.readouterr().err
    assert "map.yaml" in err and "ProduceS" in err and "dim L" in err and "!= extent 256" in err


def test_missing_level(attention_files, tmp_path, capsys):
    files = attention_files
    files[2] = _write(tmp_path, "map.yaml",
                      (EX / "attention" / "map.yaml").read_text().replace("target: L0", "target: L9", 1))
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "map.yaml" in str(e.value) and ".target" in str(e.value) and "L9" in str(e.value)
    # and the same for a Python-built tree
    with pytest.raises(Exception) as e2:
        evaluate(gemm_chain(2, 2, 2, 2), "edge_accel", T("nowhere", "m=2", OpLeaf("GEMM1")))
    assert "nowhere" in str(e2.value) and "target" in str(e2.value)


def test_missing_section(attention_files, tmp_path):
    files = attention_files
    with pytest.raises(InputFormatError) as e:
        load_inputs([f for f in files if not f.endswith("arch.yaml")])
    assert "architecture" in str(e.value)


def test_cycle_in_problem(attention_files, tmp_path):
    p = gemm_chain(2, 2, 2, 2)
    g1, g2 = p.ops
    # GEMM1 reads E (GEMM2's output) instead of A: a cycle GEMM1 -> GEMM2 -> GEMM1
    g1c = g1.with_tensor_renames({"A": "E"})
    with pytest.raises(ProblemError) as e:
        Problem([g1c, g2], source="cyc.yaml")
    assert "cycle" in str(e.value) and "cyc.yaml" in str(e.value)
    files = attention_files
    text = (EX / "attention" / "prob.yaml").read_text().replace("ins: Q, K\n", "ins: Q, O\n").replace(
        "    - name: K\n      projection: [[[B]], [[A]], [[L]]]",
        "    - name: O\n      projection: [[[B]], [[A]], [[L]]]")
    files[1] = _write(tmp_path, "prob.yaml", text)
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "prob.yaml" in str(e.value) and "cycle" in str(e.value)


def test_unsupported_constructs_rejected(attention_files, tmp_path):
    files = attention_files
    files[2] = _write(tmp_path, "map.yaml",
                      (EX / "attention" / "map.yaml").read_text().replace("factors: M=4", "factors: M=4,3", 1))
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "residual" in str(e.value) and "map.yaml" in str(e.value)
    files[2] = _write(tmp_path, "map.yaml",
                      (EX / "attention" / "map.yaml").read_text().replace("binding: B:B M:M", "binding: B:M M:B"))
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "binding" in str(e.value)


def test_loop_over_dim_not_in_every_op():
    with pytest.raises(MappingError) as e:
        evaluate(gemm_chain(2, 2, 2, 2), "edge_accel",
                 T("dram", "k=2", Scope("sequential", [T("l1", "m=2 l=2", T("l0", "k=1", OpLeaf("GEMM1"))),
                                                       T("l1", "m=2 l=2 n=2", T("l0", "n=1", OpLeaf("GEMM2")))])))
    assert "'k'" in str(e.value) and "GEMM2" in str(e.value)


def test_arch_v02_subtree_ranges_replicate():
    import yaml
    from fusion_perf.tileflow_io import parse_arch

    d = yaml.safe_load("""
version: 0.2
subtree:
- name: System
  local:
  - {name: DRAM, class: DRAM, attributes: {word-bits: 16, read_bandwidth: 8}}
  subtree:
  - name: Buffer[0..3]
    attributes: {meshX: 4}
    local:
    - {name: L1, class: SRAM, attributes: {word-bits: 16, sizeKB: 2, read_bandwidth: 16}}
    subtree:
    - name: PE
      local:
      - {name: "L0[0..15]", class: regfile, attributes: {depth: 1, block-size: 4, word-bits: 16, meshX: 16}}
      - {name: "mac[0..15]", class: intmac, attributes: {meshX: 16}}
""")
    a = parse_arch(d)
    assert [lv.name for lv in a.levels] == ["DRAM", "L1", "L0"]
    assert [lv.instances for lv in a.levels] == [1, 4, 64] and a.num_pes == 64
    assert a.levels[1].capacity_words == 1024 and a.levels[2].capacity_words == 4
    assert a.levels[0].read_bw == 8 and a.fanout(0) == (4, 1)
    with pytest.raises(InputFormatError) as e:
        parse_arch({**d, "version": 0.3})
    assert "version" in str(e.value)


def test_dse_takes_the_users_own_shapes_and_names_a_bad_field():
    from fusion_perf.config import DSEConfig
    from fusion_perf.dse import ATTENTION_SHAPES, CONV_SHAPES

    from shared_ir.errors import ValidationError

    att = ("batch", "M", "N", "K", "L")
    cfg = DSEConfig(shapes=["Bert-Small", {"batch": 4, "M": 128, "N": 64, "K": 64, "L": 128, "name": "mine"}])
    assert cfg.pick(ATTENTION_SHAPES, att) == [ATTENTION_SHAPES[0], ("mine", 4, 128, 64, 64, 128)]
    conv = DSEConfig(shapes=[{"C": 8, "H": 10, "W": 10, "K1": 8, "R1": 3, "K2": 16}])
    assert conv.pick(CONV_SHAPES, ("C", "H", "W", "K1", "R1", "K2", "R2"))[0][1:] == (8, 10, 10, 8, 3, 16)
    for bad, where in [({"batch": 4, "M": 0, "N": 1, "K": 1, "L": 1}, "task.shapes[0].M"),
                       ({"batch": 4, "M": 1, "N": 1, "K": 1}, "task.shapes[0].L"),
                       ({"batch": 4, "M": 1, "N": 1, "K": 1, "L": 1, "heads": 2}, "task.shapes[0].heads"),
                       ("Bert-Huge", "task.shapes[0]")]:
        with pytest.raises(ValidationError) as e:
            DSEConfig(shapes=[bad]).pick(ATTENTION_SHAPES, att)
        assert e.value.path == where
