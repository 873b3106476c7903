"""The fault sweep: faults a user meets, provoked for real in every package, and what each one gives.

``python -m experiments.faults [--out results/faults.json]`` runs every case (a minute or less; chain_fuser's
compile a few kernels) and writes the JSON and a CSV beside it; ``make reproduce`` runs it and the report shows the
table. Each case ends in one of three outcomes:

* ``typed error``: an error of the project's own classes, whose message names the file, field or node;
* ``recovered``: the fault is repaired (a damaged cache entry rebuilt, a failing instance isolated, a NaN
  propagated as eager PyTorch propagates it) and the rest of the work is kept;
* ``FAILED``: a raw exception, a silent wrong result or lost work: a bug, listed as such.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

PROJECT_MODULES = ("shared_ir", "chain_fuser", "dynamic_batcher", "fusion_perf", "offload_trainer", "soc_mapper",
                   "experiments")
CASES: list[tuple[str, str, Callable[[Path], str]]] = []
"""(package, fault, case): the case provokes the fault in a scratch folder and returns what was recovered, or
raises what the user sees."""


def case(package: str, fault: str):
    def register(fn):
        CASES.append((package, fault, fn))
        return fn
    return register


class Silent(AssertionError):
    """The fault went unnoticed: a wrong result, or work lost."""


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise Silent(what)


# ---- shared_ir ---------------------------------------------------------------------------------------------------
@case("shared_ir", "empty ONNX file")
def _empty_onnx(d: Path) -> str:
    from shared_ir.frontends import from_onnx

    (d / "empty.onnx").write_bytes(b"")
    from_onnx(str(d / "empty.onnx"))
    raise Silent("imported an empty file")


@case("shared_ir", "corrupt ONNX file")
def _corrupt_onnx(d: Path) -> str:
    from shared_ir.frontends import from_onnx

    (d / "bad.onnx").write_bytes(os.urandom(256))
    from_onnx(str(d / "bad.onnx"))
    raise Silent("imported random bytes")


def _hardware_yaml(d: Path, text: str) -> None:
    from shared_ir.hardware import load_hardware

    p = d / "hw.yaml"
    p.write_text(text)
    load_hardware(p)
    raise Silent("accepted")


_HW = """name: box
host:
  name: cpu
  kind: cpu
  memory:
    - {{name: dram, capacity_bytes: 1.0e9, read_bandwidth_bytes_per_s: {bw}}}
  compute: {{name: c, frequency_hz: {f}, cores: 2}}
