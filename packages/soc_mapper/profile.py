"""Usage profile of one accelerator: a step function of running tasks and PEs in use over time.

A profile is three parallel lists ``(xs, cs, us)``: segment k is [xs[k], xs[k+1]) with cs[k] tasks using us[k]
PEs; before xs[0] and from xs[-1] on the accelerator is idle. Finding the earliest start of a new task scans
forward from its ready time only until a gap long enough opens (no sorting of busy boxes per query), and adding
a task is two bisections plus an increment of the segments it covers. Both the simulator and COMB's decoder
place tasks this way (insertion into gaps), so their estimates agree.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

Profile = tuple[list[float], list[int], list[int]]


def new_profile() -> Profile:
    return ([], [], [])


def copy_profile(pr: Profile) -> Profile:
    return (pr[0][:], pr[1][:], pr[2][:])


def earliest(pr: Profile, t0: float, d: float, p: int, streams: int, npe: int) -> float:
    """Earliest t ≥ t0 such that during [t, t+d) fewer than ``streams`` tasks run and at most npe − p PEs are in
    use. The answer is t0 or the end of a full segment (a task's finish)."""
    xs, cs, us = pr
    n = len(xs)
    if n == 0 or t0 >= xs[-1]:
        return t0
    k = bisect_right(xs, t0) - 1
    if k < 0:
        k = 0
    t = t0
    end = t0 + d
    cap = npe - p
    while k < n:
        if xs[k] >= end:
            break  # this and later segments start after the window
        if cs[k] >= streams or us[k] > cap:  # full; never the last (idle) segment
            nxt = xs[k + 1]
            if nxt > t:
                t = nxt
                end = t + d
        k += 1
    return t


def _split(xs: list[float], cs: list[int], us: list[int], x: float) -> int:
    k = bisect_left(xs, x)
    if k < len(xs) and xs[k] == x:
        return k
    if k == 0:
        c = u = 0
    else:
        c, u = cs[k - 1], us[k - 1]
    xs.insert(k, x)
    cs.insert(k, c)
    us.insert(k, u)
    return k


def add(pr: Profile, s: float, e: float, q: int) -> None:
    """Record a task running in [s, e) on ``q`` PEs."""
    if not e > s:
        return
    xs, cs, us = pr
    i = _split(xs, cs, us, s)
    j = _split(xs, cs, us, e)
    for k in range(i, j):
        cs[k] += 1
        us[k] += q


def fold(pr: Profile, keep: int) -> float | None:
    """Keep the last ``keep`` breakpoints; the dropped past becomes a floor (returned) before which nothing new
    may start (a conservative summary that keeps the profile short). None when nothing was dropped."""
    xs, cs, us = pr
    cut = len(xs) - keep
    if cut <= 0:
        return None
    floor = xs[cut]
    del xs[:cut], cs[:cut], us[:cut]
    return floor


def horizon(pr: Profile) -> float:
    """When the last task on it ends (0 if none)."""
    return pr[0][-1] if pr[0] else 0.0
