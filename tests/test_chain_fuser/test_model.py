"""The analytical model against hand-derived data volumes and a brute-force simulation of the block loops."""
import itertools
import math

import pytest
from chain_fuser.errors import InfeasiblePlanError
from chain_fuser.model import dominant_tiles, explain, search_level
from chain_fuser.planner import plan_chain
from chain_fuser.spec import ConvChain, GemmChain, chain_nest


def test_gemm_chain_dims_are_unified():
    n = chain_nest(GemmChain(8, 512, 64, 32, 256))
    assert n.extents == {"b": 8, "m": 512, "l": 256, "k": 32, "n": 64}
    assert n.batch == ("b",)
    assert set(n.loops) == {"m", "l", "k", "n"}
    assert n.shared == {"b", "m", "l"}
    assert [it.name for it in n.intermediates] == ["C"]


@pytest.mark.parametrize("Tm,Tk,Tl,Tn", [(64, 32, 128, 16), (8, 8, 16, 8), (256, 32, 256, 32)])
def test_order_mlkn_matches_reference_formula(Tm, Tk, Tl, Tn):
    # reference: DV = MK⌈L/Tl⌉ + KL⌈M/Tm⌉ + NL⌈M/Tm⌉ + MN⌈L/Tl⌉ (when every loop has more than one trip)
    M, N, K, L = 512, 64, 64, 512
    n = chain_nest(GemmChain(1, M, N, K, L))
    t = {"m": Tm, "k": Tk, "l": Tl, "n": Tn}
    dv = n.dv(("m", "l", "k", "n"), t)

    def c(x, y):
        return math.ceil(x / y)

    assert dv["A"] == 4 * M * K * c(L, Tl)
    assert dv["B"] == 4 * K * L * c(M, Tm)
    assert dv["D"] == 4 * N * L * c(M, Tm)
    assert dv["E"] == 4 * M * N * c(L, Tl)
    mu = n.mu(("m", "l", "k", "n"), t)
    assert mu == 4 * max(Tm * Tk + Tk * Tl + Tm * Tl, Tm * Tl + Tl * Tn + Tm * Tn)


