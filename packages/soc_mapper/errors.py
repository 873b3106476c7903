"""Typed errors of soc_mapper. Every message names the layer, device or field at fault."""
from __future__ import annotations

from shared_ir.errors import ValidationError


class MapperError(ValidationError):
    """Base class: ``path`` names the field/layer/device (``layers.resnet18#0/conv1``, ``soc.devices.tpu0``)."""


class UnsupportedLayerError(MapperError):
    """A layer that no accelerator of the SoC can run."""

    def __init__(self, layer: str, kind: str, devices: list[str]):
        self.layer = layer
        super().__init__(f"layers.{layer}", f"no accelerator supports this {kind} layer (devices: {devices}; "
                                            f"check their compute.op_kinds / dataflow)", layer)


class SoCError(MapperError):
    """The SoC description cannot be used for mapping (no accelerators, no links/topology, position clash)."""


class CheckpointError(MapperError):
    """A GA checkpoint that does not match the run it should resume."""
