"""The counting and timing rules the model applies: the reference's (Timeloop v0.2 / TileFlow) or this package's.

Rule sets, chosen per architecture (:attr:`fusion_perf.arch.Arch.semantics`): an architecture read from
TileFlow / Timeloop files gets :data:`REFERENCE`, one built from a ``shared_ir`` preset or device gets
:data:`PROJECT`. ``arch.with_semantics("project")`` (or a :class:`Semantics`, or ``semantics:`` in a file)
switches any architecture. The reference family has two more members, TileFlow's own analysis:
:data:`TILEFLOW` (``tileflow``) and :data:`TILEFLOW_4200E63` (``tileflow-4200e63``).

=========================  ===========================================  ==========================================
rule                       REFERENCE (Timeloop v0.2 / TileFlow)         PROJECT (this package's exact model)
=========================  ===========================================  ==========================================
nested tiles               a temporal node below a scope under a node   one copy per level on a path, held at the
(``nested_slots``)         of its own level keeps its own copy, filled  outermost node targeting the level
                           from the one above (TileFlow's storage per
                           tile node; DRAM too)
partial sums               round trip: an output tile refills its       drains accumulate in the parent, never
(``psum_round_trip``)      partial sums from the parent on every        refetched; the first visit fills nothing
                           arrival, the first too (Timeloop's first-
                           read elision is off), and every compute
                           update is a read-modify-write
drain reads                folded into the read-modify-write reads      an output drain reads the child
(``drain_reads``)          (not counted again)
bandwidth charged at       the node holding the level's tile on the     the node whose execution moves the words,
(``charge_holder``)        accessing op's path: all its reads, fills    per entry
                           and updates against one budget over the
                           node's whole run
cycles                     ``ceil`` per bandwidth-bound node, float     real-valued
(``ceil_cycles``)          order as Timeloop's ``ComputePerformance``
pipeline fill/drain        left out (TileFlow)                          ``(Σ − max)/n`` per entry
(``pipeline_fill_drain``)
energy                     per vector access: ``ceil(words per          per word
(``vector_energy``)        instance / block size)`` × energy × instances
=========================  ===========================================  ==========================================

TileFlow's own analysis (``nest_calls``; :mod:`fusion_perf.nest`, whose docstring lists its rules) replaces the
closed form by a port of TileFlow's call-by-call evaluation: counts per instance summed over its calls, inner
tiles restarting at every call of their parent, fills spread over the level's whole fan-out and truncated per
call, one bandwidth bound per call. It gives TileFlow's printed cycles and energy on every validation point (the
single GEMMs too, where TileFlow's energy is up to 13% above Timeloop's) and on its ``tests/cases`` result CSVs
with ``early_tileflow`` (the commit that wrote them, 4200e63: a scope as the top of an intermediate's chain, no
bypass or profile flags in that pass, and its projection bug; see :mod:`fusion_perf.nest`). It is evaluated per
factor vector (no closed form, about 0.03–0.5 s each), so searches under it are slow.

On a single-op tree the reference rules give Timeloop's counts, cycles and energy (TileFlow prints the same
cycles there); on fused trees TileFlow's cycles, within a cycle or two: each tile node's bandwidth bound holds
over its whole run, where TileFlow bounds each of its calls (the first iteration of each loop and the rest)
and rounds each up. The counts follow Timeloop's, whose reuse carries across loop levels; TileFlow restarts an
inner tile at each call of its parent, so its energies run up to 13% above Timeloop's on the same single GEMM.
Both rule sets share Timeloop's read/write/shared bandwidths per level (``read_bandwidth``, ``write_bandwidth``,
``shared_bandwidth``: fills and updates use the write port, reads the read port, all three the shared one),
multicast of identical deltas and spatial reduction of identical drains among sibling instances.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ArchError


@dataclass(frozen=True)
class Semantics:
    """One rule set (see the module docstring for what each flag changes)."""

    name: str
    psum_round_trip: bool
    drain_reads: bool
    charge_holder: bool
    nested_slots: bool
    ceil_cycles: bool
    pipeline_fill_drain: bool
    vector_energy: bool
    nest_calls: bool = False
    """TileFlow's own call-by-call analysis (:mod:`fusion_perf.nest`) instead of the closed form."""
    early_tileflow: bool = False
    """With ``nest_calls``: TileFlow as of commit 4200e63, which wrote its ``tests/cases`` result CSVs."""


REFERENCE = Semantics("reference", psum_round_trip=True, drain_reads=False, charge_holder=True, nested_slots=True,
                      ceil_cycles=True, pipeline_fill_drain=False, vector_energy=True)
PROJECT = Semantics("project", psum_round_trip=False, drain_reads=True, charge_holder=False, nested_slots=False,
                    ceil_cycles=False, pipeline_fill_drain=True, vector_energy=False)
TILEFLOW = replace(REFERENCE, name="tileflow", nest_calls=True)
TILEFLOW_4200E63 = replace(TILEFLOW, name="tileflow-4200e63", early_tileflow=True)
NAMED = {"reference": REFERENCE, "timeloop": REFERENCE, "tileflow": TILEFLOW, "tileflow-4200e63": TILEFLOW_4200E63,
         "project": PROJECT}


def as_semantics(value: Any, where: str = "semantics") -> Semantics:
    """A :class:`Semantics` from itself, a name (``reference``/``timeloop``, ``tileflow``, ``tileflow-4200e63``,
    ``project``) or a mapping
    of flags over ``base`` (a name, default ``reference``)."""
    if isinstance(value, Semantics):
        return value
    if isinstance(value, str) and value.lower() in NAMED:
        return NAMED[value.lower()]
    if isinstance(value, dict):
        base = as_semantics(value.get("base", "reference"), f"{where}.base")
        flags = {f.name for f in fields(Semantics)} - {"name"}
        bad = sorted(set(value) - flags - {"base"})
        if bad:
            raise ArchError(f"{where}.{bad[0]}", f"is not a semantics flag (flags: {sorted(flags)})", bad[0])
        for k in flags & set(value):
            if not isinstance(value[k], bool):
                raise ArchError(f"{where}.{k}", f"must be true or false, got {value[k]!r}", value[k])
        kw = {f.name: value.get(f.name, getattr(base, f.name)) for f in fields(Semantics)}
        kw["name"] = "custom"
        return Semantics(**kw)
    raise ArchError(where, f"unknown semantics {value!r}; choose from {sorted(NAMED)} or give a mapping of flags",
                    value)


__all__ = ["Semantics", "REFERENCE", "PROJECT", "TILEFLOW", "TILEFLOW_4200E63", "as_semantics"]
