"""Transformer models of the zoo: a configurable block, BERT-base (encoder), ViT-B/16.

Attention is written out (linear projections, ``q @ kᵀ`` and ``p @ v`` batch matmuls, softmax) so the frontend sees
every GEMM; no fused scaled_dot_product_attention.
"""
from __future__ import annotations


def _blocks():
    import torch
    import torch.nn as nn

    class SelfAttention(nn.Module):
        def __init__(self, d_model, heads, causal=False, seq=None, fused_qkv=False):
            super().__init__()
            if d_model % heads:
                raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
            self.h, self.dh, self.causal, self.fused = heads, d_model // heads, causal, fused_qkv
            self.scale = 1.0 / float(self.dh) ** 0.5
            if fused_qkv:  # ViT/timm style: one [3d, d] projection
                self.qkv = nn.Linear(d_model, 3 * d_model)
            else:  # BERT style: separate q, k, v
                self.query = nn.Linear(d_model, d_model)
                self.key = nn.Linear(d_model, d_model)
                self.value = nn.Linear(d_model, d_model)
            self.out = nn.Linear(d_model, d_model)
            if causal:
                # additive mask (0 on/below the diagonal, -1e4 above) as a buffer: a constant the graph reads
                m = torch.triu(torch.full((seq, seq), -1e4), diagonal=1)
                self.register_buffer("mask", m, persistent=False)

        def heads(self, t, B, S):
            return t.reshape(B, S, self.h, self.dh).permute(0, 2, 1, 3)

        def forward(self, x):
            B, S, D = x.shape
            if self.fused:
                q, k, v = self.qkv(x).chunk(3, dim=-1)
            else:
                q, k, v = self.query(x), self.key(x), self.value(x)
            q, k, v = self.heads(q, B, S), self.heads(k, B, S), self.heads(v, B, S)
            s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
            if self.causal:
                s = s + self.mask
            p = torch.softmax(s, dim=-1)
            o = torch.matmul(p, v).permute(0, 2, 1, 3).reshape(B, S, D)
            return self.out(o)

    class Block(nn.Module):
        """Post-LN (BERT) or pre-LN (ViT/GPT) transformer block: attention + FFN, residuals."""

        def __init__(self, d_model=768, heads=12, ffn=3072, causal=False, seq=None, pre_ln=False, fused_qkv=False,
                     eps=1e-12):
            super().__init__()
            self.pre_ln = pre_ln
            self.attn = SelfAttention(d_model, heads, causal, seq, fused_qkv)
            self.ln1 = nn.LayerNorm(d_model, eps=eps)
            self.fc1 = nn.Linear(d_model, ffn)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(ffn, d_model)
            self.ln2 = nn.LayerNorm(d_model, eps=eps)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            if self.pre_ln:
                x = x + self.drop(self.attn(self.ln1(x)))
                return x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))
            x = self.ln1(x + self.drop(self.attn(x)))
            return self.ln2(x + self.drop(self.fc2(self.act(self.fc1(x)))))

    return Block


def transformer_block(d_model: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128, causal: bool = False,
                      pre_ln: bool = False):
    """One transformer block on [B, seq, d_model]: encoder-style (``causal=False``, bidirectional attention) or
    decoder-style (``causal=True``: GPT-like masked self-attention via an additive mask buffer)."""
    return _blocks()(d_model, heads, ffn, causal, seq, pre_ln)


def bert_base(seq: int = 128, vocab: int = 30522, d_model: int = 768, layers: int = 12, heads: int = 12,
              ffn: int = 3072, max_pos: int = 512, pooler: bool = True):
    """BERT-base encoder (Devlin et al. 2019) as HF ``BertModel``: embeddings (word + position + token type, LN),
    12 post-LN blocks, tanh pooler on [CLS]. Input: token ids [B, seq]."""
    import torch
    import torch.nn as nn

    Block = _blocks()
    if seq > max_pos:
        raise ValueError(f"seq ({seq}) must be <= max_pos ({max_pos})")

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, d_model)
            self.position_embeddings = nn.Embedding(max_pos, d_model)
            self.token_type_embeddings = nn.Embedding(2, d_model)
            self.register_buffer("position_ids", torch.arange(seq).unsqueeze(0), persistent=False)
            self.register_buffer("token_type_ids", torch.zeros(1, seq, dtype=torch.long), persistent=False)
            self.emb_ln = nn.LayerNorm(d_model, eps=1e-12)
            self.layer = nn.ModuleList(Block(d_model, heads, ffn) for _ in range(layers))
            self.pooler = nn.Linear(d_model, d_model) if pooler else None

        def forward(self, input_ids):
            x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids) \
                + self.token_type_embeddings(self.token_type_ids)
            x = self.emb_ln(x)
            for blk in self.layer:
                x = blk(x)
            if self.pooler is None:
                return x
            return x, torch.tanh(self.pooler(x[:, 0]))

    return Bert()


def vit_base(img: int = 224, patch: int = 16, d_model: int = 768, layers: int = 12, heads: int = 12, ffn: int = 3072,
             num_classes: int = 1000):
    """ViT-B/16 (Dosovitskiy et al. 2021) as timm's ``vit_base_patch16_224``: conv patch embedding, [CLS] token,
    learned position embedding, 12 pre-LN blocks with a fused qkv projection, final LN, linear head on [CLS]."""
    import torch
    import torch.nn as nn

    Block = _blocks()
    n = (img // patch) ** 2

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, d_model, patch, patch)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
            self.pos_embed = nn.Parameter(torch.randn(1, n + 1, d_model) * 0.02)
            self.blocks = nn.ModuleList(Block(d_model, heads, ffn, pre_ln=True, fused_qkv=True, eps=1e-6)
                                        for _ in range(layers))
            self.norm = nn.LayerNorm(d_model, eps=1e-6)
            self.head = nn.Linear(d_model, num_classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x)[:, 0])

    return ViT()
