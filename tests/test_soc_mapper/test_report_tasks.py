import csv
import json
import os
import subprocess
import sys

import pytest
from soc_mapper.baselines.heuristics import heft
from soc_mapper.report import schedule_rows, write_gantt, write_schedule_csv

from .helpers import problem


def test_schedule_csv_and_gantt(tmp_path):
    w, soc, c = problem()
    r = heft(w, soc, c)
    rows = schedule_rows(w, soc, c, r.plan, r.result)
    assert len(rows) == len(w)
    p = tmp_path / "s.csv"
    write_schedule_csv(str(p), rows)
    got = list(csv.DictReader(open(p)))
    assert {g["layer"] for g in got} == set(w.names)
    assert max(float(g["finish_us"]) for g in got) == pytest.approx(r.result.latency * 1e6, rel=1e-4)
    for g in got:
        assert g["accelerator"] in {a.name for a in soc.accs}
        assert int(g["stream"]) < soc.accs[soc.index(g["accelerator"])].streams
    png = tmp_path / "g.png"
    write_gantt(str(png), w, soc, r.plan, r.result)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]


@pytest.mark.slow
def test_hydra_experiment_writes_tables_and_gantt(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", "experiments.run", "experiment=soc_mapper/nlp1", "hardware=soc_large",
           "task.copies=1", "task.time_budget_s=2", "task.algorithms=[comb,h2h_wave_greedy,heft]",
           "task.ga.executor=serial", f"hydra.run.dir={tmp_path}"]
    subprocess.run(cmd, cwd=root, check=True, capture_output=True, timeout=600)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["soc"] == "soc_large" and s["layers"] > 0
    for a in ("comb", "h2h_wave_greedy", "heft"):
        assert (tmp_path / f"schedule_{a}.csv").exists() and (tmp_path / f"gantt_{a}.png").exists()
    assert "latency_vs_h2h_wave_greedy" in s


def test_bench_states_the_machine_and_writes_its_json(tmp_path, capsys):
    import json

    from soc_mapper.bench import main

    from shared_ir.hostinfo import isa

    out = tmp_path / "b.json"
    doc = main(["--mixes", "vision1", "--copies", "1", "--evaluations", "12", "--no-exact", "--no-mixed3",
                "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("machine: ") and f"ISA {isa()}" in lines[0]
    d = json.loads(out.read_text())
    assert d["machine"]["cores"] >= 1 and len(d["cases"]) == 4 == len(doc["cases"])
    assert d["geomean_latency_vs_magma"] > 0 and 0 < d["geomean_pe_occupancy_vs_h2h"]
    # the same evaluation budget for every search, its curve and convergence flag, no COMB-only tie-break
    assert d["budget_evaluations"] == 12 and d["comb_config"]["energy_tie"] == 0.0
    for c in d["cases"]:
        for a in ("comb", "magma", "h2h", "magma_comb_simplified"):
            r = c["algorithms"][a]
            assert r["budget_evaluations"] == 12 and r["evaluations"] <= 12 and isinstance(r["converged"], bool)
            assert r["curve"][-1][0] == r["evaluations"]
    assert set(d["converged"]) == {f"vision1/{s}/{b}" for s in ("soc_small", "soc_large") for b in ("low", "high")}
    assert d["comb_min_generations"] >= 0 and d["geomean_latency_vs_strongest"] > 0
    assert d["geomean_latency_vs_strongest"] <= min(d[f"geomean_latency_vs_{b}"] for b in ("magma", "h2h", "heft"))
    assert set(d["faithful_vs_simplified"]) == {"magma", "h2h"}
    assert (tmp_path / "b-convergence.png").stat().st_size > 0
    assert not (tmp_path / "b.json.partial.json").exists()  # complete: the resume file is gone
