"""Operational side jobs of one process: the console's per-room series."""
