"""The hardware description shared by all packages: memory levels, compute units, devices, links, systems.

Units are in the field names (``_bytes``, ``_hz``, ``_bytes_per_s``, ``_pj``, ``_w``, ``_s``). Bandwidths are in
bytes/s; tools that count in words per cycle (Timeloop, TileFlow) convert with :meth:`MemoryLevel.read_words_per_cycle`.

Load from YAML/JSON/dict/DictConfig with :func:`load_hardware` or by preset name with :func:`load_preset`
(``shared_ir/presets/hardware/<name>.yaml``, which is also the Hydra config group ``hardware``). Every error is a
:class:`HardwareError` naming the full field path and the offending value, e.g.
``devices[1].memory[0].capacity_bytes must be > 0, got -5``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from .errors import ValidationError

_NO_VALUE = object()

DEVICE_KINDS = ("cpu", "gpu", "accelerator")
DUPLEX_KINDS = ("full", "half")
TOPOLOGY_KINDS = ("mesh2d",)
# Dataflow names: spatial-accelerator styles (soc_mapper/fusion_perf cost models key on these), "spatial" for a
# Timeloop/TileFlow array whose dataflow is set by the mapping, plus CPU (simd) and GPU (simt) styles.
DATAFLOWS = ("nvdla", "shidiannao", "tpu", "eyeriss", "systolic", "spatial", "simd", "simt")
# Versions of the hardware file format this code reads (a file may say which it follows with ``format_version``).
FORMAT_VERSIONS = (1,)
# Largest hardware file read: a system takes a few KB, and a huge YAML file parses for minutes.
MAX_FILE_BYTES = 1 << 20
# Plausible range per physical field, by field name suffix (first match wins); outside it a value is a typo or a
# unit slip (1e-300 B/s, 1e308 Hz) that turns roofline times and plot axes into inf/NaN.
_PLAUSIBLE = (("_bytes_per_s", 1.0, 1e18), ("_hz", 1.0, 1e12), ("capacity_bytes", 1, 2**60),
              ("peak_flops", 1.0, 1e21), ("_pj", 0.0, 1e9), ("_w", 0.0, 1e7), ("_s", 0.0, 1e4),
              ("word_bytes", 1, 1024), ("vector_width_bits", 1, 1 << 16))
_MAX_COUNT = 1 << 32  # counts: instances, cores, PE rows/columns, streams, mesh sizes, MACs per cycle per PE
# Fallback when shared_ir.op is not importable; the real list is OpKind's values.
_OP_KINDS_FALLBACK = ("matmul", "linear", "batch_matmul", "conv2d", "elementwise", "softmax", "layernorm",
                      "reduce", "pool", "embedding", "view", "concat")


def op_kind_names() -> tuple[str, ...]:
    """The op kind strings a :class:`ComputeUnit` may list (the values of ``shared_ir.op.OpKind``)."""
    try:
        from .op import OpKind
        return tuple(k.value for k in OpKind)
    except ImportError:  # pragma: no cover - only while op.py is missing
        return _OP_KINDS_FALLBACK


class HardwareError(ValidationError):
    """An invalid hardware description. ``path`` is the full field path (``devices[1].memory[0].capacity_bytes``),
    ``value`` the offending value, ``problem`` the text after the path."""

    def __init__(self, path: str, problem: str, value: object = _NO_VALUE):
        self.path, self.problem = path, problem
        self.value = None if value is _NO_VALUE else value
        sep = "" if not path or problem.startswith(":") else " "
        # skip ValidationError's "path: message" format: messages read "x.y must be > 0, got -5"
        ValueError.__init__(self, f"{path}{sep}{problem}")

    def __reduce__(self):  # picklable across joblib/multiprocessing workers
        return HardwareError, (self.path, self.problem, self.value)

    def with_prefix(self, prefix: str) -> "HardwareError":
        """The same error with ``prefix`` put in front of its path (used when a nested object fails)."""
        if not prefix:
            return self
        path = prefix + ("" if not self.path or self.path.startswith("[") else ".") + self.path
        return HardwareError(path, self.problem, self.value)


# --- small validators (relative paths; the loader prefixes the full path) ----------------------------------------
def _positive(obj: Any, name: str, allow_zero: bool = False) -> None:
    v = getattr(obj, name)
    if v is None:
        return
    if not math.isfinite(v) or (v < 0 if allow_zero else v <= 0):
        raise HardwareError(name, f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}", v)
    _plausible(name, v)


def _plausible(name: str, v: float, path: str | None = None) -> None:
    lo, hi = next(((lo, hi) for suffix, lo, hi in _PLAUSIBLE if name.endswith(suffix)), (0, _MAX_COUNT))
    if not lo <= v <= hi:
        raise HardwareError(path or name, f"must be in the plausible range [{lo:g}, {hi:g}], got {v!r}", v)


def _one_of(obj: Any, name: str, allowed: tuple[str, ...]) -> None:
    v = getattr(obj, name)
    if v not in allowed:
        raise HardwareError(name, f"must be one of {list(allowed)}, got {v!r}", v)


def _nonempty(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    if not isinstance(v, str) or not v.strip():
        raise HardwareError(name, f"must be a non-empty string, got {v!r}", v)


# --- dataclasses ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryLevel:
    """One level of a device's memory hierarchy (DRAM, a cache, a scratchpad, a register file).

    Capacity and bandwidth are per instance; a level has ``instances`` copies laid out as a ``mesh_x × mesh_y``
    grid (Timeloop's meshX/meshY), so the fan-out from one level to the next inner one is the ratio of their
    meshes (:meth:`Device.fanout`).
    """

    name: str
    """Level name, unique within the device (e.g. ``dram``, ``l2``, ``glb``, ``rf``)."""
    capacity_bytes: int
    """Capacity of one instance, bytes."""
    read_bandwidth_bytes_per_s: float
    """Read bandwidth of one instance, bytes/s."""
    write_bandwidth_bytes_per_s: Optional[float] = None
    """Write bandwidth of one instance, bytes/s (default: the read bandwidth)."""
    read_energy_pj: float = 0.0
    """Energy of reading one word, pJ."""
    write_energy_pj: Optional[float] = None
    """Energy of writing one word, pJ (default: the read energy)."""
    word_bytes: int = 4
    """Access granularity, bytes per word (1 for int8 accelerators, 2 for 16-bit Timeloop words)."""
    instances: int = 1
    """Number of copies of this level (e.g. one L1 per core, one register file per PE)."""
    mesh_x: Optional[int] = None
    """Instances along x of the spatial grid (default: ``instances``)."""
    mesh_y: Optional[int] = None
    """Instances along y (default: ``instances // mesh_x``); ``mesh_x * mesh_y == instances``."""

    def __post_init__(self) -> None:
        _nonempty(self, "name")
        if self.write_bandwidth_bytes_per_s is None:
            object.__setattr__(self, "write_bandwidth_bytes_per_s", self.read_bandwidth_bytes_per_s)
        if self.write_energy_pj is None:
            object.__setattr__(self, "write_energy_pj", self.read_energy_pj)
        for f in ("capacity_bytes", "read_bandwidth_bytes_per_s", "write_bandwidth_bytes_per_s", "word_bytes",
                  "instances", "mesh_x", "mesh_y"):
            _positive(self, f)
        for f in ("read_energy_pj", "write_energy_pj"):
            _positive(self, f, allow_zero=True)
        mx, my = self.mesh_x, self.mesh_y
        if mx is None and my is None:
            mx, my = self.instances, 1
        elif my is None:
            my = self.instances // mx if self.instances % mx == 0 else 0
        elif mx is None:
            mx = self.instances // my if self.instances % my == 0 else 0
        if mx * my != self.instances:
            raise HardwareError("mesh_x", f"must satisfy mesh_x × mesh_y == instances ({self.instances}), got "
                                f"{self.mesh_x} × {self.mesh_y}", (self.mesh_x, self.mesh_y))
        object.__setattr__(self, "mesh_x", mx)
        object.__setattr__(self, "mesh_y", my)

    @property
    def total_capacity_bytes(self) -> int:
        """Capacity of all instances together."""
        return self.capacity_bytes * self.instances

    @property
    def total_read_bandwidth_bytes_per_s(self) -> float:
        """Read bandwidth of all instances together."""
        return self.read_bandwidth_bytes_per_s * self.instances

    @property
    def total_write_bandwidth_bytes_per_s(self) -> float:
        return self.write_bandwidth_bytes_per_s * self.instances

    @property
    def capacity_words(self) -> int:
        """Capacity of one instance in words."""
        return self.capacity_bytes // self.word_bytes

    def read_words_per_cycle(self, clock_hz: float) -> float:
        """Read bandwidth of one instance in words per cycle at ``clock_hz`` (Timeloop/TileFlow units)."""
        return self.read_bandwidth_bytes_per_s / self.word_bytes / clock_hz

    def write_words_per_cycle(self, clock_hz: float) -> float:
        """Write bandwidth of one instance in words per cycle at ``clock_hz``."""
        return self.write_bandwidth_bytes_per_s / self.word_bytes / clock_hz

    def read_energy_pj_per_byte(self) -> float:
        return self.read_energy_pj / self.word_bytes

    def write_energy_pj_per_byte(self) -> float:
        return self.write_energy_pj / self.word_bytes


@dataclass(frozen=True)
class ComputeUnit:
    """The arithmetic of a device: a PE array (``cores`` copies of ``pe_rows × pe_cols`` PEs).

    For a CPU a "PE" is one fp32 SIMD lane of a core (``pe_cols = vector_width_bits / 32``) and
    ``macs_per_cycle_per_pe`` the number of FMA pipes; for a GPU ``cores`` are SMs and PEs are CUDA cores.
    """

    frequency_hz: float
    """Clock, Hz."""
    name: str = "compute"
    """Name of the unit."""
    pe_rows: int = 1
    """PE array rows."""
    pe_cols: int = 1
    """PE array columns."""
    macs_per_cycle_per_pe: float = 1.0
    """Multiply-accumulates each PE completes per cycle."""
    cores: int = 1
    """Copies of the PE array (CPU cores, GPU SMs)."""
    dataflow: str = "simd"
    """Dataflow style, one of :data:`DATAFLOWS` (cost models of soc_mapper/fusion_perf dispatch on it)."""
    op_kinds: tuple[str, ...] = ()
    """Op kinds (``shared_ir.op.OpKind`` values) it can run; empty means all."""
    streams: int = 1
    """Tasks that may run concurrently on the unit (soc_mapper's spatial sharing)."""
    vector_width_bits: int = 32
    """SIMD width of one core, bits (512 for AVX-512, 256 for AVX2)."""
    isa: Optional[str] = None
    """The CPU's vector ISA, one of :data:`shared_ir.hostinfo.ISA_WIDTH_BITS` (``neon``, ``avx2``, ``avx512``,
    ...) when it is not implied by the width (a 128-bit unit is NEON or SSE); code generators pick registers and
    targets from it. Its width must equal ``vector_width_bits``."""
    power_w: float = 0.0
    """Power while busy, W (soc_mapper's energy = phase length × power)."""
    mac_energy_pj: float = 0.0
    """Energy of one MAC, pJ (Timeloop/Accelergy style energy model)."""
    peak_flops: Optional[float] = None
    """Declared or measured peak FLOP/s; if null, derived as 2 × MACs/cycle × frequency."""
    peak_flops_by_dtype: dict[str, float] = field(default_factory=dict, hash=False)
    """Peak FLOP/s for specific dtypes (``DType`` values, e.g. ``bfloat16`` on tensor cores)."""

    def __post_init__(self) -> None:
        _nonempty(self, "name")
        for f in ("frequency_hz", "pe_rows", "pe_cols", "macs_per_cycle_per_pe", "cores", "streams",
                  "vector_width_bits", "peak_flops"):
            _positive(self, f)
        for f in ("power_w", "mac_energy_pj"):
            _positive(self, f, allow_zero=True)
        _one_of(self, "dataflow", DATAFLOWS)
        if self.isa is not None:
            from .hostinfo import ISA_WIDTH_BITS

            _one_of(self, "isa", tuple(ISA_WIDTH_BITS))
            if ISA_WIDTH_BITS[self.isa] != self.vector_width_bits:
                raise HardwareError("isa", f": {self.isa} vectors are {ISA_WIDTH_BITS[self.isa]} bits, but "
                                           f"vector_width_bits is {self.vector_width_bits}", self.isa)
        object.__setattr__(self, "op_kinds", tuple(self.op_kinds))
        known = op_kind_names()
        for i, k in enumerate(self.op_kinds):
            if k not in known:
                raise HardwareError(f"op_kinds[{i}]", f": unknown op kind {k!r}; expected one of {list(known)}", k)
        if len(set(self.op_kinds)) != len(self.op_kinds):
            raise HardwareError("op_kinds", f": duplicates in {list(self.op_kinds)}", self.op_kinds)
        from .dtypes import DType
        dtypes = [d.value for d in DType]
        for k, v in self.peak_flops_by_dtype.items():
            if k not in dtypes:
                raise HardwareError(f"peak_flops_by_dtype.{k}", f": unknown dtype; expected one of {dtypes}", k)
            if not (math.isfinite(v) and v > 0):
                raise HardwareError(f"peak_flops_by_dtype.{k}", f"must be > 0, got {v!r}", v)
            _plausible("peak_flops", v, f"peak_flops_by_dtype.{k}")

    @property
    def num_pes(self) -> int:
        """PEs over all cores."""
        return self.pe_rows * self.pe_cols * self.cores

    @property
    def macs_per_cycle(self) -> float:
        """MACs per cycle over all cores."""
        return self.num_pes * self.macs_per_cycle_per_pe

    def peak(self, dtype: Any = None) -> float:
        """Peak FLOP/s (for ``dtype`` if listed in ``peak_flops_by_dtype``)."""
        if dtype is not None:
            key = getattr(dtype, "value", dtype)
            if key in self.peak_flops_by_dtype:
                return self.peak_flops_by_dtype[key]
        if self.peak_flops is not None:
            return self.peak_flops
        return 2.0 * self.macs_per_cycle * self.frequency_hz

    def supports(self, kind: Any) -> bool:
        """Whether an op of ``kind`` (an OpKind or its string value) can run here."""
        return not self.op_kinds or getattr(kind, "value", kind) in self.op_kinds


@dataclass(frozen=True)
class Device:
    """A CPU, GPU or accelerator: memory levels from the outermost (DRAM) to the innermost, then compute."""

    name: str
    """Unique name within the system (links refer to it)."""
    kind: str
    """``cpu``, ``gpu`` or ``accelerator``."""
    memory: tuple[MemoryLevel, ...]
    """Memory levels, outermost (DRAM) first, innermost (registers) last."""
    compute: ComputeUnit
    """The arithmetic below the innermost level."""
    mesh_position: Optional[tuple[int, int]] = None
    """(x, y) position on the system's mesh topology, if it has one."""

    def __post_init__(self) -> None:
        _nonempty(self, "name")
        _one_of(self, "kind", DEVICE_KINDS)
        object.__setattr__(self, "memory", tuple(self.memory))
        if not self.memory:
            raise HardwareError("memory", ": at least one memory level required", [])
        if self.mesh_position is not None:
            pos = tuple(self.mesh_position)
            if len(pos) != 2 or any(p < 0 for p in pos):
                raise HardwareError("mesh_position", f"must be two integers >= 0, got {list(pos)}", pos)
            object.__setattr__(self, "mesh_position", pos)
        seen: dict[str, int] = {}
        for i, lv in enumerate(self.memory):
            if lv.name in seen:
                raise HardwareError(f"memory[{i}].name", f": duplicate level name {lv.name!r} "
                                    f"(also memory[{seen[lv.name]}])", lv.name)
            seen[lv.name] = i
        for i in range(1, len(self.memory)):
            outer, inner = self.memory[i - 1], self.memory[i]
            if inner.capacity_bytes > outer.capacity_bytes:
                raise HardwareError(f"memory[{i}].capacity_bytes",
                                    f"must be <= memory[{i - 1}].capacity_bytes ({outer.capacity_bytes}; levels run "
                                    f"outermost to innermost), got {inner.capacity_bytes}", inner.capacity_bytes)
            if inner.mesh_x % outer.mesh_x or inner.mesh_y % outer.mesh_y:
                raise HardwareError(f"memory[{i}].mesh_x", f": mesh {inner.mesh_x}×{inner.mesh_y} is not a multiple "
                                    f"of memory[{i - 1}]'s mesh {outer.mesh_x}×{outer.mesh_y}",
                                    (inner.mesh_x, inner.mesh_y))
        last = self.memory[-1]
        if self.compute.num_pes % last.instances:
            raise HardwareError(f"memory[{len(self.memory) - 1}].instances",
                                f"must divide the number of PEs ({self.compute.num_pes}), got {last.instances}",
                                last.instances)

    # --- derived -----------------------------------------------------------------------------------------------
    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s of the compute unit (default dtype)."""
        return self.compute.peak()

    @property
    def dram(self) -> MemoryLevel:
        """The outermost memory level."""
        return self.memory[0]

    @property
    def dram_bandwidth_bytes_per_s(self) -> float:
        """Read bandwidth of the outermost level, all instances together."""
        return self.memory[0].total_read_bandwidth_bytes_per_s

    @property
    def memory_capacity_bytes(self) -> int:
        """Capacity of the outermost level, all instances together (what fits on the device)."""
        return self.memory[0].total_capacity_bytes

    def level(self, name: str) -> MemoryLevel:
        """The memory level called ``name``."""
        for lv in self.memory:
            if lv.name == name:
                return lv
        raise HardwareError(f"{self.name}.memory", f": no level {name!r}; levels are {[m.name for m in self.memory]}",
                            name)

    def level_index(self, name: str) -> int:
        return self.memory.index(self.level(name))

    def fanout(self, i: int) -> tuple[int, int]:
        """Spatial fan-out (x, y) from one instance of ``memory[i]`` to the next inner level (or to the PEs)."""
        lv = self.memory[i]
        if i + 1 < len(self.memory):
            nxt = self.memory[i + 1]
            return nxt.mesh_x // lv.mesh_x, nxt.mesh_y // lv.mesh_y
        return self.compute.num_pes // lv.instances, 1

    def supports(self, kind: Any) -> bool:
        return self.compute.supports(kind)


@dataclass(frozen=True)
class Link:
    """A point-to-point connection between two devices (PCIe, NVLink, a NoC channel)."""

    src: str
    """One end (device name)."""
    dst: str
    """The other end (device name). A link serves both directions."""
    bandwidth_bytes_per_s: float
    """Bandwidth per direction with ordinary (pageable) buffers, bytes/s."""
    latency_s: float = 0.0
    """Latency of one transfer, s."""
    duplex: str = "full"
    """``full``: both directions at full bandwidth at once; ``half``: the directions share it."""
    pinned_bandwidth_bytes_per_s: Optional[float] = None
    """Bandwidth with pinned (page-locked) host memory, bytes/s (host<->GPU); null if not applicable."""

    def __post_init__(self) -> None:
        _nonempty(self, "src")
        _nonempty(self, "dst")
        _positive(self, "bandwidth_bytes_per_s")
        _positive(self, "pinned_bandwidth_bytes_per_s")
        _positive(self, "latency_s", allow_zero=True)
        _one_of(self, "duplex", DUPLEX_KINDS)
        if self.src == self.dst:
            raise HardwareError("dst", f"must differ from src, got {self.dst!r}", self.dst)

    def bandwidth(self, pinned: bool = False) -> float:
        """Bandwidth per direction, bytes/s (the pinned figure if asked and known)."""
        if pinned and self.pinned_bandwidth_bytes_per_s is not None:
            return self.pinned_bandwidth_bytes_per_s
        return self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class Topology:
    """A 2D mesh network: bandwidth between two devices = nearest-neighbour bandwidth / Manhattan distance
    (the COMB/soc_mapper model); within one device, ``intra_bandwidth_bytes_per_s``."""

    nn_bandwidth_bytes_per_s: float
    """Bandwidth between mesh neighbours, bytes/s (soc presets: 3.2e9 high, 0.8e9 low)."""
    intra_bandwidth_bytes_per_s: float
    """Bandwidth of a transfer that stays inside one device, bytes/s."""
    latency_s: float = 0.0
    """Latency per hop, s."""
    kind: str = "mesh2d"
    """Topology kind; only ``mesh2d`` for now."""

    def __post_init__(self) -> None:
        _positive(self, "nn_bandwidth_bytes_per_s")
        _positive(self, "intra_bandwidth_bytes_per_s")
        _positive(self, "latency_s", allow_zero=True)
        _one_of(self, "kind", TOPOLOGY_KINDS)

    @staticmethod
    def distance(a: tuple[int, int], b: tuple[int, int]) -> int:
        """Manhattan distance (hops) between two mesh positions."""
        return abs(a[0] - b[0]) + abs(a[1] - b[1])

    def bandwidth(self, a: tuple[int, int], b: tuple[int, int]) -> float:
        d = self.distance(a, b)
        return self.intra_bandwidth_bytes_per_s if d == 0 else self.nn_bandwidth_bytes_per_s / d


Mesh2D = Topology  # the only topology kind so far


@dataclass(frozen=True)
class System:
    """A host plus devices, the links between them and an optional network topology."""

    name: str
    """System name (the preset name)."""
    devices: tuple[Device, ...] = ()
    """The devices (GPUs, accelerators); may be empty for a CPU-only host."""
    host: Optional[Device] = None
    """The host CPU, if modelled."""
    links: tuple[Link, ...] = ()
    """Explicit links; they take precedence over the topology."""
    topology: Optional[Topology] = None
    """Network for device pairs without an explicit link; requires every device to have a mesh_position."""

    def __post_init__(self) -> None:
        _nonempty(self, "name")
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "links", tuple(self.links))
        if self.host is None and not self.devices:
            raise HardwareError("devices", ": a system needs a host or at least one device", [])
        where: dict[str, str] = {}
        if self.host is not None:
            where[self.host.name] = "host"
        for i, d in enumerate(self.devices):
            if d.name in where:
                raise HardwareError(f"devices[{i}].name", f": duplicate device name {d.name!r} (also {where[d.name]})",
                                    d.name)
            where[d.name] = f"devices[{i}]"
        taken: dict[tuple[int, int], int] = {}
        for i, d in enumerate(self.devices):
            if d.mesh_position is None:
                if self.topology is not None:
                    raise HardwareError(f"devices[{i}].mesh_position", f": required by the {self.topology.kind} "
                                        f"topology (device {d.name!r})", None)
                continue
            if d.mesh_position in taken:
                j = taken[d.mesh_position]
                raise HardwareError(f"devices[{i}].mesh_position", f": devices[{i}] {d.name!r} and devices[{j}] "
                                    f"{self.devices[j].name!r} are both at {list(d.mesh_position)}",
                                    list(d.mesh_position))
            taken[d.mesh_position] = i
        pairs: dict[frozenset[str], int] = {}
        for i, ln in enumerate(self.links):
            for end in ("src", "dst"):
                n = getattr(ln, end)
                if n not in where:
                    raise HardwareError(f"links[{i}].{end}", f": unknown device {n!r}; known: {list(where)}", n)
            key = frozenset((ln.src, ln.dst))
            if key in pairs:
                raise HardwareError(f"links[{i}]",
                                    f": duplicate link {ln.src!r}<->{ln.dst!r} (also links[{pairs[key]}])",
                                    [ln.src, ln.dst])
            pairs[key] = i

    # --- queries -------------------------------------------------------------------------------------------------
    @property
    def all_devices(self) -> tuple[Device, ...]:
        """Host (if any) then devices."""
        return ((self.host,) if self.host is not None else ()) + self.devices

    @property
    def primary(self) -> Device:
        """The device work runs on by default: the first device, else the host."""
        return self.devices[0] if self.devices else self.host  # type: ignore[return-value]

    def device(self, name: str) -> Device:
        for d in self.all_devices:
            if d.name == name:
                return d
        raise HardwareError(self.name, f": no device {name!r}; devices are {[d.name for d in self.all_devices]}", name)

    def link(self, a: str, b: str) -> Link | None:
        """The explicit link between ``a`` and ``b`` (either direction), if any."""
        for ln in self.links:
            if {ln.src, ln.dst} == {a, b}:
                return ln
        return None

    def hops(self, a: str, b: str) -> int:
        """Manhattan distance between two devices on the mesh."""
        pa, pb = self.device(a).mesh_position, self.device(b).mesh_position
        if pa is None or pb is None:
            raise HardwareError(self.name, f": {a!r} or {b!r} has no mesh_position", (a, b))
        return Topology.distance(pa, pb)

    def bandwidth(self, src: str, dst: str, pinned: bool = False) -> float:
        """Transfer bandwidth src -> dst, bytes/s: an explicit link first, then the topology (nn / hops, or the
        intra-device bandwidth when src == dst); without either, src == dst gives the device's DRAM bandwidth."""
        a, b = self.device(src), self.device(dst)
        ln = self.link(src, dst) if src != dst else None
        if ln is not None:
            return ln.bandwidth(pinned)
        if self.topology is not None and a.mesh_position is not None and b.mesh_position is not None:
            return self.topology.bandwidth(a.mesh_position, b.mesh_position)
        if src == dst:
            return a.dram_bandwidth_bytes_per_s
        raise HardwareError(self.name, f": no link or topology path between {src!r} and {dst!r}", (src, dst))

    def latency(self, src: str, dst: str) -> float:
        """Latency of one transfer src -> dst, s."""
        if src == dst:
            return 0.0
        ln = self.link(src, dst)
        if ln is not None:
            return ln.latency_s
        if self.topology is not None:
            return self.topology.latency_s * self.hops(src, dst)
        return 0.0

    def transfer_time(self, src: str, dst: str, nbytes: int, pinned: bool = False) -> float:
        """Seconds to move ``nbytes`` from src to dst (latency + size / bandwidth; 0 for 0 bytes)."""
        if nbytes <= 0:
            return 0.0
        return self.latency(src, dst) + nbytes / self.bandwidth(src, dst, pinned)

    def replace(self, **changes: Any) -> "System":
        """A copy with some top-level fields changed (re-validated)."""
        return dataclasses.replace(self, **changes)


# --- loading ----------------------------------------------------------------------------------------------------
def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Convert a plain YAML value to ``tp`` strictly; errors name ``path``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, path)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise HardwareError(path, f"must be a list, got {value!r}", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise HardwareError(path, f"must have {len(args)} items, got {list(value)!r}", value)
        return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise HardwareError(path, f"must be a mapping, got {value!r}", value)
        return {str(k): _convert(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if tp is str:
        if not isinstance(value, str):
            raise HardwareError(path, f"must be a string, got {value!r}", value)
        return value
    if tp in (int, float):
        num = value
        if isinstance(value, str):  # PyYAML reads "3.2e9" (no dot in the mantissa's exponent form) as a string
            try:
                num = float(value.replace("_", ""))
            except ValueError:
                num = None
        if isinstance(num, bool) or not isinstance(num, (int, float)):
            raise HardwareError(path, f"must be a number, got {value!r}", value)
        try:
            finite = math.isfinite(num)
        except OverflowError:  # an integer beyond the range of a float
            finite = False
        if not finite:
            raise HardwareError(path, f"must be finite, got {value!r:.40}", value)
        if tp is int:
            if isinstance(num, float) and not num.is_integer():  # (float(n) != n for a large exact int)
                raise HardwareError(path, f"must be an integer, got {value!r}", value)
            return int(num)
        return float(num)
    raise TypeError(f"unsupported field type {_type_name(tp)} at {path}")  # pragma: no cover


def _build(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise HardwareError(path, f"must be a mapping, got {data!r}", data)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in data:
        if k not in fields:
            raise HardwareError(f"{path}.{k}" if path else str(k),
                                f": unknown field (expected one of: {', '.join(fields)})", data[k])
    kwargs = {}
    for name, f in fields.items():
        p = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], p)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            raise HardwareError(p, ": required field missing")
    try:
        return cls(**kwargs)
    except HardwareError as e:
        raise e.with_prefix(path) from None


def _resolve_detect(d: Any, path: str) -> Any:
    """Replace a device dict carrying ``detect: true`` (or ``detect: measure``) by the detected host CPU,
    explicit keys overriding detected ones (``compute`` merged key by key)."""
    if not isinstance(d, Mapping) or "detect" not in d:
        return d
    mode = d["detect"]
    if mode not in (True, False, "measure"):
        raise HardwareError(f"{path}.detect", f"must be true, false or 'measure', got {mode!r}", mode)
    rest = {k: v for k, v in d.items() if k != "detect"}
    if mode is False:
        return rest
    from .hostinfo import detect_host_device

    out = detect_host_device(measure=(mode == "measure"))
    for k, v in rest.items():
        if k == "compute" and isinstance(v, Mapping):
            out["compute"] = {**out["compute"], **v}
        else:
            out[k] = v
    return out


def _to_plain(src: Any) -> Any:
    if type(src).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # lazy: only for Hydra configs

        return OmegaConf.to_container(src, resolve=True)
    return src


@functools.lru_cache(maxsize=None)
def _unique_key_loader() -> type:
    """A YAML SafeLoader (libyaml's when present) that rejects a key given twice in one mapping."""
    import yaml

    class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        def construct_mapping(self, node, deep=False):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:  # before merges (<<) are flattened: a merged key may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable key: the base class reports it
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _check_size(n: int, source: str) -> None:
    if n > MAX_FILE_BYTES:
        raise HardwareError(source, f": file is {n} bytes, over the {MAX_FILE_BYTES} byte limit of a hardware "
                            "description", n)


def _parse_text(text: str, source: str) -> Any:
    import yaml

    _check_size(len(text.encode("utf-8", "replace")), source)
    try:
        return yaml.load(text, Loader=_unique_key_loader())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise HardwareError(source, f": YAML does not parse{where}: {getattr(e, 'problem', e)}", text[:80]) from None
    except (ValueError, TypeError, RecursionError) as e:  # e.g. a timestamp 2020-99-99, or nesting too deep
        raise HardwareError(source, f": YAML does not parse: {type(e).__name__}: {e}", text[:80]) from None


def _unique_pairs(source: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise HardwareError(source, f": JSON has a duplicate key {k!r}", k)
            out[k] = v
        return out

    return hook


def read_hardware_file(path: "str | os.PathLike[str]") -> Any:
    """The plain data of a hardware file (JSON by its suffix, else YAML), not yet validated. Every problem reading
    it (missing, over :data:`MAX_FILE_BYTES`, empty, not UTF-8, not parsing, a duplicate key) is a
    :class:`HardwareError` naming the file."""
    s = os.fspath(path)
    p = Path(s)
    if not p.is_file():
        raise HardwareError(s, ": hardware file not found", s)
    _check_size(p.stat().st_size, s)  # before reading: a huge file must not be parsed at all
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HardwareError(s, f": not a UTF-8 text file (byte {raw[e.start]:#04x} at offset {e.start})",
                            None) from None
    if p.suffix == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_unique_pairs(s))
        except json.JSONDecodeError as e:
            raise HardwareError(s, f": JSON does not parse at line {e.lineno}: {e.msg}", text[:80]) from None
        except RecursionError:
            raise HardwareError(s, ": JSON does not parse: nested too deeply", text[:80]) from None
    else:
        data = _parse_text(text, s)
    if data is None:
        raise HardwareError(s, ": file is empty (no hardware description in it)", text[:80])
    return data


def _check_format_version(data: dict, source: str) -> None:
    """Drop a supported ``format_version`` key; reject any other version."""
    if "format_version" not in data:
        return
    v = data.pop("format_version")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v not in FORMAT_VERSIONS:
        path = f"{source}: format_version" if source else "format_version"
        raise HardwareError(path, f": {v!r:.40} is not supported; supported versions: {list(FORMAT_VERSIONS)}", v)


def load_hardware(src: Any) -> System:
    """A validated :class:`System` from a path (YAML/JSON), a preset name, a YAML string, a dict, an OmegaConf
    DictConfig (e.g. ``cfg.hardware`` after Hydra composition) or a System (returned as is)."""
    if isinstance(src, System):
        return src
    src = _to_plain(src)
    source = ""
    if isinstance(src, (str, os.PathLike)):
        s = str(src)
        is_path = isinstance(src, os.PathLike) or ("\n" not in s and (s.endswith((".yaml", ".yml", ".json"))
                                                                        or os.path.exists(s)))
        if not is_path and "\n" not in s and s.strip() in list_presets():
            return load_preset(s.strip())
        if is_path:
            data, source = read_hardware_file(s), s
        else:
            data = _parse_text(s, "<yaml string>")
    else:
        data = src
    if not isinstance(data, Mapping):
        raise HardwareError(source, f"{': ' if source else ''}a hardware description must be a mapping (or a "
                            f"preset name: {list_presets()}), got {type(data).__name__}: {data!r:.80}", data)
    data = dict(data)
    _check_format_version(data, source)
    if "host" in data:
        data["host"] = _resolve_detect(data["host"], "host")
    if isinstance(data.get("devices"), list):
        data["devices"] = [_resolve_detect(d, f"devices[{i}]") for i, d in enumerate(data["devices"])]
    return _build(System, data, "")


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def dump_hardware(system: System) -> dict[str, Any]:
    """A plain dict (lists, numbers, strings) with every field explicit; ``load_hardware`` of it gives back an
    equal System."""
    return _plain(system)


# --- presets ----------------------------------------------------------------------------------------------------
def preset_dir() -> Path:
    """``shared_ir/presets/hardware``: the presets are package data of shared_ir (the Hydra group ``hardware``
    points here)."""
    return Path(__file__).resolve().parent / "presets" / "hardware"


def list_presets() -> list[str]:
    d = preset_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_preset(name: str) -> System:
    """The preset ``shared_ir/presets/hardware/<name>.yaml`` as a System."""
    p = preset_dir() / f"{name}.yaml"
    if not p.is_file():
        raise HardwareError("preset", f": unknown hardware preset {name!r}; available: {list_presets()}", name)
    return load_hardware(p)


__all__ = ["HardwareError", "MemoryLevel", "ComputeUnit", "Device", "Link", "Topology", "Mesh2D", "System",
           "load_hardware", "dump_hardware", "load_preset", "list_presets", "preset_dir", "op_kind_names",
           "read_hardware_file", "DATAFLOWS", "DEVICE_KINDS", "FORMAT_VERSIONS", "MAX_FILE_BYTES"]
