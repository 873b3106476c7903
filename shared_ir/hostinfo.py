"""The host's facts, one owner for every package: CPU identity, vector ISA (width, registers), FMA pipes and latency,
cores, clock, caches, and the FMA peak when one was measured; :func:`detect_host_device` gives them as a
hardware-description device dict (the ``host`` preset, ``host: {detect: true}``).

Everything is read from Linux sysfs/procfs with ``lscpu`` as a fallback and safe defaults elsewhere, so detection
never fails. ``$CHAIN_FUSER_ISA`` (:data:`ISA_ENV`) caps the ISA. The peak FLOP/s is the *measured* FMA peak when
one is recorded (:func:`peak_record`; chain_fuser's probe measures it, :func:`record_peak` keeps the best), else an
estimate from the same facts (cores × clock × FMA pipes × fp32 lanes × 2); ``detect: measure`` times a numpy
sgemm instead (a lower bound of the peak).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

_SYS_CPU = Path("/sys/devices/system/cpu")

DEFAULT_FREQUENCY_HZ = 2.5e9  # used when no clock can be read at all
FMA_PIPES = 2  # most x86 cores since Haswell/Zen and big ARM cores have two FMA pipes
FMA_LATENCY_CYCLES = 4  # of a vector FMA on every x86 core this targets (Skylake-SP and later, Zen 2 and later)
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


ISA_ENV = "CHAIN_FUSER_ISA"
"""Environment variable that caps the detected vector ISA for everything that branches on the CPU: the vector width
and register file here (so the ``host`` preset), chain_fuser's micro kernels and LLVM target (a CPU model without
AVX-512, e.g. ``haswell`` for ``avx2``), the C compile flags of :mod:`shared_ir.cbuild`, and the cache keys of
compiled kernels and peak records (an AVX2 artifact never stands in for an AVX-512 one, nor the other way round).

