"""The hardware as the chain model sees it: cache levels, vector ISA, cores, peak; from a shared_ir Device.

Defaults to the ``host`` preset (detected by :mod:`shared_ir.hostinfo`, the one owner of the host's ISA, clock,
FMA pipes and measured peak; ``$CHAIN_FUSER_ISA`` caps the ISA there). ``server_device()`` is the ``server64``
preset, a many-core server used for predictions that can be checked on such a machine.
"""
from __future__ import annotations

import functools
from typing import Any

from .model import Level, MicroKernel

_HOSTS: dict[str, list] = {}
"""Every Device :func:`host_device` returned, per ISA: the host is known by identity (a ``host`` preset loaded
elsewhere is a description like any other, with its declared clock)."""


def host_device():
    """The host CPU as a shared_ir Device (``load_preset("host")``) under the ISA in use; detected again when a
    newly recorded FMA peak changes its ``peak_flops``."""
    from shared_ir.hostinfo import isa, measured_peak_flops

    return _host_device(isa(), measured_peak_flops())


@functools.lru_cache(maxsize=None)
def _host_device(isa_name: str, peak: float | None):
    from shared_ir.hardware import load_preset

    dev = load_preset("host").host
    _HOSTS.setdefault(isa_name, []).append(dev)
    return dev


def is_host(device) -> bool:
    """Whether ``device`` is the detected host (under the ISA in use): the Device that :func:`host_device` gave."""
    from shared_ir.hostinfo import isa

    if device is host_device():
        return True
    return any(device is d for d in _HOSTS.get(isa(), ()))


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


@functools.lru_cache(maxsize=1)
def server_device():
    """The ``server64`` preset: a many-core AVX-512 server (2 × 32 cores, 1 MiB L2/core, 2 × 128 MiB L3, 8-channel
    DDR5 per socket), the machine the fusion predictions in the benchmark are stated for."""
    from shared_ir.hardware import load_preset

    return load_preset("server64").host


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
    """The cores' clock while they run vector FMAs: for the host, what its measured FMA peak implies
    (:func:`shared_ir.hostinfo.fma_clock_hz`); else the device's declared frequency.

    Why: the host's declared frequency is the nominal clock procfs reports (2.6 GHz here) while the cores boost.
    The load ports and the on-chip caches run at the boosted clock too; at the nominal one the model saw 8×16 blocks
    (9 loads per 8 FMAs) and the caches' fill 1.65× slower than they are, against an FMA time taken from the
    measured peak."""
    from shared_ir.hostinfo import fma_clock_hz

    dev = device or host_device()
    f = float(dev.compute.frequency_hz)
    if not is_host(dev):
        return f
    return fma_clock_hz() or f


def clock_scale(device=None) -> float:
    """:func:`clock_hz` over the declared frequency (1.0 for devices other than the measured host)."""
    dev = device or host_device()
    return clock_hz(dev) / float(dev.compute.frequency_hz)


def isa(device=None) -> str:
    """The device's vector ISA: its description's ``compute.isa`` when it names one (``neon``, ``avx2``, ...),
    else ``avx512`` or ``avx2`` (or ``scalar``) from its vector width (the host's is capped by
    ``$CHAIN_FUSER_ISA``, see :data:`shared_ir.hostinfo.ISA_ENV`)."""
    dev = device or host_device()
    named = getattr(dev.compute, "isa", None)
    if named:
        return str(named)
    bits = int(dev.compute.vector_width_bits)
    return "avx512" if bits >= 512 else "avx2" if bits >= 256 else "scalar"


def vector_lanes(device=None) -> int:
    return max(1, int((device or host_device()).compute.vector_width_bits) // 32)


def micro_kernels(device=None) -> list[MicroKernel]:
    """Register-blocked micro kernels for the device's vector ISA (accumulators + B vectors + 1 broadcast must fit
    the register file: 32 vector registers with AVX-512, 16 with AVX2). Widths of 1, 2 or 4 vectors: the packed
    operand panels of 3 vectors (48 floats) ran 10-25x slower than their neighbours in every kernel measured here
    (YOLO-1 4x48 199 ms vs 4x64 17 ms; Inception 7x48 41 ms vs 7x32 2.0 ms), so they are not offered."""
    from shared_ir.hostinfo import vector_registers

    name = isa(device)
    lanes = vector_lanes(device)
    regs = vector_registers(name)
    out = []
    for nv in (1, 2, 4):
        for mr in range(1, 17):
            k = MicroKernel(mr, nv * lanes, lanes, name)
            if k.registers <= regs - 1:  # leave one for addresses/spills
                out.append(k)
    return out


DEFAULT_SATURATING_ACCUMULATORS = 8.0
"""Independent FMA chains that keep the vector FMA pipes busy (pipes × latency) where nothing was measured: two
pipes × 4 cycles, as on the server preset and Intel AVX-512 cores."""


def saturating_accumulators(device=None, measured_only: bool = False) -> float | None:
    """Pipes × latency of the vector FMA, as measured by :func:`chain_fuser.peak.measure_fma_peak` on this host
    (peak over the one-accumulator rate); the default for other devices or when it was never measured."""
    from shared_ir.hostinfo import measured_saturating_accumulators

    dev = device or host_device()
    if is_host(dev):
        v = measured_saturating_accumulators()
        if v:
            return v
    return None if measured_only else DEFAULT_SATURATING_ACCUMULATORS


def measured_peak_flops(refresh: bool = False) -> float | None:
    """The host's recorded FMA peak (:func:`shared_ir.hostinfo.measured_peak_flops`), if any."""
    from shared_ir.hostinfo import measured_peak_flops as measured

    return None if refresh else measured()


def peak_flops(device=None) -> float:
    """Measured FMA peak for the host when recorded, else the device's declared/estimated peak: the same figure as
    ``shared_ir.roofline.peak_flops`` of the host (its detection takes the recorded peak)."""
    dev = device or host_device()
    if is_host(dev):
        m = measured_peak_flops()
        if m:
            return m
    return float(dev.peak_flops)