def test_single_trip_loops_give_reuse():
    # with Tk = K the k loop is not a loop: A's tile stays put across l, so A moves once (MK, not MK⌈L/Tl⌉)
    M, N, K, L = 512, 64, 64, 512
    n = chain_nest(GemmChain(1, M, N, K, L))
    dv = n.dv(("m", "l", "k", "n"), {"m": 128, "k": 64, "l": 128, "n": 32})
    assert dv["A"] == 4 * M * K
    assert dv["B"] == 4 * K * L * (M // 128)


def test_order_kmnl_hand_derived():
    # order k,m,n,l: prefix is empty (k is private to GEMM 1): C lives whole (M×L); GEMM 1 nest k,m,l:
    # A (m,k) innermost m -> MK; B (k,l) innermost l, m outside -> KL⌈M/Tm⌉; GEMM 2 nest m,n,l: D -> NL⌈M/Tm⌉,
    # E (m,n) innermost n, l inside -> MN
    M, N, K, L = 256, 64, 32, 128
    n = chain_nest(GemmChain(1, M, N, K, L))
    t = {"m": 32, "k": 8, "l": 32, "n": 16}
    dv = n.dv(("k", "m", "n", "l"), t)
    assert dv == {"A": 4 * M * K, "B": 4 * K * L * (M // 32), "D": 4 * N * L * (M // 32), "E": 4 * M * N}
    # the live intermediate is the full C
    assert n.live_tiles(("k", "m", "n", "l"), t)["m"] == M


def _brute_force_dv(nest, order, tiles):
    """Walk every op's block loops in order; a tensor's tile is (re)loaded whenever its block changes."""
    t = nest.full_tiles(tiles)
    total = {}
    for u in nest.uses:
        loops = nest.op_nest(u.op, order)
        ranges = [range(0, nest.extents[d], t[d]) for d in loops]
        last, moved = None, 0
        for origin in itertools.product(*ranges):
            lo = dict(zip(loops, origin))
            key = tuple(lo[d] for d in loops if d in u.dims)
            if key != last:
                tile = {d: min(t[d], nest.extents[d] - lo[d]) for d in u.dims}
                moved += u.access.footprint(tile, {d: lo[d] for d in u.dims})
                last = key
        total[u.name] = total.get(u.name, 0) + moved * u.elem_bytes
    return total


@pytest.mark.parametrize("spec", [GemmChain(2, 12, 6, 5, 10), GemmChain(1, 9, 4, 7, 8, glue="relu")])
def test_gemm_dv_matches_brute_force_all_orders(spec):
    n = chain_nest(spec)
    for order in n.orders():
        for tiles in ({"m": 4, "k": 2, "l": 3, "n": 4}, {"m": 12, "k": 5, "l": 4, "n": 1},
                      {"m": 5, "k": 7, "l": 8, "n": 2}):
            assert n.dv(order, tiles) == _brute_force_dv(n, order, tiles), (order, tiles)


def test_conv_dv_matches_brute_force_with_halo():
    spec = ConvChain(1, 3, 9, 7, 4, 3, 3, 5, 3, 3, glue="relu")
    n = chain_nest(spec)
    assert set(n.window) == {"r1", "s1", "r2", "s2"}
    for order in itertools.islice(n.orders(), 0, None, 7):
        for tiles in ({"p": 4, "q": 3, "k1": 2, "c": 3, "k2": 5}, {"p": 9, "q": 2, "k1": 4, "c": 1, "k2": 2}):
            assert n.dv(order, tiles) == _brute_force_dv(n, order, tiles), (order, tiles)


@pytest.mark.parametrize("spec", [ConvChain(2, 3, 9, 7, 4, 3, 3, 5, 3, 3, glue="relu"), GemmChain(3, 10, 4, 5, 8)])
def test_memory_use_and_parallel_units_match_their_definitions(spec):
    # the search's memoised fast paths against the definitions written out: MU = max over ops of the tile boxes
    # plus the live intermediate's box (prefix dims tiled, the rest whole); units = Π trips of the leading prefix
    # loops that no op reduces over
    n = chain_nest(spec)
    sizes = ({"p": 4, "q": 3, "k1": 2, "c": 3, "k2": 5, "n": 2}, {"p": 9, "q": 2, "k1": 4, "c": 1, "k2": 2},
             {"m": 4, "k": 2, "l": 3, "n": 4, "b": 2}, {"m": 10, "k": 5, "l": 1, "n": 2})
    for order in itertools.islice(n.orders(), 0, None, 3):
        for tiles in sizes:
            tiles = {d: v for d, v in tiles.items() if d in n.extents}
            if not tiles:
                continue
            t = n.full_tiles(tiles)
            live = n.live_tiles(order, t)
            mu = [0] * len(n.ops)
            for u in n.uses:
                mu[u.op] += u.access.footprint_box({d: t[d] for d in u.dims}) * 4
            for it in n.intermediates:
                box = max(it.produce.footprint_box({d: live[d] for d in it.produce.dims}),
                          it.consume.footprint_box({d: live[d] for d in it.consume.dims}))
                box = min(box, it.produce.tensor.numel) * n.intermediate_copies * 4
                mu[it.producer] += box
                mu[it.consumer] += box
            assert n.mu_ops(order, tiles) == mu, (order, tiles)
            trips, units = n.trips(t), 1
            for d in n.prefix(order, t):
                if d in n.reductions:
                    break
                units *= trips[d]
            assert n.parallel_units(order, tiles) == units, (order, tiles)


def test_dominant_tiles_cover_every_trip_count():
    for E, g in ((512, 8), (208, 16), (49, 1), (100, 7)):
        cand = dominant_tiles(E, g)
        trips = {math.ceil(E / T) for T in cand}
        every = {math.ceil(E / T) for T in range(g, -(-E // g) * g + 1, g)}
        assert trips == every
        # the dominant tile is the smallest reaching its trip count
        for T in cand:
            assert all(math.ceil(E / T2) > math.ceil(E / T) for T2 in range(g, T, g))


def test_search_is_exact_against_exhaustive_enumeration():
    n = chain_nest(GemmChain(1, 10, 4, 5, 8))
    cap, bw = 4 * 60, 1e9
    got = search_level(n, cap, bw, top=1)[0]
    best = None
    for order in n.orders():
        for tm, tk, tl, tn in itertools.product(range(1, 11), range(1, 6), range(1, 9), range(1, 5)):
            t = {"m": tm, "k": tk, "l": tl, "n": tn}
            if n.mu(order, t) > cap:
                continue
            dv = sum(n.dv(order, t).values())
            if best is None or dv < best:
                best = dv
    assert got.dv_bytes == best
    assert got.mu_bytes <= cap


@pytest.mark.parametrize("spec,cores,cap", [(GemmChain(3, 10, 3, 4, 7), 8, 4 * 40),
                                            (ConvChain(1, 2, 7, 6, 2, 3, 3, 3, 3, 3, glue="relu"), 6, 4 * 100)])
def test_search_counting_idle_cores_is_exact_against_exhaustive_enumeration(spec, cores, cap):
    # the score is (max(compute / parallel efficiency, DV / bandwidth), DV); the search prunes with the efficiency
    # once the parallel dims are assigned (p and q for the conv): its best 3 must be the exhaustive best 3 over
    # every order and every tiling (both cases fail if a dim that sets the efficiency ends its loop early, or if
    # the efficiency is taken before every parallel dim has its tile)
    n = chain_nest(spec)
    compute_s, bw = 3e-6, 1e9

    def score(order, t, dv):
        units = n.parallel_units(order, t)
        eff = units / (math.ceil(units / cores) * cores)
        return (max(compute_s / eff, dv / bw), dv)

    got = search_level(n, cap, bw, top=3, cores=cores, compute_s=compute_s)
    best = []
    for order in n.orders():
        for vals in itertools.product(*[range(1, n.extents[d] + 1) for d in n.loops]):
            t = dict(zip(n.loops, vals))
            if n.mu(order, t) <= cap:
                best.append(score(order, t, sum(n.dv(order, t).values())))
    best.sort()
    assert [score(lp.order, lp.tiles, lp.dv_bytes) for lp in got] == best[:3]
    assert all(lp.mu_bytes <= cap for lp in got)


def test_search_infeasible_raises():
    n = chain_nest(GemmChain(1, 64, 64, 64, 64))
    with pytest.raises(InfeasiblePlanError, match="no tiles fit"):
        search_level(n, 8, 1e9, level="tiny")


def test_plan_levels_and_explain(capsys):
    plans = plan_chain(GemmChain(8, 512, 64, 64, 512), top_k=3)
    assert 1 <= len(plans) <= 3
    p = plans[0]
    assert [lp.level for lp in p.levels] == ["l3", "l2", "l1"]
    for lp in p.levels:
        assert lp.mu_bytes <= lp.capacity_bytes
    # inner tiles never exceed outer ones
    for outer, inner in zip(p.levels, p.levels[1:]):
        assert all(inner.tiles[d] <= outer.tiles[d] for d in ("m", "k", "l", "n"))
    text = explain(p)
    out = capsys.readouterr().out
    assert "order" in text and "DV" in text and "predicted" in text and text in out
    assert p.predicted_s >= p.compute_s


def test_memory_bound_chain_prefers_fusing_the_big_intermediate():
    # a 8192x8192 intermediate never fits: the chosen L2 order keeps the m loop shared (C tile Tm x L)
    p = plan_chain(GemmChain(1, 8192, 16, 16, 8192), top_k=1)[0]
    l2 = p.level("l2")
    assert l2.order[0] == "m" and l2.parallel_units >= 2
    assert l2.dv_bytes < 4 * 8192 * 8192  # far less than writing the intermediate once


def test_top_plans_are_distinct_kernels():
    # plans the code generator would realise identically (same fitted order and tiles) are listed once
    for spec in (GemmChain(12, 512, 64, 64, 512), GemmChain(1, 4096, 16, 16, 4096)):
        plans = plan_chain(spec, top_k=4)
        sigs = [(p.micro.name, p.signature) for p in plans]
        assert len(plans) == 4 and len(set(sigs)) == 4


def test_realised_overheads_rank_spilled_intermediates_last():
    # K = N = 16, L = 4096: a Tm x 4096 intermediate tile does not fit L1 and is written and read back through
    # L2 (measured 35 % slower than an L1-sized l tile on this machine); the model must see it
    from chain_fuser.planner import kernel_overheads, realised

    spec = GemmChain(1, 4096, 16, 16, 4096)
    plans = plan_chain(spec, top_k=4)
    first = plans[0]
    assert first.overheads["intermediate_spill"] == 0.0
    assert dict(first.signature[1])["l"] < 4096
    spilled = [p for p in plans if dict(p.signature[1])["l"] == 4096]
    assert spilled and all(p.predicted_s > first.predicted_s for p in spilled)
    assert all(p.overheads["intermediate_spill"] > 0 for p in spilled)
    # accumulators: more l segments, more reloads of the output block
    mk = first.micro
    dev = None
    from chain_fuser import hw

    d = hw.resolve_device(dev)
    few = kernel_overheads(spec, ("m", "l"), {"m": 14, "l": 512, "k": 16, "n": 16}, mk, d, 2e11)
    many = kernel_overheads(spec, ("m", "l"), {"m": 14, "l": 32, "k": 16, "n": 16}, mk, d, 2e11)
    assert many["accumulators"] > 4 * few["accumulators"] > 0
    order, T = realised(spec, first.fused, mk)
    assert set(T) == {"m", "l", "k", "n"} and all(T[x] >= 1 for x in T)


def test_explain_shows_overheads(capsys):
    p = plan_chain(GemmChain(1, 2048, 64, 64, 8192), top_k=1)[0]
    text = explain(p)
    assert "overheads" in text and abs(p.base_s + p.overhead_s - p.predicted_s) < 1e-12


def test_micro_choice_follows_the_measured_fma_rate(monkeypatch):
    # N = K = 5 vectors: a 2-vector block ends in a 1-vector one (no padding to 6), so both compute the same FMAs.
    # With one 512-bit FMA per cycle (Zen 4: 4 accumulators saturate) an 8x16 block is FMA-bound like 8x32 and they
    # tie; with two pipes (8 to saturate) 8x16 is load-bound (9 loads per 8 FMAs) and the wider block wins
    from chain_fuser import hw
    from chain_fuser.planner import block_work, choose_micro, micro_cycles, padded_flops

    dev = hw.server_device()  # pinned: a 512-bit description (32 registers), whatever the host
    lanes = hw.vector_lanes(dev)
    spec = GemmChain(16, 256, 5 * lanes, 5 * lanes, 256)  # 5 vectors: two 2-vector blocks, then a 1-vector one
    mks = {(m.mr, m.nr): m for _, m in choose_micro(spec, dev, 2e11)[1]}
    wide, narrow = mks[(8, 2 * lanes)], mks[(8, lanes)]
    # GEMM 1; GEMM 2 by width
    assert [(w, r) for _, w, r in block_work(spec, wide)] == [(2 * lanes, 5 * lanes), (2 * lanes, 256), (lanes, 256)]
    assert padded_flops(spec, wide) == padded_flops(spec, narrow) == 2.0 * 16 * 256 * 256 * (10 * lanes)
    monkeypatch.setattr(hw, "saturating_accumulators", lambda device=None, measured_only=False: 4.0)
    assert micro_cycles(spec, narrow, dev) == pytest.approx(micro_cycles(spec, wide, dev), rel=0.02)
    monkeypatch.setattr(hw, "saturating_accumulators", lambda device=None, measured_only=False: 8.0)
    assert micro_cycles(spec, narrow, dev) > micro_cycles(spec, wide, dev) * 1.1
    assert choose_micro(spec, dev, 2e11)[0].nr == 2 * lanes


def test_padded_rows_cost_a_copy_and_steer_the_block_height():
    from chain_fuser import hw
    from chain_fuser.model import MicroKernel
    from chain_fuser.planner import choose_micro, padded_rows_copy_s

    dev = hw.server_device()  # pinned: an AVX-512 description (32 registers allow a 12-row block)
    spec = GemmChain(12, 256, 64, 64, 256)
    lanes = hw.vector_lanes(dev)
    six, eight = MicroKernel(6, 2 * lanes, lanes, hw.isa(dev)), MicroKernel(8, 2 * lanes, lanes, hw.isa(dev))
    assert padded_rows_copy_s(spec, eight, dev) == 0.0
    # read and write of A (12 x 256 x 64 floats) at the memory bandwidth
    bw = dev.memory[0].total_read_bandwidth_bytes_per_s
    assert padded_rows_copy_s(spec, six, dev) == pytest.approx(2 * 4 * 12 * 256 * 64 / bw)
    assert 256 % choose_micro(spec, dev)[0].mr == 0
    # Mixer-Base: the tallest block of the pinned description's register file that divides M = 768 (no copy) wins
    from chain_fuser.planner import MR_CHOICES

    tallest = max(k.mr for k in hw.micro_kernels(dev) if k.mr in MR_CHOICES and k.nr == 2 * lanes and 768 % k.mr == 0)
    assert choose_micro(GemmChain(1, 768, 64, 64, 384), dev)[0].mr == tallest
    # conv rows are output columns: 35 columns take a block that pads them by at most one column, and the whole
    # plan decides among the shortlisted micro kernels (a short block may have the least micro-kernel time while its
    # tiles recompute more halo): the first plan is the best of every shortlisted kernel's best plan
    from chain_fuser.planner import MICRO_SHORTLIST

    spec = ConvChain(1, 64, 35, 35, 96, 3, 3, 96, 3, 3)
    first = plan_chain(spec, dev)[0]
    assert -35 % first.micro.mr <= 1
    for _, mk in choose_micro(spec, dev)[1][:MICRO_SHORTLIST]:
        assert first.predicted_s <= plan_chain(spec, dev, micro=mk)[0].predicted_s * (1 + 1e-9)


def test_top_k_measures_a_second_micro_kernel():
    spec = GemmChain(12, 512, 64, 64, 512)
    plans = plan_chain(spec, top_k=4)
    assert len({p.micro.name for p in plans}) == 2
    assert plans == sorted(plans, key=lambda p: p.predicted_s)
    assert len({p.micro.name for p in plan_chain(spec, top_k=2)}) == 1


def test_host_clock_comes_from_the_measured_peak(tmp_path, monkeypatch):
    # the declared (procfs) clock is the nominal one; the peak probe's rate gives the clock the cores run FMAs at
    from chain_fuser import hw

    from shared_ir import hostinfo

    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(tmp_path))  # a record of this test's own
    threads, lanes = hostinfo.num_cores(), hostinfo.vector_lanes()
    rec = {"gflops": 512.0, "threads": threads, "lanes": lanes, "saturating_accumulators": 8.0,
           "cpu": hostinfo.cpu_id()}
    assert hostinfo.record_peak(rec)
    host = hw.host_device()
    clock = 512e9 / (threads * 2 * lanes * 2)  # threads x pipes x lanes x 2 flops
    assert hw.clock_hz(host) == pytest.approx(clock)
    scale = hw.clock_scale(host)
    assert scale == pytest.approx(clock / host.compute.frequency_hz)
    levels, mem = hw.model_levels(host), list(host.memory)
    assert levels[0].fill_bandwidth_bytes_per_s == pytest.approx(mem[0].total_read_bandwidth_bytes_per_s)  # DRAM
    for lv, src in zip(levels[1:], mem[1:]):
        assert lv.fill_bandwidth_bytes_per_s == pytest.approx(src.total_read_bandwidth_bytes_per_s * scale)
    assert hostinfo.record_peak({**rec, "saturating_accumulators": 4.0})  # one pipe (Zen 4): twice the clock
    assert hw.clock_hz(host) == pytest.approx(2 * clock)
    server = hw.server_device()  # not the host: its declared clock
    assert hw.clock_hz(server) == server.compute.frequency_hz and hw.clock_scale(server) == 1.0


def test_panel_stream_hand_derived():
    from chain_fuser import hw
    from chain_fuser.model import MicroKernel
    from chain_fuser.planner import panel_stream_s

    dev = hw.server_device()  # 48 KiB L1 per core
    l1_fill = {lv.name: lv.fill_bandwidth_bytes_per_s for lv in hw.model_levels(dev)}["l1"]
    spec = ConvChain(1, 128, 28, 28, 256, 3, 3, 128, 1, 1)  # Darknet-19
    tall, short = MicroKernel(14, 32, 16, "avx512"), MicroKernel(4, 64, 16, "avx512")
    # conv1 reduces over 9 x 128 = 1152: its panels (1152 x nr floats) never fit L1, so every block of mr columns
    # reads its panel again: 4 / mr bytes per MAC; conv2 over 256 channels: 256 x (64 + 4) x 4 B = 68 KiB > 48 KiB,
    # and 256 x (32 + 14) x 4 B = 46 KiB fits
    macs1_tall, macs1_short = 28 * 28 * 256 * 1152, 28 * 28 * 256 * 1152  # W = 28 pads to neither 14 nor 4
    macs2_short = 28 * 28 * 128 * 256
    assert panel_stream_s(spec, tall, dev) == pytest.approx(macs1_tall * 4 / 14 / l1_fill)
    assert panel_stream_s(spec, short, dev) == pytest.approx((macs1_short + macs2_short) * 4 / 4 / l1_fill)
    # GEMM chains with K = 64 and a 32-wide l tile: small panels, nothing streamed; the whole of L = 4096 is not
    gemm = GemmChain(1, 1024, 64, 64, 4096)
    assert panel_stream_s(gemm, MicroKernel(8, 32, 16, "avx512"), dev, {"l": 32}) == 0.0
    assert panel_stream_s(gemm, MicroKernel(8, 32, 16, "avx512"), dev) == pytest.approx(
        1024 * 64 * 4096 * 4 / 8 / l1_fill)


def test_tiles_leave_part_of_the_private_middle_level_free():
    """The L2 (private, not the innermost) is planned at MID_LEVEL_USABLE of its size, the L1 and the shared L3 at
    theirs; no plan of a chain whose best tiles had filled the whole L2 (Attention-4k) uses more than that share."""
    from chain_fuser import hw

    host = hw.host_device()
    levels = {lv.name: lv.capacity_bytes for lv in hw.model_levels(host)}
    mem = {lv.name: lv for lv in host.memory}
    n = hw.cores(host)
    assert levels["l2"] == int(mem["l2"].capacity_bytes * hw.MID_LEVEL_USABLE) < mem["l2"].capacity_bytes
    assert levels["l1"] == mem["l1"].capacity_bytes
    l3 = mem["l3"]
    assert levels["l3"] == (l3.capacity_bytes if l3.instances >= n else l3.capacity_bytes * l3.instances // n)
    spec = GemmChain(2, 4096, 64, 64, 4096, glue="softmax", scale=0.125, bt=True, name="att4k")
    for p in plan_chain(spec, top_k=4):
        l2 = next(lv for lv in p.levels if lv.level == "l2")
        assert l2.mu_bytes <= levels["l2"]
