"""Alerting on the Valkey store: what only a fleet on Valkey and PostgreSQL can fail at.

``storage_failing`` (the events journal cannot commit to PostgreSQL) and ``valkey_unreachable`` (sent
by the instance itself, since nobody leads while Valkey is away), each against a relay the test cuts
and restores, and a real receiver process.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness import create_room, join, start_server, valkey_services, wait_until
from receiver import Receiver
from relay import relayed
from test_alerts import FIELDS, alert_env

pytestmark = pytest.mark.stores("valkey")


def fleet_pages(receiver: Receiver, event: str) -> list[dict[str, Any]]:
    return [p for p in receiver.pages() if p and p.get("event") == event]


def test_storage_failing_pages_naming_the_instance_and_resolves(receiver: Receiver) -> None:
    with relayed(valkey_services()["database"], 5432) as (relay, url):
        # the storage window is 3 x RESYNC_MS (each instance reports its storage that often): 3 s, not 15 s
        env = {
            **alert_env(receiver, ALERT_HOLD_SEC="1"),
            "DATABASE_URL": url,
            "QM_INSTANCE_ID": "web-7",
            "RESYNC_MS": "1000",
        }
        srv = start_server(env)
        try:
            with srv.admin() as admin:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            relay.cut()
            with srv.client() as c:
                wait_until(lambda: join(c, room).status_code == 503, timeout=30, what="a join refused")
            firing = wait_until(lambda: fleet_pages(receiver, "storage_failing"), timeout=30, what="storage_failing")
            page = firing[0]
            assert set(page) == FIELDS and page["status"] == "firing" and page["severity"] == "critical"
            assert page["roomId"] is None and "web-7" in page["message"]
            relay.restore()
            with srv.client() as c:
                wait_until(lambda: join(c, room).status_code == 200, timeout=60, what="joins land again")
            resolved = wait_until(
                lambda: [p for p in fleet_pages(receiver, "storage_failing") if p["status"] == "resolved"],
                timeout=60,
                what="storage_failing resolved",
            )
            assert resolved[0]["since"] == page["since"]
        finally:
            srv.stop()


@pytest.mark.single_valkey("a relay cannot cut a cluster: its client reaches the nodes directly")
def test_valkey_unreachable_is_sent_by_the_instance_itself_and_resolves(receiver: Receiver) -> None:
    with relayed(valkey_services()["valkey"], 6379) as (relay, url):
        env = {**alert_env(receiver), "VALKEY_URL": url, "VALKEY_ALERT_AFTER_MS": "1500", "QM_INSTANCE_ID": "web-9"}
        srv = start_server(env)
        try:
            relay.cut()
            firing = wait_until(
                lambda: fleet_pages(receiver, "valkey_unreachable"), timeout=30, what="valkey_unreachable"
            )
            page = firing[0]
            assert set(page) == FIELDS and page["status"] == "firing" and page["roomId"] is None
            assert page["message"].startswith("web-9: Valkey unreachable for ")
            assert page["ts"] - page["since"] >= 1500  # held for VALKEY_ALERT_AFTER_MS
            with srv.admin() as admin:
                view = admin.get("/api/admin/alerts").json()
            assert view["leader"] is False  # nobody leads while Valkey is away; the page came from this instance
            assert [f["event"] for f in view["firing"]] == ["valkey_unreachable"]
            relay.restore()
            resolved = wait_until(
                lambda: [p for p in fleet_pages(receiver, "valkey_unreachable") if p["status"] == "resolved"],
                timeout=60,
                what="valkey_unreachable resolved",
            )
            assert resolved[0]["since"] == page["since"]
            assert len([p for p in fleet_pages(receiver, "valkey_unreachable") if p["status"] == "firing"]) == 1
        finally:
            srv.stop()
