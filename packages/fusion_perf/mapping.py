"""Mapping trees: Tile nodes (temporal/spatial loops), Scope nodes and Op leaves; built in Python, loaded and
saved as YAML in the TileFlow node syntax (``node-type``, ``type``, ``factors``, ``permutation``, ``target``,
``bypass``, ``split``, ``subtree``). As in TileFlow and Timeloop, a temporal node's ``permutation`` lists its loops
innermost first (``permutation: KMN`` runs N outermost, K innermost); without one the loops run in the order the
``factors`` list them, outermost first. A spatial node's ``permutation`` orders its loops for ``split``: the
first ``split`` go along mesh x, the rest along y. In Python (:func:`T`, :class:`Tile`) loops are always listed
outermost first.

A loop factor is an int, or a name: a macro (resolved when loading) or a free variable to be searched. In YAML,
``?`` is a free variable of that loop alone (``<dim>@<node path>``); another name that is no macro is an error
(a typo must not become a searched factor), unless ``free_names`` asks for TileFlow's mapper convention, where
such a name is a free variable of that loop alone. Trees built in Python may share a variable name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, Union

from .errors import MappingError

SCOPE_KINDS = ("sequential", "sharing", "parallel", "pipeline")
Factor = Union[int, str]


@dataclass
class Tile:
    """A loop nest at one storage level: ``loops`` are (dim, factor) pairs from outermost to innermost.

    ``target`` names the storage level; the outermost Tile targeting a level on a path is where that level's
    tile (the footprint of every loop from here down) is held. Spatial loops distribute the next inner level's
    instances (or the PEs). ``bypass`` lists tensors not kept at ``target``.
    """

    target: str
    loops: list[tuple[str, Factor]]
    child: "Node" = None
    kind: str = "temporal"
    bypass: tuple[str, ...] = ()
    split: int | None = None
    """Spatial loops before index ``split`` map along mesh x, the rest along y (None: only the product is checked)."""
    profile: bool = True
    """TileFlow's ``profile: False``: the accesses charged to this node count for cycles, not for energy."""

    def __post_init__(self):
        self.kind = self.kind.lower()
        if self.kind.startswith("temp"):
            self.kind = "temporal"
        elif self.kind.startswith("spat"):
            self.kind = "spatial"
        else:
            raise MappingError("mapping.type", f"tile type must be temporal or spatial, got {self.kind!r}")
        self.loops = [(str(d), f) for d, f in self.loops]
        self.bypass = tuple(self.bypass)

    @property
    def children(self) -> list["Node"]:
        return [self.child] if self.child is not None else []


@dataclass
class Scope:
    """Sequential | Sharing | Parallel | Pipeline over two or more subtrees; no loops of its own."""

    kind: str
    children: list["Node"] = field(default_factory=list)

    def __post_init__(self):
        k = self.kind.lower()
        for s in SCOPE_KINDS:
            if k.startswith(s[:4]):
                self.kind = s
                break
        else:
            raise MappingError("mapping.type", f"scope type must be one of {list(SCOPE_KINDS)}, got {self.kind!r}")


@dataclass
class OpLeaf:
    """A leaf naming one op of the problem."""

    name: str
    binding: dict[str, str] | None = None


Node = Union[Tile, Scope, OpLeaf]


def T(target: str, loops: Sequence[tuple[str, Factor]] | str, child: Node, kind: str = "temporal",
      bypass: Sequence[str] = (), split: int | None = None) -> Tile:
    """Shorthand: ``T("l1", "m=4 l=2", child)`` or ``T("l1", [("m", 4)], child)``."""
    if isinstance(loops, str):
        loops = _parse_factors(loops, {}, "factors")[0]
    return Tile(target, list(loops), child, kind, tuple(bypass), split)


def S(target: str, loops: Sequence[tuple[str, Factor]] | str, child: Node, split: int | None = None,
      bypass: Sequence[str] = ()) -> Tile:
    """Shorthand for a spatial tile."""
    return T(target, loops, child, "spatial", bypass, split)


