"""``python -m fusion_perf FILE [FILE ...]``: evaluate TileFlow-format inputs (architecture, problem, mapping,
macro/config files in any order). Prints the metrics; with ``output: PATH`` in a file, writes the CSV
(``metric,value`` rows: Cycle, Energy, per-level Read/Fill/Update/Write per tensor, SlowDown, CapUtil) to PATH
(``.csv`` appended when PATH has no extension). Free factors (``?``) are searched with MCTS first."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from .errors import cli_count

    ap = argparse.ArgumentParser(prog="python -m fusion_perf", description=__doc__)
    ap.add_argument("files", nargs="+", help="YAML files with architecture / problem / mapping / macro sections")
    ap.add_argument("--iterations", type=cli_count(1), default=100,
                    help="MCTS iterations when the mapping has free factors (>= 1)")
    ap.add_argument("--objective", choices=["cycles", "energy"], default="cycles")
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    ap.add_argument("--solve-names", action="store_true",
                    help="solve a factor name that is no macro from its dimension's loop count, as TileFlow's "
                         "mapper fixes it (default: such a name is an error)")
    a = ap.parse_args(argv)
    from .errors import FusionPerfError
    from .mapping import dump_mapping, free_variables
    from .model import evaluate
    from .search import search
    from .tileflow_io import load_inputs

    inp = None
    try:
        prob, arch, tree, inp = load_inputs(a.files, solve_names=a.solve_names)
        chk = inp.data.get("check") or {}
        check = not (isinstance(chk, dict) and (chk.get("mem") is False or chk.get("spatial") is False))
        if free_variables(tree):
            sr = search(prob, arch, tree, a.objective, iterations=a.iterations)
            tree = sr.tree
            print(f"# searched {sr.evaluations} factor assignments; best mapping:\n{dump_mapping(tree)}")
        res = evaluate(prob, arch, tree, check=check)
    except FusionPerfError as e:
        msg = str(e)
        if inp is not None and not any(f in msg for f in a.files):
            msg = f"{inp.sources.get('mapping')}: {msg}"  # evaluation errors name tree paths of the mapping file
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(res.to_json() if a.json else res.summary())
    out = inp.data.get("output")
    if out:
        import os

        path = str(out) if os.path.splitext(str(out))[1] else f"{out}.csv"
        res.save_csv(path)
        print(f"wrote {path}")
    if not a.json:
        for k, v in res.metrics()[:2]:
            print(f"{k},{v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
