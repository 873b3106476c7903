"""What the ``python -c`` child processes of the benchmark and of the MetaSchedule baseline need to start."""
from __future__ import annotations

import json
import os


def child_sys_path() -> str:
    """The ``sys.path`` entries (JSON) a child ``python -c`` script needs to import this repository's packages
    (a checkout used without installing it; with the editable install they are already importable)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return json.dumps([pkg, os.path.dirname(pkg)])
