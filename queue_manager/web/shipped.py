"""Where the guides and the connectors' sources are, installed or in a checkout.

An installed wheel carries them inside the package, under ``queue_manager/_shipped/docs`` and
``queue_manager/_shipped/connectors`` (pyproject.toml's wheel sources); a checkout (and an editable install)
keeps them beside the package, as ``docs/`` and ``connectors/`` at the repository's root. Either way a
server serves the same guides and builds the same connector downloads, byte for byte.

Example::

    folder("docs") / "OPERATIONS.md"   # the Operations Guide this server renders at /docs/operations
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

PACKAGE = Path(__file__).resolve().parents[1]


def folder(name: Literal["docs", "connectors"]) -> Path:
    """The ``docs`` or ``connectors`` folder this server reads: the wheel's copy when installed, else the checkout's."""
    inside = PACKAGE / "_shipped" / name
    return inside if inside.is_dir() else PACKAGE.parent / name
