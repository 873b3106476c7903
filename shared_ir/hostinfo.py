"""Detect the host CPU (cores, caches, ISA, clock) as a hardware-description device dict.

Used by the ``host`` preset (``host: {detect: true}``). Everything is read from Linux sysfs/procfs with ``lscpu``
as a fallback and safe defaults elsewhere, so detection never fails. The peak FLOP/s here is an *estimate*
(cores × clock × 2 FMA pipes × fp32 lanes × 2); chain_fuser measures the real FMA peak, and ``detect: measure``
times a numpy sgemm instead (a lower bound of the peak).
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

_SYS_CPU = Path("/sys/devices/system/cpu")

DEFAULT_FREQUENCY_HZ = 2.5e9  # used when no clock can be read at all
FMA_PIPES = 2  # most x86 cores since Haswell/Zen and big ARM cores have two FMA pipes
# DRAM bandwidth is not discoverable without a benchmark: ~10 GB/s of STREAM bandwidth per core, capped at a
# two-socket DDR5 server's ~200 GB/s. chain_fuser/offload_trainer measure when it matters.
DRAM_BYTES_PER_S_PER_CORE = 10e9
DRAM_BYTES_PER_S_CAP = 200e9
# cache bandwidth per core in bytes/cycle (estimates from Intel/AMD optimisation manuals: two vector loads per
# cycle from L1, ~32 B/cycle from L2, ~16 B/cycle per core from L3)
L2_BYTES_PER_CYCLE = 32
L3_BYTES_PER_CYCLE_PER_CORE = 16


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _lscpu() -> dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if v}


@functools.lru_cache(maxsize=1)
def cpu_ids() -> tuple[int, ...]:
    """CPUs this process may run on (respects taskset/cgroup affinity), as first asked.

    Cached because ``sched_getaffinity(0)`` is the *calling thread's* mask: a benchmark that pins its calling
    thread to one core (its parallel regions still run on all of them) would otherwise see one core from then on,
    and every kernel built after that would be generated for one thread. A process that changes its own CPU set
    on purpose calls ``cpu_ids.cache_clear()``."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return tuple(range(os.cpu_count() or 1))


def num_cores() -> int:
    return max(1, len(cpu_ids()))


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """ISA flags from /proc/cpuinfo (``flags`` on x86, ``Features`` on ARM), else lscpu."""
    text = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^(flags|Features)\s*:\s*(.*)$", text, re.M)
    flags = m.group(2) if m else _lscpu().get("Flags", "")
    return frozenset(flags.split())


def vector_width_bits(flags: frozenset[str] | None = None) -> int:
    """Widest SIMD register width the ISA offers."""
    f = cpu_flags() if flags is None else flags
    if "avx512f" in f:
        return 512
    if "avx2" in f or "avx" in f:
        return 256
    if f & {"sse2", "asimd", "neon"}:
        return 128
    return 64


def cpu_model() -> str:
    text = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    return (m.group(1) if m else _lscpu().get("Model name", "cpu")).strip() or "cpu"


