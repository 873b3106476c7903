"""experiments.report: headline figures read from the run (never typed in), missing ones shown, citations, HTML."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments import report as rep
from experiments import report_spec as rs
from experiments import store as st

BENCH = {
    "fusion_perf": {"exact_fraction": 1.0, "n_random_mappings": 500, "us_per_eval": 412.0,
                    "attention_dse": {"edge_accel": {"geomean_vs_flat": 1.93, "geomean_vs_layer_by_layer": 3.1},
                                      "cloud_accel": {"geomean_vs_flat": 1.2}}},
    "chain_fuser": {"shapes": [{"name": "bert_small", "ratios": {"vs_openblas": 1.2, "vs_torch": 2.1}},
                               {"name": "vit_base_14", "ratios": {"vs_openblas": 1.6, "vs_torch": 2.4}}],
                    "reference_geomean_vs_torch": 2.2, "reference_geomean_vs_openblas": 1.3,
                    "geomean_vs_metaschedule": 2.5, "reference_peak_fraction": 0.81, "fma_peak_gflops": 501.3,
                    "attention_vs_sdpa": 1.6},
    "soc_mapper": {"geomean_latency_vs_magma": 1.31, "geomean_latency_vs_h2h": 1.42,
                   "energy_reduction_vs_magma": 0.25, "energy_reduction_vs_h2h": 0.3,
                   "cases": [{"mix": "vision1", "soc": "soc_small"}]},
    "dynamic_batcher": {"speedup_vs_best_baseline": {"chain": 1.2, "tree": 1.5, "lattice": 2.6},
                        "sched_exec_speedup_vs_best_baseline": {"lattice": 2.1}},
    "offload_trainer": {"modeled_iteration_s": {"rtx4090_6.7b": {"lsp": 1.0, "zero_offload": 2.2, "native": 0.9},
                                                "laptop_1.3b": {"lsp": 0.5, "zero_offload": 1.1, "native": 0.45}},
                        "memory_gb": {"rtx4090_6.7b": {"gpu_gb": 17.5, "fits": True},
                                      "laptop_1.3b": {"gpu_gb": 3.7, "fits": True}},
                        "convergence": {"full_ft": {"eval_loss": 2.0}, "lsp": {"eval_loss": 2.04}}},
}


def _row(md: str, figure_start: str) -> str:
    lines = [ln for ln in md.splitlines() if ln.startswith(f"| {figure_start}")]
    assert lines, f"no row starting with {figure_start!r}"
    return lines[0]


def _write_bench(results: Path, docs=BENCH) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for pkg, doc in docs.items():
        (results / f"bench-{pkg}.json").write_text(json.dumps(doc))


def test_report_with_nothing_measured(tmp_path):
    paths = rep.write_report(tmp_path / "none.sqlite", "reproduce-small", tmp_path / "report",
                             results_dir=tmp_path / "results", scale="small")
    md = paths["md"].read_text()
    assert "Jobs: 0 done, 0 failed, 0 unfinished." in md
    for h in rs.HEADLINES:  # every headline has a row, each saying why it is missing
        assert "| not measured (" in _row(md, h.figure)
    assert "not measured (no bench-soc_mapper.json yet and no benchmark run in sweep" in md
    for pkg in rs.REFERENCE_FILES:
        assert f"| {pkg} | {rs.SYSTEMS[pkg]} | 0 of {len(rs.headlines_for(pkg))} |" in md
    html = paths["html"].read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<table>") == 1 + len(rs.REFERENCE_FILES)


def test_measured_figures_come_from_the_bench_json(tmp_path):
    results = tmp_path / "results"
    _write_bench(results)
    md = rep.write_report(tmp_path / "none.sqlite", "s", tmp_path / "report", results_dir=results)["md"].read_text()
    soc = _row(md, "Latency: COMB vs MAGMA")
    assert "| 1.28× lower latency than MAGMA | soc_mapper.md:" in soc or "(reference file not available" in soc
    assert "| 1.31× |" in soc and "bench-soc_mapper.json: geomean_latency_vs_magma" in soc
    assert "| 25.0% |" in _row(md, "Energy reduction vs MAGMA")
    assert "not measured (bench-soc_mapper.json has no /^(geomean_)?(pe_)?occupancy" in _row(md, "Mean PE occupancy")
    assert "| 0.412 ms (412.0 µs) |" in _row(md, "Time of one evaluation")
    assert "| 1.93× |" in _row(md, "Attention DSE at edge scale")
    assert "| of 500 random mappings: 1.000 |" in _row(md, "Exactness of the modelled")
    best = _row(md, "Reference GEMM chains: fused kernel vs the best library, best shape")
    assert "| 1.60× (max over 2: shapes[1].ratios.vs_openblas) |" in best
    assert "| 81.0% |" in _row(md, "Reference chains: fraction")
    assert "| vs the fastest baseline: 2.60×; ablation: schedule+plan+execute: 2.10× |" in _row(
        md, "Throughput vs the fastest baseline (real DyNet included), lattice")
    native = _row(md, "Iteration time: LSP vs native")
    assert "rtx4090_6.7b: 1.111× (+11.1%)" in native and "laptop_1.3b: 1.111× (+11.1%)" in native
    assert "rtx4090_6.7b: 2.44×" in _row(md, "ZeRO-Offload vs GPU compute alone")
    assert "memory_gb.rtx4090_6.7b.gpu_gb: 17.50 GB" in _row(md, "GPU memory with LSP")
    assert "eval loss LSP / full fine-tuning: 1.02" in _row(md, "Fine-tuning quality")
    # provenance: a file written outside the sweep says so
    assert "command `make bench-soc_mapper (run outside sweep s)`" in md
    assert "### All scalar figures of bench-soc_mapper.json" in md
    # not typed in: change a number, the report changes
    docs = json.loads(json.dumps(BENCH))
    docs["soc_mapper"]["geomean_latency_vs_magma"] = 1.77
    _write_bench(results, docs)
    md2 = rep.write_report(tmp_path / "none.sqlite", "s", tmp_path / "report", results_dir=results)["md"].read_text()
    assert "| 1.77× |" in _row(md2, "Latency: COMB vs MAGMA")


def test_store_rows_are_preferred_and_failures_explained(tmp_path):
    results = tmp_path / "results"
    _write_bench(results)  # stale files that the sweep's own results must win over
    s = st.ResultsStore(tmp_path / "s.sqlite")
    machine = {"cpu": "Test CPU 9000", "cpus_usable": 2, "hostname": "box", "gpus": []}
    k = st.job_key("bench/soc_mapper", ["--scale", "small"])
    s.start("sw", k, experiment="bench/soc_mapper", overrides=["--scale", "small"], machine=machine,
            command="python -m soc_mapper.bench --scale small")
    s.finish("sw", k, status="done", experiment="bench/soc_mapper", summary={"geomean_latency_vs_magma": 1.5})
    s.finish("sw", "kb", status="failed", experiment="bench/dynamic_batcher", error="RuntimeError: boom\ntb")
    out = tmp_path / "elsewhere" / "conv"
    out.mkdir(parents=True)
    (out / "chains.csv").write_text("a,b\n1,2\n")
    (out / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    s.finish("sw", "kc", status="done", experiment="fusion_perf/conv_chain", out_dir=str(out),
             summary={"geomean_vs_fused_layer": 1.4, "hardware": "edge_accel", "cases": 6})
    s.start("sw", "kd", experiment="soc_mapper/mixed3", out_dir=str(tmp_path / "gone"))  # killed: no end
    report_dir = tmp_path / "report"
    md = rep.write_report(s.path, "sw", report_dir, results_dir=results)["md"].read_text()
    soc = _row(md, "Latency: COMB vs MAGMA")
    assert "| 1.50× |" in soc and "[1] bench-soc_mapper.json" in soc
    assert ("[1] `bench-soc_mapper.json` — command `python -m soc_mapper.bench --scale small`; machine: "
            "Test CPU 9000 · 2 cores · no GPU (box)") in md
    assert "not measured (bench-soc_mapper.json has no energy_reduction_vs_magma)" in md
    assert "not measured (the benchmark failed in sweep sw: RuntimeError: boom)" in \
        _row(md, "Throughput vs the fastest baseline (real DyNet included), chain")
    conv = _row(md, "Conv chains")
    assert "| 1.40× |" in conv and "experiment=fusion_perf/conv_chain: geomean_vs_fused_layer" in conv
    # files of a run outside the report folder are copied in, and linked/embedded
    assert re.search(r"\[chains\.csv\]\(files/fusion_perf_conv_chain/kc/chains\.csv\)", md)
    assert "![plot](files/fusion_perf_conv_chain/kc/plot.png)" in md
    assert (report_dir / "files" / "fusion_perf_conv_chain" / "kc" / "chains.csv").read_text() == "a,b\n1,2\n"
    assert "hardware=edge_accel" in md
    assert "## Failed and unfinished jobs" in md
    assert "| soc_mapper/mixed3 | running | no end recorded (killed or still running) |" in md
    assert "Jobs: 2 done, 1 failed, 1 unfinished." in md


def test_a_broken_spec_entry_does_not_break_the_report(tmp_path):
    results = tmp_path / "results"
    _write_bench(results)
    spec = (rs.Headline("soc_mapper", "Broken", "1×", "1.28×", compute=lambda d: 1 / 0),
            rs.Headline("soc_mapper", "Scaled", "1×", "1.28×", keys=("geomean_latency_vs_h2h",), unit="x"))
    md = rep.write_report(tmp_path / "none.sqlite", "s", tmp_path / "report", results_dir=results,
                          spec=spec)["md"].read_text()
    assert "computing it failed (ZeroDivisionError" in _row(md, "Broken")
    assert "| 1.42× |" in _row(md, "Scaled")


def test_every_quote_is_in_its_reference_file():
    ref = rep.find_reference_dir()
    if ref is None:
        pytest.skip("../shared/reference is not available here")
    for h in rs.HEADLINES:
        c = rep.cite(ref, rs.REFERENCE_FILES[h.package], h.quote)
        assert re.fullmatch(r"\w+\.md:\d+", c), (h.figure, c)
        # the numbers of the published figure are the reference's (none made up in report_spec)
        text = (ref / rs.REFERENCE_FILES[h.package]).read_text()
        for num in re.findall(r"\d+(?:[.,]\d+)?", h.published):
            assert num in text, (h.figure, num)


def test_spec_validation():
    with pytest.raises(ValueError, match="headline.unit must be one of"):
        rs.Headline("soc_mapper", "f", "p", "q", keys=("a",), unit="parsecs")
    with pytest.raises(ValueError, match="needs keys, a pattern or compute"):
        rs.Headline("soc_mapper", "f", "p", "q")
    with pytest.raises(ValueError, match="headline.package must be one of"):
        rs.Headline("nope", "f", "p", "q", keys=("a",))
    assert rs.get_path({"a": [{"b": 2}]}, "a[0].b") == 2
    with pytest.raises(KeyError):
        rs.get_path({"a": []}, "a[0]")


def test_fallback_markdown_converter():
    md = ("# Title\n\nSome `code` and **bold** [link](x.csv).\n\n| a | b |\n|---|---|\n| 1 \\| 2 | ![p](p.png) |\n\n"
          "- one\n- two\n\n```\n<raw>\n```\n")
    h = rep.simple_markdown_to_html(md)
    assert "<h1>Title</h1>" in h and "<code>code</code>" in h and "<strong>bold</strong>" in h
    assert '<a href="x.csv">link</a>' in h
    assert "<th>a</th><th>b</th>" in h and "<td>1 | 2</td>" in h and '<img src="p.png" alt="p">' in h
    assert "<li>one</li><li>two</li>" in h.replace("\n", "")
    assert "&lt;raw&gt;" in h
