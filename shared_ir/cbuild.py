"""Compile a C source file into a shared object, cached and published atomically; every package's C goes through it.

The cache key is a hash of everything the object depends on: the source bytes, the flag sets, the compiler
(``$CC``, default ``cc``) and its ``--version``, the machine, and for ``native=True`` the target CPU (the ISA in
use, capped by ``$CHAIN_FUSER_ISA``, and the CPU's flag list, since ``-march=native`` on a Zen 3 and a Zen 4 with
the same ISA level still generates different code). A cache shared between machines (a home directory on NFS)
therefore never hands one CPU another's instructions.

Publishing: the compiler writes into a temporary file in the cache folder, which is renamed over the final name;
a sidecar ``<name>.so.json`` records the object's size and SHA-256. An object whose size or hash does not match
its sidecar (a truncated copy, a disk that filled up, a crash before the sidecar) is rebuilt instead of being
loaded, since ``dlopen`` of a damaged object can crash the process rather than raise.

ISA cap: with ``native=True`` the flags are ``-march=native`` plus, when :func:`shared_ir.hostinfo.isa` is below
the detected ISA, the ``-mno-…`` switches that take the higher levels away (``avx2`` on an AVX-512 machine:
``-mno-avx512f``), so the AVX2 code path of a kernel is built and tested on any machine.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

COMPILE_TIMEOUT_S = 120


class CompileError(RuntimeError):
    """No flag set compiled the source, or the compiler named by ``$CC`` does not run; the message says which."""

    def __init__(self, field: str, message: str, stderr: str = ""):
        super().__init__(f"{field}: {message}" + (f"\n{stderr.strip()[-2000:]}" if stderr else ""))
        self.field = field
        self.stderr = stderr


def compiler() -> list[str]:
    """The C compiler command: ``$CC`` split as a shell would (``CC="ccache gcc"`` works), default ``cc``."""
    cc = shlex.split(os.environ.get("CC", "") or "cc")
    return cc or ["cc"]


@functools.lru_cache(maxsize=8)
def _version(cc: tuple[str, ...]) -> str:
    try:
        r = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError("CC", f"{' '.join(cc)!r} does not run ({e})") from e
    if r.returncode != 0:
        raise CompileError("CC", f"{' '.join(cc)!r} --version failed", r.stderr)
    return (r.stdout or r.stderr).strip()


def compiler_version(cc: Sequence[str] | None = None) -> str:
    """The ``--version`` text of the compiler (part of the cache key: an upgrade rebuilds)."""
    return _version(tuple(compiler() if cc is None else cc))


# the -mno- switch that removes each x86 ISA level and everything above it
_X86_DISABLE = {"avx2": ["-mno-avx512f"], "sse": ["-mno-avx"], "scalar": ["-mno-avx"]}


def native_flags() -> list[str]:
    """Flags that target this CPU, capped at :func:`shared_ir.hostinfo.isa` (``$CHAIN_FUSER_ISA``)."""
    from .hostinfo import detected_isa, isa

    mach = platform.machine().lower()
    if mach in ("x86_64", "amd64", "i686", "i386"):
        used = isa()
        return ["-march=native"] + (_X86_DISABLE.get(used, []) if used != detected_isa() else [])
    if mach in ("aarch64", "arm64"):
        return ["-mcpu=native"]
    return []


def target_key(native: bool) -> dict[str, str]:
    """What the compiled code depends on besides source and flags."""
    key = {"machine": platform.machine(), "system": platform.system()}
    if native:
        from .hostinfo import cpu_flags, cpu_model, isa

        key.update(isa=isa(), cpu_model=cpu_model(),
                   cpu_flags=hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16])
    return key


def cache_key(source_text: bytes, flag_sets: Sequence[Sequence[str]], native: bool, extra: str = "") -> str:
    cc = compiler()
    doc = {"source": hashlib.sha256(source_text).hexdigest(), "flags": [list(f) for f in flag_sets],
           "cc": cc, "cc_version": compiler_version(cc), "target": target_key(native), "extra": extra}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _sidecar(so: Path) -> Path:
    return so.with_name(so.name + ".json")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_ok(so: "str | os.PathLike[str]") -> bool:
    """Whether ``so`` exists and matches the size and SHA-256 its sidecar recorded."""
    so = Path(so)
    try:
        meta = json.loads(_sidecar(so).read_text())
        return so.stat().st_size == meta["size"] and _digest(so) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def publish(tmp: "str | os.PathLike[str]", so: "str | os.PathLike[str]", **meta) -> None:
    """Rename the finished object ``tmp`` over ``so`` and record its size and SHA-256 (plus ``meta``) in the
    sidecar that :func:`cached_ok` checks: the one way a verified object enters a cache."""
    from .atomic import atomic_write_text

    so = Path(so)
    os.replace(tmp, so)
    doc = {"size": so.stat().st_size, "sha256": _digest(so), **meta}
    atomic_write_text(_sidecar(so), json.dumps(doc, indent=1))


def _run_compiler(cmd: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError("CC", f"{cmd[0]!r} failed to run ({e})") from e


def _compile(src: Path, so: Path, flag_sets: Sequence[Sequence[str]], pre: list[str], link: Sequence[str]
             ) -> list[str]:
    """Compile with the first flag set that works into a temporary file next to ``so``, then rename it over
    ``so`` and write the sidecar (both atomically). Returns the flag set used."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{so.stem}.", suffix=".so.tmp", dir=so.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    errors = []
    try:
        for flags in flag_sets:
            cmd = [*compiler(), *pre, *flags, "-shared", "-fPIC", str(src), "-o", str(tmp), *link]
            r = _run_compiler(cmd)
            if r.returncode == 0 and tmp.stat().st_size > 0:
                publish(tmp, so, flags=[*pre, *flags], source=str(src))
                return [*pre, *flags]
            errors.append(f"$ {shlex.join(cmd)}\n{r.stderr.strip()}")
        raise CompileError("flag_sets", f"{src.name} did not compile with any of {len(flag_sets)} flag sets",
                           "\n\n".join(errors))
    finally:
        if tmp.exists():
            tmp.unlink()


