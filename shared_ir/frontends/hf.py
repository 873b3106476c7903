"""Hugging Face models built from a config (random weights, nothing downloaded) and imported through torch.export.

``hf_model("gpt2", {"n_layer": 2})`` builds ``AutoModel.from_config(AutoConfig.for_model("gpt2", n_layer=2))``
and example inputs that fit it: token ids for text models, images for vision models (``num_channels`` ×
``image_size``²), log-mel features for speech encoders (Whisper: its encoder alone, ``2 × max_source_positions``
frames), and decoder ids for encoder-decoder text models (T5). :func:`from_hf` returns the IR graph.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import ValidationError


def hf_config(model_type: str, config: Mapping[str, Any] | None = None):
    """``transformers.AutoConfig.for_model(model_type, **config)``; unknown types and fields are errors naming
    them (a typo would otherwise be stored on the config silently and the full-size default model built)."""
    import transformers

    try:
        cfg = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        known = sorted(transformers.CONFIG_MAPPING.keys())
        raise ValidationError("name", f"unknown Hugging Face model type {model_type!r} "
                              f"(e.g. {', '.join(k for k in known if k in _EXAMPLES)})", model_type) from None
    for k, v in (config or {}).items():
        if not hasattr(cfg, k):
            raise ValidationError(f"config.{k}", f"is not a field of {type(cfg).__name__}", v)
        setattr(cfg, k, v)
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False  # no key/value cache outputs: the graph is one forward pass
    return cfg


_EXAMPLES = ("gpt2", "llama", "qwen2", "mistral", "bert", "vit", "t5", "whisper")


def hf_model(model_type: str, config: Mapping[str, Any] | None = None, batch: int = 1, seq: int = 128):
    """(module in eval mode, example inputs) of a Hugging Face model type built from ``config``."""
    import torch
    import transformers

    cfg = hf_config(model_type, config)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(cfg).eval()
    name = getattr(model, "main_input_name", "input_ids")
    if name == "input_features":  # speech: the encoder over log-mel frames
        model = model.get_encoder() if hasattr(model, "get_encoder") else model
        frames = 2 * getattr(cfg, "max_source_positions", seq)
        return model, (torch.randn(batch, cfg.num_mel_bins, frames),)
    if name == "pixel_values":
        return model, (torch.randn(batch, cfg.num_channels, cfg.image_size, cfg.image_size),)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    if getattr(cfg, "is_encoder_decoder", False):
        return model, {"input_ids": ids, "decoder_input_ids": ids[:, : max(1, seq // 2)]}
    return model, (ids,)


def from_hf(model_type: str, config: Mapping[str, Any] | None = None, batch: int = 1, seq: int = 128,
            name: str | None = None, strict: bool = True):
    """The IR graph of :func:`hf_model` (through :func:`shared_ir.frontends.from_torch_export`)."""
    from . import from_torch_export

    model, inputs = hf_model(model_type, config, batch, seq)
    return from_torch_export(model, inputs, name=name or model_type, strict=strict)
