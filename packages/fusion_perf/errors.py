"""Typed errors of fusion_perf. Every message names the file/field, tree node and level at fault; nothing here
ever exits the process."""
from __future__ import annotations

from shared_ir.errors import ValidationError


class FusionPerfError(ValidationError):
    """Base class: ``path`` is the file/field or tree-node path at fault."""


class ProblemError(FusionPerfError):
    """The problem is malformed: a cycle, a tensor produced twice, dimension extents that disagree."""


class ArchError(FusionPerfError):
    """The architecture is malformed or lacks a level the mapping names."""


class MappingError(FusionPerfError):
    """The mapping tree is malformed: unknown tensor/op/dim/level, factor product != extent, bad nesting."""


class ConstraintError(MappingError):
    """A resource constraint of the hardware is violated by a (well-formed) mapping.

    Attributes: ``node`` (tree path), ``level`` (memory level name), ``need`` and ``have`` (words or PEs)."""

    kind = "constraint"

    def __init__(self, node: str, level: str, need: int, have: int, detail: str = ""):
        self.node, self.level, self.need, self.have = node, level, int(need), int(have)
        msg = f"{self.kind} violated at level {level!r}: needs {need}, has {have}" + (f" ({detail})" if detail else "")
        super().__init__(node, msg, need)


class CapacityError(ConstraintError):
    """Footprint of the tiles live at a level exceeds its capacity (words per instance)."""

    kind = "capacity"


class FanoutError(ConstraintError):
    """Spatial loops need more instances than the level's fan-out provides."""

    kind = "spatial fan-out"


class InputFormatError(FusionPerfError):
    """A TileFlow-format input file is unreadable or uses an unsupported construct."""
