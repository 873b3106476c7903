"""shared_ir.cbuild: compile once, cache by everything the object depends on, rebuild a damaged object, honour
$CC and the ISA cap."""
from __future__ import annotations

import ctypes
import os
import platform
import stat

import pytest

from shared_ir import cbuild, hostinfo
from shared_ir.cbuild import CompileError, build_info, build_shared

SRC = """
int answer(int x) { return 2 * x + 1; }
int vector_bits(void) {
#if defined(__AVX512F__)
    return 512;
#elif defined(__AVX2__)
    return 256;
#elif defined(__SSE2__) || defined(__ARM_NEON)
    return 128;
#else
    return 64;
#endif
}
"""
X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture
def counting_cc(tmp_path, monkeypatch):
    """$CC = a wrapper around the real compiler that counts its compile calls (not --version)."""
    log = tmp_path / "cc.log"
    real = os.environ.get("CC", "cc")
    wrapper = tmp_path / "countcc"
    wrapper.write_text(f'#!/bin/sh\ncase "$1" in --version) ;; *) echo x >> "{log}";; esac\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(wrapper))
    return lambda: len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "k.c"
    p.write_text(SRC)
    return p


def test_builds_loads_and_reuses_the_cached_object(tmp_path, src, counting_cc):
    so = build_shared(src, tmp_path / "cache", flag_sets=(["-O2"],))
    assert ctypes.CDLL(str(so)).answer(20) == 41
    assert counting_cc() == 1
    assert build_shared(src, tmp_path / "cache", flag_sets=(["-O2"],)) == so
    assert counting_cc() == 1  # cached: no second compile
    assert build_info(so)["flags"] == ["-O2"]
    # the source, the flags and the compiler's identity are all in the key
    assert build_shared(src, tmp_path / "cache", flag_sets=(["-O1"],)) != so
    src.write_text(SRC + "\nint other(void) { return 3; }\n")
    assert build_shared(src, tmp_path / "cache", flag_sets=(["-O2"],)) != so
    assert counting_cc() == 3
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith((".so", ".so.json"))]
    assert leftovers == []


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_sidecar"])
def test_a_damaged_cached_object_is_rebuilt_not_loaded(tmp_path, src, counting_cc, damage):
    so = build_shared(src, tmp_path, flag_sets=(["-O2"],))
    size = so.stat().st_size
    if damage == "truncate":
        so.write_bytes(so.read_bytes()[: size // 3])
    elif damage == "garbage":
        so.write_bytes(b"\0" * size)  # same size, other content: the hash catches it
    else:
        (tmp_path / (so.name + ".json")).unlink()
    assert not cbuild.cached_ok(so)
    assert build_shared(src, tmp_path, flag_sets=(["-O2"],)) == so
    assert counting_cc() == 2 and cbuild.cached_ok(so)
    assert ctypes.CDLL(str(so)).answer(1) == 3


def test_first_working_flag_set_wins_and_failures_name_the_field(tmp_path, src):
    so = build_shared(src, tmp_path, flag_sets=(["-fno-such-flag-xyz"], ["-O1"]))
    assert build_info(so)["flags"] == ["-O1"]
    bad = tmp_path / "bad.c"
    bad.write_text("int broken( { return; }\n")
    with pytest.raises(CompileError) as e:
        build_shared(bad, tmp_path / "c2", flag_sets=(["-O2"],))
    assert e.value.field == "flag_sets" and "bad.c" in str(e.value)
    assert list((tmp_path / "c2").iterdir()) == []  # no temporary or partial object left
    with pytest.raises(CompileError, match="source"):
        build_shared(tmp_path / "missing.c", tmp_path)


def test_cc_that_does_not_run_is_a_typed_error(tmp_path, src, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.raises(CompileError) as e:
        build_shared(src, tmp_path)
    assert e.value.field == "CC"


@pytest.mark.skipif(not X86, reason="the ISA cap flags are x86 switches")
def test_native_build_follows_the_isa_cap(tmp_path, src, monkeypatch):
    monkeypatch.delenv(hostinfo.ISA_ENV, raising=False)
    top = hostinfo.detected_isa()
    bits = {"avx512": 512, "avx2": 256, "sse": 128}
    so = build_shared(src, tmp_path, native=True)
    assert ctypes.CDLL(str(so)).vector_bits() == bits.get(top, 128)
    lower = hostinfo.ISA_ORDER[hostinfo.ISA_ORDER.index(top) - 1]
    if lower not in bits:
        pytest.skip(f"nothing to cap below {top}")
    monkeypatch.setenv(hostinfo.ISA_ENV, lower)
    capped = build_shared(src, tmp_path, native=True)
    assert capped != so  # the ISA is in the key: a capped build never reuses the full-width object
    assert any(f.startswith("-mno-") for f in build_info(capped)["flags"])
    assert ctypes.CDLL(str(capped)).vector_bits() == bits[lower]
