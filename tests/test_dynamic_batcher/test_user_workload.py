"""A user's own dynamic model through the experiment: ``workloads: ["package.module:factory"]``."""
from __future__ import annotations

import sys

import pytest
from dynamic_batcher.errors import ConfigError

USER_MODULE = '''
import random
from dynamic_batcher.ir import Model
from dynamic_batcher.workloads import Workload, lstm_block

def gru_free_rnn(hidden, embed=None, seed=0):
    """A character RNN with an LSTM cell and a sum readout, written by a user."""
    m = Model("my_rnn", seed=seed)
    E = m.param("emb", (50, embed or hidden), "normal")
    Z = m.param("zero", (1, hidden), "zeros")
    cell, _ = lstm_block(m, "cell", embed or hidden, hidden)

    def forward(ops, chars):
        h = c = ops.lookup(Z, 0)
        outs = []
        for ch in chars:
            h, c = ops.call(cell, ops.lookup(E, ch), h, c)
            outs.append(h)
        return outs

    sample = lambda rng, n=None: [rng.randrange(50) for _ in range(n or rng.randint(3, 12))]
    return Workload("my_rnn", "chain", m, sample, forward, hidden)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_dyn_model.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_dyn_model:gru_free_rnn"
    sys.modules.pop("my_dyn_model", None)


def test_a_user_module_runs_through_the_experiment(tmp_path, user_module):
    from dynamic_batcher.tasks import run_workloads

    out = run_workloads(out_dir=str(tmp_path / "run"), workloads=[user_module], batch=4, hidden=16, scale="tiny",
                        plots=False)
    w = out["workloads"]["my_rnn"]
    assert w["lower_bound"] <= w["batches_fsm"] and w["speedup_vs_best_baseline"] > 0


@pytest.mark.parametrize("ref", ["no_such_module_xyz:f", "my_dyn_model:missing"])
def test_a_bad_reference_names_the_field(ref, user_module):
    from dynamic_batcher.config import BenchConfig
    from dynamic_batcher.workloads import make_workload

    with pytest.raises(ConfigError) as e:
        make_workload(ref)
    assert e.value.path == "workload.name" and ref in str(e.value)
    with pytest.raises(ConfigError) as e:
        BenchConfig(workloads=["treelstm", "nosuch"])
    assert e.value.path == "task.workloads[1]"
