import os
import sys

import pytest

from .common import REPO


@pytest.fixture
def run_cli(tmp_path):
    """Run ``python -m experiments.run ARGS`` from the repo root; returns the CompletedProcess."""
    import subprocess

    def _run(*args, env=None, timeout=300):
        e = dict(os.environ)
        e.pop("HYDRA_FULL_ERROR", None)
        e.update(env or {})
        e.setdefault("EXPERIMENTS_STORE", str(tmp_path / "store.sqlite"))  # never the repo's results store
        e["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "packages"), e.get("PYTHONPATH", "")])
        return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, env=e,
                              capture_output=True, text=True, timeout=timeout)

    return _run
