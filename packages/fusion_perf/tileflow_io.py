"""Reads TileFlow's input format unchanged: ``architecture`` (Timeloop v0.2 tree), ``problem`` (ops with
``ins``/``out``, shared dimensions, ``io``), ``mapping`` (the tree) and ``macro`` substitution, spread over any
number of YAML files in any order.

Supported: storage ``local`` components (``name[0..N-1]``, ``meshX``/``meshY``, ``sizeKB`` or ``depth`` ×
``block-size``/``width``, ``word-bits``, ``read_bandwidth``/``write_bandwidth`` in words/cycle, optional
``read_energy``/``write_energy`` in pJ per word), one compute component (``class`` containing ``mac``); problem
projections ``[[D]]`` and ``[[D, coeff]]`` sums with coefficients from numbers, ``coefficients``, ``instance`` or
macros; ``io`` lists; per-op or global ``instance``; mapping nodes Tile/Scope/Op with ``factors`` (ints, macros,
``?`` for searched factors), ``permutation`` (one letter per dim, or space-separated names), ``target``,
``bypass``, ``split``, ``type``; ``check: {mem: False}``; ``output: PATH``.

Not supported (rejected with an error naming the file and field): architecture versions other than 0.2,
residual factors (``M=4,3``), non-identity ``binding``, ``multicast: false``, a compute component other than
the innermost one, ``tileflow-mapper`` options other than being ignored with a note. Energies are not part of
TileFlow's files (Accelergy computes them); defaults by component class are used unless given.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from shared_ir import Access, AffineExpr, Dim, Op, OpKind, Tensor, TensorRole

from .arch import Arch, Level
from .errors import ArchError, InputFormatError, MappingError
from .mapping import Node, OpLeaf, Tile, node_from_dict, walk
from .problem import Problem

# pJ per 16-bit word by class (Accelergy-style 16 nm estimates; TileFlow's files carry no energies)
_DEFAULT_ENERGY = {"dram": 64.0, "sram": 1.5, "regfile": 0.1, "smartbuffer": 1.5, "storage": 1.5}
_DEFAULT_MAC = 0.3


@dataclass
class Inputs:
    """The merged contents of the input files."""

    sources: dict[str, str] = field(default_factory=dict)
    """Top-level key -> file it came from."""
    data: dict[str, Any] = field(default_factory=dict)


def read_files(paths: Sequence[str]) -> Inputs:
    import yaml

    inp = Inputs()
    macros: dict[str, Any] = {}
    for p in paths:
        if not os.path.isfile(p):
            raise InputFormatError(str(p), "file not found")
        text = open(p).read()
        try:
            d = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise InputFormatError(str(p), f"YAML does not parse{at}: {getattr(e, 'problem', e)}") from None
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


def parse_arch(d: Any, where: str = "architecture") -> Arch:
    if not isinstance(d, Mapping):
        raise InputFormatError(where, "must be a mapping")
    ver = d.get("version")
    if ver is not None and str(ver) not in ("0.2", "0.20"):
        raise InputFormatError(f"{where}.version", f"only version 0.2 trees are supported, got {ver!r}")
    levels: list[Level] = []
    compute: list[tuple[int, float, tuple[int, int]]] = []

    def comp_(c: Mapping, path: str, outer: int, outer_x: int):
        # v0.2 semantics: a range on an enclosing subtree replicates everything inside it
        name = str(c.get("name", ""))
        cls = str(c.get("class", "")).lower()
        at = c.get("attributes") or {}
        m = _RANGE.match(name)
        base, own = (m.group(1), int(m.group(3)) - int(m.group(2)) + 1) if m else (name, 1)
        n = outer * own
        mx = at.get("meshX")
        mx = outer_x * (int(mx) if mx is not None
                        else (own if at.get("meshY") is None else max(1, own // int(at["meshY"]))))
        my = max(1, n // mx) if n % mx == 0 else 1
        if mx * my != n:
            mx, my = n, 1
        if "mac" in cls or cls in ("compute", "alu"):
            compute.append((n, float(at.get("energy", _DEFAULT_MAC)), (mx, my)))
            return
        if compute:
            raise InputFormatError(f"{path}", "a storage level below the compute unit is not supported")
        bits = int(at.get("word-bits", at.get("word_bits", 16)))
        if cls == "dram":
            cap = math.inf
        elif "sizeKB" in at:
            cap = float(at["sizeKB"]) * 1024 * 8 / bits
        elif "depth" in at:
            blk = at.get("block-size", at.get("block_size"))
            cap = float(at["depth"]) * (float(blk) if blk is not None else float(at.get("width", bits)) / bits)
        else:
            cap = math.inf
        if cap <= 0:
            raise InputFormatError(f"{path}.attributes", f"capacity must be > 0, got {cap}")
        rb = float(at.get("read_bandwidth", math.inf) or math.inf)
        wb = float(at.get("write_bandwidth", math.inf) or math.inf)
        e0 = _DEFAULT_ENERGY.get(cls, 1.0) * bits / 16
        levels.append(Level(base, cap, rb, wb, float(at.get("read_energy", e0)), float(at.get("write_energy", e0)),
                            n, mx, my, max(1, bits // 8)))

    def rec(node: Mapping, path: str, outer: int, outer_x: int):
        if not isinstance(node, Mapping):
            raise InputFormatError(path, "an architecture node must be a mapping")
        m = _RANGE.match(str(node.get("name", "")))
        if m:
            k = int(m.group(3)) - int(m.group(2)) + 1
            at = node.get("attributes") or {}
            outer, outer_x = outer * k, outer_x * int(at.get("meshX", k))
        for i, c in enumerate(node.get("local") or []):
            comp_(c, f"{path}.local[{i}]", outer, outer_x)
        for i, s in enumerate(node.get("subtree") or []):
            rec(s, f"{path}.subtree[{i}]", outer, outer_x)

    rec(d, where, 1, 1)
    if not levels:
        raise InputFormatError(where, "no storage level found")
    if not compute:
        raise InputFormatError(where, "no compute (mac) component found")
    n, e, mesh = compute[-1]
    try:
        return Arch(tuple(levels), n, mesh, e, "tileflow")
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
    while isinstance(v, str) and not v.lstrip("-").isdigit():
        if v not in env or seen > 8:
            raise InputFormatError(where, f"unknown name {v!r} (not a number, macro or instance value)")
        v = env[v]
        seen += 1
    try:
        return int(v)
    except (TypeError, ValueError):
        raise InputFormatError(where, f"expected an integer, got {v!r}") from None


def parse_problem(d: Any, macros: Mapping[str, Any], where: str = "problem") -> Problem:
    if not isinstance(d, Mapping):
        raise InputFormatError(where, "must be a mapping")
    ops_d = d.get("ops")
    if not isinstance(ops_d, list) or not ops_d:
        raise InputFormatError(f"{where}.ops", "a list of ops is required")
    glob_inst = dict(d.get("instance") or {})
    coeffs = {c["name"]: c.get("default", 1) for c in (d.get("coefficients") or []) if isinstance(c, Mapping)}
    io = d.get("io") or {}
    ins, outs = _names(io.get("ins")), _names(io.get("outs"))
    # extents
    env = {**macros}
    ext: dict[str, int] = {}
    for k, v in glob_inst.items():
        ext[k] = _num(v, env, f"{where}.instance.{k}")
    ops: list[Op] = []
    shapes: dict[str, list] = {}
    parsed = []
    for i, od in enumerate(ops_d):
        w = f"{where}.ops[{i}]"
        if not isinstance(od, Mapping) or "name" not in od:
            raise InputFormatError(w, "an op needs a name")
        name = str(od["name"])
        w = f"{where}.ops[{i}]({name})"
        dims = _names(od.get("dimensions"))
        inst = {k: _num(v, env, f"{w}.instance.{k}") for k, v in (od.get("instance") or {}).items()}
        for dd in dims:
            if dd not in inst and dd not in ext:
                raise InputFormatError(f"{w}.dimensions", f"dimension {dd!r} has no extent (instance)")
            e = inst.get(dd, ext.get(dd))
            if ext.setdefault(dd, e) != e:
                raise InputFormatError(f"{w}.instance.{dd}", f"extent {e} disagrees with {ext[dd]} elsewhere")
        cenv = {**env, **coeffs, **glob_inst, **(od.get("instance") or {})}
        spaces = od.get("data-spaces") or od.get("data_spaces")
        if not isinstance(spaces, list) or not spaces:
            raise InputFormatError(f"{w}.data-spaces", "a list of data spaces is required")
        accs = {}
        for j, ds in enumerate(spaces):
            tw = f"{w}.data-spaces[{j}]"
            tname = str(ds.get("name"))
            idx = []
            for k, proj in enumerate(ds.get("projection") or []):
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
                idx.append(AffineExpr.of(terms))
            accs[tname] = (idx, bool(ds.get("read-write", False)))
        out = _names(od.get("out"))
        oin = _names(od.get("ins"))
        if len(out) != 1:
            raise InputFormatError(f"{w}.out", f"exactly one output tensor is required, got {out}")
        for t in oin + out:
            if t not in accs:
                raise InputFormatError(f"{w}.ins" if t in oin else f"{w}.out",
                                       f"tensor {t!r} is not among the op's data-spaces {sorted(accs)}")
        parsed.append((name, dims, accs, oin, out[0], od.get("type")))
    for name, dims, accs, oin, out, typ in parsed:
        for t, (idx, _) in accs.items():
            shp = [1 + sum(abs(c) * (ext[dd] - 1) for dd, c in e.terms) for e in idx]
            if shapes.setdefault(t, shp) != shp:
                shapes[t] = [max(a, b) for a, b in zip(shapes[t], shp)]
    for name, dims, accs, oin, out, typ in parsed:
        outdims = {dd for dd, _ in sum((e.terms for e in accs[out][0]), ())}

        def tensor(t):
            role = TensorRole.input if t in ins else TensorRole.output if t in outs else TensorRole.activation
            return Tensor(t, tuple(shapes[t]), "float16", role)

        kind = OpKind.elementwise if typ else (OpKind.matmul if outdims != set(dims) else OpKind.elementwise)
        try:
            ops.append(Op(name, kind, tuple(Dim(dd, ext[dd], dd not in outdims) for dd in dims),
                          tuple(Access(tensor(t), tuple(accs[t][0])) for t in oin),
                          (Access(tensor(out), tuple(accs[out][0])),), {"padded": True}))
        except Exception as e:  # shared_ir validation
            raise InputFormatError(f"{where}.ops({name})", str(e)) from None
    try:
        return Problem(ops, tuple(ins), tuple(outs), "tileflow", where)
    except Exception as e:
        if isinstance(e, InputFormatError):
            raise
        raise InputFormatError(where, str(e).split(": ", 1)[-1] if str(e).startswith(where) else str(e)) from None


def parse_mapping(d: Any, macros: Mapping[str, Any], where: str = "mapping") -> Node:
    try:
        tree = node_from_dict(d, macros, where)
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


def load_inputs(paths: Sequence[str]):
    """(problem, arch, tree, options) from TileFlow files."""
    inp = read_files(paths)
    m = inp.data["macro"]
    src = inp.sources
    arch = parse_arch(inp.data["architecture"], f"{src['architecture']}: architecture")
    prob = parse_problem(inp.data["problem"], m, f"{src['problem']}: problem")
    tree = parse_mapping(inp.data["mapping"], m, f"{src['mapping']}: mapping")
    # targets must name levels of this architecture: say which file
    names = [lv.name for lv in arch.levels]
    for path, n in walk(tree, f"{src['mapping']}: mapping"):
        if isinstance(n, Tile) and n.target not in names:
            raise InputFormatError(f"{path}.target", f"no storage level {n.target!r} in {src['architecture']}; "
                                   f"levels are {names}")
    return prob, arch, tree, inp


__all__ = ["read_files", "parse_arch", "parse_problem", "parse_mapping", "load_inputs", "Inputs"]
