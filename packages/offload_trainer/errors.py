"""Typed errors of offload_trainer. Every message names the field, layer or file at fault."""
from __future__ import annotations


class OffloadError(ValueError):
    """Base class. ``path`` is the dotted path of the config field / layer / file at fault."""

    def __init__(self, path: str, message: str, value: object = None):
        self.path = path
        self.value = value
        super().__init__(f"{path}: {message}" if path else message)


class ConfigError(OffloadError):
    """A configuration field has an invalid value (``path`` e.g. ``lsp.d``, ``train.method``)."""


class ModelError(OffloadError):
    """The model cannot be trained with the chosen method (no trainable linear, a dimension smaller than d)."""


class DataError(OffloadError):
    """A corpus file or shipped corpus cannot be read or parsed (``path`` names the file and line)."""


class NonFiniteGradientError(OffloadError):
    """A gradient (compressed or full) holds NaN/inf; ``path`` is the layer's module name."""


class PlannerError(OffloadError):
    """The memory/time planner got an unusable model spec or hardware preset (``path`` names the field)."""


class CheckpointError(OffloadError):
    """A checkpoint cannot be read or does not fit the model (``path`` is the file); the message names an older
    good checkpoint of the same folder when there is one."""
