"""The usage profile that places tasks (simulator and decoder) against an exhaustive check of every start."""
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from soc_mapper.profile import add, earliest, fold, horizon, new_profile


def _brute(boxes, t0, d, p, streams, npe):
    """Exhaustive: try t0 and every box end after it, checking usage at t and at every box start in the window."""
    for t in sorted({t0} | {e for _, e, _ in boxes if e > t0}):
        end = t + d
        over = [b for b in boxes if b[0] < end and b[1] > t]
        ok = True
        for x in [t] + [s for s, _, _ in over if t < s < end]:
            act = [q for s, e, q in over if s <= x < e]
            if len(act) >= streams or sum(act) + p > npe:
                ok = False
                break
        if ok:
            return t
    raise AssertionError("no slot")


boxes_st = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(0, 10)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(boxes_st, st.integers(0, 40), st.integers(1, 10), st.integers(0, 10), st.integers(1, 3))
def test_earliest_matches_exhaustive_search(raw, t0, d, p, streams):
    npe = 10
    pr = new_profile()
    boxes = []
    for s, length, q in raw:  # integer times: exact float comparisons, shared breakpoints
        boxes.append((float(s), float(s + length), q))
        add(pr, float(s), float(s + length), q)
    assert earliest(pr, float(t0), float(d), p, streams, npe) == _brute(boxes, float(t0), float(d), p, streams, npe)
    assert horizon(pr) == max((b[1] for b in boxes), default=0.0)


def test_fold_keeps_the_recent_past_and_returns_a_floor():
    pr = new_profile()
    for k in range(10):
        add(pr, float(k), k + 0.5, 1)
    floor = fold(pr, 4)
    assert floor == 8.0 and pr[0] == [8.0, 8.5, 9.0, 9.5]
    assert fold(pr, 4) is None
    assert earliest(pr, 8.0, 0.5, 1, 1, 1) == 8.5  # the kept boxes still block


def test_decode_of_thousands_of_layers_is_fast():
    """One evaluation (two decodes + a simulation) of ~1,000 layers stays well under a second per 1,000 layers
    (it took > 4 s per 1,000 layers before the profiles)."""
    from soc_mapper.comb import CombContext, comb_evaluate, upward_rank_order
    from soc_mapper.cost import cost_table
    from soc_mapper.decoder import DecodeContext

    from .helpers import mixed_workload, small_soc

    w = mixed_workload(cnn=90, tf=45, br=45)
    soc = small_soc()
    c = cost_table(w, soc)
    ctx = CombContext(DecodeContext(w, soc, c, 4), w, soc, c, "simulator", None, "comb", False,
                      DecodeContext(w, soc, c, 1))
    order = upward_rank_order(w, c, soc)
    comb_evaluate(ctx, order)
    t = time.perf_counter()
    fit, groups, energy = comb_evaluate(ctx, order)
    el = time.perf_counter() - t
    assert len(w) > 1000 and fit > 0 and energy > 0 and sum(len(g) for g, _ in groups) == len(w)
    assert el < 2.5e-3 * len(w), f"{el:.2f} s for {len(w)} layers"


