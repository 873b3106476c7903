"""Every README's quick start runs exactly as written.

In each README, the ``python`` code blocks under the heading "Quick start" are run as a script by the project's
interpreter in an empty folder (so that nothing relies on, or writes into, the checkout), and the ``bash`` blocks'
``python -m <module> ...`` commands must name a module whose ``--help`` works. ``make`` targets are CI's own.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = [ROOT / "README.md", *sorted((ROOT / "packages").glob("*/README.md"))]
_FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```", re.S | re.M)


def quick_start(text: str) -> str:
    """The README's "Quick start" section (up to the next heading of the same or a higher level; a ``#`` line inside
    a code block is a comment, not a heading)."""
    lines = text.splitlines(keepends=True)
    start = level = None
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^(#+) ", line)
        if m and start is None and re.match(r"^#+ Quick start", line, re.I):
            start, level = i + 1, len(m.group(1))
        elif m and start is not None and len(m.group(1)) <= level:
            return "".join(lines[start:i])
    return "" if start is None else "".join(lines[start:])


def blocks(readme: Path, lang: str) -> list[str]:
    return [body for kind, body in _FENCE.findall(quick_start(readme.read_text())) if kind == lang]


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT).parent) if p.parent != ROOT else "root"


def test_every_package_readme_has_a_python_quick_start():
    missing = [_id(r) for r in READMES[1:] if not blocks(r, "python")]
    assert not missing, f"no ```python block under 'Quick start' in: {missing}"


@pytest.mark.parametrize("readme", READMES[1:], ids=_id)
def test_quick_start_python_runs_as_written(readme, tmp_path):
    for i, code in enumerate(blocks(readme, "python")):
        script = tmp_path / f"quick_start_{i}.py"
        script.write_text(code)
        r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{readme}: block {i} failed:\n{code}\n--- stderr ---\n{r.stderr[-3000:]}"


def _modules(cmds: str) -> list[str]:
    mods = []
    for line in cmds.replace("\\\n", " ").splitlines():  # a backslash continues the command on the next line
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        for j, w in enumerate(words[:-1]):
            if w == "-m" and Path(words[j - 1]).name.startswith("python"):
                mods.append(words[j + 1])
    return mods


@pytest.mark.parametrize("readme", READMES, ids=_id)
def test_quick_start_commands_name_real_entry_points(readme):
    for cmds in blocks(readme, "bash"):
        for line in cmds.splitlines():
            assert not re.match(r"^\s*python3?\s", line), f"{readme}: use the project's .venv/bin/python: {line}"
        for mod in _modules(cmds):
            r = subprocess.run([sys.executable, "-m", mod, "--help"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, f"{readme}: `python -m {mod} --help` failed:\n{r.stderr[-2000:]}"
