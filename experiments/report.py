"""The reproduction report: ``results/report/REPORT.md`` and ``REPORT.html``.

    python -m experiments.report [--sweep reproduce-small] [--store results/store.sqlite] [--report-dir results/report]

For each package, a table puts every headline figure of the reference system (its published number, cited by file
and line from ``../shared/reference/<package>.md``) beside the figure this project measured, read from the results
store (the benchmark's JSON as recorded by the sweep, or an experiment's summary) or, for a benchmark run outside
the sweep, from ``results/bench-<package>.json``, with the command and the machine that produced it. Then every job
of the sweep: status, command, modelled hardware, CSV tables (linked) and plots (embedded).

Nothing measured is typed in: the figures come from the run (see :mod:`experiments.report_spec` for the mapping).
A figure the run did not produce shows as "not measured (reason)"; a broken section shows its error instead of
failing the report. The HTML is rendered with markdown-it-py (installed with rich), or a small built-in converter.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import html
import json
import math
import os
import re
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from . import report_spec as rs
from . import store as st

REPO = Path(__file__).resolve().parents[1]
PACKAGES = tuple(rs.REFERENCE_FILES)
EXTRA_GROUPS = ("ir_summary", "pipeline")
MAX_FILES_PER_EXPERIMENT = 24
MAX_SUMMARY_ROWS = 14


# ------------------------------------------------------------------------------------------------ formatting
def fmt_num(v: float) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_value(v: float, unit: str) -> str:
    if unit == "x":
        return f"{v:.2f}×"
    if unit == "x+":
        return f"{v:.3f}× ({(v - 1) * 100:+.1f}%)"
    if unit == "%":
        return f"{v * 100:.1f}%"
    if unit == "frac":
        return f"{v:.3f}"
    if unit == "us":
        return f"{v / 1000:.3g} ms ({fmt_num(v)} µs)"
    if unit in ("ms", "s", "GB", "GFLOP/s"):
        return f"{fmt_num(v)} {unit}"
    return fmt_num(v)


def cell(text: Any) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def when(t: Optional[float]) -> str:
    if not t:
        return "—"
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def first_line(text: Optional[str]) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


# ------------------------------------------------------------------------------------------------ citations
def find_reference_dir(explicit: str | os.PathLike | None = None) -> Optional[Path]:
    """``../shared/reference`` beside the repository (or ``$REFERENCE_DIR``, or an explicit folder)."""
    cands = [Path(explicit)] if explicit else []
    if os.environ.get("REFERENCE_DIR"):
        cands.append(Path(os.environ["REFERENCE_DIR"]))
    cands += [REPO.parent / "shared" / "reference", REPO / "shared" / "reference", REPO / "docs" / "reference"]
    for c in cands:
        if c.is_dir():
            return c
    return None


def _norm_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def cite(ref_dir: Optional[Path], filename: str, quote: str) -> str:
    """``soc_mapper.md:52`` when the quote is found there; says so when it is not."""
    if ref_dir is None or not (ref_dir / filename).is_file():
        return f"{filename} (reference file not available here)"
    lines = (ref_dir / filename).read_text().splitlines()
    q = _norm_ws(quote)
    for i, line in enumerate(lines, 1):
        if q in _norm_ws(line):
            return f"{filename}:{i}"
    # a quote may wrap over two lines
    for i in range(len(lines) - 1):
        if q in _norm_ws(lines[i] + " " + lines[i + 1]):
            return f"{filename}:{i + 1}"
    return f"{filename} (quote not found: check report_spec)"


# ------------------------------------------------------------------------------------------------ sources
@dataclass
class Source:
    """A document the measured figures are read from, with its provenance."""

    label: str
    data: Optional[dict] = None
    reason: str = ""
    """Why ``data`` is None."""
    command: str = ""
    machine: str = ""
    when: Optional[float] = None
    note: str = ""


def _hardware_in(doc: dict) -> str:
    for k in ("machine", "hardware", "host", "device"):
        v = doc.get(k)
        if isinstance(v, str) and v:
            return v
        if isinstance(v, dict) and v:
            return st.describe_machine(v) if ("cpu" in v or "hostname" in v) else json.dumps(v)[:160]
    return ""


def _latest(rows: Sequence[st.JobRow]) -> Optional[st.JobRow]:
    """The done row finished last, else the latest row of any status."""
    done = [r for r in rows if r.done]
    pool = done or list(rows)
    return max(pool, key=lambda r: (r.finished or r.started or 0), default=None)


def bench_source(pkg: str, rows: Sequence[st.JobRow], results_dir: Path, sweep_id: str) -> Source:
    label = f"bench-{pkg}.json"
    row = _latest([r for r in rows if r.experiment == f"bench/{pkg}"])
    if row is not None and row.done and isinstance(row.summary, dict):
        return Source(label, row.summary, command=row.command or f"python -m {pkg}.bench",
                      machine=st.describe_machine(row.machine), when=row.finished,
                      note=_hardware_in(row.summary))
    f = results_dir / f"bench-{pkg}.json"
    if row is not None and row.status == "failed":
        return Source(label, reason=f"the benchmark failed in sweep {sweep_id}: {first_line(row.error)}",
                      command=row.command or "")
    if f.is_file():
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            return Source(label, reason=f"{f} is not valid JSON ({e})")
        if not isinstance(data, dict):
            return Source(label, reason=f"{f} does not hold a JSON object")
        hw = _hardware_in(data)
        return Source(label, data, command=f"make bench-{pkg} (run outside sweep {sweep_id})",
                      machine=hw or "not recorded in the bench JSON", when=f.stat().st_mtime,
                      note="read from " + str(f))
    if row is not None:
        return Source(label, reason=f"the benchmark did not finish in sweep {sweep_id} (status {row.status})")
    return Source(label, reason=f"no {f.name} yet and no benchmark run in sweep {sweep_id}; "
                                f"make bench-{pkg} writes it")


def experiment_source(name: str, rows: Sequence[st.JobRow], sweep_id: str) -> Source:
    label = f"experiment={name}"
    mine = [r for r in rows if r.experiment == name]
    row = _latest(mine)
    if row is None:
        return Source(label, reason=f"experiment {name} was not run in sweep {sweep_id}")
    if not row.done:
        why = first_line(row.error) if row.status == "failed" else "did not finish"
        return Source(label, reason=f"experiment {name} {row.status}: {why}", command=row.command or "")
    return Source(label, row.summary or {}, command=row.command or "", machine=st.describe_machine(row.machine),
                  when=row.finished, note=modelled_hardware(row))


# ------------------------------------------------------------------------------------------------ measuring
@dataclass
class Measured:
    text: str
    """The figure as printed, or ``not measured (reason)``."""
    where: str = ""
    """Source label and the key path(s) used."""
    source: Optional[Source] = None
    ok: bool = False


def _reduce(matches: list[tuple[str, float]], how: Optional[str]) -> list[tuple[Optional[str], float]]:
    vals = [v for _, v in matches]
    if how == "all":
        return [(p, v) for p, v in matches]
    if how == "max":
        i = max(range(len(vals)), key=vals.__getitem__)
        return [(f"max over {len(vals)}: {matches[i][0]}", vals[i])]
    if how == "min":
        i = min(range(len(vals)), key=vals.__getitem__)
        return [(f"min over {len(vals)}: {matches[i][0]}", vals[i])]
    if how == "geomean":
        if any(v <= 0 for v in vals):
            raise ValueError("geomean of non-positive values")
        return [(f"geomean of {len(vals)}", math.exp(sum(math.log(v) for v in vals) / len(vals)))]
    return [matches[0]]


def _lookup(h: rs.Headline, doc: dict) -> tuple[list[tuple[Optional[str], float]], str]:
    """(values with labels, how they were found) or ([], why not)."""
    for k in h.keys:
        try:
            v = rs.get_path(doc, k)
        except KeyError:
            continue
        if rs.is_number(v):
            return [(None, float(v))], k
        if isinstance(v, dict):  # a key naming a group of numbers (e.g. one per case)
            nums = [(p, float(x)) for p, x in rs.leaves(v) if rs.is_number(x)]
            if nums:
                return nums, k
    if h.pattern:
        rx = re.compile(h.pattern)
        matches = [(p, float(v)) for p, v in rs.leaves(doc) if rs.is_number(v) and rx.search(p)]
        if matches:
            got = _reduce(matches, h.reduce)
            how = ", ".join(p for p, _ in matches[:6]) + (" …" if len(matches) > 6 else "")
            return got, how
    if h.compute is not None:
        try:
            r = h.compute(doc)
        except Exception as e:  # noqa: BLE001 - a spec bug shows in the report, it does not break it
            return [], f"computing it failed ({type(e).__name__}: {e})"
        if rs.is_number(r):
            return [(None, float(r))], "computed"
        if isinstance(r, dict) and r and all(rs.is_number(v) for v in r.values()):
            return [(str(k), float(v)) for k, v in r.items()], "computed from " + ", ".join(map(str, r))
    wanted = list(h.keys) + ([f"/{h.pattern}/"] if h.pattern else [])
    if h.compute is not None:
        wanted.append("the keys it is computed from (see experiments/report_spec.py)")
    return [], "no " + " or ".join(wanted)


def measure(h: rs.Headline, sources: dict[str, Source]) -> Measured:
    reasons = []
    for name in h.sources:
        src = sources.get(name)
        if src is None:
            reasons.append(f"unknown source {name}")
            continue
        if src.data is None:
            reasons.append(src.reason)
            continue
        vals, how = _lookup(h, src.data)
        if vals:
            if len(vals) == 1 and vals[0][0] is None:
                text = fmt_value(vals[0][1], h.unit)
            elif len(vals) == 1 and h.reduce in ("max", "min", "geomean"):
                text = f"{fmt_value(vals[0][1], h.unit)} ({vals[0][0]})"
            else:
                text = "; ".join(f"{lab}: {fmt_value(v, h.unit)}" if lab else fmt_value(v, h.unit)
                                 for lab, v in vals)
            return Measured(text, f"{src.label}: {how}", src, ok=True)
        reasons.append(f"{src.label} has {how}")
    return Measured(f"not measured ({'; '.join(r for r in reasons if r) or 'no source'})")


# ------------------------------------------------------------------------------------------------ experiments
def modelled_hardware(row: st.JobRow) -> str:
    """``hardware=<preset>[, workload=<model>]`` of an experiment job: the hardware from its summary or its saved
    Hydra config; the workload only when the summary names it (many tasks ignore the default workload group)."""
    parts = []
    s = row.summary or {}
    hw = s.get("hardware") if isinstance(s.get("hardware"), str) else None
    wl = s.get("workload") if isinstance(s.get("workload"), str) else None
    if hw is None and row.out_dir:
        import yaml

        for cand in (Path(row.out_dir) / ".hydra" / "config.yaml", Path(row.out_dir) / "0" / ".hydra" / "config.yaml"):
            try:
                cfg = yaml.safe_load(cand.read_text()) or {}
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(cfg.get("hardware"), dict):
                hw = cfg["hardware"].get("name")
            break
    if hw:
        parts.append(f"hardware={hw}")
    if wl:
        parts.append(f"workload={wl}")
    return ", ".join(parts)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def experiment_files(row: st.JobRow, report_dir: Path) -> tuple[list[str], list[str]]:
    """(CSV links, PNG links) relative to the report folder; files outside it are copied into ``files/``."""
    if not row.out_dir or not Path(row.out_dir).is_dir():
        return [], []
    out = Path(row.out_dir)
    found = sorted(p for p in out.rglob("*") if p.suffix.lower() in (".csv", ".png") and p.is_file()
                   and ".hydra" not in p.parts)[:MAX_FILES_PER_EXPERIMENT]
    rep = report_dir.resolve()
    csvs, pngs = [], []
    for p in found:
        rp = p.resolve()
        if not rp.is_relative_to(rep):
            dst = report_dir / "files" / _safe(row.experiment) / row.job_key / p.relative_to(out)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
            rp = dst.resolve()
        link = os.path.relpath(rp, rep).replace(os.sep, "/")
        (csvs if p.suffix.lower() == ".csv" else pngs).append(link)
    return csvs, pngs


def summary_rows(summary: Optional[dict]) -> list[tuple[str, str]]:
    """Top-level scalar entries of a summary (the compact key results of an experiment)."""
    if not isinstance(summary, dict):
        return []
    out = []
    for k, v in summary.items():
        if k in ("task", "out_dir"):
            continue
        if rs.is_number(v):
            out.append((k, fmt_num(float(v)) if isinstance(v, float) else fmt_num(v)))
        elif isinstance(v, (str, bool)) and len(str(v)) <= 80:
            out.append((k, str(v)))
    return out[:MAX_SUMMARY_ROWS]


def bench_scalars(doc: Optional[dict], limit: int = 40) -> list[tuple[str, str]]:
    """Numeric leaves of a bench JSON outside lists (its headline numbers), for the 'all figures' table."""
    if not isinstance(doc, dict):
        return []
    out = [(p, fmt_num(float(v)) if isinstance(v, float) else fmt_num(v)) for p, v in rs.leaves(doc)
           if rs.is_number(v) and "[" not in p]
    return out[:limit]


def _group_of(experiment: str) -> str:
    if experiment.startswith("bench/"):
        return experiment.split("/", 1)[1]
    return experiment.split("/", 1)[0]


# ------------------------------------------------------------------------------------------------ markdown
def render_markdown(rows: Sequence[st.JobRow], *, sweep_id: str, store_path: Path, report_dir: Path,
                    results_dir: Path, scale: Optional[str] = None, reference_dir: Optional[Path] = None,
                    spec: Sequence[rs.Headline] = rs.HEADLINES) -> str:
    ref_dir = reference_dir if reference_dir is not None else find_reference_dir()
    counts = {s: sum(r.status == s for r in rows) for s in st.STATUSES}
    machines = sorted({st.describe_machine(r.machine) for r in rows if r.machine})
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    scale_arg = f" SCALE={scale}" if scale and scale != "small" else ""
    md = [
        "# Reproduction report",
        "",
        f"Generated {now} from sweep `{sweep_id}` of the results store `{store_path}`"
        + (f" (scale {scale})" if scale else "") + ".",
        "",
        f"Reproduce: `make reproduce{scale_arg}` (that is, `python -m experiments.reproduce"
        f"{' --scale ' + scale if scale else ''}`); a rerun completes only the jobs not yet done.",
        "",
        f"Jobs: {counts['done']} done, {counts['failed']} failed, {counts['running']} unfinished.",
        "",
        "Machine(s) that ran them: " + ("; ".join(machines) if machines else "not recorded") + ".",
        "",
        "Published figures are quoted from the reference notes "
        f"(`{ref_dir if ref_dir else '../shared/reference (not found)'}`, cited as file:line); every measured "
        "figure is read from this run's results (see `experiments/report_spec.py` for which key measures what).",
        "",
    ]
    overview, sections = [], []
    for pkg in PACKAGES:
        try:
            sec, n_ok, n_all = _package_section(pkg, rows, sweep_id=sweep_id, report_dir=report_dir,
                                                results_dir=results_dir, ref_dir=ref_dir, spec=spec)
        except Exception as e:  # noqa: BLE001 - one broken section must not lose the report
            sec, n_ok, n_all = (f"## {pkg}\n\nThis section could not be rendered: {type(e).__name__}: {e}\n\n"
                                f"```\n{traceback.format_exc()}```\n"), 0, 0
        grp = [r for r in rows if _group_of(r.experiment) == pkg]
        overview.append((pkg, rs.SYSTEMS.get(pkg, ""), f"{n_ok} of {n_all}",
                         sum(r.done for r in grp), sum(r.status == "failed" for r in grp),
                         sum(r.status == "running" for r in grp)))
        sections.append(sec)
    for g in EXTRA_GROUPS:
        grp = [r for r in rows if _group_of(r.experiment) == g]
        if grp:
            try:
                sections.append(f"## {g}\n\n" + _experiments_block(grp, report_dir))
            except Exception as e:  # noqa: BLE001
                sections.append(f"## {g}\n\nThis section could not be rendered: {type(e).__name__}: {e}\n")
            overview.append((g, "—", "—", sum(r.done for r in grp), sum(r.status == "failed" for r in grp),
                             sum(r.status == "running" for r in grp)))
    md += ["## Overview", "",
           table(["package", "reference system", "headline figures measured", "jobs done", "failed",
                  "unfinished"], overview), ""]
    md += sections
    md += _fault_section(results_dir)
    bad = [r for r in rows if r.status != "done"]
    if bad:
        md += ["## Failed and unfinished jobs", ""]
        md += [table(["job", "status", "error", "log"],
                     [(r.experiment + (f" {' '.join(r.overrides)}" if r.overrides else ""), r.status,
                       first_line(r.error)[:300] or ("no end recorded (killed or still running)"
                                                      if r.status == "running" else ""),
                       f"{r.out_dir}/stderr.log" if r.out_dir else "—") for r in bad]), ""]
    return "\n".join(md).rstrip() + "\n"


def _fault_section(results_dir: Path) -> list[str]:
    """The fault sweep's table (``experiments.faults``, written by ``make reproduce`` to ``faults.json``)."""
    import json

    p = Path(results_dir) / "faults.json"
    try:
        doc = json.loads(p.read_text())
        rows = [(c["package"], c["fault"], c["outcome"], c["detail"]) for c in doc["cases"]]
    except (OSError, ValueError, KeyError, TypeError):
        return ["## Fault sweep", "", f"Not run (no readable `{p}`; `python -m experiments.faults` writes it).", ""]
    n_bad = sum(r[2] == "FAILED" for r in rows)
    return ["## Fault sweep", "",
            f"{len(rows) - n_bad} of {len(rows)} faults provoked in every package give a typed error naming the "
            "file, field or node, or a recovery that keeps the rest of the work "
            f"({n_bad} failed; `python -m experiments.faults`, `{p.name}`, `faults.csv`).", "",
            table(["package", "fault", "outcome", "what the user gets"], rows), ""]