def walk(node: Node, path: str = "mapping") -> Iterator[tuple[str, Node]]:
    yield path, node
    for i, c in enumerate(node.children if not isinstance(node, OpLeaf) else []):
        yield from walk(c, f"{path}.subtree[{i}]")


def free_variables(node: Node) -> list[str]:
    out: list[str] = []
    for _, n in walk(node):
        if isinstance(n, Tile):
            for _, f in n.loops:
                if isinstance(f, str) and f not in out:
                    out.append(f)
    return out


def substitute(node: Node, values: Mapping[str, int]) -> Node:
    """A copy with free variables replaced by ``values`` (missing ones stay free)."""
    if isinstance(node, OpLeaf):
        return OpLeaf(node.name, dict(node.binding) if node.binding else None)
    if isinstance(node, Scope):
        return Scope(node.kind, [substitute(c, values) for c in node.children])
    loops = [(d, int(values[f]) if isinstance(f, str) and f in values else f) for d, f in node.loops]
    return Tile(node.target, loops, substitute(node.child, values) if node.child else None, node.kind,
                node.bypass, node.split, node.profile)


# --- YAML (TileFlow node syntax) ------------------------------------------------------------------------------
_FACTOR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z0-9_?]+)(\s*,\s*[0-9]+)?")


def _parse_factors(text: Any, macros: Mapping[str, Any], where: str, autoname: str = "",
                   free_names: bool = False) -> tuple[list[tuple[str, Factor]], list[str]]:
    """Loops of a ``factors`` field. ``autoname`` (YAML): ``?`` is a free factor of this loop; another name must be
    a macro unless ``free_names`` (TileFlow's mapper placeholders). Without it (Python) names are free variables."""
    if isinstance(text, Mapping):
        items = [(str(k), v) for k, v in text.items()]
    else:
        s = str(text).split("#")[0]
        items, pos = [], 0
        for m in _FACTOR.finditer(s):
            if s[pos:m.start()].strip(" ,\t"):
                raise MappingError(where, f"cannot parse factors {text!r} near {s[pos:m.start()]!r}", text)
            if m.group(3):
                raise MappingError(where, f"residual factors ('{m.group(0)}') are not supported", text)
            items.append((m.group(1), m.group(2)))
            pos = m.end()
        if s[pos:].strip(" ,\t"):
            raise MappingError(where, f"cannot parse factors {text!r} near {s[pos:]!r}", text)
    out = [(d, _factor(d, v, macros, f"{where}.{d}", autoname, free_names)) for d, v in items]
    return out, [d for d, _ in out]


def _factor(d: str, v: Any, macros: Mapping[str, Any], where: str, autoname: str, free_names: bool) -> Factor:
    if v == "?" or v is None:
        return f"{d}@{autoname}"
    if isinstance(v, str) and not re.fullmatch(r"[0-9]+", v):
        if v in macros:
            return _integer(macros[v], where, f"macro {v!r}")
        if not autoname:
            return v
        if free_names:
            return f"{v}:{d}@{autoname}"  # TileFlow files reuse one placeholder name for many loops
        known = f"known macros: {sorted(map(str, macros))}" if macros else "no macros are defined"
        raise MappingError(where, f"unknown factor {v!r}: not an integer, a macro or '?' ({known})", v)
    return _integer(v, where, "factor")


def _integer(v: Any, where: str, what: str) -> int:
    if isinstance(v, str) and re.fullmatch(r"[0-9]+", v.strip()):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise MappingError(where, f"{what} must be an integer, got {v!r}", v)
    if v < 1:
        raise MappingError(where, f"{what} must be >= 1, got {v}", v)
    return v


