"""Paths shared by the experiments tests."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "experiments" / "conf"
