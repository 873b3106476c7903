"""offload_trainer: LLM fine-tuning with CPU offload through learned (d, r)-sparse projectors and a layer-wise
schedule (LSP-Offload, AAAI 2025), with full fine-tuning, ZeRO-Offload-style, LoRA and GaLore baselines, a memory
planner and an iteration-time model.

Light to import: torch/transformers are imported inside the modules that need them.
"""
from .errors import ConfigError, DataError, ModelError, NonFiniteGradientError, OffloadError, PlannerError  # noqa: F401

__all__ = ["OffloadError", "ConfigError", "ModelError", "DataError", "NonFiniteGradientError", "PlannerError"]
