"""Atomic file writes for every package: results, checkpoints and plots are never seen half written.

A writer gets a temporary path in the destination's folder (same suffix, so tools that pick a format from the
extension still do), and the file is renamed over the destination only after it was written and synced.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: "str | os.PathLike[str]") -> Iterator[str]:
    """``with atomic_path(p) as tmp: write(tmp)`` — on success ``tmp`` replaces ``p``; on error it is removed."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    base, ext = os.path.splitext(os.path.basename(path))
    tmp = os.path.join(d, f".{base}.tmp{os.getpid()}{ext}")
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
