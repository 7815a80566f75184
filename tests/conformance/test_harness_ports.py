"""The harness's ports for listeners that bind later (``reserved_port``): below the kernel's ephemeral
range, never the same twice in one test process, and each pytest-xdist worker in a slice of its own, so
two rigs starting at once on different workers cannot be handed the same port."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from harness import reserved_port

pytestmark = pytest.mark.store_independent


def test_ports_are_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [reserved_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(10_000 <= p < low for p in ports)  # below the kernel's ephemeral range


def test_each_worker_draws_from_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for i in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        drawn = {reserved_port() for _ in range(50)}
        slices.append((min(drawn), max(drawn)))
    for (_, high), (low, _) in itertools.pairwise(slices):
        assert high < low  # disjoint, in worker order