"""


@case("shared_ir", "hardware YAML: duplicated key")
def _dup_key(d: Path) -> str:
    return _hardware_yaml(d, _HW.format(bw=1e10, f=2e9).replace("  kind: cpu\n", "  kind: cpu\n  kind: gpu\n"))


@case("shared_ir", "hardware YAML: bandwidth 1e-300 B/s")
def _tiny_bw(d: Path) -> str:
    return _hardware_yaml(d, _HW.format(bw=1e-300, f=2e9))


@case("shared_ir", "hardware YAML: frequency 1e308 Hz")
def _huge_f(d: Path) -> str:
    return _hardware_yaml(d, _HW.format(bw=1e10, f=1e308))


@case("shared_ir", "hardware YAML: format_version 99")
def _version(d: Path) -> str:
    return _hardware_yaml(d, "format_version: 99\n" + _HW.format(bw=1e10, f=2e9))


@case("shared_ir", "hardware YAML: 2 MB file")
def _big_yaml(d: Path) -> str:
    return _hardware_yaml(d, _HW.format(bw=1e10, f=2e9) + "# " + "x" * (2 << 20) + "\n")


# ---- chain_fuser -------------------------------------------------------------------------------------------------
def _compiled_mlp():
    import chain_fuser
    import torch

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).eval()
    x = torch.randn(32, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = chain_fuser.compile(m, (x,), tune=False)
    _expect(bool(cm.fused), f"nothing fused: {cm.report()}")
    return m, x, cm


@case("chain_fuser", "NaN in an input row through a fused Linear-ReLU-Linear")
def _nan_relu(d: Path) -> str:
    import torch

    m, x, cm = _compiled_mlp()
    x[3, 5] = math.nan
    with torch.no_grad():
        got, want = int(cm(x).isnan().sum()), int(m(x).isnan().sum())
    _expect(got == want, f"{got} NaN outputs, eager {want}")
    return f"propagated as eager does ({got} NaN outputs)"


@case("chain_fuser", "compiled chain called with an input of another shape")
def _other_shape(d: Path) -> str:
    import torch

    m, x, cm = _compiled_mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cm(x[:1])
    with torch.no_grad():
        _expect(got.shape == m(x[:1]).shape, f"result of shape {list(got.shape)}, eager {list(m(x[:1]).shape)}")
    return "ran eagerly: " + next(iter(cm.fallbacks))


@case("chain_fuser", "truncated kernel in the on-disk cache")
def _truncated_kernel(d: Path) -> str:
    from chain_fuser import cache
    from chain_fuser.kernel import _kernel_key, build_kernel
    from chain_fuser.planner import plan_chain
    from chain_fuser.spec import GemmChain

    os.environ["CHAIN_FUSER_CACHE"] = str(d / "cache")
    try:
        spec = GemmChain(1, 24, 16, 16, 40, name="fault_sweep")
        plan = plan_chain(spec, top_k=1)[0]
        build_kernel(spec, plan)
        so = cache.entry_path(_kernel_key(spec, plan, True), ".so")
        data = Path(so).read_bytes()
        os.remove(so)
        Path(so).write_bytes(data[: len(data) // 3])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            k = build_kernel(spec, plan)
        _expect(not k.from_cache, "loaded the truncated object")
        return "rebuilt: " + str(w[-1].message).split(": ", 1)[-1][:120] if w else "rebuilt"
    finally:
        del os.environ["CHAIN_FUSER_CACHE"]


# ---- dynamic_batcher ---------------------------------------------------------------------------------------------
@case("dynamic_batcher", "one instance's user code raises in a minibatch")
def _failing_instance(d: Path) -> str:
    import random

    from dynamic_batcher import Batcher, InstanceError
    from dynamic_batcher.workloads import make_workload

    wl = make_workload("treelstm", hidden=8, seed=0)
    bt = Batcher(wl.model, cache=False)
    mb = wl.minibatch(random.Random(0), 4)
    outs = [wl.forward(bt, inst) for inst in mb]

    def boom(t):
        raise RuntimeError("user code failed")

    bad = bt.custom(boom, outs[1][0], shape=outs[1][0].shape)
    bt.flush()
    ok = [o.value() for inst in (0, 2, 3) for o in outs[inst]]
    try:
        bad.value()
    except InstanceError as e:
        return f"isolated: {len(ok)} values of the 3 healthy instances computed; the failing one raised {e}"[:300]
    raise Silent("the failing instance returned a value")


@case("dynamic_batcher", "FSM policy file of binary bytes")
def _policy_bytes(d: Path) -> str:
    from dynamic_batcher.rl import FSMPolicy

    (d / "fsm.json").write_bytes(b"\x80\x02garbage")
    FSMPolicy.load(str(d / "fsm.json"))
    raise Silent("loaded")


# ---- fusion_perf -------------------------------------------------------------------------------------------------
@case("fusion_perf", "tiling factor typo (M=sixteen)")
def _factor_typo(d: Path) -> str:
    import shutil

    import fusion_perf
    from fusion_perf.tileflow_io import load_inputs

    ex = Path(fusion_perf.__file__).parent / "examples" / "attention"
    files = []
    for f in ("arch.yaml", "prob.yaml", "map.yaml", "macro.yaml"):
        shutil.copy(ex / f, d / f)
        files.append(str(d / f))
    text = (d / "map.yaml").read_text()
    _expect("factors: M=MI" in text, "example mapping changed")
    (d / "map.yaml").write_text(text.replace("factors: M=MI", "factors: M=sixteen", 1))
    load_inputs(files)
    raise Silent("searched the typo as a free factor")


# ---- offload_trainer ---------------------------------------------------------------------------------------------
@case("offload_trainer", "garbage checkpoint file")
def _bad_checkpoint(d: Path) -> str:
    from offload_trainer.trainer import read_checkpoint

    (d / "checkpoint.pt").write_bytes(b"\x80\x02not a pickle")
    read_checkpoint(str(d / "checkpoint.pt"))
    raise Silent("read")


@case("offload_trainer", "temp file left by a write killed mid-way")
def _stale_temp(d: Path) -> str:
    from offload_trainer.trainer import CHECKPOINT, remove_stale_temps

    base, ext = os.path.splitext(CHECKPOINT)
    tmp = d / f".{base}.tmp999999{ext}"  # a pid that is not running
    tmp.write_bytes(b"\0" * 1024)
    removed = remove_stale_temps(str(d))
    _expect(not tmp.exists(), "left behind")
    return f"removed {removed}"


# ---- soc_mapper --------------------------------------------------------------------------------------------------
@case("soc_mapper", "a string where a number belongs (ga.population: 'eight')")
def _soc_type(d: Path) -> str:
    from soc_mapper.config import GAConfig

    GAConfig(population="eight")
    raise Silent("accepted")


@case("soc_mapper", "mix naming an unknown model")
def _soc_mix(d: Path) -> str:
    from soc_mapper.workload import load_user_mix

    load_user_mix(["resnet18", "resnet_nope"])
    raise Silent("accepted")


def _typed(e: BaseException) -> bool:
    return type(e).__module__.split(".")[0] in PROJECT_MODULES


def run_case(package: str, fault: str, fn: Callable[[Path], str]) -> dict[str, Any]:
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fault-") as d:
        try:
            detail, outcome = fn(Path(d)).replace(d, "<dir>"), "recovered"
        except Silent as e:
            detail, outcome = f"silent: {e}", "FAILED"
        except Exception as e:  # noqa: BLE001 - what the user would see is the result
            outcome = "typed error" if _typed(e) else "FAILED"
            detail = f"{type(e).__name__}: {e}".replace(d, "<dir>")
    return {"package": package, "fault": fault, "outcome": outcome, "detail": " ".join(detail.split())[:400],
            "seconds": round(time.perf_counter() - t, 2)}


def run(out: str | None = "results/faults.json", log=print) -> dict[str, Any]:
    """Every case of :data:`CASES`; the JSON (and a CSV beside it) when ``out`` is given."""
    rows = []
    for i, (pkg, fault, fn) in enumerate(CASES):
        rows.append(run_case(pkg, fault, fn))
        log(f"[{i + 1}/{len(CASES)}] {pkg}: {fault}: {rows[-1]['outcome']}")
    doc = {"cases": rows, "failed": sum(r["outcome"] == "FAILED" for r in rows), "n": len(rows)}
    if out:
        _write(out, doc)
    return doc


def _write(out: str, doc: dict) -> None:
    import csv
    import io
    import json

    from shared_ir import atomic_write_text

    atomic_write_text(out, json.dumps(doc, indent=1))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["package", "fault", "outcome", "detail", "seconds"])
    w.writeheader()
    w.writerows(doc["cases"])
    atomic_write_text(os.path.splitext(out)[0] + ".csv", buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.faults", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/faults.json")
    a = ap.parse_args(argv)
    doc = run(a.out)
    print(f"{doc['n'] - doc['failed']} of {doc['n']} faults give a typed error or a recovery; wrote {a.out}")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
