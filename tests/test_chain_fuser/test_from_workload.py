"""Chains taken from any imported graph (``task.from_workload``): the zoo's ResNet-18 with its batch norms folded, a
Hugging Face BERT built from a config, and the chains a template does not cover listed with the reason."""
from __future__ import annotations

import warnings

import pytest
from chain_fuser.config import ChainsExperiment
from chain_fuser.errors import UnsupportedChainError
from chain_fuser.spec import ConvChain, GemmChain, graph_specs, spec_from_chain

from shared_ir import zoo
from shared_ir.errors import ValidationError


def test_resnet18_basic_blocks_are_conv_chains_with_their_batch_norms_folded():
    g = zoo.graph("resnet18")
    specs, skipped = graph_specs(g, ConvChain)
    # one 3x3->3x3 stride-1 block per stage survives (the first block of stages 2-4 has a stride-2 conv)
    assert [(s.C, s.H, s.K1, s.K2) for s in specs] == [(64, 56, 64, 64), (128, 28, 128, 128), (256, 14, 256, 256),
                                                         (512, 7, 512, 512)]
    assert all(s.bias1 and s.glue == "relu" and (s.R1, s.R2) == (3, 3) for s in specs)
    assert len(skipped) == 3 and all("stride 1" in s["reason"] for s in skipped)
    # compile() does not fold (it would have to rewrite the weights): the same chain is refused by default
    bn_chain = next(c for c in g.chains() if c.names[0] == "layer1_0_conv1")
    with pytest.raises(UnsupportedChainError, match="batchnorm"):
        spec_from_chain(bn_chain)


def test_hugging_face_bert_mlp_chains_from_its_config():
    pytest.importorskip("transformers")
    from shared_ir.workload import load_workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = load_workload({"source": "hf", "name": "bert", "seq": 32,
                           "config": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                                      "num_attention_heads": 4, "vocab_size": 128}})
    specs, skipped = graph_specs(g, GemmChain)
    assert len(specs) == 1  # both layers' MLPs are the same shape: one kernel
    s = specs[0]
    assert (s.M, s.K, s.L, s.N, s.glue, s.bias1, s.bias2) == (32, 64, 128, 64, "gelu", True, True)
    assert skipped and all(r["reason"] for r in skipped)


def test_from_workload_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="task.shapes"):
        ChainsExperiment(from_workload=True, shapes=["Bert-Small"])
    with pytest.raises(ValidationError, match="task.max_chains"):
        ChainsExperiment(from_workload=True, max_chains=0)
    with pytest.raises(ValidationError, match="task.from_workload"):
        ChainsExperiment(from_workload="yes")
