"""offload_trainer: LLM fine-tuning with CPU offload through learned (d, r)-sparse projectors and a layer-wise
schedule (LSP-Offload, AAAI 2025), with full fine-tuning, ZeRO-Offload-style, LoRA and GaLore baselines, a memory
planner and an iteration-time model.

``finetune(model, dataset, method="lsp")`` fine-tunes a user's own model; ``LSPOffload`` plugs LSP into a
``transformers.Trainer``. Light to import: torch/transformers are imported inside the modules that need them, and
those two names load their modules on first use.
"""
from .errors import ConfigError, DataError, ModelError, NonFiniteGradientError, OffloadError, PlannerError  # noqa: F401

_LAZY = {"finetune": "api", "Finetuned": "api", "LSPOffload": "hf"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["finetune", "Finetuned", "LSPOffload", "OffloadError", "ConfigError", "ModelError", "DataError",
           "NonFiniteGradientError", "PlannerError"]
