"""The reference's own validation points (pku-liang/TileFlow ``AE/validation``, examples/validation) against what
Timeloop and TileFlow print: every single-GEMM mapping gives Timeloop's cycles exactly and its energy within 1%,
every fused GEMM->GEMM mapping TileFlow's cycles within 2%."""
import math
import shutil
from pathlib import Path

import pytest
from fusion_perf import InputFormatError, evaluate
from fusion_perf.__main__ import main
from fusion_perf.tileflow_io import load_inputs
from fusion_perf.validation import HERE, TILEFLOW_MACROS, TIMELOOP_MACROS, compare, evaluate_point, read_rows

TL_ROWS = read_rows(HERE / "timeloop_single_gemm.csv")
TF_ROWS = read_rows(HERE / "tileflow_fused_gemm_gemm.csv")


def _macros(row, names):
    return {k: int(row[k]) for k in names}


def test_every_single_gemm_point_gives_timeloops_cycles_and_energy():
    bad, worst = [], 0.0
    for row in TL_ROWS:
        r = evaluate_point("timeloop", _macros(row, TIMELOOP_MACROS))
        if r.cycles != row["timeloop_cycles"]:
            bad.append((_macros(row, TIMELOOP_MACROS), r.cycles, row["timeloop_cycles"]))
        worst = max(worst, abs(r.energy_pj / row["timeloop_energy"] - 1))
    assert len(TL_ROWS) == 576 and not bad, bad[:5]
    assert worst <= 0.01


def test_every_fused_point_within_2_percent_of_tileflows_cycles():
    errs = []
    for row in TF_ROWS:
        r = evaluate_point("accelerator", _macros(row, TILEFLOW_MACROS))
        errs.append((abs(r.cycles / row["tileflow_cycles"] - 1), _macros(row, TILEFLOW_MACROS), r.cycles))
    assert len(TF_ROWS) == 65
    assert max(errs, key=lambda e: e[0])[0] <= 0.02, max(errs, key=lambda e: e[0])


def test_compare_reports_the_bench_keys():
    s = compare(HERE / "timeloop_single_gemm.csv", HERE / "tileflow_fused_gemm_gemm.csv", with_tileflow_rules=False)
    assert s["timeloop_cycles_equal_fraction"] == 1.0 and s["timeloop_energy_max_rel_err"] <= 0.01
    assert s["tileflow_fused_cycles_max_rel_err"] <= 0.02 and s["timeloop_points"] == 576


def _files(tmp_path, kind, macros):
    for f in ("arch.yaml", "map.yaml", "prob.yaml"):
        shutil.copy(HERE / kind / f, tmp_path / f)
    text = "output: out.csv\nmacro:\n" + "".join(f"  {k}: {v}\n" for k, v in macros.items())
    (tmp_path / "macro.yaml").write_text(text)  # a macro NO (YAML 1.1's false) stays a name, as in TileFlow
    return [str(tmp_path / f) for f in ("arch.yaml", "map.yaml", "prob.yaml", "macro.yaml")]


def test_issue_example_through_the_cli(tmp_path, monkeypatch):
    """Timeloop: 536 cycles = (256 A + 1024 B + 1024 C reads) / 4.3 words/cycle: the output's partial sums are
    read back from DRAM on every visit, the first too (its first-read elision is off); 1.38883e+07 pJ."""
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path, "timeloop", dict(M=16, N=64, K=16, MO=1, MM=1, NO=4, NI=16, KO=1, KM=1))
    assert main(files) == 0
    rows = dict(line.split(",") for line in (tmp_path / "out.csv").read_text().splitlines()[1:])
    assert float(rows["Cycle"]) == 536
    assert math.isclose(float(rows["Energy"]), 13_888_300, rel_tol=1e-5)
    assert float(rows["MainMemory::Read"]) == 2304 and float(rows["MainMemory::Read::C"]) == 1024


def test_unchanged_fused_files_need_their_names_solved(tmp_path, monkeypatch, capsys):
    """TileFlow's fused map names L=LI and N=NI, which are no macros: its mapper fixes them from the loop counts.
    Here that is an error naming the factor (a typo must not pass), which says how to solve it."""
    monkeypatch.chdir(tmp_path)
    row = TF_ROWS[0]
    files = _files(tmp_path, "accelerator", _macros(row, TILEFLOW_MACROS))
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "'LI'" in str(e.value) and "--solve-names" in str(e.value) and "map.yaml" in str(e.value)
    assert main(files) == 2 and "LI" in capsys.readouterr().err
    assert main(["--solve-names", *files]) == 0
    rows = dict(line.split(",") for line in (tmp_path / "out.csv").read_text().splitlines()[1:])
    assert abs(float(rows["Cycle"]) / row["tileflow_cycles"] - 1) <= 0.02
    prob, arch, tree, _ = load_inputs(files, solve_names=True)
    assert evaluate(prob, arch, tree).cycles == float(rows["Cycle"])


def test_project_semantics_are_an_option_and_differ_where_documented():
    """The same mapping under this package's own rules: partial sums accumulate in the parent (no DRAM read of C),
    so DRAM is write-bound, 1024 / 2.9 cycles, where the reference's read-modify-writes take 536."""
    prob, arch, tree, _ = load_inputs([str(HERE / "timeloop" / f) for f in ("arch.yaml", "map.yaml", "prob.yaml")]
                                      + [str(Path(__file__).parent / "data" / "timeloop_example_macros.yaml")])
    ref, own = evaluate(prob, arch, tree), evaluate(prob, arch.with_semantics("project"), tree)
    assert ref.cycles == 536 and math.isclose(own.cycles, 1024 / 2.9)
    assert ref.level("MainMemory").total("reads") == 2304 and own.level("MainMemory").total("reads") == 1280
