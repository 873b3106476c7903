"""The benchmark toolkit: medians on a driven clock, interleaving order, geomean, atomic JSON, CLI, machine line."""
from __future__ import annotations

import json
import math
import os

import pytest

from shared_ir import benchkit
from shared_ir.benchkit import BenchError, Interleaved, do_bench, geomean, interleave, machine_line, write_json


class FakeClock:
    """A clock the callables advance: each call of a variant adds its cost, so the medians are known exactly."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def spend(self, s: float) -> None:
        self.t += s


def test_geomean_of_known_values_and_skipped_entries():
    assert geomean([1, 4, 16]) == pytest.approx(4.0)
    assert geomean([2, 8]) == pytest.approx(4.0)
    # None, non-positive and non-finite ratios are not measurements
    assert geomean([2, None, 0, -3, float("inf"), float("nan"), 8]) == pytest.approx(4.0)
    assert math.isnan(geomean([]))
    assert geomean([None], empty=None) is None


def test_do_bench_reports_the_median_of_a_fake_clock_and_warms_up_untimed():
    wall, cpu = FakeClock(), FakeClock()
    costs = iter([100.0, 100.0, 3.0, 1.0, 2.0, 50.0, 4.0])  # two warm-up calls cost 100 s each, untimed

    def fn():
        c = next(costs)
        wall.spend(c)
        cpu.spend(c / 2)
        return c

    t = do_bench(fn, warmup=2, repeats=5, wall=wall, cpu=cpu)
    assert t.wall_s == [3.0, 1.0, 2.0, 50.0, 4.0]
    assert t.wall == 3.0 and t.cpu == 1.5  # the median ignores the 50 s outlier
    assert t.values == [3.0, 1.0, 2.0, 50.0, 4.0]
    assert t.as_dict()["repeats"] == 5


def test_do_bench_inner_calls_average_and_before_is_untimed():
    wall = FakeClock()
    t = do_bench(lambda: wall.spend(2.0), warmup=0, repeats=3, inner=4, before=lambda: wall.spend(1000.0),
                 wall=wall, cpu=wall)
    assert t.wall_s == [2.0, 2.0, 2.0]


def test_do_bench_rejects_bad_counts_naming_the_argument():
    with pytest.raises(BenchError, match="repeats"):
        do_bench(lambda: None, repeats=0)
    with pytest.raises(BenchError, match="inner"):
        do_bench(lambda: None, inner=0)


def test_interleaving_times_every_variant_once_per_round_in_a_fresh_order():
    wall = FakeClock()
    order: list[str] = []
    cost = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}

    def variant(name):
        def f():
            order.append(name)
            wall.spend(cost[name])
        return f

    timings = interleave({k: variant(k) for k in cost}, repeats=6, warmup=1, seed=3, wall=wall, cpu=wall)
    assert {k: t.wall for k, t in timings.items()} == cost
    rounds = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert len(rounds) == 7 and all(sorted(r) == list("abcd") for r in rounds)
    assert rounds[0] == rounds[1] == list("abcd")  # the warm-up and the first timed round in the given order
    assert len({tuple(r) for r in rounds[2:]}) > 1  # later rounds shuffled


def test_interleaved_passes_round_arguments_and_times_a_subset():
    wall = FakeClock()
    seen = []
    timer = Interleaved({"fast": lambda x: (seen.append(("fast", x)), wall.spend(x))[1],
                         "slow": lambda x: (seen.append(("slow", x)), wall.spend(10 * x))[1]},
                        shuffle=False, wall=wall, cpu=wall)
    for r in range(4):
        timer.round(r + 1.0, only=None if r < 1 else ["fast"])
    assert timer.timings["fast"].n == 4 and timer.timings["slow"].n == 1
    assert timer.medians()["fast"] == 2.5 and timer.medians("cpu")["slow"] == 10.0
    assert seen[:2] == [("fast", 1.0), ("slow", 1.0)]
    with pytest.raises(BenchError, match="only"):
        timer.round(1.0, only=["nope"])
    with pytest.raises(BenchError, match="clock"):
        timer.medians("gpu")


def test_write_json_is_atomic_and_keeps_the_old_file_on_an_encoding_error(tmp_path):
    import numpy as np

    p = tmp_path / "sub" / "r.json"
    write_json(p, {"x": np.float32(1.5), "n": np.int64(3), "s": {2, 1}})
    assert json.loads(p.read_text()) == {"x": 1.5, "n": 3.0, "s": [1, 2]}
    with pytest.raises(TypeError, match="object"):
        write_json(p, {"bad": object()})
    assert json.loads(p.read_text())["x"] == 1.5  # untouched
    assert os.listdir(p.parent) == ["r.json"]  # no temporary file left behind


def test_write_json_leaves_no_partial_file_when_the_write_fails(tmp_path, monkeypatch):
    from shared_ir import atomic

    p = tmp_path / "r.json"

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_json(p, {"a": 1})
    assert os.listdir(tmp_path) == []


def test_bench_parser_adds_scale_and_out():
    ap = benchkit.bench_parser("x", "d", {"tiny": 1, "small": 2}, "results/x.json")
    a = ap.parse_args([])
    assert (a.scale, a.out) == ("small", "results/x.json")
    assert ap.parse_args(["--scale", "tiny", "--out", "o.json"]).scale == "tiny"
    with pytest.raises(SystemExit):
        ap.parse_args(["--scale", "huge"])
    with pytest.raises(BenchError, match="default_scale"):
        benchkit.bench_parser("x", "d", ["full"], "o.json")


def test_machine_record_and_line_name_cpu_isa_and_cores(monkeypatch):
    rec = benchkit.machine()
    for k in ("cpu_model", "isa", "cores", "vector_width_bits"):
        assert k in rec
    line = machine_line(rec)
    assert line.startswith("machine: ") and f"ISA {rec['isa']}" in line and f"{rec['cores']} cores" in line
    fake = {"cpu_model": "AMD EPYC 7763", "isa": "avx2", "isa_detected": "avx512", "vector_width_bits": 256,
            "vector_registers": 16, "cores": 2}
    assert machine_line(fake) == ("machine: AMD EPYC 7763, ISA avx2 (capped from avx512), 256-bit vectors, "
                                  "16 registers, 2 cores")
