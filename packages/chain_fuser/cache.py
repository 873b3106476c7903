"""On-disk cache of compiled kernels and measurements, keyed by chain shape, dtype, plan and hardware."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any


def cache_dir() -> str:
    """``$CHAIN_FUSER_CACHE`` or ``~/.cache/chain_fuser`` (:func:`shared_ir.hostinfo.record_dir`: the host's peak
    records live there too)."""
    from shared_ir.hostinfo import record_dir

    return record_dir()


def hardware_key(device=None) -> str:
    """A short hash of what the generated code depends on: the CPU model, vector width, cores and caches. The
    vector width is the ISA's (``$CHAIN_FUSER_ISA`` lowers the host's): kernels built for AVX2 and for AVX-512
    never share a key."""
    from .hw import host_device

    dev = device or host_device()
    desc = {"cpu": dev.compute.name, "vec": dev.compute.vector_width_bits, "cores": dev.compute.cores,
            "mem": [(m.name, m.capacity_bytes, m.instances) for m in dev.memory[1:]]}
    return hashlib.sha1(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:12]


def entry_key(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def entry_path(key: str, suffix: str) -> str:
    return os.path.join(cache_dir(), f"{key}{suffix}")


def load_json(key: str) -> dict | None:
    p = entry_path(key, ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save_json(key: str, data: dict) -> None:
    from shared_ir import atomic_write_text

    atomic_write_text(entry_path(key, ".json"), json.dumps(data, indent=1, default=str))
