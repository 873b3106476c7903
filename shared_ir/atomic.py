"""Atomic file writes for every package: results, checkpoints and plots are never seen half written.

A writer gets a temporary path in the destination's folder (same suffix, so tools that pick a format from the
extension still do), and the file is renamed over the destination only after it was written and synced.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterable, Iterator


def _temp_name(name: str, pid: int) -> str:
    base, ext = os.path.splitext(name)
    return f".{base}.tmp{pid}{ext}"


_TEMP = re.compile(r"^\.(?P<base>.+)\.tmp(?P<pid>[0-9]+)(?P<ext>\.[^.]*)?$")  # what _temp_name writes


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_temps(folder: "str | os.PathLike[str]", names: Iterable[str]) -> list[str]:
    """Remove the temporary files that interrupted atomic writes of ``names`` (file names in ``folder``) left
    behind: those of processes no longer running, or of this one (a kill -9 skips :func:`atomic_path`'s
    cleanup). Returns the names removed."""
    mine = {os.path.splitext(n) for n in names}
    removed: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for f in entries:
        m = _TEMP.match(f)
        if not m or (m["base"], m["ext"] or "") not in mine:
            continue
        pid = int(m["pid"])
        if pid != os.getpid() and _running(pid):
            continue
        try:
            os.remove(os.path.join(folder, f))
            removed.append(f)
        except OSError:
            pass  # gone already, or not ours to remove
    return removed


@contextlib.contextmanager
def atomic_path(path: "str | os.PathLike[str]") -> Iterator[str]:
    """``with atomic_path(p) as tmp: write(tmp)`` — on success ``tmp`` replaces ``p``; on error it is removed."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, _temp_name(os.path.basename(path), os.getpid()))
    try:
        yield tmp
        # flush the data to disk before the rename makes it visible (a crash then leaves old or new, never half)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_text(path: "str | os.PathLike[str]", text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)


def atomic_write_bytes(path: "str | os.PathLike[str]", data: bytes) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_savefig(fig: Any, path: "str | os.PathLike[str]", **kw: Any) -> None:
    """``fig.savefig`` through a temporary file (the format follows the destination's extension)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **kw)