def _package_section(pkg: str, rows: Sequence[st.JobRow], *, sweep_id: str, report_dir: Path,
                     results_dir: Path, ref_dir: Optional[Path], spec: Sequence[rs.Headline]) -> tuple[str, int, int]:
    heads = rs.headlines_for(pkg, spec)
    sources: dict[str, Source] = {rs.BENCH: bench_source(pkg, rows, results_dir, sweep_id)}
    for h in heads:
        for s in h.sources:
            if s.startswith("experiment:") and s not in sources:
                sources[s] = experiment_source(s.split(":", 1)[1], rows, sweep_id)
    ref_file = rs.REFERENCE_FILES[pkg]
    lines = [f"## {pkg} — reproducing {rs.SYSTEMS.get(pkg, '')}", "",
             f"Reference: `{ref_file}`" + (f" in `{ref_dir}`" if ref_dir else "") + ".", ""]
    trs, used, n_ok = [], [], 0
    for h in heads:
        m = measure(h, sources)
        n_ok += m.ok
        ref_no = ""
        if m.source is not None:
            if m.source not in used:
                used.append(m.source)
            ref_no = f"[{used.index(m.source) + 1}] "
        where = (ref_no + m.where) if m.ok else ""
        figure = h.figure + (f" — {h.note}" if h.note else "")
        trs.append((figure, h.published, cite(ref_dir, ref_file, h.quote), m.text, where))
    if trs:
        lines += [table(["headline figure", "published (reference)", "cited", "measured here", "source"], trs), ""]
    if used:
        lines += ["Sources of the measured figures:", ""]
        for i, s in enumerate(used, 1):
            extra = f"; {s.note}" if s.note else ""
            lines.append(f"- [{i}] `{s.label}` — command `{s.command or 'not recorded'}`; machine: "
                         f"{s.machine or 'not recorded'}; finished {when(s.when)}{extra}")
        lines.append("")
    grp = [r for r in rows if _group_of(r.experiment) == pkg]
    if grp:
        lines += [f"### Jobs of {pkg}", "", _experiments_block(grp, report_dir)]
    else:
        lines += [f"No job of {pkg} ran in sweep `{sweep_id}` "
                  f"(no configs in experiments/conf/experiment/{pkg}/ or no {pkg}/bench.py yet).", ""]
    bench = sources[rs.BENCH]
    scal = bench_scalars(bench.data)
    if scal:
        lines += [f"### All scalar figures of {bench.label}", "", table(["key", "value"], scal), ""]
    return "\n".join(lines) + "\n", n_ok, len(heads)


