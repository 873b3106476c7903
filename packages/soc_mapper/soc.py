"""The SoC as the mapper sees it: accelerators (dataflow, PEs, streams, power, mesh position) and a transfer
bandwidth matrix, built from a ``shared_ir.hardware.System`` (e.g. the ``soc_small`` / ``soc_large`` presets)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import SoCError


@dataclass(frozen=True)
class Accelerator:
    """One accelerator of the SoC."""

    name: str
    """Device name (from the hardware description)."""
    dataflow: str
    """Dataflow style (nvdla, shidiannao, tpu, eyeriss, ...): selects the cost model."""
    pe_rows: int
    """PE array rows (times ``cores`` copies folded into ``num_pes``)."""
    pe_cols: int
    """PE array columns."""
    num_pes: int
    """PEs in total (the budget shared by concurrent tasks)."""
    frequency_hz: float
    """Clock, Hz."""
    streams: int
    """Tasks that may run at once (spatial sharing)."""
    power_w: float
    """Power at full use, W."""
    mac_energy_pj: float
    """Energy of one MAC, pJ (0: power-only energy model)."""
    op_kinds: tuple[str, ...]
    """Op kinds it can run (empty: all)."""
    position: tuple[int, int] | None
    """Mesh position."""
    buffer_bytes: int
    """On-chip buffer capacity, bytes (the outermost level: where H2H pins weights)."""
    buffer_bandwidth_bytes_per_s: float
    """Bandwidth of that buffer, bytes/s (the memory-bound term of the cost model)."""
    buffer_energy_pj_per_byte: float
    """Energy of one byte read from that buffer, pJ."""
    l1_bytes: int = 0
    """Capacity of one PE's local buffer (the next memory level; 0: none described), bytes."""
    l1_energy_pj_per_byte: float = 0.0
    """Energy of one byte of a PE's local buffer, pJ (the MAESTRO model's L1 reads and writes alike)."""


@dataclass
class SoC:
    """Accelerators plus the pairwise transfer bandwidth (bytes/s; the diagonal is the intra-accelerator one)."""

    name: str
    accs: list[Accelerator]
    bandwidth: np.ndarray
    """[A, A] bytes/s between accelerators (diagonal: inside one accelerator)."""
    nn_bandwidth: float
    """Nearest-neighbour link bandwidth, bytes/s (MAGMA's shared-bandwidth model uses it)."""

    @property
    def n(self) -> int:
        return len(self.accs)

    def index(self, name: str) -> int:
        for i, a in enumerate(self.accs):
            if a.name == name:
                return i
        raise SoCError("soc.devices", f"no accelerator {name!r}; have {[a.name for a in self.accs]}", name)

    def neighbours(self, a: int) -> list[int]:
        """Accelerators one mesh hop away (H2H's local search moves layers there)."""
        pa = self.accs[a].position
        if pa is None:
            return [b for b in range(self.n) if b != a]
        return [b for b, x in enumerate(self.accs) if x.position is not None
                and abs(x.position[0] - pa[0]) + abs(x.position[1] - pa[1]) == 1]


def soc_from_system(system: Any, nn_bandwidth: float | None = None) -> SoC:
    """A :class:`SoC` from a System / preset name / dict / DictConfig.

    ``nn_bandwidth`` overrides the mesh's nearest-neighbour bandwidth (the reference's 0.8 / 3.2 GB/s settings).
    Errors (:class:`SoCError`) name the device: no accelerators, no links or topology between two devices.
    A mesh position clash is rejected by ``shared_ir.hardware.System`` itself with both device names.
    """
    from shared_ir.hardware import HardwareError, System, load_hardware, load_preset

    if isinstance(system, str) and "\n" not in system and not system.endswith((".yaml", ".yml", ".json")):
        system = load_preset(system)
    try:
        system = load_hardware(system)
    except HardwareError as e:
        raise SoCError(f"soc.{e.path}", e.problem.lstrip(": "), e.value) from None
    assert isinstance(system, System)
    devs = [d for d in system.devices if d.kind == "accelerator"] or list(system.devices)
    if not devs:
        raise SoCError(f"soc({system.name}).devices", "no accelerator devices to map layers onto")
    if nn_bandwidth is not None:
        if not nn_bandwidth > 0:
            raise SoCError("soc.nn_bandwidth", f"must be > 0, got {nn_bandwidth!r}", nn_bandwidth)
        if system.topology is None:
            raise SoCError(f"soc({system.name}).topology", "a bandwidth override needs a mesh topology")
        system = system.replace(topology=dataclasses.replace(system.topology, nn_bandwidth_bytes_per_s=nn_bandwidth))
    # a position clash is also checked here for Systems built without validation paths
    seen: dict[tuple[int, int], str] = {}
    for d in devs:
        if d.mesh_position is not None:
            if d.mesh_position in seen:
                raise SoCError(f"soc.devices.{d.name}.mesh_position",
                               f"{d.name!r} and {seen[d.mesh_position]!r} are both at {list(d.mesh_position)}")
            seen[d.mesh_position] = d.name
    n = len(devs)
    bw = np.zeros((n, n))
    for i, a in enumerate(devs):
        for j, b in enumerate(devs):
            if i == j:
                bw[i, j] = (system.topology.intra_bandwidth_bytes_per_s if system.topology is not None
                            else a.dram_bandwidth_bytes_per_s)
                continue
            try:
                bw[i, j] = system.bandwidth(a.name, b.name)
            except HardwareError:
                raise SoCError(f"soc({system.name}).links",
                               f"no link or mesh topology between {a.name!r} and {b.name!r}: the SoC has no way "
                               f"to move data between these accelerators", (a.name, b.name)) from None
    accs = []
    for d in devs:
        c, m0 = d.compute, d.memory[0]
        m1 = d.memory[1] if len(d.memory) > 1 else None
        accs.append(Accelerator(
            name=d.name, dataflow=c.dataflow, pe_rows=c.pe_rows, pe_cols=c.pe_cols, num_pes=c.num_pes,
            frequency_hz=c.frequency_hz, streams=c.streams, power_w=c.power_w, mac_energy_pj=c.mac_energy_pj,
            op_kinds=tuple(c.op_kinds), position=d.mesh_position, buffer_bytes=m0.total_capacity_bytes,
            buffer_bandwidth_bytes_per_s=m0.total_read_bandwidth_bytes_per_s,
            buffer_energy_pj_per_byte=m0.read_energy_pj_per_byte(),
            l1_bytes=m1.capacity_bytes if m1 is not None else 0,
            l1_energy_pj_per_byte=m1.read_energy_pj_per_byte() if m1 is not None else 0.0))
    nn = system.topology.nn_bandwidth_bytes_per_s if system.topology is not None else float(
        np.max(bw[~np.eye(n, dtype=bool)]) if n > 1 else bw[0, 0])
    return SoC(system.name, accs, bw, nn)
