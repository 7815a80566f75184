"""ADMIN_AUTH_FAIL_PER_MIN is the fleet's on STORE=valkey: two instances on the same Valkey and
PostgreSQL spend one allowance per address, so a guesser behind a load balancer gets the limit in
total, not once per instance; the lockout reaches the other instance by an ``authlock`` hint, or, the
hint lost, on that instance's first wrong try (Valkey-only: memory instances share nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from harness import Server, clear_of_the_minute_turn, peer_env, start_server, wait_until

pytestmark = pytest.mark.stores("valkey")

CSRF = {"X-QM-CSRF": "1"}


@contextmanager
def _pair(extra: dict[str, str]) -> Iterator[tuple[Server, Server]]:
    a = start_server({"ADMIN_AUTH_FAIL_PER_MIN": "3", **extra})
    try:
        b = start_server({**peer_env(a), "ADMIN_AUTH_FAIL_PER_MIN": "3", **extra})
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def _listening_for_hints(srv: Server) -> bool:
    with srv.admin() as admin:
        return bool(admin.get("/api/admin/health").json()["backend"]["hints"]["subscribed"])


@pytest.fixture
def pair() -> Iterator[tuple[Server, Server]]:
    with _pair({}) as (a, b):
        for srv in (a, b):  # a hint published before an instance subscribes is lost to it
            wait_until(lambda srv=srv: _listening_for_hints(srv), what="subscribed to the hints")
        yield a, b


@pytest.fixture
def deaf_pair() -> Iterator[tuple[Server, Server]]:
    """Two instances that exchange no hints (CTL_HINTS=false): every hint lost."""
    with _pair({"CTL_HINTS": "false"}) as pair:
        yield pair


def _locked(r: httpx.Response, what: str) -> None:
    assert r.status_code == 429, (what, r.status_code, r.text)
    assert r.json()["code"] == "too_many_auth_failures", (what, r.text)
    retry = r.headers.get("retry-after")
    assert retry is not None and retry.isdigit() and 1 <= int(retry) <= 60, (what, retry)


def _with_key(srv: Server, key: str) -> httpx.Response:
    with srv.client(headers={"Authorization": f"Bearer {key}"}) as c:
        return c.get("/api/admin/rooms")


def test_wrong_keys_alternated_between_two_instances_spend_one_allowance(pair: tuple[Server, Server]) -> None:
    a, b = pair
    assert _with_key(a, a.admin_key).status_code == 200  # a right key spends nothing
    assert _with_key(b, b.admin_key).status_code == 200
    clear_of_the_minute_turn()
    for i, srv in enumerate((a, b, a)):  # three wrong keys in total, from the same address
        r = _with_key(srv, f"wrong-{i}")
        assert r.status_code == 401, (srv, r.text)
    # the fourth attempt is refused on either instance: on B by A's hint, or, were it still on its way,
    # by the fleet's count that B's own check of the wrong key reads
    _locked(_with_key(b, "wrong-3"), "a wrong key on B")
    _locked(_with_key(a, "wrong-4"), "a wrong key on A")
    _locked(_with_key(b, b.admin_key), "ADMIN_KEY on B")
    with a.client() as c:
        _locked(c.post("/api/admin/session", json={"key": a.admin_key}, headers=CSRF), "console sign-in on A")


def test_wrong_sign_ins_on_one_instance_lock_the_address_out_of_the_other(pair: tuple[Server, Server]) -> None:
    a, b = pair
    clear_of_the_minute_turn()
    with a.client() as c:
        for i in range(3):
            r = c.post("/api/admin/session", json={"key": f"wrong-{i}"}, headers=CSRF)
            assert r.status_code == 401, r.text

    def refused_on_b() -> httpx.Response | None:
        r = _with_key(b, b.admin_key)
        return r if r.status_code == 429 else None

    # the lockout travels to B as a hint, a moment after A answered the third failure
    _locked(wait_until(refused_on_b, what="B refusing the address"), "ADMIN_KEY on B after three bad sign-ins on A")


def test_with_the_hint_lost_the_other_instance_locks_the_address_on_its_first_wrong_try(
    deaf_pair: tuple[Server, Server],
) -> None:
    a, b = deaf_pair
    clear_of_the_minute_turn()
    for i in range(3):
        assert _with_key(a, f"wrong-{i}").status_code == 401
    _locked(_with_key(a, a.admin_key), "ADMIN_KEY on A")
    # B has not heard: a right key still gets through there (the worst case), a wrong one is counted
    # in the fleet's allowance, already spent, and locks the address out of B too
    assert _with_key(b, b.admin_key).status_code == 200
    _locked(_with_key(b, "wrong-3"), "the first wrong key on B")
    _locked(_with_key(b, b.admin_key), "ADMIN_KEY on B after its first wrong key")
