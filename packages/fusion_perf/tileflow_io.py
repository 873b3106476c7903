"""Reads TileFlow's input format unchanged: ``architecture`` (Timeloop v0.2 tree), ``problem`` (ops with
``ins``/``out``, shared dimensions, ``io``), ``mapping`` (the tree) and ``macro`` substitution, spread over any
number of YAML files in any order. YAML booleans are YAML 1.2's (``true``/``false``): a macro ``NO`` stays a
name, as TileFlow's parser reads it.

Supported: storage ``local`` components as Timeloop reads them (``name[0..N-1]``, times an enclosing subtree's
range; ``meshX``/``meshY``, the component's own, the rest of its instances along y; ``entries``,
``depth`` × ``block-size`` (``block_size``, ``n_words``, or ``width`` / word bits) or ``sizeKB``,
``multiple-buffering``, ``word-bits``, ``read_bandwidth``/``write_bandwidth``/``shared_bandwidth`` in words/cycle and
the deprecated ``bandwidth`` (half read, half write), ``technology: DRAM`` or a class naming DRAM for an unbounded
DRAM, ``vector-access-energy`` in pJ per vector access, and this package's ``read_energy``/``write_energy`` in pJ
per word), one compute component (``class`` containing ``mac``, optional ``energy``); problem projections
``[[D]]`` and ``[[D, coeff]]`` sums with coefficients from numbers, ``coefficients``, ``instance`` or macros; ``io``
lists; per-op or global ``instance``; mapping nodes Tile/Scope/Op with ``factors`` (ints, macros, ``?`` for
searched factors; any other name is an error naming the node, unless a ``tileflow-mapper`` section asks for
TileFlow's mapper, which searches factors written as names, or ``solve_names`` solves a name that is the only
unknown of its dimension's loop count, as the mapper fixes it), ``permutation`` (innermost loop first, one letter
per dim or space-separated names), ``target``, ``bypass``, ``split``, ``type``, ``profile`` (``False``: no energy
for the accesses charged to the node); ``check: {mem: False}``; ``output: PATH``.

Energies: the reference's (Timeloop's built-in PAT model, :mod:`fusion_perf.energy`) unless an ``ERT`` (Accelergy's
energy reference table, as Timeloop and TileFlow accept it) or an ``energy_table`` section (a mapping or a file
name; ``technology: project-16nm`` gives this package's earlier per-class estimates) is given. Rules: the
reference's (:mod:`fusion_perf.semantics`) unless a ``semantics`` section names others (``project``, ``tileflow``,
``tileflow-4200e63``, or flags). The data spaces' order of declaration is kept per op (``Op.attr("data_spaces")``),
which TileFlow's order of tensors follows.

Not supported (rejected with an error naming the file and field): architecture versions other than 0.2,
residual factors (``M=4,3``), non-identity ``binding``, ``multicast: false``, a compute component other than
the innermost one, ``tileflow-mapper`` options other than being ignored with a note.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from shared_ir import Access, AffineExpr, Dim, Op, OpKind, Tensor, TensorRole

from .arch import Arch, Level
from .energy import BUILTIN, EnergyTable, load_table
from .errors import ArchError, InputFormatError, MappingError
from .mapping import Node, OpLeaf, Scope, Tile, free_variables, node_from_dict, walk
from .mapping import yaml_load as _yaml12
from .problem import Problem
from .semantics import REFERENCE, as_semantics


@dataclass
class Inputs:
    """The merged contents of the input files."""

    sources: dict[str, str] = field(default_factory=dict)
    """Top-level key -> file it came from."""
    data: dict[str, Any] = field(default_factory=dict)


def yaml_load(text: str, where: str):
    """YAML 1.2 booleans (``NO: 4`` is the macro ``NO``, as TileFlow's parser reads it); errors name ``where``."""
    try:
        return _yaml12(text, where)
    except MappingError as e:
        raise InputFormatError(e.path, str(e)[len(e.path) + 2:]) from None


def read_files(paths: Sequence[str]) -> Inputs:
    inp = Inputs()
    macros: dict[str, Any] = {}
    for p in paths:
        if not os.path.isfile(p):
            raise InputFormatError(str(p), "file not found")
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise InputFormatError(str(p), f"not a UTF-8 text file (byte {e.start}: {e.reason})") from None
        d = yaml_load(text, str(p))
        if d is None:
            continue
        if not isinstance(d, Mapping):
            raise InputFormatError(str(p), f"top level must be a mapping, got {type(d).__name__}")
        for k, v in d.items():
            if k == "macro":
                if not isinstance(v, Mapping):
                    raise InputFormatError(f"{p}: macro", "must be a mapping of names to numbers")
                macros.update(v)
                continue
            if k in inp.data and k in ("architecture", "problem", "mapping"):
                raise InputFormatError(f"{p}: {k}", f"also given in {inp.sources[k]}")
            inp.data[k] = v
            inp.sources[k] = str(p)
    inp.data["macro"] = macros
    for k in ("architecture", "problem", "mapping"):
        if k not in inp.data:
            raise InputFormatError(", ".join(map(str, paths)), f"no file has a top-level {k!r} section")
    return inp


# --- architecture -----------------------------------------------------------------------------------------------
_RANGE = re.compile(r"^(.*?)\[(\d+)\.\.(\d+)\]$")


def _map(v: Any, where: str) -> Mapping:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise InputFormatError(where, f"must be a mapping, got {v!r}")
    return v


def _list(v: Any, where: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise InputFormatError(where, f"must be a list, got {v!r}")
    return v


def _real(v: Any, where: str, positive: bool = True) -> float:
    """A finite number (> 0, or >= 0 with ``positive=False``) from an int, float or numeric string."""
    x = math.nan
    if not isinstance(v, bool) and isinstance(v, (int, float, str)):
        try:
            x = float(v)
        except (ValueError, OverflowError):
            pass
    if not math.isfinite(x) or (x <= 0 if positive else x < 0):
        raise InputFormatError(where, f"must be a number {'>' if positive else '>='} 0, got {v!r}")
    return x


def _count(v: Any, where: str) -> int:
    if isinstance(v, str) and re.fullmatch(r"\s*[0-9]+\s*", v):
        v = int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputFormatError(where, f"must be an integer >= 1, got {v!r}")
    return v


def _replicas(name: str, where: str) -> tuple[str, int]:
    """``L1[0..3]`` -> ("L1", 4); a name without a range -> (name, 1)."""
    m = _RANGE.match(name)
    if not m:
        return name, 1
    n = int(m.group(3)) - int(m.group(2)) + 1
    if n < 1:
        raise InputFormatError(where, f"range {name!r} is empty")
    return m.group(1), n


def _first(at: Mapping, keys: tuple[str, ...]) -> Any:
    return next((at[k] for k in keys if k in at), None)


def _geometry(at: Mapping, bits: int, path: str) -> tuple[int, float | None]:
    """(block size, entries) as Timeloop reads them: ``block-size``/``block_size``/``n_words`` (or ``width`` /
    word bits), then ``entries``, ``depth`` × block size or ``sizeKB``; entries ``None`` when no size is given."""
    blk = _first(at, ("block-size", "block_size", "n_words"))
    width = _first(at, ("width", "memory_width", "data_storage_width"))
    if blk is not None:
        block = _count(blk, f"{path}.block-size")
    elif width is not None:
        block = max(1, int(_real(width, f"{path}.width") // bits))
    else:
        block = 1
    if "entries" in at:
        return block, _real(at["entries"], f"{path}.entries")
    depth = _first(at, ("depth", "memory_depth", "data_storage_depth"))
    if depth is not None:
        return block, _real(depth, f"{path}.depth") * block
    if "sizeKB" in at:
        return block, _real(at["sizeKB"], f"{path}.sizeKB") * 1024 * 8 / bits
    return block, None


def _bandwidths(at: Mapping, ap: str) -> list[float]:
    """Read, write and shared words/cycle (Timeloop: a deprecated ``bandwidth`` is half read, half write)."""
    bw = [math.inf, math.inf, math.inf]
    if at.get("bandwidth"):
        bw[0] = bw[1] = _real(at["bandwidth"], f"{ap}.bandwidth") / 2
    for i, k in enumerate(("read_bandwidth", "write_bandwidth", "shared_bandwidth")):
        if at.get(k):
            bw[i] = _real(at[k], f"{ap}.{k}")
    return bw


def _storage(c: Mapping, cls: str, at: Mapping, path: str, n: int, mesh: tuple[int, int],
             table: EnergyTable) -> Level:
    ap = f"{path}.attributes"
    bits = _count(_first(at, ("word-bits", "word_bits", "word_width", "datawidth")) or 16, f"{ap}.word-bits")
    block, entries = _geometry(at, bits, ap)
    mb = _real(at.get("multiple-buffering", 1), f"{ap}.multiple-buffering")
    dram = "dram" in cls or str(at.get("technology", "")).upper() == "DRAM"
    cap = math.inf if dram or entries is None else math.floor(entries / mb)
    base = _replicas(str(c.get("name", "")), f"{path}.name")[0]
    en = table.storage(base, "dram" if dram else cls, bits, block, None if dram else entries)
    if "vector-access-energy" in at:
        en = dict.fromkeys(en, _real(at["vector-access-energy"], f"{ap}.vector-access-energy", positive=False))
    for k, acts in (("read_energy", ("read",)), ("write_energy", ("fill", "update"))):
        if k in at:  # this package's per-word override
            en.update(dict.fromkeys(acts, _real(at[k], f"{ap}.{k}", positive=False) * block))
    bw = _bandwidths(at, ap)
    try:
        return Level(base, cap, bw[0], bw[1], en["read"], en["fill"], n, mesh[0], mesh[1], max(1, bits // 8),
                     block_size=block, shared_bw=bw[2], fill_energy=en["fill"], update_energy=en["update"],
                     cls=str(c.get("class", "")))
    except ArchError as err:
        raise InputFormatError(path, str(err)) from None


def parse_arch(d: Any, where: str = "architecture", energy: Any = None, semantics: Any = REFERENCE) -> Arch:
    """An :class:`Arch` from a v0.2 architecture tree; per-action energies from ``energy`` (an
    :class:`~fusion_perf.energy.EnergyTable`, a built-in technology, a table mapping or file; default the
    reference's ``timeloop-pat``), under ``semantics`` (default the reference's)."""
    table = BUILTIN["timeloop-pat"] if energy is None else load_table(energy, f"{where}: energy_table")
    if not isinstance(d, Mapping):
        raise InputFormatError(where, "must be a mapping")
    ver = d.get("version")
    if ver is not None and str(ver) not in ("0.2", "0.20"):
        raise InputFormatError(f"{where}.version", f"only version 0.2 trees are supported, got {ver!r}")
    levels: list[Level] = []
    compute: list[tuple[int, float, tuple[int, int]]] = []

    def comp_(c: Any, path: str, outer: int):
        # v0.2 semantics: a range on an enclosing subtree replicates everything inside it
        if not isinstance(c, Mapping):
            raise InputFormatError(path, f"a component must be a mapping, got {c!r}")
        cls = str(c.get("class", "")).lower()
        at = _map(c.get("attributes"), f"{path}.attributes")
        own = _replicas(str(c.get("name", "")), f"{path}.name")[1]
        n = outer * own
        # the mesh as Timeloop's BufferLevel::ParseSpecs sets it: the component's own meshX (or all instances along
        # x), y the rest; an enclosing subtree's meshX only multiplies the instances
        mx, my = at.get("meshX"), at.get("meshY")
        mx = (_count(mx, f"{path}.attributes.meshX") if mx is not None
              else (n if my is None else max(1, n // _count(my, f"{path}.attributes.meshY"))))
        my = max(1, n // mx) if n % mx == 0 else 1
        if mx * my != n:
            mx, my = n, 1
        if "mac" in cls or cls in ("compute", "alu"):
            bits = _count(_first(at, ("word-bits", "word_bits", "datawidth")) or 16, f"{path}.attributes.word-bits")
            base = _replicas(str(c.get("name", "")), f"{path}.name")[0]
            e = at.get("energy")
            e = table.compute(base, cls, bits) if e is None else _real(e, f"{path}.attributes.energy", False)
            compute.append((n, e, (mx, my)))
            return
        if compute:
            raise InputFormatError(f"{path}", "a storage level below the compute unit is not supported")
        levels.append(_storage(c, cls, at, path, n, (mx, my), table))

    def rec(node: Any, path: str, outer: int):
        if not isinstance(node, Mapping):
            raise InputFormatError(path, "an architecture node must be a mapping")
        if _RANGE.match(str(node.get("name", ""))):
            k = _replicas(str(node.get("name", "")), f"{path}.name")[1]
            outer = outer * k
        for i, c in enumerate(_list(node.get("local"), f"{path}.local")):
            comp_(c, f"{path}.local[{i}]", outer)
        for i, s in enumerate(_list(node.get("subtree"), f"{path}.subtree")):
            rec(s, f"{path}.subtree[{i}]", outer)

    rec(d, where, 1)
    if not levels:
        raise InputFormatError(where, "no storage level found")
    if not compute:
        raise InputFormatError(where, "no compute (mac) component found")
    n, e, mesh = compute[-1]
    try:
        return Arch(tuple(levels), n, mesh, e, "tileflow", as_semantics(semantics, f"{where}: semantics"))
    except ArchError as err:
        raise InputFormatError(where, str(err)) from None


# --- problem ----------------------------------------------------------------------------------------------------
def _names(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return [str(x).strip() for x in v]
    return [x for x in re.split(r"[\s,]+", str(v)) if x]


def _num(v: Any, env: Mapping[str, Any], where: str) -> int:
    seen = 0
    while isinstance(v, str) and not re.fullmatch(r"\s*-?[0-9]+\s*", v):
        if v not in env or seen > 8:
            raise InputFormatError(where, f"unknown name {v!r} (not a number, macro or instance value)")
        v = env[v]
        seen += 1
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, str):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputFormatError(where, f"expected an integer, got {v!r}")
    return v


def _extent(v: Any, env: Mapping[str, Any], where: str) -> int:
    e = _num(v, env, where)
    if e < 1:
        raise InputFormatError(where, f"an extent must be >= 1, got {e}")
    return e


def _projection(ds: Mapping, dims: list[str], cenv: Mapping[str, Any], tw: str) -> list:
    idx = []
    for k, proj in enumerate(_list(ds.get("projection"), f"{tw}.projection")):
        terms: dict[str, int] = {}
        if not isinstance(proj, list):
            raise InputFormatError(f"{tw}.projection[{k}]", f"expected a list of terms, got {proj!r}")
        for term in proj:
            term = term if isinstance(term, list) else [term]
            dn = [x for x in term if isinstance(x, str) and x in dims]
            if len(dn) != 1:
                raise InputFormatError(f"{tw}.projection[{k}]", f"term {term} must name exactly one of the "
                                       f"op's dimensions {dims}")
            c = 1
            for x in term:
                if x != dn[0]:
                    c *= _num(x, cenv, f"{tw}.projection[{k}]")
            terms[dn[0]] = terms.get(dn[0], 0) + c
        try:
            idx.append(AffineExpr.of(terms))
        except Exception as e:  # shared_ir validation
            raise InputFormatError(f"{tw}.projection[{k}]", str(e)) from None
    return idx


def _parse_op(od: Any, i: int, env: Mapping[str, Any], coeffs: Mapping[str, Any], glob_inst: Mapping[str, Any],
              ext: dict[str, int], where: str) -> tuple:
    w = f"{where}.ops[{i}]"
    if not isinstance(od, Mapping) or "name" not in od:
        raise InputFormatError(w, "an op needs a name")
    name = str(od["name"])
    w = f"{where}.ops[{i}]({name})"
    dims = _names(od.get("dimensions"))
    own = _map(od.get("instance"), f"{w}.instance")
    inst = {k: _extent(v, env, f"{w}.instance.{k}") for k, v in own.items()}
    for dd in dims:
        if dd not in inst and dd not in ext:
            raise InputFormatError(f"{w}.dimensions", f"dimension {dd!r} has no extent (instance)")
        e = inst.get(dd, ext.get(dd))
        if ext.setdefault(dd, e) != e:
            raise InputFormatError(f"{w}.instance.{dd}", f"extent {e} disagrees with {ext[dd]} elsewhere")
    cenv = {**env, **coeffs, **glob_inst, **own}
    spaces = od.get("data-spaces") or od.get("data_spaces")
    if not isinstance(spaces, list) or not spaces:
        raise InputFormatError(f"{w}.data-spaces", "a list of data spaces is required")
    accs = {}
    for j, ds in enumerate(spaces):
        tw = f"{w}.data-spaces[{j}]"
        if not isinstance(ds, Mapping) or ds.get("name") is None:
            raise InputFormatError(tw, f"a data space is a mapping with a name, got {ds!r}")
        accs[str(ds["name"])] = (_projection(ds, dims, cenv, tw), bool(ds.get("read-write", False)))
    out = _names(od.get("out"))
    oin = _names(od.get("ins"))
    if len(out) != 1:
        raise InputFormatError(f"{w}.out", f"exactly one output tensor is required, got {out}")
    for t in oin + out:
        if t not in accs:
            raise InputFormatError(f"{w}.ins" if t in oin else f"{w}.out",
                                   f"tensor {t!r} is not among the op's data-spaces {sorted(accs)}")
    return name, dims, accs, oin, out[0], od.get("type")


def parse_problem(d: Any, macros: Mapping[str, Any], where: str = "problem") -> Problem:
    if not isinstance(d, Mapping):
        raise InputFormatError(where, "must be a mapping")
    ops_d = d.get("ops")
    if not isinstance(ops_d, list) or not ops_d:
        raise InputFormatError(f"{where}.ops", "a list of ops is required")
    glob_inst = _map(d.get("instance"), f"{where}.instance")
    coeffs = {}
    for i, c in enumerate(_list(d.get("coefficients"), f"{where}.coefficients")):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise InputFormatError(f"{where}.coefficients[{i}]", f"a coefficient needs a name, got {c!r}")
        coeffs[c["name"]] = c.get("default", 1)
    io = _map(d.get("io"), f"{where}.io")
    ins, outs = _names(io.get("ins")), _names(io.get("outs"))
    env = {**_map(macros, "macro")}
    ext = {str(k): _extent(v, env, f"{where}.instance.{k}") for k, v in glob_inst.items()}
    parsed = [_parse_op(od, i, env, coeffs, glob_inst, ext, where) for i, od in enumerate(ops_d)]
    shapes: dict[str, list] = {}
    for name, dims, accs, oin, out, typ in parsed:
        for t, (idx, _) in accs.items():
            shp = [1 + sum(abs(c) * (ext[dd] - 1) for dd, c in e.terms) for e in idx]
            if shapes.setdefault(t, shp) != shp:
                shapes[t] = [max(a, b) for a, b in zip(shapes[t], shp)]
    ops = [_make_op(p, ext, shapes, ins, outs, where) for p in parsed]
    try:
        return Problem(ops, tuple(ins), tuple(outs), "tileflow", where)
    except Exception as e:
        if isinstance(e, InputFormatError):
            raise
        raise InputFormatError(where, str(e).split(": ", 1)[-1] if str(e).startswith(where) else str(e)) from None


def _make_op(parsed: tuple, ext: Mapping[str, int], shapes: Mapping[str, list], ins: list[str], outs: list[str],
             where: str) -> Op:
    name, dims, accs, oin, out, typ = parsed
    outdims = {dd for dd, _ in sum((e.terms for e in accs[out][0]), ())}

    def tensor(t):
        role = TensorRole.input if t in ins else TensorRole.output if t in outs else TensorRole.activation
        return Tensor(t, tuple(shapes[t]), "float16", role)

    kind = OpKind.elementwise if typ else (OpKind.matmul if outdims != set(dims) else OpKind.elementwise)
    try:
        return Op(name, kind, tuple(Dim(dd, ext[dd], dd not in outdims) for dd in dims),
                  tuple(Access(tensor(t), tuple(accs[t][0])) for t in oin),
                  (Access(tensor(out), tuple(accs[out][0])),), {"padded": True, "data_spaces": tuple(accs)})
    except Exception as e:  # shared_ir validation
        raise InputFormatError(f"{where}.ops({name})", str(e)) from None


def parse_mapping(d: Any, macros: Mapping[str, Any], where: str = "mapping", free_names: bool = False) -> Node:
    """The tree; a factor name that is no macro is an error unless ``free_names`` (a ``tileflow-mapper`` section:
    TileFlow's mapper searches factors written as names)."""
    try:
        tree = node_from_dict(d, macros, where, free_names)
    except MappingError as e:
        raise InputFormatError(e.path, str(e)[len(e.path) + 2:] if str(e).startswith(e.path) else str(e)) from None
    for path, n in walk(tree, where):
        if isinstance(n, OpLeaf) and n.binding and any(k != v for k, v in n.binding.items()):
            raise InputFormatError(f"{path}.binding", f"non-identity bindings are not supported: {n.binding}")
    _reject_multicast(d, where)
    return tree


def _reject_multicast(d: Any, where: str):
    if isinstance(d, Mapping):
        if d.get("multicast") is False:
            raise InputFormatError(f"{where}.multicast", "multicast: false is not supported (multicast is always on)")
        sub = d.get("subtree") or []
        for i, c in enumerate(sub if isinstance(sub, list) else [sub]):
            _reject_multicast(c, f"{where}.subtree[{i}]")


def load_inputs(paths: Sequence[str], solve_names: bool = False):
    """(problem, arch, tree, inputs) from TileFlow files. The architecture takes its energies from an ``ERT`` or
    ``energy_table`` section (a mapping or a file name) when one is given, and its rules from ``semantics``
    (default the reference's). With ``solve_names`` a factor name that is no macro but the only unknown of its
    dimension's loop count is solved (as TileFlow's mapper fixes it); otherwise it stays an error."""
    inp = read_files(paths)
    m = inp.data["macro"]
    src = inp.sources
    energy = None
    for k in ("ERT", "energy_table"):
        if k in inp.data:
            v = inp.data[k]
            if isinstance(v, str) and v not in BUILTIN and not os.path.isabs(v):
                v = os.path.join(os.path.dirname(src[k]), v)  # a file name is relative to the file naming it
            energy = load_table({k: v} if isinstance(v, Mapping) else v, f"{src[k]}: {k}")
    try:
        sem = as_semantics(inp.data.get("semantics", REFERENCE), f"{src.get('semantics', '')}: semantics")
    except ArchError as e:
        raise InputFormatError(e.path, str(e)[len(e.path) + 2:]) from None
    arch = parse_arch(inp.data["architecture"], f"{src['architecture']}: architecture", energy, sem)
    prob = parse_problem(inp.data["problem"], m, f"{src['problem']}: problem")
    mapper = "tileflow-mapper" in inp.data
    where = f"{src['mapping']}: mapping"
    try:
        tree = parse_mapping(inp.data["mapping"], m, where, mapper or solve_names)
    except InputFormatError as e:
        raise InputFormatError(e.path, _unknown_hint(str(e)[len(e.path) + 2:], inp.data["mapping"], m, prob,
                                                     where)) from None
    if solve_names and not mapper:
        tree = solve_factor_names(tree, prob, where)
        left = [f for f in free_variables(tree) if ":" in f]
        if left:
            name, rest = left[0].split(":", 1)
            d, node = rest.split("@", 1)
            known = f"known macros: {sorted(map(str, m))}" if m else "no macros are defined"
            raise InputFormatError(f"{node}.factors.{d}", f"unknown factor {name!r}: not an integer, a macro or '?', "
                                   f"and not fixed by the loop count of {d} ({known})")
    # targets must name levels of this architecture: say which file
    names = [lv.name for lv in arch.levels]
    for path, n in walk(tree, f"{src['mapping']}: mapping"):
        if isinstance(n, Tile) and n.target not in names:
            raise InputFormatError(f"{path}.target", f"no storage level {n.target!r} in {src['architecture']}; "
                                   f"levels are {names}")
    return prob, arch, tree, inp


def _unknown_hint(msg: str, doc: Any, macros: Mapping, prob: Problem, where: str) -> str:
    """``msg`` of an unknown factor name, plus the value the loop count gives it when it gives one."""
    if not msg.startswith("unknown factor"):
        return msg
    try:
        tree = solve_factor_names(parse_mapping(doc, macros, where, True), prob, where)
    except InputFormatError:
        return msg
    if any(":" in f for f in free_variables(tree)):
        return msg
    return f"{msg}; its loop count fixes it (TileFlow's mapper does): pass --solve-names (solve_names=True)"


def _op_paths(tree: Node) -> dict[str, list[Tile]]:
    """Per op leaf, the Tile nodes from the root down to it."""
    out: dict[str, list[Tile]] = {}

    def rec(n: Node, above: list[Tile]):
        if isinstance(n, OpLeaf):
            out[n.name] = above
        elif isinstance(n, Scope):
            for c in n.children:
                rec(c, above)
        elif isinstance(n, Tile):
            rec(n.child, above + [n])

    rec(tree, [])
    return out


def solve_factor_names(tree: Node, prob: Problem, where: str) -> Node:
    """Substitutes every named factor that is the only unknown of an op's dimension: extent / the product of the
    dimension's other factors on that op's path (TileFlow's loop-count constraint with one variable)."""
    from .mapping import substitute

    values: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for op, tiles in _op_paths(tree).items():
            for d in prob.op_dims(op):
                fs = [f for t in tiles for dd, f in t.loops if dd == d]
                free = {f for f in fs if isinstance(f, str) and f not in values}
                if len(free) != 1 or sum(1 for f in fs if f in free) != 1:
                    continue
                known = math.prod(values.get(f, f) for f in fs if f not in free)
                name = free.pop()
                if prob.dims[d] % known:
                    raise InputFormatError(f"{where} (op {op}, dim {d})", f"factor {name.split(':')[0]!r} cannot be "
                                           f"solved: extent {prob.dims[d]} is not a multiple of {known}")
                values[name] = prob.dims[d] // known
                changed = True
    return substitute(tree, values)


__all__ = ["read_files", "parse_arch", "parse_problem", "parse_mapping", "load_inputs", "Inputs", "yaml_load",
           "solve_factor_names"]
