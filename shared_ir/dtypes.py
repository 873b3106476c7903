"""Data types with their byte sizes. The IR counts data in bytes; word sizes come from the hardware level."""
from __future__ import annotations

import enum


class DType(str, enum.Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float64 = "float64"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"

    @property
    def nbytes(self) -> int:
        return _SIZES[self]

    @classmethod
    def parse(cls, value: "str | DType", path: str = "dtype") -> "DType":
        from .errors import ValidationError

        if isinstance(value, DType):
            return value
        v = str(value).replace("torch.", "")
        v = _ALIASES.get(v, v)
        try:
            return cls(v)
        except ValueError:
            raise ValidationError(path, f"unknown dtype {value!r}; expected one of {[d.value for d in cls]}",
                                  value) from None


_SIZES = {
    DType.float32: 4, DType.float16: 2, DType.bfloat16: 2, DType.float64: 8, DType.int8: 1, DType.uint8: 1,
    DType.int16: 2, DType.int32: 4, DType.int64: 8, DType.bool: 1,
}
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
            "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