def build_shared(source: "str | os.PathLike[str]", cache_dir: "str | os.PathLike[str]",
                 flag_sets: Sequence[Sequence[str]] = ((),), native: bool = False,
                 link: Sequence[str] = (), extra_key: str = "", name: str | None = None) -> Path:
    """The shared object compiled from the C file ``source``, from the cache under ``cache_dir`` when an intact
    one is there, else compiled now.

    ``flag_sets``: alternatives tried in order, the first that compiles wins (e.g. with ``-fopenmp``, then
    without); ``-shared -fPIC`` are always added. ``native``: target this CPU (:func:`native_flags`, in the key).
    ``link``: flags after the source (``-lm``). ``extra_key``: anything else the object depends on (the Python
    version of a source that includes ``Python.h``). Raises :class:`CompileError` when nothing compiles."""
    src = Path(source)
    try:
        text = src.read_bytes()
    except OSError as e:
        raise CompileError("source", f"{src}: cannot be read ({e})") from e
    if not flag_sets:
        raise CompileError("flag_sets", "at least one flag set (an empty one is fine)")
    pre = native_flags() if native else []
    key = cache_key(text + b"\0" + " ".join(pre).encode(), flag_sets, native, extra_key)
    d = Path(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    so = d / f"{name or src.stem}_{key}.so"
    if not cached_ok(so):
        _compile(src, so, flag_sets, pre, link)
    return so


def build_info(so: "str | os.PathLike[str]") -> dict:
    """The sidecar of a built object: size, SHA-256 and the flags it was compiled with."""
    return json.loads(_sidecar(Path(so)).read_text())


__all__ = ["CompileError", "build_shared", "build_info", "cached_ok", "cache_key", "compiler", "compiler_version",
           "native_flags", "publish", "target_key"]
