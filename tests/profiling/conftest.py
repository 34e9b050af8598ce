"""Make ``tests.fakes`` importable under plain ``pytest`` (as tests/devices/conftest.py does)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
