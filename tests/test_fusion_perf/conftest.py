import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "packages" / "fusion_perf" / "examples"
ATTENTION_FILES = ["arch.yaml", "prob.yaml", "map.yaml", "macro.yaml"]


@pytest.fixture
def attention_files(tmp_path):
    """The attention example's four input files copied into ``tmp_path`` (arch, prob, map, macro), for editing."""
    for f in ATTENTION_FILES:
        shutil.copy(EXAMPLES / "attention" / f, tmp_path / f)
    return [str(tmp_path / f) for f in ATTENTION_FILES]
