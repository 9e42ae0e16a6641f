"""Shared pytest setup: make `from tests.builders import ...` work under plain `pytest` as well."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