def _experiments_block(rows: Sequence[st.JobRow], report_dir: Path) -> str:
    rows = sorted(rows, key=lambda r: (r.experiment, r.started or 0))
    out = [table(["job", "status", "wall", "modelled hardware", "command"],
                 [(r.experiment + (f" ({' '.join(r.overrides)})" if r.overrides else ""), r.status,
                   f"{r.wall_s:.1f} s" if r.wall_s is not None else "—", modelled_hardware(r) or "—",
                   f"`{r.command}`" if r.command else "—") for r in rows]), ""]
    for r in rows:
        if not r.done:
            continue
        csvs, pngs = experiment_files(r, report_dir)
        srows = summary_rows(r.summary)
        if not (csvs or pngs or srows):
            continue
        title = r.experiment + (f" ({' '.join(r.overrides)})" if r.overrides else "")
        out += [f"#### {title}", ""]
        if srows:
            out += [table(["summary key", "value"], srows), ""]
        if csvs:
            out += ["Tables: " + ", ".join(f"[{Path(c).name}]({c})" for c in csvs), ""]
        for p in pngs:
            out += [f"![{Path(p).stem}]({p})", ""]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ HTML
_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}th,td{border:1px solid #ccc;padding:.25em .5em;
vertical-align:top;text-align:left}th{background:#f3f3f3}code{background:#f6f6f6;padding:0 .2em}
img{max-width:100%;border:1px solid #eee}h2{border-bottom:1px solid #ddd;margin-top:2em}"""


def _inline(text: str) -> str:
    """Inline markdown of the fallback converter: code, images, links, bold (HTML-escaped first)."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        s = html.escape(part, quote=False).replace("\\|", "|").replace("\\\\", "\\")
        s = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", lambda m: f'<img src="{html.escape(m[2])}" alt="{m[1]}">', s)
        s = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", lambda m: f'<a href="{html.escape(m[2])}">{m[1]}</a>', s)
        s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
        out.append(s)
    return "".join(out)


def _split_row(line: str) -> list[str]:
    cells, cur, i = [], "", 0
    body = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur += body[i:i + 2]
            i += 2
            continue
        if c == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    cells.append(cur.strip())
    return cells


def simple_markdown_to_html(md: str) -> str:
    """A small converter for what this report uses: headings, tables, lists, fenced code, paragraphs."""
    out, lines, i = [], md.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
        elif m := re.match(r"^(#{1,6})\s+(.*)", line):
            n = len(m[1])
            out.append(f"<h{n}>{_inline(m[2])}</h{n}>")
            i += 1
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            head = _split_row(line)
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>")
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                out.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _split_row(lines[i])) + "</tr>")
                i += 1
            out.append("</tbody></table>")
        elif re.match(r"^\s*[-*]\s+", line):
            out.append("<ul>")
            while i < len(lines) and re.match(r"^\s*[-*]\s+", lines[i]):
                out.append("<li>" + _inline(re.sub(r"^\s*[-*]\s+", "", lines[i])) + "</li>")
                i += 1
            out.append("</ul>")
        elif not line.strip():
            i += 1
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "```")) \
                    and not re.match(r"^\s*[-*]\s+", lines[i]):
                para.append(lines[i])
                i += 1
            out.append("<p>" + _inline(" ".join(para)) + "</p>")
    return "\n".join(out)


def markdown_to_html(md: str, title: str = "Reproduction report") -> str:
    try:
        from markdown_it import MarkdownIt

        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(md)
    except ImportError:
        body = simple_markdown_to_html(md)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


# ------------------------------------------------------------------------------------------------ entry points
def write_report(store_path: str | os.PathLike = st.DEFAULT_DB, sweep_id: str = "reproduce-small",
                 report_dir: str | os.PathLike = "results/report", results_dir: str | os.PathLike = "results",
                 scale: Optional[str] = None, reference_dir: str | os.PathLike | None = None,
                 spec: Sequence[rs.Headline] = rs.HEADLINES) -> dict[str, Path]:
    """Write ``REPORT.md`` and ``REPORT.html`` under ``report_dir`` (atomically); their paths."""
    from shared_ir import atomic_write_text

    report_dir, results_dir = Path(report_dir), Path(results_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    sp = Path(store_path)
    rows = st.ResultsStore(sp).rows(sweep_id=sweep_id) if sp.exists() else []
    md = render_markdown(rows, sweep_id=sweep_id, store_path=sp, report_dir=report_dir, results_dir=results_dir,
                         scale=scale, reference_dir=Path(reference_dir) if reference_dir else None, spec=spec)
    md_path, html_path = report_dir / "REPORT.md", report_dir / "REPORT.html"
    atomic_write_text(str(md_path), md)
    atomic_write_text(str(html_path), markdown_to_html(md))
    return {"md": md_path, "html": html_path}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default=st.DEFAULT_DB)
    p.add_argument("--sweep", default=None, help="sweep id (default reproduce-<scale>)")
    p.add_argument("--scale", default="small", choices=("small", "full"))
    p.add_argument("--report-dir", default="results/report")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--reference-dir", default=None, help="folder of the reference notes (default ../shared/reference)")
    a = p.parse_args(argv)
    paths = write_report(a.store, a.sweep or f"reproduce-{a.scale}", a.report_dir, a.results_dir, scale=a.scale,
                         reference_dir=a.reference_dir)
    print(f"{paths['md']}\n{paths['html']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
