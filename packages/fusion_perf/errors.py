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


class ConfigError(FusionPerfError):
    """A search budget or task setting is out of range (``path`` names the field, e.g. ``task.iterations``)."""


def require_count(path: str, value: object, minimum: int = 1) -> int:
    """``value`` as an integer >= ``minimum``, else :class:`ConfigError` naming ``path`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(path, f"must be an integer >= {minimum}, got {value!r}", value)
    return value


def cli_count(minimum: int = 1):
    """An argparse ``type=`` for integers >= ``minimum`` (argparse names the option in its message)."""
    import argparse

    def parse(text: str) -> int:
        try:
            return require_count("", int(text), minimum)
        except (ValueError, ConfigError):
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None

    return parse
