"""``GET /api/admin/health`` → ``settings``: every setting's value in effect and its source, secrets never.

The settings expected are the rows of docs/configuration.md (read as a document; the test-only table
left out), and ``qm config --json`` run with the server's own environment must list the same.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import Server, server_command

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"name", "value", "source", "sensitive", "set", "group"}


def _documented_settings() -> list[str]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", text.split("## Test-only variables")[0], re.M)


def _settings(server: Server) -> tuple[list[dict[str, Any]], str]:
    with server.admin() as admin:
        r = admin.get("/api/admin/health")
    assert r.status_code == 200, r.text
    listing: list[dict[str, Any]] = r.json()["settings"]
    return listing, r.text


def test_health_lists_every_setting_once(server: Server, store: str) -> None:
    listing, _ = _settings(server)
    names = [s["name"] for s in listing]
    assert len(names) == len(set(names))
    assert set(names) == set(_documented_settings())
    assert all(set(s) == FIELDS for s in listing), listing
    by_name = {s["name"]: s for s in listing}
    assert by_name["PORT"] == {
        "name": "PORT",
        "value": server.port,
        "source": "environment",
        "sensitive": False,
        "set": True,
        "group": "Core and storage",
    }
    assert by_name["STORE"]["value"] == store
    assert by_name["JOIN_LIMIT_PER_MIN"]["value"] == 0  # the harness turns the limits off
    assert (by_name["PROTECTION_MODE"]["value"], by_name["PROTECTION_MODE"]["source"]) == ("monitor", "default")


def test_health_never_shows_a_secret(make_server: Any) -> None:
    token = secrets.token_hex(12)
    extra = {
        "PUBLIC_API_KEY": f"public-{token}",
        "SECRET_PREVIOUS": f"previous-{token}-" + "p" * 32,
        "ALERT_WEBHOOK_URL": f"http://127.0.0.1:9/hook-{token}",
        "ALERT_ALLOW_PRIVATE": "1",
        "SMTP_URL": f"smtp://user:pw-{token}@127.0.0.1:9",
    }
    srv = make_server(extra)
    listing, text = _settings(srv)
    assert token not in text
    for value in (srv.admin_key, srv.secret, srv.env.get("VALKEY_URL"), srv.env.get("DATABASE_URL")):
        assert not value or value not in text
    by_name = {s["name"]: s for s in listing}
    for name in ("ADMIN_KEY", "SECRET", *[n for n in extra if n != "ALERT_ALLOW_PRIVATE"]):
        assert by_name[name] == {
            "name": name,
            "value": None,
            "source": "environment",
            "sensitive": True,
            "set": True,
            "group": by_name[name]["group"],
        }
    assert (by_name["EDGE_SECRET"]["set"], by_name["EDGE_SECRET"]["value"]) == (False, None)


@pytest.mark.skipif(bool(os.environ.get("QM_SERVER_CMD", "").strip()), reason="qm config is this repository's")
def test_qm_config_lists_what_health_lists(server: Server) -> None:
    listing, _ = _settings(server)
    done = subprocess.run(
        [*server_command(), "config", "--json"], env=server.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    configured = json.loads(done.stdout)["settings"]
    random_id = [s for s in listing if s["name"] == "QM_INSTANCE_ID" and s["source"] == "derived"]
    if random_id:  # a new random id on each start: only its source can agree
        for entries in (listing, configured):
            next(s for s in entries if s["name"] == "QM_INSTANCE_ID")["value"] = None
    assert configured == listing
