"""Makes the repo importable without installation (CI installs it editable anyway)."""
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
for _p in (_ROOT, os.path.join(_ROOT, "packages")):
    if _p not in sys.path:
        sys.path.insert(0, _p)
