"""Connector tests: each connector on its real runtime (workerd, node, WordPress on PHP) in front of a real
local origin, against a live Queue Manager server process (the conformance harness) and a stopped one."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
