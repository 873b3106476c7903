"""``compile()`` on Hugging Face blocks (which torch.fx cannot trace: captured with torch.export) and the causal
attention template that GPT-style blocks need."""
from dataclasses import replace

import chain_fuser
import pytest
import torch
from chain_fuser.kernel import build_kernel, random_inputs, reference
from chain_fuser.planner import plan_chain
from chain_fuser.spec import GemmChain

transformers = pytest.importorskip("transformers")


def _order(spec, order, tiles):
    base = plan_chain(spec, top_k=1)[0]
    lp = replace(base.fused, order=order, tiles=tiles)
    return replace(base, levels=tuple(lp if x.level == base.fusion_level else x for x in base.levels))


@pytest.mark.parametrize("M", [40, 77])
def test_causal_attention_equals_masked_softmax(M):
    spec = GemmChain(3, M, 24, 16, M, glue="softmax", scale=0.25, bt=True, causal=True)
    ins = random_inputs(spec)
    want = torch.nn.functional.scaled_dot_product_attention(*ins, is_causal=True, scale=0.25)
    torch.testing.assert_close(reference(spec, *ins), want, rtol=1e-5, atol=1e-6)
    whole = build_kernel(spec, plan_chain(spec, top_k=1)[0], True, use_cache=False)
    torch.testing.assert_close(whole(*ins), want, rtol=2e-4, atol=2e-5)
    # l tiled: whole score blocks above the diagonal are masked out of a row (their weight must be 0, not NaN)
    tiled = build_kernel(spec, _order(spec, ("m", "l", "k", "n"), {"m": 16, "l": 16, "k": 16, "n": 24, "b": 1}),
                         True, use_cache=False)
    torch.testing.assert_close(tiled(*ins), want, rtol=2e-4, atol=2e-5)


def test_causal_needs_softmax():
    from chain_fuser.errors import UnsupportedChainError

    with pytest.raises(UnsupportedChainError, match="causal mask needs softmax"):
        GemmChain(1, 8, 8, 8, 8, glue="relu", causal=True)


def _block(kind: str):
    from transformers import BertConfig, GPT2Config, ViTConfig
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.vit.modeling_vit import ViTLayer

    torch.manual_seed(0)
    if kind == "bert":
        cfg = BertConfig(hidden_size=64, num_attention_heads=2, intermediate_size=128)
        cfg._attn_implementation = "sdpa"
        return BertLayer(cfg).eval(), torch.randn(2, 40, 64)
    if kind == "vit":
        cfg = ViTConfig(hidden_size=48, num_attention_heads=3, intermediate_size=96)
        cfg._attn_implementation = "sdpa"
        return ViTLayer(cfg).eval(), torch.randn(2, 37, 48)
    cfg = GPT2Config(n_embd=64, n_head=2)
    cfg._attn_implementation = "sdpa"
    return GPT2Block(cfg, layer_idx=0).eval(), torch.randn(2, 33, 64)


def _first(y):
    return y[0] if isinstance(y, tuple) else y


@pytest.mark.parametrize("kind, fused", [("bert", {"attention", "mlp"}), ("vit", {"attention", "mlp"}),
                                         ("gpt2", {"attention"})])
def test_hf_block_compiles_through_torch_export_and_matches_eager(kind, fused):
    m, x = _block(kind)
    with torch.no_grad(), pytest.warns(UserWarning):  # the chains broken by views are reported
        c = chain_fuser.compile(m, (x,), tune=False)
        got, want = _first(c(x)), _first(m(x))
    kinds = {"attention" if d.spec.glue == "softmax" else "mlp" for d in c.fused}
    assert kinds == fused, c.report()
    if kind == "gpt2":
        assert all(d.spec.causal for d in c.fused)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_attention_with_a_mask_stays_eager_with_the_reason():
    class Masked(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    mask = torch.randn(16, 16)
    with pytest.warns(UserWarning):
        c = chain_fuser.compile(Masked(), (q, k, v, mask), tune=False)
    assert not c.fused
    assert any("mask" in d.reason for d in c.unfused), c.report()
    torch.testing.assert_close(c(q, k, v, mask), Masked()(q, k, v, mask))
