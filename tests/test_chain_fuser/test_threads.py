"""TVM's thread pool must not pin its workers: a pinned worker and the free calling thread on the same core run
every parallel kernel at half speed (the benchmark's bimodal timings; see ``chain_fuser.kernel.import_tvm``)."""
import json
import os
import subprocess
import sys

import pytest

_CHILD = r"""
import json, os, sys
sys.path[:0] = json.loads(sys.argv[1])
from chain_fuser.codegen import compile_tir
from chain_fuser.kernel import import_tvm, thread_affinities, unpinned_thread_pool
tvm = import_tvm()
import numpy as np
from tvm import te, s_tir
n = 4096
A = te.placeholder((64, n), name="A")
B = te.compute((64, n), lambda i, j: A[i, j] * 2.0, name="B")
sch = s_tir.Schedule(te.create_prim_func([A, B]))
sch.parallel(sch.get_loops(sch.get_sblock("B"))[0])
f = compile_tir(sch.mod, "llvm")
a = tvm.runtime.tensor(np.ones((64, n), "float32"))
b = tvm.runtime.tensor(np.zeros((64, n), "float32"))
for _ in range(5):
    f(a, b)  # the pool exists (and would have pinned its workers) after the first parallel call
print(json.dumps({"unpinned": unpinned_thread_pool(), "threads": thread_affinities(),
                  "ok": bool((b.numpy() == 2.0).all())}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and at least 2 usable CPUs (TVM only pins with more than one worker)")
def test_tvm_workers_not_pinned():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}  # import_tvm's default, not the caller's
    env["TVM_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([root, os.path.join(root, "packages")])],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"]
    assert len(res["threads"]) >= 2, res  # the pool's worker thread exists
    assert res["unpinned"], f"a thread is pinned to a subset of the process's CPUs: {res['threads']}"


def test_unpinned_detects_a_pinned_thread():
    """The check itself can fail: a thread pinned to one CPU is reported."""
    import threading

    from chain_fuser.kernel import unpinned_thread_pool

    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and at least 2 usable CPUs")
    cpus = sorted(os.sched_getaffinity(0))
    seen = {}
    go, done = threading.Event(), threading.Event()

    def pinned():
        os.sched_setaffinity(0, {cpus[-1]})  # this thread only
        go.set()
        done.wait(10)

    t = threading.Thread(target=pinned)
    t.start()
    go.wait(10)
    seen["during"] = unpinned_thread_pool()
    done.set()
    t.join()
    assert seen["during"] is False


def test_tvm_workers_spin_briefly_unless_the_user_chose(monkeypatch):
    """TVM's default spin after each kernel takes the cores from the user's next torch ops (see README)."""
    import os

    from chain_fuser.kernel import import_tvm

    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    import_tvm()
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "1000"
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "7")
    import_tvm()
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "7"
