"""The fault sweep: every case ends in a typed error or a recovery; a raw exception or a silent result is listed
as FAILED; the report shows the table."""
from pathlib import Path

from experiments import faults
from experiments.report import _fault_section


def test_the_fast_cases_give_typed_errors_or_recoveries(tmp_path):
    fast = [c for c in faults.CASES if c[0] in ("shared_ir", "dynamic_batcher", "offload_trainer", "soc_mapper",
                                                "fusion_perf")]
    rows = [faults.run_case(*c) for c in fast]
    assert rows and all(r["outcome"] in ("typed error", "recovered") for r in rows), rows
    assert all("<dir>" in r["detail"] or r["outcome"] == "recovered" or "task.mix" in r["detail"]
               or "ga.population" in r["detail"] or "host." in r["detail"] for r in rows)


def test_a_raw_exception_or_a_silent_result_is_a_failure():
    def raw(d: Path) -> str:
        return {}["missing"]

    def silent(d: Path) -> str:
        raise faults.Silent("returned a wrong result")

    assert faults.run_case("x", "raw", raw)["outcome"] == "FAILED"
    assert faults.run_case("x", "silent", silent)["detail"] == "silent: returned a wrong result"


def test_the_report_renders_the_sweep(tmp_path):
    faults._write(str(tmp_path / "faults.json"), {"cases": [faults.run_case(*faults.CASES[0])], "failed": 0, "n": 1})
    md = "\n".join(_fault_section(tmp_path))
    assert "1 of 1 faults" in md and "empty ONNX file" in md and (tmp_path / "faults.csv").exists()
    assert "Not run" in "\n".join(_fault_section(tmp_path / "none"))
