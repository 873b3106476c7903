"""The hardware description: presets, host detection, strict loading with path-naming errors, mesh bandwidth."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

from shared_ir.hardware import (
    ComputeUnit,
    Device,
    HardwareError,
    Link,
    MemoryLevel,
    System,
    Topology,
    dump_hardware,
    list_presets,
    load_hardware,
    load_preset,
    preset_dir,
)

BROKEN = Path(__file__).parent / "broken_hw"
REQUIRED_PRESETS = {"host", "rtx4090_workstation", "laptop_4gb", "soc_small", "soc_large", "edge_accel", "cloud_accel",
                    "systolic_16x16"}


def _dev(name="d", **kw) -> dict:
    d = {"name": name, "kind": "accelerator", "compute": {"frequency_hz": 1e9},
         "memory": [{"name": "dram", "capacity_bytes": 1 << 20, "read_bandwidth_bytes_per_s": 1e9}]}
    d.update(kw)
    return d


# --- presets ----------------------------------------------------------------------------------------------------
def test_preset_dir_lists_required_presets():
    assert preset_dir().is_dir()
    assert REQUIRED_PRESETS <= set(list_presets())


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_preset_loads_and_round_trips(name):
    s = load_preset(name)
    assert isinstance(s, System) and s.name == name
    d = dump_hardware(s)
    assert load_hardware(d) == s
    # the dump is plain YAML (lists, numbers, strings) and survives a text round trip
    assert load_hardware(yaml.safe_dump(d)) == s
    assert load_hardware(json.loads(json.dumps(d))) == s
    for dev in s.all_devices:
        assert dev.peak_flops > 0 and dev.dram_bandwidth_bytes_per_s > 0


def test_preset_name_and_pickle():
    import pickle

    assert load_hardware("edge_accel") == load_preset("edge_accel")
    with pytest.raises(HardwareError, match=r"must be a mapping \(or a preset name: \[.*'soc_small'"):
        load_hardware("no_such_preset")
    s = load_preset("soc_small")
    assert pickle.loads(pickle.dumps(s)) == s
    try:
        load_hardware(BROKEN / "negative_capacity.yaml")
    except HardwareError as e:
        e2 = pickle.loads(pickle.dumps(e))
        assert (str(e2), e2.path, e2.value) == (str(e), e.path, e.value)


def test_unknown_preset_lists_available():
    with pytest.raises(HardwareError, match=r"unknown hardware preset 'nope'.*soc_small"):
        load_preset("nope")


def test_rtx4090_figures():
    s = load_preset("rtx4090_workstation")
    gpu = s.device("gpu")
    assert gpu.kind == "gpu" and gpu.memory_capacity_bytes == 24 << 30
    assert gpu.peak_flops == pytest.approx(82.6e12, rel=0.005)
    assert gpu.compute.peak("bfloat16") == pytest.approx(165.2e12)
    assert gpu.dram_bandwidth_bytes_per_s == pytest.approx(1008e9)
    assert s.bandwidth("cpu", "gpu", pinned=True) == 25e9
    assert s.bandwidth("gpu", "cpu") < s.bandwidth("gpu", "cpu", pinned=True)  # pageable is slower; either direction
    assert s.link("gpu", "cpu").duplex == "full"
    assert s.host.compute.cores == 16 and s.host.memory_capacity_bytes >= 64 << 30


def test_laptop_figures():
    s = load_preset("laptop_4gb")
    gpu = s.primary
    assert gpu.memory_capacity_bytes == 4 << 30
    assert 3e12 < gpu.peak_flops < 5e12
    assert 10e9 <= s.bandwidth("cpu", "gpu", pinned=True) <= 20e9  # LSP-Offload: 10-20 GB/s pinned
    assert s.host.compute.cores == 8 and s.host.memory_capacity_bytes == 16 << 30


@pytest.mark.parametrize("name, layout", [
    ("soc_small", {"nvdla": 2, "shidiannao": 1, "tpu": 1}),
    ("soc_large", {"nvdla": 4, "shidiannao": 2, "tpu": 2}),
])
def test_soc_presets(name, layout):
    s = load_preset(name)
    kinds = [d.compute.dataflow for d in s.devices]
    assert {k: kinds.count(k) for k in set(kinds)} == layout
    xs = {d.mesh_position[0] for d in s.devices}
    ys = {d.mesh_position[1] for d in s.devices}
    assert (len(xs), len(ys)) == ((2, 2) if name == "soc_small" else (4, 2))
    streams = {"nvdla": 2, "shidiannao": 1, "tpu": 2}
    for d in s.devices:
        c = d.compute
        assert (c.pe_rows, c.pe_cols, c.frequency_hz) == (128, 128, 2e8)
        assert c.streams == streams[c.dataflow] and d.memory[0].word_bytes == 1 and c.power_w > 0
    nv, sdn, tpu = (next(d for d in s.devices if d.compute.dataflow == k) for k in ("nvdla", "shidiannao", "tpu"))
    assert nv.supports("conv2d") and not nv.supports("pool")
    assert sdn.supports("pool") and not sdn.supports("matmul")
    assert tpu.supports("batch_matmul") and tpu.supports("conv2d") and not tpu.supports("softmax")
    assert s.topology.nn_bandwidth_bytes_per_s == 3.2e9 and s.topology.intra_bandwidth_bytes_per_s == 32e9


def test_soc_small_layout_matches_reference():
    s = load_preset("soc_small")
    at = {d.mesh_position: d.compute.dataflow for d in s.devices}
    assert at == {(0, 0): "nvdla", (1, 0): "nvdla", (0, 1): "shidiannao", (1, 1): "tpu"}


def test_tileflow_presets_in_words_per_cycle():
    edge = load_preset("edge_accel").primary
    f = edge.compute.frequency_hz
    assert edge.compute.num_pes == 32 * 32
    assert edge.dram.read_words_per_cycle(f) == pytest.approx(25)
    assert edge.dram.write_words_per_cycle(f) == pytest.approx(10)
    assert edge.level("l1").instances == 4 and edge.fanout(0) == (2, 2)
    cloud = load_preset("cloud_accel").primary
    f = cloud.compute.frequency_hz
    assert cloud.compute.num_pes == 65536
    assert cloud.dram.read_words_per_cycle(f) == pytest.approx(160)
    l2, l1 = cloud.level("l2"), cloud.level("l1")
    assert (l2.instances, l2.read_words_per_cycle(f), l2.capacity_bytes) == (4, pytest.approx(800), 40 << 20)
    assert (l1.instances, l1.read_words_per_cycle(f), l1.capacity_bytes) == (16, pytest.approx(4000), 20 << 20)
    assert [cloud.fanout(i) for i in range(4)] == [(2, 2), (2, 2), (64, 64), (1, 1)]


def test_systolic_preset_energies():
    d = load_preset("systolic_16x16").primary
    assert d.compute.num_pes == 256 and d.level("rf").instances == 256 and d.fanout(1) == (16, 16)
    e = [lv.read_energy_pj for lv in d.memory]
    assert e == sorted(e, reverse=True)  # DRAM > buffer > register file
    assert d.compute.mac_energy_pj > 0 and d.level("rf").read_energy_pj_per_byte() == 0.25


# --- host detection ---------------------------------------------------------------------------------------------
def test_host_detection():
    from shared_ir import hostinfo

    s = load_preset("host")
    h = s.host
    assert s.primary is h and h.kind == "cpu"
    assert h.compute.cores == len(os.sched_getaffinity(0))
    vec = hostinfo.vector_width_bits()
    flags = hostinfo.cpu_flags()
    top = 512 if "avx512f" in flags else 256 if "avx2" in flags else vec
    assert vec == (hostinfo.ISA_WIDTH_BITS[hostinfo.isa()] if hostinfo.isa_capped() else top)  # $CHAIN_FUSER_ISA
    assert h.compute.vector_width_bits == vec
    # the measured FMA peak when one is recorded, else the estimate from the same facts
    assert h.peak_flops == pytest.approx(hostinfo.measured_peak_flops() or
                                         hostinfo.estimated_peak_flops(h.compute.cores, h.compute.frequency_hz, vec))
    assert h.dram.capacity_bytes == hostinfo.memory_bytes() > 0
    caches = hostinfo.caches()
    if caches:  # sysfs or lscpu told us something: each cache is a level, innermost smallest
        assert {c["name"] for c in caches} <= {lv.name for lv in h.memory}
        assert h.memory[-1].capacity_bytes == min(c["size_bytes"] for c in caches)
    assert load_hardware(dump_hardware(s)) == s


def test_core_count_survives_pinning_the_calling_thread():
    """A benchmark pins its calling thread to one core; the process still runs its parallel regions on all of them,
    so the core count (and every kernel generated for it) must not drop to one."""
    import threading

    from shared_ir import hostinfo

    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and at least 2 usable CPUs")
    before = hostinfo.num_cores()
    seen = {}

    def pinned():  # a thread of its own: pinning it leaves the test process's other threads alone
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        seen["mask"] = len(os.sched_getaffinity(0))
        seen["cores"] = hostinfo.num_cores()

    t = threading.Thread(target=pinned)
    t.start()
    t.join()
    assert seen["mask"] == 1 and seen["cores"] == before >= 2


def test_host_detect_overrides_and_errors():
    s = load_hardware({"name": "h", "host": {"detect": True, "name": "me", "compute": {"peak_flops": 1.5e12}}})
    assert s.host.name == "me" and s.host.peak_flops == 1.5e12 and s.host.compute.cores >= 1
    with pytest.raises(HardwareError, match=r"^host\.detect must be true, false or 'measure', got 'yes please'"):
        load_hardware({"name": "h", "host": {"detect": "yes please"}})


def test_measured_peak():
    from shared_ir.hostinfo import measure_matmul_flops

    assert measure_matmul_flops(n=64, repeats=1) > 1e6  # a real (tiny) sgemm timing, not a constant


def test_size_parsing():
    from shared_ir.hostinfo import _cpu_list, _size_bytes

    assert _size_bytes("32K") == 32768 and _size_bytes("2 MiB") == 2 << 20 and _size_bytes("1024K") == 1 << 20
    assert _cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}


# --- broken files -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fname, path, message", [
    ("negative_capacity.yaml", "devices[1].memory[0].capacity_bytes",
     "devices[1].memory[0].capacity_bytes must be > 0, got -5"),
    ("unknown_field.yaml", "devices[0].compute.frobnicate", "devices[0].compute.frobnicate: unknown field"),
    ("missing_memory.yaml", "devices[0].memory", "devices[0].memory: at least one memory level required"),
    ("unknown_link_device.yaml", "links[2].dst", "links[2].dst: unknown device 'npu9'"),
    ("mesh_clash.yaml", "devices[3].mesh_position",
     "devices[3].mesh_position: devices[3] 'sdn0' and devices[1] 'tpu0' are both at [0, 1]"),
    ("non_numeric_bandwidth.yaml", "devices[0].memory[0].read_bandwidth_bytes_per_s",
     "devices[0].memory[0].read_bandwidth_bytes_per_s must be a number, got 'fast'"),
    ("bad_yaml.yaml", None, "bad_yaml.yaml: YAML does not parse at line 4"),
    ("unknown_op_kind.yaml", "devices[0].compute.op_kinds[1]",
     "devices[0].compute.op_kinds[1]: unknown op kind 'convolution'"),
    ("reversed_levels.yaml", "devices[0].memory[1].capacity_bytes",
     "devices[0].memory[1].capacity_bytes must be <= memory[0].capacity_bytes"),
    ("missing_topology_position.yaml", "devices[1].mesh_position",
     "devices[1].mesh_position: required by the mesh2d topology (device 'n1')"),
    ("missing_frequency.yaml", "devices[0].compute.frequency_hz",
     "devices[0].compute.frequency_hz: required field missing"),
    ("bad_mesh.yaml", "devices[0].memory[1].mesh_x",
     "devices[0].memory[1].mesh_x must satisfy mesh_x × mesh_y == instances (16), got 4 × 2"),
])
def test_broken_file(fname, path, message):
    with pytest.raises(HardwareError) as ei:
        load_hardware(BROKEN / fname)
    assert message in str(ei.value)
    assert isinstance(ei.value, ValueError)
    if path is not None:
        assert ei.value.path == path and str(ei.value).startswith(path)


def test_every_broken_file_is_tested():
    tested = {p for p in test_broken_file.pytestmark[0].args[1]}  # type: ignore[attr-defined]
    assert {p.name for p in BROKEN.glob("*.yaml")} == {t[0] for t in tested}


@pytest.mark.parametrize("patch, message", [
    ({"kind": "fpga"}, "devices[0].kind must be one of ['cpu', 'gpu', 'accelerator'], got 'fpga'"),
    ({"compute": {"frequency_hz": 1e9, "dataflow": "magic"}}, "devices[0].compute.dataflow must be one of"),
    ({"compute": {"frequency_hz": True}}, "devices[0].compute.frequency_hz must be a number, got True"),
    ({"compute": {"frequency_hz": 1e9, "pe_rows": 2.5}}, "devices[0].compute.pe_rows must be an integer, got 2.5"),
    ({"compute": {"frequency_hz": "inf"}}, "devices[0].compute.frequency_hz must be finite, got 'inf'"),
    ({"compute": {"frequency_hz": 1e9, "peak_flops_by_dtype": {"fp8x": 1e12}}},
     "devices[0].compute.peak_flops_by_dtype.fp8x: unknown dtype"),
    ({"mesh_position": [0, 1, 2]}, "devices[0].mesh_position must have 2 items, got [0, 1, 2]"),
    ({"memory": "dram"}, "devices[0].memory must be a list, got 'dram'"),
    ({"compute": {"frequency_hz": 1e9, "pe_rows": 3},  # 3 PEs cannot split over 2 register files
      "memory": [{"name": "dram", "capacity_bytes": 1 << 20, "read_bandwidth_bytes_per_s": 1e9},
                 {"name": "rf", "capacity_bytes": 64, "read_bandwidth_bytes_per_s": 1e9, "instances": 2}]},
     "devices[0].memory[1].instances must divide the number of PEs (3), got 2"),
])
def test_inline_errors(patch, message):
    with pytest.raises(HardwareError) as ei:
        load_hardware({"name": "s", "devices": [_dev(**patch)]})
    assert message in str(ei.value)


def test_system_level_errors():
    with pytest.raises(HardwareError, match=r"^devices\[1\]\.name: duplicate device name 'd' \(also devices\[0\]\)"):
        load_hardware({"name": "s", "devices": [_dev(), _dev()]})
    with pytest.raises(HardwareError, match=r"^devices: a system needs a host or at least one device"):
        load_hardware({"name": "s"})
    with pytest.raises(HardwareError, match=r"^links\[0\]\.dst must differ from src"):
        load_hardware({"name": "s", "devices": [_dev()],
                       "links": [{"src": "d", "dst": "d", "bandwidth_bytes_per_s": 1e9}]})
    with pytest.raises(HardwareError, match=r"^links\[1\]: duplicate link"):
        load_hardware({"name": "s", "devices": [_dev("a"), _dev("b")],
                       "links": [{"src": "a", "dst": "b", "bandwidth_bytes_per_s": 1e9},
                                 {"src": "b", "dst": "a", "bandwidth_bytes_per_s": 2e9}]})
    with pytest.raises(HardwareError, match=r"^links\[0\]\.duplex must be one of \['full', 'half'\], got 'simplex'"):
        load_hardware({"name": "s", "devices": [_dev("a"), _dev("b")],
                       "links": [{"src": "a", "dst": "b", "bandwidth_bytes_per_s": 1e9, "duplex": "simplex"}]})
    with pytest.raises(HardwareError, match=r"^topology\.nn_bandwidth_bytes_per_s must be > 0, got -1"):
        load_hardware({"name": "s", "devices": [_dev(mesh_position=[0, 0])],
                       "topology": {"nn_bandwidth_bytes_per_s": -1, "intra_bandwidth_bytes_per_s": 1e9}})
    with pytest.raises(HardwareError, match=r"^colour: unknown field"):
        load_hardware({"name": "s", "devices": [_dev()], "colour": "red"})
    with pytest.raises(HardwareError, match=r"must be a mapping \(or a preset name: .*\), got list"):
        load_hardware("- 1\n- 2\n")
    with pytest.raises(HardwareError, match="hardware file not found"):
        load_hardware("does/not/exist.yaml")


# --- loading sources, defaults ----------------------------------------------------------------------------------
def test_load_sources(tmp_path):
    want = load_preset("soc_small")
    d = dump_hardware(want)
    (tmp_path / "s.json").write_text(json.dumps(d))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    assert load_hardware(tmp_path / "s.json") == want
    assert load_hardware(str(tmp_path / "s.yaml")) == want
    assert load_hardware(yaml.safe_dump(d)) == want
    assert load_hardware(want) is want
    from omegaconf import OmegaConf

    assert load_hardware(OmegaConf.create(d)) == want
    # PyYAML reads 3.2e9 (no dot) as a string: numeric strings are accepted for number fields
    s = load_hardware("name: x\ndevices: [{name: a, kind: cpu, compute: {frequency_hz: 3e9},\n"
                      "  memory: [{name: dram, capacity_bytes: 1e6, read_bandwidth_bytes_per_s: 1_000e6}]}]\n")
    assert s.primary.compute.frequency_hz == 3e9 and s.primary.dram.capacity_bytes == 10**6
    assert s.primary.dram.read_bandwidth_bytes_per_s == 1e9


def test_defaults_filled_in():
    lv = MemoryLevel("buf", 1024, 2e9, read_energy_pj=3.0, instances=8)
    assert lv.write_bandwidth_bytes_per_s == 2e9 and lv.write_energy_pj == 3.0
    assert (lv.mesh_x, lv.mesh_y) == (8, 1) and lv.total_capacity_bytes == 8192
    assert MemoryLevel("b", 1024, 1e9, instances=8, mesh_y=2).mesh_x == 4
    assert lv.read_words_per_cycle(1e9) == 0.5 and MemoryLevel("w", 4, 8e9, word_bytes=2).read_words_per_cycle(1e9) == 4
    c = ComputeUnit(1e9, pe_rows=4, pe_cols=4, macs_per_cycle_per_pe=2, cores=2)
    assert c.num_pes == 32 and c.peak() == 2 * 64 * 1e9 and c.supports("softmax")
    assert ComputeUnit(1e9, peak_flops=5.0).peak() == 5.0
    dev = Device("d", "cpu", [lv], c)
    assert isinstance(dev.memory, tuple) and dev.level("buf") is lv and dev.fanout(0) == (4, 1)
    assert hash(dev) == hash(Device("d", "cpu", (lv,), c))  # frozen and hashable: usable as dict keys
    with pytest.raises(HardwareError, match=r"no level 'l9'"):
        dev.level("l9")
    with pytest.raises(HardwareError, match=r"^capacity_bytes must be > 0, got 0$"):
        MemoryLevel("x", 0, 1e9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lv.capacity_bytes = 5  # type: ignore[misc]


# --- bandwidth on the mesh --------------------------------------------------------------------------------------
def test_bandwidth_follows_manhattan_distance():
    s = load_preset("soc_large")
    nn = s.topology.nn_bandwidth_bytes_per_s
    names = [d.name for d in s.devices]
    seen_hops = set()
    for a in names:
        for b in names:
            pa, pb = s.device(a).mesh_position, s.device(b).mesh_position
            hops = abs(pa[0] - pb[0]) + abs(pa[1] - pb[1])
            seen_hops.add(hops)
            assert s.hops(a, b) == hops
            want = 32e9 if a == b else nn / hops
            assert s.bandwidth(a, b) == pytest.approx(want)
            assert s.transfer_time(a, b, 1 << 20) == pytest.approx((1 << 20) / want)
    assert seen_hops == {0, 1, 2, 3, 4}  # a 4×2 mesh: distances up to 3 + 1
    # the corner-to-corner pair is 4 hops apart: a quarter of the neighbour bandwidth
    assert s.bandwidth("shidiannao0", "shidiannao1") == pytest.approx(3.2e9 / 4)


def test_low_bandwidth_setting_and_explicit_links():
    d = dump_hardware(load_preset("soc_small"))
    d["topology"]["nn_bandwidth_bytes_per_s"] = 0.8e9  # the paper's "low" setting
    low = load_hardware(d)
    assert low.bandwidth("nvdla0", "tpu0") == pytest.approx(0.8e9 / 2)
    fast = low.replace(links=(Link("nvdla0", "tpu0", 10e9, latency_s=1e-6),))
    assert fast.bandwidth("tpu0", "nvdla0") == 10e9  # the explicit link wins, either direction
    assert fast.bandwidth("nvdla0", "nvdla1") == pytest.approx(0.8e9)  # others still on the mesh
    assert fast.transfer_time("nvdla0", "tpu0", 10**7) == pytest.approx(1e-6 + 1e-3)
    assert fast.transfer_time("nvdla0", "tpu0", 0) == 0.0


def test_hydra_composes_hardware_group():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(preset_dir().parent.resolve()), version_base=None):
        cfg = compose(config_name=None, overrides=["+hardware=soc_small",
                                                   "hardware.topology.nn_bandwidth_bytes_per_s=0.8e9"])
        s = load_hardware(cfg.hardware)
        assert s.topology.nn_bandwidth_bytes_per_s == 0.8e9 and len(s.devices) == 4
        cfg = compose(config_name=None, overrides=["+hardware=host"])
        assert load_hardware(cfg.hardware).host.kind == "cpu"


def test_topology_requires_positions_only_with_topology():
    s = System("s", devices=(Device("a", "gpu", [MemoryLevel("m", 10, 1.0)], ComputeUnit(1e9)),))
    assert s.bandwidth("a", "a") == 1.0  # no topology: same device -> its DRAM bandwidth
    with pytest.raises(HardwareError, match="no device 'b'"):
        s.bandwidth("a", "b")
    two = System("s", devices=(Device("a", "gpu", [MemoryLevel("m", 10, 1.0)], ComputeUnit(1e9)),
                               Device("b", "gpu", [MemoryLevel("m", 10, 1.0)], ComputeUnit(1e9))))
    with pytest.raises(HardwareError, match="no link or topology path between 'a' and 'b'"):
        two.bandwidth("a", "b")
    assert Topology(1e9, 1e10).bandwidth((0, 0), (2, 1)) == pytest.approx(1e9 / 3)