def _parse_perm(text: Any, where: str) -> list[str]:
    if isinstance(text, (list, tuple)):
        return [str(x) for x in text]
    s = str(text).strip()
    if re.search(r"[\s,]", s):
        return [x for x in re.split(r"[\s,]+", s) if x]
    return list(s)  # TileFlow: one character per dimension


def node_from_dict(d: Any, macros: Mapping[str, Any] | None = None, where: str = "mapping",
                   free_names: bool = False) -> Node:
    """Parse one node (and its subtree) of the TileFlow mapping syntax. Errors name ``where`` (file: field path).
    A factor that is neither an integer, a macro nor ``?`` is an error unless ``free_names``."""
    macros = macros or {}
    if not isinstance(macros, Mapping):
        raise MappingError("macro", f"must be a mapping of names to numbers, got {macros!r}", macros)
    if not isinstance(d, Mapping):
        raise MappingError(where, f"a mapping node must be a mapping, got {type(d).__name__}", d)
    nt = str(d.get("node-type", d.get("node_type", ""))).lower()
    sub = d.get("subtree", [])
    if isinstance(sub, Mapping):
        sub = [sub]
    if sub is None:
        sub = []
    if not isinstance(sub, list):
        raise MappingError(f"{where}.subtree", f"must be a list of nodes, got {sub!r}", sub)
    kids = [node_from_dict(c, macros, f"{where}.subtree[{i}]", free_names) for i, c in enumerate(sub)]
    if nt == "op":
        if "name" not in d:
            raise MappingError(f"{where}.name", "an Op node needs a name")
        if kids:
            raise MappingError(f"{where}.subtree", "an Op node is a leaf")
        binding = None
        if d.get("binding"):
            binding = {}
            for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([A-Za-z_][A-Za-z0-9_]*)", str(d["binding"])):
                binding[m.group(2)] = m.group(1)
        return OpLeaf(str(d["name"]), binding)
    if nt == "scope":
        if not kids:
            raise MappingError(f"{where}.subtree", "a Scope node needs at least one child")
        try:
            return Scope(str(d.get("type", "sequential")), kids)
        except MappingError as e:
            raise MappingError(f"{where}.type", e.args[0].split(": ", 1)[-1], d.get("type")) from None
    if nt == "tile":
        if "factors" not in d:
            raise MappingError(f"{where}.factors", "a Tile node needs factors")
        if "target" not in d:
            raise MappingError(f"{where}.target", "a Tile node needs a target storage level")
        loops, order = _parse_factors(d["factors"], macros, f"{where}.factors", where, free_names)
        kind = str(d.get("type", "temporal")).lower()
        if d.get("permutation") is not None:
            perm = _parse_perm(d["permutation"], f"{where}.permutation")
            if sorted(perm) != sorted(order):
                raise MappingError(f"{where}.permutation", f"permutation {perm} does not list the factor dims {order}",
                                   d["permutation"])
            fac = dict(loops)
            # TileFlow/Timeloop list the innermost loop first; spatial loops keep the order (the first `split` on x)
            loops = [(p, fac[p]) for p in (perm if kind.startswith("spat") else perm[::-1])]
        if len(kids) != 1:
            raise MappingError(f"{where}.subtree", f"a Tile node has exactly one child, got {len(kids)}")
        byp = d.get("bypass") or ()
        if isinstance(byp, str):
            byp = [x for x in re.split(r"[\s,]+", byp) if x]
        if not isinstance(byp, (list, tuple)) or not all(isinstance(x, str) for x in byp):
            raise MappingError(f"{where}.bypass", f"must be a list of tensor names, got {byp!r}", byp)
        split = d.get("split")
        if isinstance(split, str) and re.fullmatch(r"[0-9]+", split.strip()):
            split = int(split)
        if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 0):
            raise MappingError(f"{where}.split", f"must be an integer >= 0, got {split!r}", split)
        prof = d.get("profile", True)
        if not isinstance(prof, bool):
            raise MappingError(f"{where}.profile", f"must be true or false, got {prof!r}", prof)
        try:
            return Tile(str(d["target"]), loops, kids[0], str(d.get("type", "temporal")), tuple(byp), split, prof)
        except MappingError as e:
            raise MappingError(f"{where}.type", str(e).split(": ", 1)[-1], d.get("type")) from None
    raise MappingError(f"{where}.node-type", f"must be Tile, Scope or Op, got {d.get('node-type')!r}", nt)


