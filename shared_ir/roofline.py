"""Roofline model: for an op on a device, the compute-bound time (FLOPs / peak) and the memory-bound time
(compulsory bytes / bandwidth of one memory level, DRAM by default), and which of the two binds.

Ops are ``shared_ir.op.Op`` (anything with ``flops`` and ``total_bytes``; ``output_bytes`` and ``kind``/``name``/
``macs`` are used when present).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Union

from .hardware import Device, HardwareError, MemoryLevel, System

LevelRef = Union[None, str, int, MemoryLevel]


@dataclass(frozen=True)
class Roofline:
    """Roofline estimate of one op on one device."""

    flops: int
    """FLOPs of the op."""
    bytes: int
    """Compulsory bytes moved at the level (every tensor read or written once)."""
    peak_flops: float
    """Peak FLOP/s used (for the op's dtype where the device lists one)."""
    read_bandwidth_bytes_per_s: float
    """Read bandwidth of the level, all instances together."""
    write_bandwidth_bytes_per_s: float
    """Write bandwidth of the level, all instances together."""
    level: str
    """Memory level the memory time refers to."""
    compute_s: float
    """FLOPs / peak FLOP/s."""
    memory_s: float
    """Bytes read / read bandwidth + bytes written / write bandwidth (one shared port, conservative)."""

    @property
    def time_s(self) -> float:
        """The roofline time: max(compute, memory) (perfect overlap)."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``memory`` if moving the data takes longer than the arithmetic, else ``compute``."""
        return "memory" if self.memory_s > self.compute_s else "compute"

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte moved."""
        if self.bytes == 0:
            return math.inf if self.flops else 0.0
        return self.flops / self.bytes

    @property
    def ridge_intensity(self) -> float:
        """Intensity (FLOP/byte) above which the op is compute-bound on this device and level."""
        return self.peak_flops / self.read_bandwidth_bytes_per_s

    @property
    def attained_flops(self) -> float:
        """FLOP/s the op attains at the roofline time."""
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(time_s=self.time_s, bound=self.bound, arithmetic_intensity=self.arithmetic_intensity)
        return d


def _device(device: Device | System) -> Device:
    return device.primary if isinstance(device, System) else device


def _level(dev: Device, level: LevelRef) -> MemoryLevel:
    if level is None:
        return dev.memory[0]
    if isinstance(level, MemoryLevel):
        return level
    if isinstance(level, int) and not isinstance(level, bool):
        if not -len(dev.memory) <= level < len(dev.memory):
            raise HardwareError(f"{dev.name}.memory[{level}]", f": no such level; the device has {len(dev.memory)}",
                                level)
        return dev.memory[level]
    return dev.level(level)


def _op_dtype(op: Any) -> Any:
    outs = getattr(op, "outputs", ())
    try:
        return outs[0].tensor.dtype
    except (IndexError, AttributeError, TypeError):
        return None


def peak_flops(device: Device | System, dtype: Any = None) -> float:
    """Peak FLOP/s of a device (a System's primary device), for ``dtype`` where the device lists one."""
    return _device(device).compute.peak(dtype)


def roofline(op: Any, device: Device | System, level: LevelRef = None, dtype: Any = None) -> Roofline:
    """Roofline of ``op`` on ``device`` with the memory time at ``level`` (name, index or MemoryLevel; default the
    outermost level). ``dtype`` defaults to the op's first output dtype (selects e.g. the bf16 tensor-core peak)."""
    dev = _device(device)
    lv = _level(dev, level)
    flops, nbytes = int(op.flops), int(op.total_bytes)
    written = min(nbytes, int(getattr(op, "output_bytes", 0) or 0))
    peak = dev.compute.peak(dtype if dtype is not None else _op_dtype(op))
    rbw, wbw = lv.total_read_bandwidth_bytes_per_s, lv.total_write_bandwidth_bytes_per_s
    return Roofline(flops=flops, bytes=nbytes, peak_flops=peak, read_bandwidth_bytes_per_s=rbw,
                    write_bandwidth_bytes_per_s=wbw, level=lv.name, compute_s=flops / peak,
                    memory_s=(nbytes - written) / rbw + written / wbw)


def roofline_table(graph: Any, device: Device | System, level: LevelRef = None) -> list[dict[str, Any]]:
    """One row per op in topological order: op, kind, macs, flops, bytes, intensity, compute_s, memory_s, time_s,
    bound, supported (whether the device's compute unit runs this op kind)."""
    dev = _device(device)
    rows = []
    for op in graph.topological_ops():
        r = roofline(op, dev, level)
        kind = getattr(op.kind, "value", op.kind)
        rows.append({"op": op.name, "kind": kind, "macs": int(getattr(op, "macs", 0)), "flops": r.flops,
                     "bytes": r.bytes, "intensity": r.arithmetic_intensity, "compute_s": r.compute_s,
                     "memory_s": r.memory_s, "time_s": r.time_s, "bound": r.bound,
                     "supported": dev.supports(kind)})
    return rows


__all__ = ["Roofline", "roofline", "roofline_table", "peak_flops"]