def frequency_hz() -> float:
    """Max clock: cpufreq's cpuinfo_max_freq, else the highest ``cpu MHz`` in /proc/cpuinfo, else lscpu."""
    khz = _read(_SYS_CPU / f"cpu{cpu_ids()[0]}" / "cpufreq" / "cpuinfo_max_freq")
    if khz and khz.isdigit() and int(khz) > 0:
        return int(khz) * 1e3
    mhz = [float(x) for x in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", _read(Path("/proc/cpuinfo")) or "", re.M)]
    if mhz and max(mhz) > 0:
        return max(mhz) * 1e6
    for key in ("CPU max MHz", "CPU MHz"):
        try:
            return float(_lscpu()[key]) * 1e6
        except (KeyError, ValueError):
            pass
    return DEFAULT_FREQUENCY_HZ


def _size_bytes(text: str) -> int:
    """'32K', '1024K', '32M', '64 KiB', '2 MiB' -> bytes."""
    m = re.match(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?", text, re.I)
    if not m:
        raise ValueError(text)
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _cpu_list(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part.strip():
            out.add(int(part))
    return frozenset(out)


def caches() -> list[dict[str, Any]]:
    """Data/unified caches: ``{level, name, size_bytes, instances}`` (size per instance; instances = distinct
    sharing groups among the CPUs we may use). From sysfs, else lscpu."""
    ids = cpu_ids()
    found: dict[tuple[int, str], dict[str, Any]] = {}
    for cpu in ids:
        for idx in sorted((_SYS_CPU / f"cpu{cpu}" / "cache").glob("index*")):
            level, typ, size = (_read(idx / n) for n in ("level", "type", "size"))
            if not (level and typ and size) or typ == "Instruction":
                continue
            key = (int(level), typ)
            c = found.setdefault(key, {"level": int(level), "size_bytes": _size_bytes(size), "groups": set()})
            c["groups"].add(_cpu_list(_read(idx / "shared_cpu_list") or str(cpu)))
    if found:
        out = [{"level": c["level"], "name": f"l{c['level']}", "size_bytes": c["size_bytes"],
                "instances": len(c["groups"])} for c in found.values()]
        return sorted(out, key=lambda c: c["level"])
    # lscpu: "L1d cache: 64 KiB (2 instances)" (total over instances)
    out = []
    for key, val in _lscpu().items():
        m = re.match(r"L(\d)d? cache$", key)
        if not m:
            continue
        n = re.search(r"\((\d+) instances?\)", val)
        inst = int(n.group(1)) if n else 1
        try:
            total = _size_bytes(val)
        except ValueError:
            continue
        out.append({"level": int(m.group(1)), "name": f"l{m.group(1)}", "size_bytes": max(1, total // inst),
                    "instances": inst})
    return sorted(out, key=lambda c: c["level"])


def memory_bytes() -> int:
    text = _read(Path("/proc/meminfo")) or ""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.M)
    if m:
        return int(m.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 << 30


def estimated_peak_flops(cores: int, freq_hz: float, vec_bits: int) -> float:
    """cores × clock × FMA pipes × fp32 lanes × 2 FLOPs per FMA."""
    return cores * freq_hz * FMA_PIPES * (vec_bits / 32) * 2


def measure_matmul_flops(n: int = 1024, repeats: int = 3) -> float:
    """FLOP/s of a float32 numpy matmul (best of ``repeats``): a quick lower bound of the real peak."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    a @ a  # warm-up (BLAS thread pool, page faults)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / best


@functools.lru_cache(maxsize=2)
def _detect(measure: bool) -> dict[str, Any]:
    cores = num_cores()
    freq = frequency_hz()
    vec = vector_width_bits()
    vec_bytes = vec // 8
    mem = memory_bytes()
    dram_bw = min(DRAM_BYTES_PER_S_CAP, DRAM_BYTES_PER_S_PER_CORE * cores)
    levels = [{"name": "dram", "capacity_bytes": mem, "read_bandwidth_bytes_per_s": dram_bw, "word_bytes": 4}]
    for c in sorted(caches(), key=lambda c: -c["level"]):
        inst = max(1, min(c["instances"], cores))
        per_inst_cores = max(1, cores // inst)
        if c["level"] == 1:
            rd, wr = 2 * vec_bytes * freq, vec_bytes * freq  # two vector loads + one store per cycle
        elif c["level"] == 2:
            rd = wr = L2_BYTES_PER_CYCLE * freq * per_inst_cores
        else:
            rd = wr = L3_BYTES_PER_CYCLE_PER_CORE * freq * per_inst_cores
        levels.append({"name": c["name"], "capacity_bytes": c["size_bytes"], "read_bandwidth_bytes_per_s": rd,
                       "write_bandwidth_bytes_per_s": wr, "word_bytes": 4, "instances": inst})
    # keep the outermost-to-innermost order valid even on odd cache layouts
    levels = [levels[0]] + sorted(levels[1:], key=lambda lv: -lv["capacity_bytes"])
    # odd affinity masks can give instance counts that do not nest; fall back to shared levels then
    prev, pes = 1, cores * max(1, vec // 32)
    for lv in levels[1:]:
        if lv["instances"] % prev or pes % lv["instances"]:
            lv["instances"] = prev
        prev = lv["instances"]
    compute = {"name": cpu_model(), "frequency_hz": freq, "pe_rows": 1, "pe_cols": max(1, vec // 32),
               "macs_per_cycle_per_pe": float(FMA_PIPES), "cores": cores, "dataflow": "simd",
               "vector_width_bits": vec}
    if measure:
        compute["peak_flops"] = measure_matmul_flops()
    return {"name": "host", "kind": "cpu", "memory": levels, "compute": compute}


def detect_host_device(measure: bool = False) -> dict[str, Any]:
    """The host CPU as a plain device dict (a fresh copy; detection itself is cached)."""
    import copy

    return copy.deepcopy(_detect(measure))


def machine_record() -> dict[str, Any]:
    """What every benchmark records about the machine it ran on (CPU model, ISA, vector width, cores, clock)."""
    import platform

    return {"cpu_model": cpu_model(), "arch": platform.machine(), "vector_width_bits": vector_width_bits(),
            "cores": num_cores(), "frequency_hz": frequency_hz(), "memory_bytes": memory_bytes(),
            "python": platform.python_version()}


__all__ = ["detect_host_device", "machine_record", "caches", "cpu_flags", "vector_width_bits", "frequency_hz", "num_cores",
           "memory_bytes", "estimated_peak_flops", "measure_matmul_flops", "cpu_model"]
