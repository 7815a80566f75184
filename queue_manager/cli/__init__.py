"""The command line, ``qm``: the top of the layers (docs/architecture.md).

``main.py`` parses the command line and runs one command: ``serve.py`` (``qm serve``, the default),
``config.py`` (``qm config``), or the surge tools of queue_manager/rehearse.
"""

from queue_manager.cli.main import main

__all__ = ["main"]
