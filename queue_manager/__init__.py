"""Queue Manager: a self-hosted virtual waiting room."""

__version__ = "0.1.0"
