"""Per-action access energies: an Accelergy-style energy reference table by component class and technology.

A table gives, per storage component, pJ per *vector access* (one access moves ``block-size`` words) for the
actions ``read``, ``fill`` (a write from the parent) and ``update`` (a write from a child or the compute), and
per compute component pJ per op. Entries are looked up by component name first, then by class
(``DRAM``, ``SRAM``, ``regfile``, ``smartbuffer``, ``storage``; ``intmac``, ``mac``, ``fpmac``, ``compute``).

Built-in technologies:

* ``timeloop-pat`` (the default for TileFlow/Timeloop files): Timeloop's internal power-area-timing model, what
  Timeloop and TileFlow use when built without Accelergy (TileFlow's build and validation runs):
  DRAM ``200 · width/16`` pJ per vector of ``width = word-bits · block-size`` bits; every other storage class an
  SRAM fitted to Eyeriss (0.5 KB → 1.0, 100 KB → 6.0 units per 16-bit access, linear in the capacity) times
  ``width/16``, 0 when the capacity is not given; compute ``(word-bits/16)²`` pJ per op.
* ``project-16nm``: this package's earlier per-class estimates in pJ per 16-bit word (DRAM 64, SRAM 1.5,
  regfile 0.1, smartbuffer/storage 1.5; MAC 0.3), scaled by word bits and block size.

A user table is a YAML file (or mapping) with ``energy_table:`` — ``technology``, ``classes`` (per class, pJ per
16-bit word per action, scaled by word bits and block size like Accelergy's table plug-ins; ``write`` sets fill
and update) and ``components`` (per component name, pJ per vector access) — or with Accelergy's ``ERT:`` output
(versions 0.2–0.4), whose actions map to Timeloop's as Timeloop maps them (``read``; ``random_fill``/``write``;
``random_update``/``random_fill``/``write``; ``mac_random``/``mult_random``/``mac``/``mult``/``compute``; the most
expensive argument of an action).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InputFormatError, MappingError
from .mapping import yaml_load

STORAGE_ACTIONS = ("read", "fill", "update")
STORAGE_CLASSES = ("dram", "sram", "regfile", "smartbuffer", "storage")
COMPUTE_CLASSES = ("intmac", "mac", "fpmac", "compute")
# Timeloop's priority lists from its action names to the ERT's (topology.hpp: storageOperationMappings)
_ERT_STORAGE = {"read": ("random_read", "read"), "fill": ("random_fill", "write"),
                "update": ("random_update", "random_fill", "write")}
_ERT_COMPUTE = ("mac_random", "mult_random", "mac", "mult", "compute")


def pat_dram(width_bits: int) -> float:
    """Timeloop PAT: pJ per DRAM vector access of ``width_bits``."""
    return 200.0 * width_bits / 16


def pat_sram(height: int, width_bits: int) -> float:
    """Timeloop PAT: pJ per access of an SRAM ``height`` rows × ``width_bits`` (Eyeriss fit, linear in KB)."""
    x0, y0, x1, y1 = 0.5, 1.0, 100.0, 6.0
    kb = width_bits * height / (8 * 1024)
    return ((y1 - y0) / (x1 - x0) * (kb - x0) + y0) * width_bits / 16


def pat_mult(bits: int) -> float:
    """Timeloop PAT: pJ per multiply of two ``bits``-bit operands."""
    return (bits / 16) * (bits / 16)


_PROJECT_WORD = {"dram": 64.0, "sram": 1.5, "regfile": 0.1, "smartbuffer": 1.5, "storage": 1.5}


@dataclass
class EnergyTable:
    """Per-action energies by component name and class (see the module docstring)."""

    technology: str = "timeloop-pat"
    classes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Class (lower case) -> action -> pJ per 16-bit word (storage) or per 16-bit op (compute)."""
    components: dict[str, dict[str, float]] = field(default_factory=dict)
    """Component name -> action -> pJ per vector access (storage) or per op (compute)."""
    source: str = "built-in"

    def storage(self, name: str, cls: str, word_bits: int, block: int, entries: float | None) -> dict[str, float]:
        """pJ per vector access for read, fill, update of one storage component."""
        if name in self.components:
            return _complete(self.components[name], STORAGE_ACTIONS, f"{self.source}: {name}")
        c = _storage_class(cls)
        if c in self.classes:
            per = _complete(self.classes[c], STORAGE_ACTIONS, f"{self.source}: classes.{c}")
            return {a: e * word_bits / 16 * block for a, e in per.items()}
        if self.technology == "project-16nm":
            e = _PROJECT_WORD.get(c, 1.0) * word_bits / 16 * block
        elif c == "dram":
            e = pat_dram(word_bits * block)
        elif not entries:
            e = 0.0
        else:
            e = pat_sram(-(-int(entries) // block), word_bits * block)
        return {a: e for a in STORAGE_ACTIONS}

    def compute(self, name: str, cls: str, word_bits: int) -> float:
        """pJ per op of one compute component."""
        if name in self.components:
            return float(_complete(self.components[name], ("compute",), f"{self.source}: {name}")["compute"])
        c = _compute_class(cls)
        if c in self.classes:
            e = _complete(self.classes[c], ("compute",), f"{self.source}: classes.{c}")["compute"]
            return e * (word_bits / 16) ** 2
        return 0.3 * (word_bits / 16) ** 2 if self.technology == "project-16nm" else pat_mult(word_bits)


def _storage_class(cls: str) -> str:
    c = cls.lower()
    return "dram" if "dram" in c else c if c in STORAGE_CLASSES else "sram"


def _compute_class(cls: str) -> str:
    c = cls.lower()
    return c if c in COMPUTE_CLASSES else "intmac"


def _complete(d: Mapping[str, float], actions: tuple, where: str) -> dict[str, float]:
    out = {}
    for a in actions:
        v = d.get(a, d.get("write") if a in ("fill", "update") else None)
        if v is None:
            raise InputFormatError(where, f"no energy for action {a!r} (give {list(actions)}"
                                   f"{' or write' if a in ('fill', 'update') else ''})")
        out[a] = float(v)
    return out


BUILTIN = {"timeloop-pat": EnergyTable("timeloop-pat"), "project-16nm": EnergyTable("project-16nm")}


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise InputFormatError(where, f"must be a number >= 0 (pJ), got {v!r}")
    return float(v)


def _actions(d: Any, where: str) -> dict[str, float]:
    if not isinstance(d, Mapping):
        raise InputFormatError(where, f"must be a mapping of action -> pJ, got {d!r}")
    known = set(STORAGE_ACTIONS) | {"write", "compute"}
    out = {}
    for a, v in d.items():
        if str(a) not in known:
            raise InputFormatError(f"{where}.{a}", f"unknown action; actions are {sorted(known)}")
        out[str(a)] = _number(v, f"{where}.{a}")
    return out


def parse_table(d: Any, where: str = "energy_table") -> EnergyTable:
    """An :class:`EnergyTable` from an ``energy_table`` mapping (technology, classes, components)."""
    if not isinstance(d, Mapping):
        raise InputFormatError(where, f"must be a mapping with technology/classes/components, got {d!r}")
    bad = sorted(set(map(str, d)) - {"technology", "classes", "components"})
    if bad:
        raise InputFormatError(f"{where}.{bad[0]}", "unknown key (keys: technology, classes, components)")
    tech = str(d.get("technology", "timeloop-pat"))
    base = BUILTIN.get(tech, BUILTIN["timeloop-pat"])
    classes = {}
    for c, acts in (d.get("classes") or {}).items():
        cl = str(c).lower()
        if cl not in STORAGE_CLASSES + COMPUTE_CLASSES:
            raise InputFormatError(f"{where}.classes.{c}", f"unknown class; classes are "
                                   f"{list(STORAGE_CLASSES + COMPUTE_CLASSES)}")
        classes[cl] = _actions(acts, f"{where}.classes.{c}")
    comps = {str(n): _actions(a, f"{where}.components.{n}") for n, a in (d.get("components") or {}).items()}
    return EnergyTable(tech, {**base.classes, **classes}, comps, where)


def parse_ert(d: Any, where: str = "ERT") -> EnergyTable:
    """An :class:`EnergyTable` of components from Accelergy's ERT (versions 0.2, 0.3, 0.4)."""
    if not isinstance(d, Mapping) or "tables" not in d:
        raise InputFormatError(where, "an ERT needs version and tables")
    tables = d["tables"]
    rows: list[tuple[str, str, Any]] = []
    if isinstance(tables, list):
        for i, t in enumerate(tables):
            if not isinstance(t, Mapping) or "name" not in t or not isinstance(t.get("actions"), list):
                raise InputFormatError(f"{where}.tables[{i}]", "each table needs a name and a list of actions")
            rows += [(str(t["name"]), str(a.get("name")), a) for a in t["actions"] if isinstance(a, Mapping)]
    elif isinstance(tables, Mapping):
        for n, acts in tables.items():
            if not isinstance(acts, Mapping):
                raise InputFormatError(f"{where}.tables.{n}", "must map action names to energies")
            rows += [(str(n), str(a), v) for a, v in acts.items()]
    else:
        raise InputFormatError(f"{where}.tables", "must be a list (v0.3/0.4) or a mapping (v0.2)")
    per: dict[str, dict[str, float]] = {}
    for name, act, v in rows:
        comp = re.sub(r"\[\d+\.\.\d+\]$", "", name).rsplit(".", 1)[-1]
        entries = v if isinstance(v, list) else [v]
        es = [float(e["energy"]) for e in entries if isinstance(e, Mapping) and "energy" in e]
        if not es:
            raise InputFormatError(f"{where}.tables.{name}.{act}", "no energy given")
        per.setdefault(comp, {})[act] = max(es)
    comps = {}
    for comp, acts in per.items():
        out = {}
        for ours, names in _ERT_STORAGE.items():
            hit = next((acts[n] for n in names if n in acts), None)
            if hit is not None:
                out[ours] = hit
        hit = next((acts[n] for n in _ERT_COMPUTE if n in acts), None)
        if hit is not None:
            out["compute"] = hit
        if out:
            comps[comp] = out
    return EnergyTable("accelergy-ert", {}, comps, where)


def load_table(src: Any, where: str = "energy_table") -> EnergyTable:
    """A table from an :class:`EnergyTable`, a built-in technology name, a mapping (``energy_table``/``ERT`` or the
    table itself) or a YAML file holding one."""
    if isinstance(src, EnergyTable):
        return src
    if isinstance(src, str) and src in BUILTIN:
        return BUILTIN[src]
    if isinstance(src, (str, os.PathLike)):
        path = str(src)
        if not os.path.isfile(path):
            raise InputFormatError(where, f"no built-in technology or file {path!r} (built-in: {sorted(BUILTIN)})")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            data = yaml_load(text, path)
        except MappingError as e:
            raise InputFormatError(e.path, str(e)[len(e.path) + 2:]) from None
        return load_table(data, path)
    if isinstance(src, Mapping):
        if "ERT" in src:
            return parse_ert(src["ERT"], f"{where}: ERT")
        if "energy_table" in src:
            return parse_table(src["energy_table"], f"{where}: energy_table")
        return parse_table(src, where)
    raise InputFormatError(where, f"an energy table is a technology name, a mapping or a YAML file, got {src!r}")


__all__ = ["EnergyTable", "BUILTIN", "load_table", "parse_table", "parse_ert", "pat_dram", "pat_sram", "pat_mult"]
