"""A flush runs on the Batcher's own thread count (one by default) and gives the caller's back afterwards."""
import pytest

torch = pytest.importorskip("torch")

from dynamic_batcher import Batcher, ConfigError  # noqa: E402
from dynamic_batcher.workloads import make_workload  # noqa: E402


def _record(bt, wl):
    import random

    for inst in wl.minibatch(random.Random(0), 3):
        wl.forward(bt, inst)


def test_a_flush_runs_on_one_thread_and_restores_the_callers(monkeypatch):
    wl = make_workload("treelstm", hidden=8, seed=0)
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bt = Batcher(wl.model, cache=False)
        real = bt._flush
        monkeypatch.setattr(bt, "_flush", lambda: (seen.append(torch.get_num_threads()), real())[1])
        _record(bt, wl)
        bt.flush()
        assert seen == [1] and torch.get_num_threads() == 2
        bt2 = Batcher(wl.model, cache=False, threads=2)
        monkeypatch.setattr(bt2, "_flush", lambda: (seen.append(torch.get_num_threads()), bt2.__class__._flush(bt2))[1])
        _record(bt2, wl)
        bt2.flush()
        assert seen == [1, 2]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="batcher.threads"):
        Batcher(make_workload("treelstm", hidden=8, seed=0).model, threads=bad)
