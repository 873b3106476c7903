"""Tiny tasks for runner tests (cheap stand-ins for real experiments; they follow the runner convention)."""
from __future__ import annotations

import os


def echo(hardware=None, workload=None, out_dir=None, **params):
    """Returns what it was given, and writes a marker file into out_dir."""
    with open(os.path.join(out_dir, "echo.txt"), "w") as f:
        f.write("ok\n")
    return {"hardware": (hardware or {}).get("name"), "workload": (workload or {}).get("name"),
            "out_dir": out_dir, "params": params, "has_workload": workload is not None}


def fail_on(hardware=None, workload=None, out_dir=None, bad: str = "edge_accel", **params):
    """Fails (ValueError naming the field) when the hardware is ``bad``; else like :func:`echo`."""
    if (hardware or {}).get("name") == bad:
        raise ValueError(f"hardware.name: refusing to run on {bad!r} (test failure)\nsecond line of detail")
    return echo(hardware, workload, out_dir, **params)


def not_a_dict(hardware=None, workload=None, out_dir=None, **params):
    return [1, 2, 3]
