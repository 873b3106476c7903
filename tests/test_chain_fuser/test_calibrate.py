import json


def test_calibration_measures_each_micro_kernel_and_the_planner_uses_it(tmp_path, monkeypatch):
    from chain_fuser import calibrate, hw
    from chain_fuser.planner import MR_CHOICES, choose_micro, plan_chain
    from chain_fuser.spec import ConvChain, GemmChain

    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(tmp_path))
    dev = hw.host_device()
    spec = GemmChain(4, 256, 64, 64, 256)
    first, ranked = choose_micro(spec, dev)
    assert calibrate.load() is None and calibrate.factor(dev, first) is None
    # two kernels measured for real: the record holds both, each a positive measured/predicted ratio
    kernels = [mk for _, mk in ranked[:2]]
    rec = calibrate.calibrate(kernels, log=lambda *a: None)
    assert set(rec["factors"]) == {mk.name for mk in kernels} and all(v > 0 for v in rec["factors"].values())
    assert calibrate.load()["factors"] == rec["factors"]
    assert calibrate.factor(dev, kernels[0]) == rec["factors"][kernels[0].name]
    assert calibrate.factor(hw.server_device(), kernels[0]) is None  # another machine's description: the model's
    # conv chains are measured apart (their own calibration chain) and read apart
    assert set(rec["factors_conv"]) == {mk.name for mk in kernels}
    assert calibrate.factor(dev, kernels[0], "conv") == rec["factors_conv"][kernels[0].name]
    # a kernel measured 10x slower than modelled loses the first place, and its plans are predicted slower (than
    # with every factor 1: the real factors just measured depend on the machine's load)
    path = calibrate.record_path()
    data = json.loads(open(path).read())

    def record(factors):
        data["factors"] = factors
        open(path, "w").write(json.dumps(data))

    ones = {mk.name: 1.0 for mk in hw.micro_kernels(dev) if mk.mr in MR_CHOICES}
    record(ones)
    best = choose_micro(spec, dev)[0]
    before = plan_chain(spec, dev, top_k=1, micro=best)[0].predicted_s
    record({**ones, best.name: 10.0})
    assert choose_micro(spec, dev)[0] != best
    assert plan_chain(spec, dev, top_k=1, micro=best)[0].predicted_s > 2 * before
    # a conv chain's ranking follows the conv factors, and a GEMM chain's ignores them
    conv = ConvChain(1, 32, 28, 28, 64, 3, 3, 32, 1, 1, glue="relu")
    data["factors_conv"] = dict(ones)
    record(ones)
    best_conv = choose_micro(conv, dev)[0]
    data["factors_conv"] = {**ones, best_conv.name: 10.0}
    record(ones)
    assert choose_micro(conv, dev)[0] != best_conv and choose_micro(spec, dev)[0] == best


def test_a_record_of_another_cpu_or_format_is_ignored(tmp_path, monkeypatch):
    from chain_fuser import calibrate

    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(tmp_path))
    for rec in ({"format": calibrate.FORMAT, "cpu": "some other CPU", "factors": {"x": 1.0}},
                {"format": 99, "factors": {"x": 1.0}}, ["not", "a", "record"], {"factors": {"x": -1}}):
        with open(calibrate.record_path(), "w") as f:
            json.dump(rec, f)
        assert calibrate.load() is None
    with open(calibrate.record_path(), "w") as f:
        f.write("{truncated")
    assert calibrate.load() is None
