"""The host's facts have one owner: the ISA and its cap ($CHAIN_FUSER_ISA), the vector register file, the FMA
pipes, the measured peak (recorded per ISA and CPU) and the machine record; the roofline of the host uses the
measured peak when one is recorded."""
import json

import pytest

from shared_ir import hostinfo
from shared_ir.hardware import load_hardware, load_preset
from shared_ir.roofline import peak_flops


@pytest.fixture
def records(tmp_path, monkeypatch):
    """A peak-record folder of the test's own (no record of earlier runs)."""
    monkeypatch.setenv(hostinfo.PEAK_DIR_ENV, str(tmp_path))
    return tmp_path


def _lower(isa: str) -> str | None:
    order = hostinfo.ISA_ORDER
    return order[order.index(isa) - 1] if isa in order and order.index(isa) > 0 else None


def test_the_isa_cap_lowers_width_registers_and_the_host_preset(monkeypatch):
    monkeypatch.delenv(hostinfo.ISA_ENV, raising=False)
    top = hostinfo.detected_isa()
    assert hostinfo.isa() == top and not hostinfo.isa_capped()
    assert hostinfo.vector_width_bits() == hostinfo.ISA_WIDTH_BITS[top]
    monkeypatch.setenv(hostinfo.ISA_ENV, top.upper())  # the detected level itself: no cap, any case
    assert hostinfo.isa() == top and not hostinfo.isa_capped()
    low = _lower(top)
    if low is None:
        pytest.skip(f"no ISA level below {top!r} to cap to")
    monkeypatch.setenv(hostinfo.ISA_ENV, low)
    assert hostinfo.isa() == low and hostinfo.isa_capped() and hostinfo.detected_isa() == top
    bits = hostinfo.ISA_WIDTH_BITS[low]
    assert hostinfo.vector_width_bits() == bits and hostinfo.vector_lanes() == max(1, bits // 32)
    assert hostinfo.vector_registers() == hostinfo.ISA_VECTOR_REGISTERS[low]
    host = load_preset("host").host
    assert host.compute.vector_width_bits == bits and host.compute.pe_cols == max(1, bits // 32)


def test_the_register_files_of_each_isa():
    assert hostinfo.vector_registers("avx512") == 32 and hostinfo.vector_lanes("avx512") == 16
    assert hostinfo.vector_registers("avx2") == 16 and hostinfo.vector_lanes("avx2") == 8
    assert hostinfo.vector_registers("neon") == 32 and hostinfo.vector_lanes("neon") == 4


def test_the_cap_cannot_raise_the_isa_and_names_the_variable(monkeypatch):
    top = hostinfo.detected_isa()
    above = [i for i in hostinfo.ISA_ORDER if top in hostinfo.ISA_ORDER
             and hostinfo.ISA_ORDER.index(i) > hostinfo.ISA_ORDER.index(top)]
    other_arch = "neon" if top != "neon" else "avx2"
    for want in above + [other_arch]:
        monkeypatch.setenv(hostinfo.ISA_ENV, want)
        with pytest.raises(hostinfo.IsaError, match=rf"^CHAIN_FUSER_ISA='{want}': this CPU offers at most"):
            hostinfo.isa()
    monkeypatch.setenv(hostinfo.ISA_ENV, "avx1024")
    with pytest.raises(hostinfo.IsaError, match=r"^CHAIN_FUSER_ISA='avx1024': unknown ISA"):
        hostinfo.vector_width_bits()


def test_isa_from_flags():
    assert hostinfo.detected_isa(frozenset({"sse2", "avx", "avx2", "fma", "avx512f"})) == "avx512"
    assert hostinfo.detected_isa(frozenset({"sse2", "avx", "avx2", "fma"})) == "avx2"  # Zen 3
    assert hostinfo.detected_isa(frozenset({"fp", "asimd"})) == "neon"
    assert hostinfo.detected_isa(frozenset({"sse2"})) == "sse"
    assert hostinfo.vector_width_bits(frozenset({"sse2", "avx2", "fma"})) == 256


def _record(gflops: float, **kw) -> dict:
    return {"gflops": gflops, "threads": hostinfo.num_cores(), "lanes": hostinfo.vector_lanes(),
            "saturating_accumulators": 8.0, "cpu": hostinfo.cpu_id(), **kw}


def test_roofline_of_the_host_uses_the_measured_peak_when_recorded(records):
    host = load_preset("host").host
    est = hostinfo.estimated_peak_flops(hostinfo.num_cores(), hostinfo.frequency_hz(), hostinfo.vector_width_bits())
    assert hostinfo.measured_peak_flops() is None
    assert peak_flops(host) == pytest.approx(est) == pytest.approx(hostinfo.host_peak_flops())
    assert hostinfo.record_peak(_record(123.0))
    host = load_preset("host").host
    assert peak_flops(host) == pytest.approx(123e9) == pytest.approx(hostinfo.host_peak_flops())
    # `detect: measure` asks for the numpy sgemm rate instead, not the record
    measured = load_hardware({"name": "h", "host": {"detect": "measure"}}).host
    assert measured.peak_flops != pytest.approx(123e9)


def test_a_peak_record_keeps_the_best_and_stays_with_its_isa_and_cpu(records, monkeypatch):
    monkeypatch.delenv(hostinfo.ISA_ENV, raising=False)
    assert hostinfo.record_peak(_record(200.0))
    assert not hostinfo.record_peak(_record(150.0))  # a busy machine's lower rate does not replace it
    assert hostinfo.measured_peak_flops() == pytest.approx(200e9)
    assert hostinfo.record_peak(_record(210.0, saturating_accumulators=4.0))
    assert hostinfo.fma_pipes() == 1.0 and hostinfo.measured_saturating_accumulators() == 4.0
    # the FMA clock the peak implies: peak / (threads x pipes x lanes x 2 flops)
    assert hostinfo.fma_clock_hz() == pytest.approx(210e9 / (hostinfo.num_cores() * 1.0 * hostinfo.vector_lanes() * 2))
    path = hostinfo.peak_record_path()
    assert path.endswith(f"fma_peak-{hostinfo.isa()}.json")
    low = _lower(hostinfo.detected_isa())
    if low is not None:  # a capped ISA has its own record
        monkeypatch.setenv(hostinfo.ISA_ENV, low)
        assert hostinfo.peak_record() is None and hostinfo.fma_pipes() == hostinfo.FMA_PIPES
        monkeypatch.delenv(hostinfo.ISA_ENV)
    with open(path, "w") as f:  # another CPU's record (a home folder shared between machines) is not this host's
        json.dump(_record(999.0, cpu="Some Other CPU (family 1, model 2)"), f)
    assert hostinfo.peak_record() is None and hostinfo.measured_peak_flops() is None


def test_a_record_from_before_records_were_kept_per_isa_counts_for_the_detected_isa(records, monkeypatch):
    monkeypatch.delenv(hostinfo.ISA_ENV, raising=False)
    (records / "fma_peak.json").write_text(json.dumps(_record(321.0)))
    assert hostinfo.measured_peak_flops() == pytest.approx(321e9)
    (records / "fma_peak.json").write_text(json.dumps(_record(321.0, lanes=hostinfo.vector_lanes() * 2)))
    assert hostinfo.measured_peak_flops() is None  # measured with other lanes: another ISA's


def test_machine_record_is_plain_json_with_the_isa_facts(records, monkeypatch):
    monkeypatch.delenv(hostinfo.ISA_ENV, raising=False)
    rec = hostinfo.machine_record()
    assert json.loads(json.dumps(rec)) == rec
    assert rec["isa"] == hostinfo.isa() and rec["vector_width_bits"] == hostinfo.ISA_WIDTH_BITS[rec["isa"]]
    assert rec["vector_registers"] == hostinfo.ISA_VECTOR_REGISTERS[rec["isa"]]
    assert rec["fma_pipes"] == hostinfo.FMA_PIPES and rec["fma_pipes_source"] == "default"
    assert rec["cores"] == hostinfo.num_cores() and rec["peak_flops_measured"] is None
    assert rec["peak_flops_estimated"] > 0 and rec["caches"] == hostinfo.caches()
    hostinfo.record_peak(_record(100.0, saturating_accumulators=6.0))
    rec = hostinfo.machine_record()
    assert rec["peak_flops_measured"] == pytest.approx(100e9)
    assert rec["fma_pipes"] == 1.5 and rec["fma_pipes_source"] == "measured"
