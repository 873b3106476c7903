"""The DSE's shapes taken from any imported graph (``task.from_workload``): ResNet-50's bottleneck pairs equal the
suite's hand-written ResNet-50 rows, ResNet-18's basic blocks, a Hugging Face model's attention; what the problems
cannot express is listed with the reason."""
from __future__ import annotations

import warnings

import pytest
from fusion_perf.config import DSEConfig
from fusion_perf.dse import CONV_SHAPES
from fusion_perf.errors import ConfigError
from fusion_perf.graph_shapes import graph_shapes

from shared_ir import zoo


def test_resnet50_bottleneck_pairs_are_the_suites_resnet50_rows():
    rows, left_out = graph_shapes(zoo.graph("resnet50"), "conv")
    suite = {r[1:] for r in CONV_SHAPES}
    got = {r[1:] for r in rows}
    # the 1x1 -> 3x3 pair at 56x56 and the 3x3 -> 1x1 pair (input pre-padded to 58x58) of conv2_x
    assert (256, 56, 56, 64, 1, 64, 3) in got & suite
    assert (64, 58, 58, 64, 3, 256, 1) in got and ("ResNet50-like", 64, 58, 58, 64, 3, 256) in CONV_SHAPES
    assert any("stride 1" in r["reason"] for r in left_out)  # the strided first blocks of conv3_x..conv5_x


def test_resnet18_basic_blocks_and_the_chains_left_out():
    rows, left_out = graph_shapes(zoo.graph("resnet18"), "conv", limit=2)
    assert [r[1:] for r in rows] == [(64, 56, 56, 64, 3, 64, 3), (128, 28, 28, 128, 3, 128, 3)]
    assert len(left_out) == 3


def test_hugging_face_attention_from_its_config():
    pytest.importorskip("transformers")
    from shared_ir.workload import load_workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = load_workload({"source": "hf", "name": "gpt2", "seq": 32,
                           "config": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128}})
    rows, left_out = graph_shapes(g, "attention")
    assert [r[1:] for r in rows] == [(4, 32, 16, 16, 32)]  # batch·heads, M, N (value width), K (head width), L
    assert graph_shapes(g, "conv")[0] == []


def test_from_workload_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="task.shapes"):
        DSEConfig(from_workload=True, shapes=["Bert-Base"])
    with pytest.raises(ConfigError, match="task.max_chains"):
        DSEConfig(from_workload=True, max_chains=0)