Values: ``avx512``, ``avx2``, ``sse``, ``scalar`` on x86-64; ``neon`` on ARM (its only level). Unset or empty: the
detected ISA. ``CHAIN_FUSER_ISA=avx2`` on an AVX-512 machine runs the AVX2 path (8 fp32 lanes, 16 ymm registers,
no AVX-512 instructions), which is how CI exercises what an AVX2-only machine (Zen 3) runs. It can only lower the
ISA: asking for one the CPU does not have is an :class:`IsaError` naming the variable. The name comes from
chain_fuser, its main user."""

ISA_ORDER = ("scalar", "sse", "avx2", "avx512")
"""x86 ISA levels the project generates code for, lowest first (``neon`` is ARM's 128-bit level)."""
ISA_WIDTH_BITS = {"scalar": 64, "sse": 128, "neon": 128, "avx2": 256, "avx512": 512}
ISA_VECTOR_REGISTERS = {"scalar": 16, "sse": 16, "neon": 32, "avx2": 16, "avx512": 32}
"""Architectural vector registers: 16 xmm/ymm without AVX-512, 32 zmm with it, 32 NEON v registers."""


class IsaError(ValueError):
    """``$CHAIN_FUSER_ISA`` names an unknown ISA, or one above what the CPU supports."""


def detected_isa(flags: frozenset[str] | None = None) -> str:
    """The widest vector ISA the CPU flags offer, ignoring :data:`ISA_ENV`."""
    f = cpu_flags() if flags is None else flags
    if "avx512f" in f:
        return "avx512"
    if "avx2" in f and "fma" in f:
        return "avx2"
    if f & {"asimd", "neon"}:
        return "neon"
    if "sse2" in f:
        return "sse"
    return "scalar"


def isa() -> str:
    """The vector ISA in use: :func:`detected_isa`, capped by :data:`ISA_ENV` when it is set."""
    found = detected_isa()
    want = os.environ.get(ISA_ENV, "").strip().lower()
    if not want:
        return found
    if want not in ISA_WIDTH_BITS:
        raise IsaError(f"{ISA_ENV}={want!r}: unknown ISA; one of {sorted(ISA_WIDTH_BITS)}")
    if want == found:
        return found
    if found == "neon" or want == "neon" or ISA_ORDER.index(want) > ISA_ORDER.index(found):
        raise IsaError(f"{ISA_ENV}={want!r}: this CPU offers at most {found!r}; the variable can only lower it")
    return want


def isa_capped() -> bool:
    """Whether :data:`ISA_ENV` lowers the ISA below what the CPU has."""
    return isa() != detected_isa()


def vector_width_bits(flags: frozenset[str] | None = None) -> int:
    """Widest SIMD register width in use (of ``flags`` when given, else of this CPU under :data:`ISA_ENV`)."""
    return ISA_WIDTH_BITS[detected_isa(flags) if flags is not None else isa()]


def vector_registers(isa_name: str | None = None) -> int:
    """Architectural vector registers of ``isa_name`` (default: the ISA in use)."""
    return ISA_VECTOR_REGISTERS[isa_name or isa()]


def vector_lanes(isa_name: str | None = None) -> int:
    """fp32 lanes of one vector register of ``isa_name`` (default: the ISA in use)."""
    return max(1, ISA_WIDTH_BITS[isa_name or isa()] // 32)


def cpu_model() -> str:
    text = _read(Path("/proc/cpuinfo")) or ""
    m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    return (m.group(1) if m else _lscpu().get("Model name", "cpu")).strip() or "cpu"


@functools.lru_cache(maxsize=1)
def cpu_id() -> str:
    """The CPU's model name, family and model: what tells two CPUs apart when their peaks differ (Zen 4, family 25,
    runs a 512-bit FMA as two 256-bit halves: its 512-bit peak equals its 256-bit one; Zen 5, family 26, has full
    512-bit pipes and twice the peak)."""
    text = _read(Path("/proc/cpuinfo"))
    if text is None:
        return "unknown"
    info: dict[str, str] = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in ("model name", "cpu family", "model") and k not in info:
            info[k] = v.strip()
        if len(info) == 3:
            break
    return f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"


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


# --- the measured FMA peak ----------------------------------------------------------------------------------------
PEAK_DIR_ENV = "CHAIN_FUSER_CACHE"
"""Folder of the peak records (``$CHAIN_FUSER_CACHE``, else ``~/.cache/chain_fuser``): chain_fuser's FMA probe
measures the peak and keeps its compiled kernels there too."""


def record_dir() -> str:
    """``$CHAIN_FUSER_CACHE`` or ``~/.cache/chain_fuser`` (created)."""
    d = os.environ.get(PEAK_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "chain_fuser")
    os.makedirs(d, exist_ok=True)
    return d


def peak_record_path(isa_name: str | None = None) -> str:
    """One record per ISA: a peak measured with AVX-512 must not drive the model of the AVX2 path."""
    return os.path.join(record_dir(), f"fma_peak-{isa_name or isa()}.json")


_PEAK_RECORDS: dict[str, tuple[tuple[int, int, int], dict | None]] = {}


def _load_record(path: str) -> dict | None:
    """The JSON record at ``path``, read again only when the file changes (its inode, mtime or size): the planner
    asks for it for every micro kernel it scores."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    mtime = (st.st_ino, st.st_mtime_ns, st.st_size)  # the inode too: an atomic rewrite within a clock tick
    seen = _PEAK_RECORDS.get(path)
    if seen is None or seen[0] != mtime:
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = None
        seen = _PEAK_RECORDS[path] = (mtime, rec if isinstance(rec, dict) else None)
    return seen[1]


def peak_record(isa_name: str | None = None) -> dict | None:
    """The FMA-peak record of this CPU and ISA (``{"gflops", "threads", "lanes", "saturating_accumulators", "cpu",
    ...}``, as chain_fuser's probe measured it), or None. A record of another CPU model (a home folder shared
    between machines) is not this host's; a record from before records were kept per ISA (``fma_peak.json``) counts
    for the detected ISA when its lanes match."""
    name = isa_name or isa()
    rec = _load_record(peak_record_path(name))
    if rec is None and name == detected_isa():
        old = _load_record(os.path.join(record_dir(), "fma_peak.json"))
        rec = old if old is not None and old.get("lanes") in (None, vector_lanes(name)) else None
    if rec is not None and rec.get("cpu") not in (None, cpu_id()):
        return None
    return rec


def record_peak(res: dict[str, Any]) -> bool:
    """Keep ``res`` (a measurement, as :func:`peak_record` returns) as this ISA's record if it is the best so far.
    A peak is the best the machine did: a measurement on a busy machine must not lower it (to measure afresh,
    delete the file). A kept record lacking the latency fields gets them from ``res``. Returns whether ``res``
    replaced the record."""
    from .atomic import atomic_write_text

    path = peak_record_path()
    prev = peak_record()
    if prev is None or float(res["gflops"]) >= float(prev.get("gflops") or 0.0):
        atomic_write_text(path, json.dumps(res, indent=1))
        return True
    if "saturating_accumulators" not in prev:  # a record from before this field existed: add it, keep the peak
        rec = dict(prev)
        rec.update({k: res[k] for k in ("latency_bound_gflops", "saturating_accumulators") if k in res})
        atomic_write_text(path, json.dumps(rec, indent=1))
    return False


def measured_peak_flops() -> float | None:
    """The recorded FMA peak of this CPU and ISA, FLOP/s, or None."""
    rec = peak_record()
    try:
        return float(rec["gflops"]) * 1e9 if rec else None
    except (KeyError, TypeError, ValueError):
        return None


def measured_saturating_accumulators() -> float | None:
    """Independent FMA chains that saturate the FMA pipes (pipes × latency), as measured (peak over the
    one-accumulator rate), or None."""
    v = (peak_record() or {}).get("saturating_accumulators")
    return float(v) if v else None


def fma_pipes(saturating_accumulators: float | None = None) -> float:
    """Vector FMAs issued per cycle: the accumulators that saturate the pipes over the FMA's latency (measured when
    a record has it), else :data:`FMA_PIPES`."""
    sat = saturating_accumulators if saturating_accumulators is not None else measured_saturating_accumulators()
    return float(FMA_PIPES) if not sat else max(1.0, sat / FMA_LATENCY_CYCLES)


def fma_clock_hz() -> float | None:
    """The clock the cores run vector FMAs at, as the measured peak implies it (peak over threads × pipes × lanes
    × 2 flops), or None without a record. Why: procfs reports the nominal clock while the cores boost (the probe on
    Zen 5: 548 GFLOP/s = 2 cores × 2 pipes × 16 lanes × 2 × 4.28 GHz, procfs 2.6 GHz)."""
    peak = measured_peak_flops()
    if not peak:
        return None
    rec = peak_record() or {}
    threads = rec.get("threads") or num_cores()
    lanes = rec.get("lanes") or vector_lanes()
    return peak / (threads * fma_pipes() * lanes * 2)


def host_peak_flops() -> float:
    """The host's peak FLOP/s: the measured FMA peak when one is recorded, else :func:`estimated_peak_flops`."""
    return measured_peak_flops() or estimated_peak_flops(num_cores(), frequency_hz(), vector_width_bits())


@functools.lru_cache(maxsize=4)
def _detect(measure: bool, isa_name: str) -> dict[str, Any]:
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

    out = copy.deepcopy(_detect(measure, isa()))
    peak = None if measure else measured_peak_flops()  # read afresh: a probe may have measured it since
    if peak:
        out["compute"]["peak_flops"] = peak
    return out


def machine_record() -> dict[str, Any]:
    """What every benchmark records about the machine it ran on (a plain JSON-able dict): CPU model and id, ISA
    (in use, and detected when :data:`ISA_ENV` caps it), vector width, lanes and registers, FMA pipes (measured or
    the default) and latency, cores, clock (procfs's, and the FMA clock the measured peak implies), caches, memory,
    and the peak FLOP/s (measured when recorded, and the estimate)."""
    import platform

    name, freq, cores = isa(), frequency_hz(), num_cores()
    sat = measured_saturating_accumulators()
    return {"cpu_model": cpu_model(), "cpu": cpu_id(), "arch": platform.machine(), "isa": name,
            "isa_detected": detected_isa(), "vector_width_bits": vector_width_bits(), "vector_lanes": vector_lanes(),
            "vector_registers": vector_registers(), "fma_pipes": fma_pipes(sat),
            "fma_pipes_source": "measured" if sat else "default", "fma_latency_cycles": FMA_LATENCY_CYCLES,
            "cores": cores, "frequency_hz": freq, "fma_clock_hz": fma_clock_hz(), "caches": caches(),
            "memory_bytes": memory_bytes(), "peak_flops_measured": measured_peak_flops(),
            "peak_flops_estimated": estimated_peak_flops(cores, freq, vector_width_bits()),
            "python": platform.python_version()}


__all__ = ["detect_host_device", "machine_record", "isa", "detected_isa", "isa_capped", "vector_registers",
           "vector_lanes", "IsaError", "ISA_ENV", "caches", "cpu_flags", "vector_width_bits", "frequency_hz",
           "num_cores", "memory_bytes", "estimated_peak_flops", "measure_matmul_flops", "cpu_model", "cpu_id",
           "peak_record", "record_peak", "peak_record_path", "record_dir", "measured_peak_flops",
           "measured_saturating_accumulators", "fma_pipes", "fma_clock_hz", "host_peak_flops", "FMA_PIPES",
           "FMA_LATENCY_CYCLES"]
