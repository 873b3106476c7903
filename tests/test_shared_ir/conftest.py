"""Models shared by the frontend tests (torch.export in test_torch_export.py, ONNX dynamo exports in
test_onnx_dynamo.py), each built as (module, example inputs) and handed out by a fixture: small Hugging Face models
from configs (random weights, nothing downloaded), a CNN with every conv kind, an audio front end."""
from __future__ import annotations

import pytest


def _ids(b=2, s=16):
    import torch

    return torch.randint(0, 128, (b, s), generator=torch.Generator().manual_seed(0))


def build_hf(name: str):
    """(module, inputs) of a two-layer Hugging Face model: gpt2, llama / qwen2 (grouped-query attention), bert, vit,
    t5 (keyword inputs with decoder ids) or whisper (its encoder)."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    dec = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, use_cache=False)
    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
                                              use_cache=False, bos_token_id=0, eos_token_id=0)), (_ids(),)
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(**dec)), (_ids(),)
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(**dec)), (_ids(),)
    if name == "bert":
        return T.BertModel(T.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                        num_attention_heads=4, vocab_size=128, max_position_embeddings=64)), (_ids(),)
    if name == "vit":
        return T.ViTModel(T.ViTConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, image_size=32, patch_size=8)), (torch.randn(2, 3, 32, 32),)
    if name == "t5":
        return (T.T5Model(T.T5Config(num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=128,
                                     use_cache=False)), {"input_ids": _ids(), "decoder_input_ids": _ids(2, 8)})
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = T.WhisperConfig(encoder_layers=2, d_model=128, encoder_attention_heads=4, encoder_ffn_dim=256,
                          num_mel_bins=16, max_source_positions=32)
    return WhisperEncoder(cfg), (torch.randn(2, 16, 64),)


def build_conv_zoo():
    """Dilated depthwise, grouped strided, transposed (output padding, groups), 1-d and 3-d convs, bilinear, nearest
    (downsampling) and trilinear resizes; three inputs (image, sequence, volume), three outputs."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class ConvZoo(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, padding=1)
            self.dw = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
            self.grp = nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=4)
            self.bn = nn.BatchNorm2d(32)
            self.up = nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)
            self.up_g = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1)
            self.head = nn.Conv2d(8, 4, 1)
            self.c1 = nn.Conv1d(4, 8, 5, stride=2, padding=2, dilation=2)
            self.t1 = nn.ConvTranspose1d(8, 4, 3, stride=3)
            self.c3 = nn.Conv3d(2, 4, 3, padding=1, stride=(1, 2, 2))
            self.t3 = nn.ConvTranspose3d(4, 2, 2, stride=2)

        def forward(self, x, seq, vol):
            y = F.relu(self.bn(self.grp(F.relu(self.dw(self.stem(x))))))
            y = F.interpolate(self.up(y), scale_factor=2, mode="bilinear", align_corners=False)
            y = self.head(F.interpolate(self.up_g(y), scale_factor=0.5, mode="nearest"))
            s = self.t1(F.gelu(self.c1(seq)))
            v = F.interpolate(self.t3(self.c3(vol)), scale_factor=2, mode="trilinear")
            return y, s, v

    torch.manual_seed(0)
    return ConvZoo(), (torch.randn(2, 3, 16, 16), torch.randn(2, 4, 30), torch.randn(1, 2, 4, 8, 8))


def build_audio():
    """Two 1-d convs then a transformer encoder layer over the frames (a speech front end)."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Audio(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(16, 64, 3, padding=1)
            self.c2 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
            self.enc = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)

        def forward(self, mel):
            return self.enc(F.gelu(self.c2(F.gelu(self.c1(mel)))).transpose(1, 2))

    torch.manual_seed(0)
    return Audio(), (torch.randn(2, 16, 50),)


@pytest.fixture
def hf_model():
    """``hf_model(name)`` → (module, inputs) of :func:`build_hf`."""
    return build_hf


@pytest.fixture
def conv_zoo():
    """(module, inputs) of :func:`build_conv_zoo`."""
    return build_conv_zoo()


@pytest.fixture
def audio_front_end():
    """(module, inputs) of :func:`build_audio`."""
    return build_audio()
