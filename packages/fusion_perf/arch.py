"""The architecture as the model sees it: storage levels outermost (DRAM) to innermost, in words and words/cycle.

Built from a :mod:`shared_ir.hardware` device (:meth:`Arch.from_device`, :func:`load_arch` with a preset name) or
from a TileFlow/Timeloop v0.2 architecture tree (:mod:`fusion_perf.tileflow_io`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .errors import ArchError
from .semantics import PROJECT, Semantics, as_semantics


@dataclass(frozen=True)
class Level:
    """One storage level (per instance figures)."""

    name: str
    """Level name (what a mapping's ``target`` names)."""
    capacity_words: float
    """Words one instance holds (``math.inf`` for an unbounded DRAM)."""
    read_bw: float = math.inf
    """Words per cycle one instance can read (``inf``: unlimited)."""
    write_bw: float = math.inf
    """Words per cycle one instance can write."""
    read_energy: float = 0.0
    """pJ per word read."""
    write_energy: float = 0.0
    """pJ per word written (fills and updates)."""
    instances: int = 1
    """Copies of the level (``mesh_x × mesh_y``)."""
    mesh_x: int = 1
    """Instances along x."""
    mesh_y: int = 1
    """Instances along y."""
    word_bytes: int = 2
    """Bytes per word."""
    block_size: int = 1
    """Words per vector access (Timeloop's ``block-size``): energies are per vector access of this many words."""
    shared_bw: float = math.inf
    """Words per cycle of reads plus writes together (Timeloop's ``shared_bandwidth``; ``inf``: no shared limit)."""
    fill_energy: float | None = None
    """pJ per fill (write from the parent); ``None``: ``write_energy``."""
    update_energy: float | None = None
    """pJ per update (write from a child or the compute); ``None``: ``write_energy``."""
    cls: str = ""
    """Component class (``DRAM``, ``SRAM``, ``regfile``, ...), as the architecture file names it."""

    @property
    def fill_e(self) -> float:
        return self.write_energy if self.fill_energy is None else self.fill_energy

    @property
    def update_e(self) -> float:
        return self.write_energy if self.update_energy is None else self.update_energy

    def __post_init__(self):
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ArchError(f"levels.{self.name}.block_size", f"must be an integer >= 1, got {self.block_size!r}",
                            self.block_size)
        for f in ("capacity_words", "read_bw", "write_bw", "shared_bw"):
            v = getattr(self, f)
            if not (v > 0):
                raise ArchError(f"levels.{self.name}.{f}", f"must be > 0, got {v!r}", v)
        if self.mesh_x * self.mesh_y != self.instances:
            raise ArchError(f"levels.{self.name}.instances",
                            f"mesh {self.mesh_x}x{self.mesh_y} does not match {self.instances} instances")


@dataclass(frozen=True)
class Arch:
    """Levels outermost first, plus the MAC array below the innermost level."""

    levels: tuple[Level, ...]
    num_pes: int
    """MAC units (each completes one op point per cycle)."""
    pe_mesh: tuple[int, int] = (1, 1)
    """PE grid (x, y)."""
    mac_energy: float = 0.0
    """pJ per op point (MAC)."""
    name: str = "arch"
    semantics: Semantics = PROJECT
    """Counting and timing rules (:mod:`fusion_perf.semantics`): TileFlow/Timeloop files get ``REFERENCE``."""

    def __post_init__(self):
        object.__setattr__(self, "levels", tuple(self.levels))
        object.__setattr__(self, "semantics", as_semantics(self.semantics, f"{self.name}.semantics"))
        if not self.levels:
            raise ArchError(f"{self.name}.levels", "at least one storage level is required")
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ArchError(f"{self.name}.levels", f"duplicate level names {names}")
        for i in range(1, len(self.levels)):
            o, n = self.levels[i - 1], self.levels[i]
            if n.instances % o.instances:
                raise ArchError(f"{self.name}.levels.{n.name}.instances",
                                f"{n.instances} is not a multiple of {o.name}'s {o.instances}")
        if self.num_pes % self.levels[-1].instances:
            raise ArchError(f"{self.name}.num_pes", f"{self.num_pes} PEs not a multiple of the innermost level's "
                            f"{self.levels[-1].instances} instances")

    def index(self, name: str, where: str = "target") -> int:
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise ArchError(where, f"no storage level {name!r}; levels are {[lv.name for lv in self.levels]}", name)

    def fanout(self, i: int) -> tuple[int, int]:
        """(x, y) fan-out from one instance of level ``i`` to the next inner level (or to the PEs)."""
        lv = self.levels[i]
        if i + 1 < len(self.levels):
            n = self.levels[i + 1]
            return max(1, n.mesh_x // lv.mesh_x), max(1, n.mesh_y // lv.mesh_y)
        px, py = self.pe_mesh
        if px * py != self.num_pes:
            return self.num_pes // lv.instances, 1
        return max(1, px // lv.mesh_x), max(1, py // lv.mesh_y)

    def signature(self) -> tuple:
        return (self.levels, self.num_pes, self.pe_mesh, self.mac_energy, self.semantics)

    def with_semantics(self, semantics: Any) -> "Arch":
        """The same architecture under other rules: a :class:`Semantics`, ``"reference"`` or ``"project"``."""
        return replace(self, semantics=as_semantics(semantics))

    # --- constructors ----------------------------------------------------------------------------------------
    @staticmethod
    def from_device(dev: Any, dram_unbounded: bool = True) -> "Arch":
        """From a :class:`shared_ir.hardware.Device` (bandwidths converted to words/cycle at the device clock)."""
        clk = dev.compute.frequency_hz
        lv = []
        for i, m in enumerate(dev.memory):
            cap = m.capacity_bytes // m.word_bytes
            lv.append(Level(m.name, math.inf if (i == 0 and dram_unbounded) else cap,
                            m.read_words_per_cycle(clk), m.write_words_per_cycle(clk),
                            m.read_energy_pj, m.write_energy_pj, m.instances, m.mesh_x, m.mesh_y, m.word_bytes))
        c = dev.compute
        pe = (c.pe_cols * (c.cores if c.cores > 1 else 1), c.pe_rows)
        return Arch(tuple(lv), int(c.num_pes * c.macs_per_cycle_per_pe), pe, c.mac_energy_pj, dev.name)


def load_arch(src: Any) -> Arch:
    """An :class:`Arch` from an Arch, a shared_ir Device or System, a preset name (``edge_accel``), or a
    hardware dict/DictConfig/path that :func:`shared_ir.hardware.load_hardware` reads (its first device)."""
    if isinstance(src, Arch):
        return src
    from shared_ir import hardware as hw

    if isinstance(src, hw.Device):
        return Arch.from_device(src)
    if isinstance(src, str) and "\n" not in src and not src.endswith((".yaml", ".yml", ".json")):
        system = hw.load_preset(src)
    else:
        system = hw.load_hardware(src)
    devs = system.all_devices if hasattr(system, "all_devices") else system.devices
    devs = [d for d in devs if d.kind == "accelerator"] or list(devs)
    if not devs:
        raise ArchError("hardware.devices", "the system has no device to map onto")
    return Arch.from_device(devs[0])


__all__ = ["Level", "Arch", "load_arch"]
