"""shared_ir: the graph IR (ops as loop nests over named dims) and the hardware description shared by all packages.

Light to import: torch/onnx are imported only inside the frontends.
"""
from . import ops
from .affine import AffineExpr, IndirectIndex, parse_index
from .atomic import atomic_path, atomic_savefig, atomic_write_bytes, atomic_write_text
from .dtypes import DType
from .errors import GraphError, IRError, ShapeError, UnsupportedOpError, ValidationError
from .graph import Chain, Graph
from .hardware import (
                       ComputeUnit,
                       Device,
                       HardwareError,
                       Link,
                       MemoryLevel,
                       System,
                       Topology,
                       dump_hardware,
                       list_presets,
                       load_hardware,
                       load_preset,
)
from .op import Access, Dim, Op, OpKind, Tensor, TensorRole
from .roofline import Roofline, peak_flops, roofline, roofline_table

__all__ = ["AffineExpr", "IndirectIndex", "parse_index", "DType", "GraphError", "IRError", "ShapeError",
           "UnsupportedOpError", "ValidationError", "Chain", "Graph", "atomic_path", "atomic_savefig",
           "atomic_write_bytes", "atomic_write_text", "Access", "Dim", "Op",
           "OpKind", "Tensor", "TensorRole", "ops", "ComputeUnit", "Device", "HardwareError", "Link", "MemoryLevel",
           "System", "Topology", "dump_hardware", "list_presets", "load_hardware", "load_preset", "Roofline",
           "peak_flops", "roofline", "roofline_table"]
