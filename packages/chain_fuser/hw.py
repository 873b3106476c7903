"""The hardware as the chain model sees it: cache levels, vector ISA, cores, peak; from a shared_ir Device.

Defaults to the ``host`` preset (detected from sysfs/procfs by shared_ir). ``server_device()`` is a many-core
server used for predictions that can be checked on such a machine.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any

from .model import Level, MicroKernel


@functools.lru_cache(maxsize=1)
def host_device():
    """The host CPU as a shared_ir Device (``load_preset("host")``)."""
    from shared_ir.hardware import load_preset

    return load_preset("host").host


def resolve_device(device: Any = None):
    """A Device from None (host), a preset name, a System, a Device or a hardware dict."""
    from shared_ir.hardware import Device, System, load_hardware, load_preset

    if device is None:
        return host_device()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        device = load_preset(device)
    elif not isinstance(device, System):
        device = load_hardware(device)
    if device.host is not None:
        return device.host
    for d in device.devices:
        if d.kind == "cpu":
            return d
    raise ValueError(f"hardware {device.name!r} has no CPU device for chain_fuser")


def server_device():
    """A many-core AVX-512 server (2 × 32 cores, 1 MiB L2/core, 2 × 128 MiB L3, 8-channel DDR5 per socket):
    the machine the fusion predictions in the benchmark are stated for."""
    from shared_ir.hardware import load_hardware

    cores, f = 64, 2.6e9
    return load_hardware({"name": "server64", "host": {
        "name": "server64", "kind": "cpu",
        "memory": [
            {"name": "dram", "capacity_bytes": 512 << 30, "read_bandwidth_bytes_per_s": 400e9},
            {"name": "l3", "capacity_bytes": 128 << 20, "read_bandwidth_bytes_per_s": 16 * f * 32, "instances": 2},
            {"name": "l2", "capacity_bytes": 1 << 20, "read_bandwidth_bytes_per_s": 32 * f, "instances": cores},
            {"name": "l1", "capacity_bytes": 48 << 10, "read_bandwidth_bytes_per_s": 128 * f,
             "write_bandwidth_bytes_per_s": 64 * f, "instances": cores}],
        "compute": {"name": "server64", "frequency_hz": f, "pe_cols": 16, "macs_per_cycle_per_pe": 2.0,
                    "cores": cores, "vector_width_bits": 512}}}).host


def cores(device) -> int:
    return int(device.compute.cores)


MID_LEVEL_USABLE = 15 / 16
"""The share of a private cache level other than the innermost (here the L2) that a plan's tiles may fill. Why: the
rest holds what no tile accounts for (stack, code, the inner level's other lines, what the prefetchers bring in past
a tile's end). Measured (Attention-4k, its L2 plan with only the m tile changed, 2 threads, interleaved):
m = 1024, a working set of exactly the 1 MiB L2, 30.9 ms; 960 (94 %) 28.9; 896 28.4; 824 28.7; 768 28.3; 512 28.3.
The model had ranked 1024 first (predicted within 0.2 % of 824), 6-10 % slower in every run."""


def model_levels(device) -> list[Level]:
    """Cache levels outermost first (DRAM excluded: it is the source), each with the capacity one core's tiles may
    use (:data:`MID_LEVEL_USABLE` of a private middle level) and the total bandwidth of the level that fills it
    (on-chip levels at the core's real clock: :func:`clock_scale`)."""
    mem = list(device.memory)
    n = cores(device)
    scale = clock_scale(device)
    out = []
    for i in range(1, len(mem)):
        lv, src = mem[i], mem[i - 1]
        per_core = lv.capacity_bytes if lv.instances >= n else lv.capacity_bytes * lv.instances // n
        if lv.instances >= n and i < len(mem) - 1:  # a private level, not the innermost
            per_core = int(per_core * MID_LEVEL_USABLE)
        bw = float(src.total_read_bandwidth_bytes_per_s) * (scale if i > 1 else 1.0)  # DRAM's does not scale
        out.append(Level(lv.name, int(per_core), bw))
    return out


def l1_bandwidth(device) -> float:
    return float(device.memory[-1].total_read_bandwidth_bytes_per_s) * clock_scale(device)


def clock_hz(device=None) -> float:
    """The cores' clock while they run vector FMAs: for the host, what its measured FMA peak implies (peak over
    cores × pipes × lanes × 2 flops); else the device's declared frequency.

    Why: the host's declared frequency is the nominal clock procfs reports (2.6 GHz here) while the cores boost
    (the peak probe on Zen 5: 548 GFLOP/s = 2 cores × 2 pipes × 16 lanes × 2 × 4.28 GHz). The load ports and the
    on-chip caches run at the boosted clock too; at the nominal one the model saw 8×16 blocks (9 loads per 8 FMAs)
    and the caches' fill 1.65× slower than they are, against an FMA time taken from the measured peak."""
    dev = device or host_device()
    f = float(dev.compute.frequency_hz)
    if dev is not host_device():
        return f
    peak = measured_peak_flops()
    if not peak:
        return f
    rec = peak_record() or {}
    threads = rec.get("threads") or cores(dev)
    lanes = rec.get("lanes") or vector_lanes(dev)
    return peak / (threads * fma_pipes(saturating_accumulators(dev)) * lanes * 2)


def fma_pipes(saturating_accumulators: float) -> float:
    """Vector FMAs issued per cycle: the accumulators that saturate the pipes over the FMA's latency."""
    return max(1.0, saturating_accumulators / FMA_LATENCY_CYCLES)


def clock_scale(device=None) -> float:
    """:func:`clock_hz` over the declared frequency (1.0 for devices other than the measured host)."""
    dev = device or host_device()
    return clock_hz(dev) / float(dev.compute.frequency_hz)


def isa(device=None) -> str:
    """``avx512`` or ``avx2`` (or ``scalar``) from the device's vector width."""
    bits = int((device or host_device()).compute.vector_width_bits)
    return "avx512" if bits >= 512 else "avx2" if bits >= 256 else "scalar"


def vector_lanes(device=None) -> int:
    return max(1, int((device or host_device()).compute.vector_width_bits) // 32)


def micro_kernels(device=None) -> list[MicroKernel]:
    """Register-blocked micro kernels for the device's vector ISA (accumulators + B vectors + 1 broadcast must fit
    the register file: 32 vector registers with AVX-512, 16 with AVX2). Widths of 1, 2 or 4 vectors: the packed
    operand panels of 3 vectors (48 floats) ran 10-25x slower than their neighbours in every kernel measured here
    (YOLO-1 4x48 199 ms vs 4x64 17 ms; Inception 7x48 41 ms vs 7x32 2.0 ms), so they are not offered."""
    name = isa(device)
    lanes = vector_lanes(device)
    regs = 32 if name == "avx512" else 16
    out = []
    for nv in (1, 2, 4):
        for mr in range(1, 17):
            k = MicroKernel(mr, nv * lanes, lanes, name)
            if k.registers <= regs - 1:  # leave one for addresses/spills
                out.append(k)
    return out


def _peak_cache_path() -> str:
    from .cache import cache_dir

    return os.path.join(cache_dir(), "fma_peak.json")


def peak_record() -> dict | None:
    """The FMA-peak record that :func:`chain_fuser.peak.measure_fma_peak` cached on disk, or None. Read once per
    change of the file (its mtime): the planner asks for it for every micro kernel it scores."""
    p = _peak_cache_path()
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        return None
    if _PEAK_RECORD.get("key") != (p, mtime):
        try:
            with open(p) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = None
        _PEAK_RECORD.update(key=(p, mtime), rec=rec)
    return _PEAK_RECORD["rec"]


_PEAK_RECORD: dict = {}

FMA_LATENCY_CYCLES = 4  # of a vector FMA on every x86 core this targets (Skylake-SP and later, Zen 2 and later)

DEFAULT_SATURATING_ACCUMULATORS = 8.0
"""Independent FMA chains that keep the vector FMA pipes busy (pipes × latency) where nothing was measured: two
pipes × 4 cycles, as on the server preset and Intel AVX-512 cores."""


def saturating_accumulators(device=None, measured_only: bool = False) -> float | None:
    """Pipes × latency of the vector FMA, as measured by :func:`chain_fuser.peak.measure_fma_peak` on this host
    (peak over the one-accumulator rate); the default for other devices or when it was never measured."""
    dev = device or host_device()
    if dev is host_device():
        v = (peak_record() or {}).get("saturating_accumulators")
        if v:
            return float(v)
    return None if measured_only else DEFAULT_SATURATING_ACCUMULATORS


def measured_peak_flops(refresh: bool = False) -> float | None:
    """The FMA peak measured by :func:`chain_fuser.peak.measure_fma_peak` and cached on disk, if any."""
    rec = None if refresh else peak_record()
    try:
        return float(rec["gflops"]) * 1e9 if rec else None
    except (KeyError, TypeError, ValueError):
        return None


def peak_flops(device=None) -> float:
    """Measured FMA peak for the host when cached, else the device's declared/estimated peak."""
    dev = device or host_device()
    if dev is host_device():
        m = measured_peak_flops()
        if m:
            return m
    return float(dev.peak_flops)
