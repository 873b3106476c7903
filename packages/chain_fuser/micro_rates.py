"""The record of the model's micro-kernel rates measured on this machine (written by :mod:`chain_fuser.calibrate`),
and the factor the planner scales a micro kernel's modelled compute time by. Apart from the measuring code so that
the planner can read it without importing the kernel builder (which imports the planner).
"""
from __future__ import annotations

import json
import os

FORMAT = 2  # 2: conv chains calibrated apart from GEMM chains (``factors_conv``)
_DISABLED = [False]  # while calibrating: the model's own, uncalibrated prediction is the reference


def record_path(isa_name: str | None = None) -> str:
    from shared_ir.hostinfo import isa, record_dir

    return os.path.join(record_dir(), f"micro_rates-{isa_name or isa()}.json")


_SEEN: dict[str, tuple[tuple[int, int, int], dict | None]] = {}


def load(isa_name: str | None = None) -> dict | None:
    """This CPU's calibration record for the ISA in use (``{"factors": {micro kernel name: measured/predicted}}``),
    or None (none, another CPU's, another format, or unreadable). Read again only when the file changes: the
    planner asks for every micro kernel it scores."""
    path = record_path(isa_name)
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    seen = _SEEN.get(path)
    if seen is None or seen[0] != key:
        _SEEN[path] = seen = (key, _read(path))
    return seen[1]


def _read(path: str) -> dict | None:
    from shared_ir.hostinfo import cpu_id

    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("cpu") != cpu_id():
        return None
    for key in ("factors", "factors_conv"):
        factors = rec.get(key)
        if not isinstance(factors, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in factors.values()):
            return None
    return rec


def factor(device, mk, kind: str = "gemm") -> float | None:
    """The measured/predicted ratio of micro kernel ``mk`` on ``device`` for a chain of ``kind`` ("gemm" or
    "conv") when it is this host and a calibration of that kernel is recorded (a conv chain without its own
    measurement takes the GEMM chain's); None otherwise (the model's own rate)."""
    from . import hw

    if _DISABLED[0] or not hw.is_host(device):
        return None
    rec = load()
    if not rec:
        return None
    v = (kind == "conv" and rec["factors_conv"].get(mk.name)) or rec["factors"].get(mk.name)
    return float(v) if v else None
