"""Typed errors of the shared IR. Every message names the field, tensor or op at fault."""
from __future__ import annotations


class IRError(ValueError):
    """Base class of every error raised by shared_ir."""


class ValidationError(IRError):
    """A field has an invalid value. ``path`` is the dotted/indexed path of the field (e.g. ``ops[3].dims``)."""

    def __init__(self, path: str, message: str, value: object = None):
        self.path = path
        self.value = value
        super().__init__(f"{path}: {message}" if path else message)


class ConfigFieldError(ValueError):
    """An invalid config field (a workload, an experiment's task): ``path`` is the dotted field path, ``problem``
    what is wrong, ``value`` the bad value. The message reads ``workload.batch must be an integer >= 1, got 0``."""

    def __init__(self, path: str, problem: str, value: object = None):
        self.path, self.problem, self.value = path, problem, value
        super().__init__(f"{path} {problem}" if path else problem)


class ShapeError(ValidationError):
    """Two descriptions of one tensor disagree, or an op is applied to tensors of incompatible shapes."""


class GraphError(ValidationError):
    """The graph is malformed: a cycle, a tensor produced twice, an undeclared input."""


class UnsupportedOpError(IRError):
    """A frontend met operators it cannot translate. ``items`` lists every one of them (target, location)."""

    def __init__(self, items: list[tuple[str, str]]):
        self.items = list(items)
        lines = "\n".join(f"  - {t} at {loc}" for t, loc in self.items)
        super().__init__(f"{len(self.items)} unsupported operator(s):\n{lines}")