def node_to_dict(n: Node) -> dict[str, Any]:
    if isinstance(n, OpLeaf):
        out: dict[str, Any] = {"node-type": "Op", "name": n.name}
        if n.binding:
            out["binding"] = " ".join(f"{v}:{k}" for k, v in n.binding.items())
        return out
    if isinstance(n, Scope):
        return {"node-type": "Scope", "type": n.kind.capitalize(), "subtree": [node_to_dict(c) for c in n.children]}
    perm = [d for d, _ in n.loops]
    out = {"node-type": "Tile", "type": n.kind, "factors": " ".join(f"{d}={f}" for d, f in n.loops),
           "permutation": " ".join(perm if n.kind == "spatial" else perm[::-1]), "target": n.target}
    if n.bypass:
        out["bypass"] = list(n.bypass)
    if n.split is not None:
        out["split"] = n.split
    if not n.profile:
        out["profile"] = False
    out["subtree"] = [node_to_dict(n.child)]
    return out


class _Yaml12Loader:
    """PyYAML's SafeLoader with YAML 1.2 booleans: ``NO``/``yes``/``on`` stay strings (TileFlow's macro ``NO``)."""

    loader = None

    @classmethod
    def get(cls):
        if cls.loader is None:
            import yaml

            class Loader(yaml.SafeLoader):
                pass

            Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
                                              for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
            bools = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
            Loader.add_implicit_resolver("tag:yaml.org,2002:bool", bools, list("tTfF"))
            cls.loader = Loader
        return cls.loader


def yaml_load(text: str, where: str = "yaml"):
    """YAML text as data with YAML 1.2 booleans (only true/false); a parse error is a :class:`MappingError`
    naming ``where`` and the line."""
    import yaml

    try:
        return yaml.load(text, Loader=_Yaml12Loader.get())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise MappingError(where, f"YAML does not parse{at}: {getattr(e, 'problem', e)}") from None


def load_mapping(src: Any, macros: Mapping[str, Any] | None = None, free_names: bool = False) -> Node:
    """A tree from a node dict, a ``{mapping: ...}`` dict, a YAML string or a path (factors: integers, macros or
    ``?``; other names only with ``free_names``)."""
    import os

    where = "mapping"
    if macros is not None and not isinstance(macros, Mapping):
        raise MappingError("macro", f"must be a mapping of names to numbers, got {macros!r}", macros)
    if isinstance(src, (Tile, Scope, OpLeaf)):
        return src
    if isinstance(src, (str, os.PathLike)) and ("\n" not in str(src)) and os.path.exists(str(src)):
        where = f"{src}: mapping"
        src = open(src).read()
    if isinstance(src, str):
        src = yaml_load(src, where)
    if isinstance(src, Mapping) and "mapping" in src:
        own = src.get("macro") or {}
        if not isinstance(own, Mapping):
            raise MappingError("macro", f"must be a mapping of names to numbers, got {own!r}", own)
        macros = {**own, **(macros or {})}
        src = src["mapping"]
    return node_from_dict(src, macros, where, free_names)


def dump_mapping(node: Node) -> str:
    import yaml

    return yaml.safe_dump({"mapping": node_to_dict(node)}, sort_keys=False)


__all__ = ["Tile", "Scope", "OpLeaf", "Node", "T", "S", "walk", "free_variables", "substitute", "node_from_dict",
           "node_to_dict", "load_mapping", "dump_mapping", "SCOPE_KINDS"]
