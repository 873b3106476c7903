"""Bad user input to fusion_perf fails with a typed error naming the file/field and value, never silently."""
import copy
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from fusion_perf import FusionPerfError, InputFormatError, MappingError, OpLeaf, T, free_variables, load_mapping
from fusion_perf.__main__ import main
from fusion_perf.tileflow_io import load_inputs, parse_arch, parse_mapping, parse_problem, read_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EX = Path(__file__).resolve().parents[2] / "packages" / "fusion_perf" / "examples"
FILES = ["arch.yaml", "prob.yaml", "map.yaml", "macro.yaml"]


def _edit(path, old, new):
    text = Path(path).read_text()
    assert old in text
    Path(path).write_text(text.replace(old, new, 1))


def test_factor_typo_is_an_error_naming_node_field_and_value(attention_files, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = attention_files
    _edit(files[2], "factors: M=MI L=LT A=A", "factors: M=sixteen L=LT A=A")
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    msg = str(e.value)
    assert "map.yaml" in msg and ".factors.M" in msg and "'sixteen'" in msg and "'LT'" in msg  # known macros
    assert main(files) == 2
    out = capsys.readouterr()
    assert "sixteen" in out.err and "searched" not in out.out


def test_missing_macro_is_an_error_listing_the_known_macros(attention_files, tmp_path):
    files = attention_files
    _edit(files[3], "  MO: 4 ", "  XX: 4 ")
    with pytest.raises(InputFormatError) as e:
        load_inputs(files)
    assert "'MO'" in str(e.value) and "XX" in str(e.value) and "subtree" not in str(e.value).split(":")[0]


def test_yaml_names_are_free_only_with_question_mark_or_the_mapper_section(attention_files, tmp_path):
    node = "node-type: Tile\nfactors: m=sixteen\ntarget: l1\nsubtree:\n- {node-type: Op, name: GEMM1}\n"
    with pytest.raises(MappingError) as e:
        load_mapping(node)
    assert e.value.path == "mapping.factors.m" and "'sixteen'" in str(e.value)
    assert free_variables(load_mapping(node.replace("sixteen", "?"))) == ["m@mapping"]
    assert free_variables(T("l1", "m=a", OpLeaf("GEMM1"))) == ["a"]  # Python-built trees keep named variables
    # TileFlow's placeholder names stay free when the inputs ask for its mapper
    files = attention_files
    _edit(files[2], "factors: M=MI L=LT A=A", "factors: M=X L=LT A=A")
    Path(files[3]).write_text(Path(files[3]).read_text() + "tileflow-mapper: {alg: mcts}\n")
    _, _, tree, _ = load_inputs(files)
    assert len(free_variables(tree)) == 1


def test_macro_that_is_not_an_integer_names_the_factor():
    d = yaml.safe_load("node-type: Tile\nfactors: m=T\ntarget: l1\nsubtree:\n- {node-type: Op, name: GEMM1}\n")
    with pytest.raises(MappingError) as e:
        load_mapping(d, {"T": "big"})
    assert e.value.path == "mapping.factors.m" and "'big'" in str(e.value)


@pytest.mark.parametrize("value", ["-5", "0"])
def test_cli_rejects_non_positive_iterations(attention_files, tmp_path, capsys, monkeypatch, value):
    monkeypatch.chdir(tmp_path)  # the example's output CSV lands here
    files = attention_files
    files[2] = str(EX / "attention_search" / "map.yaml")
    with pytest.raises(SystemExit) as e:
        main(["--iterations", value, *files])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--iterations" in err and value in err


def test_bench_cli_rejects_non_positive_jobs(capsys):
    from fusion_perf.bench import main as bench_main

    with pytest.raises(SystemExit) as e:
        bench_main(["--jobs", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_search_and_task_config_reject_bad_budgets_with_the_packages_error():
    from fusion_perf import gemm_chain, search
    from fusion_perf.config import DSEConfig

    tree = load_mapping({"node-type": "Tile", "factors": "m=4 k=2 l=?", "target": "dram",
                         "subtree": [{"node-type": "Op", "name": "GEMM1"}]})
    p = gemm_chain(4, 2, 4, 2)
    for field, value in (("iterations", -5), ("rollouts", 0), ("restarts", 0), ("top_k", 0), ("kicks", -1),
                         ("sweep", -1), ("refine_sweeps", -1)):
        with pytest.raises(FusionPerfError) as e:
            search(p, "edge_accel", tree, **{field: value})
        assert e.value.path == f"search.{field}" and str(value) in str(e.value)
    for field, value in (("iterations", -5), ("rollouts", 0), ("restarts", -1), ("top_k", 0), ("kicks", -1),
                         ("sweep", -2), ("seed", -1), ("seed", "x")):
        with pytest.raises(FusionPerfError) as e:
            DSEConfig(**{field: value})
        assert e.value.path == f"task.{field}"


# --- fuzz: every input loads or raises the package's typed error ------------------------------------------------
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 2 ** 40), st.floats(allow_nan=True),
                  st.text(max_size=8), st.sampled_from(["?", "M", "MO", "B", "0", "-1", "x[0..3]", "L1[3..1]",
                                                        "1..2", "²", "Tile", "Op", "Scope", "mac", "DRAM"]))
_value = st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=3),
                                                 st.dictionaries(st.text(max_size=6), c, max_size=3)),
                      max_leaves=8)


def _examples():
    d = {}
    for f in FILES:
        d.update(yaml.safe_load((EX / "attention" / f).read_text()))
    return d


_EX = _examples()


def _paths(x, at=()):
    yield at
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, (*at, i))


def _mutated(section, data):
    doc = copy.deepcopy(_EX[section])
    paths = list(_paths(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.sampled_from(paths))
        if not at:
            return data.draw(_value)
        parent = doc
        try:
            for k in at[:-1]:
                parent = parent[k]
            parent[at[-1]] = data.draw(_value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation replaced a container on this path
    return doc


def _parse(section, doc, macros):
    if section == "architecture":
        parse_arch(doc)
    elif section == "problem":
        parse_problem(doc, macros)
    else:
        parse_mapping(doc, macros)
        load_mapping(doc, macros)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_spec_parsers_raise_only_typed_errors(data):
    section = data.draw(st.sampled_from(["architecture", "problem", "mapping"]))
    doc = data.draw(_value) if data.draw(st.integers(0, 3)) == 0 else _mutated(section, data)
    macros = _EX["macro"] if data.draw(st.booleans()) else data.draw(
        st.dictionaries(st.sampled_from(["M", "MO", "MI", "LT", "B", "x"]), _leaf, max_size=4))
    try:
        _parse(section, doc, macros)
    except FusionPerfError:
        pass


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.text(max_size=60), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                 _value.map(lambda v: yaml.safe_dump({"macro": v, "mapping": v}))))
def test_fuzz_input_files_raise_only_typed_errors(text):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "in.yaml")
        with open(p, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        try:
            read_files([p])
        except FusionPerfError:
            pass
        with open(p, "wb") as f:
            f.write(b"\xff\xfe" + text.encode("utf-8", "surrogateescape"))
        with pytest.raises(FusionPerfError):
            read_files([p])
