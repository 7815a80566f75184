"""``qm export`` and ``qm apply`` against real servers: a server's rooms written as one document, applied
to a fresh server and read back the same; the plan, its exit codes, pruning, a bad field refused before
anything is sent, the audit trail naming the key's operator, and a key that may not write."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml
from harness import Server, create_room

ROOT = Path(__file__).resolve().parents[2]
LOGO = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    b'<rect width="10" height="10" fill="#0b5394"/></svg>'
)


MESSAGE = {"en": "Hi", "th": "สวัสดี"}


def qm(server: Server, key: str, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it in CI: the server and key from the environment, no terminal."""
    env = {"PATH": "/usr/bin:/bin", "QM_URL": server.base_url, "QM_ADMIN_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "queue_manager", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        input=stdin or "",
        check=False,
    )


def qm_on_a_terminal(server: Server, key: str, answer: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command run by a person: standard input is a terminal, and ``answer`` is typed at the question."""
    env = {"PATH": "/usr/bin:/bin", "QM_URL": server.base_url, "QM_ADMIN_KEY": key}
    main, sub = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "queue_manager", *argv],
            stdin=sub,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        os.write(main, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(sub)
        os.close(main)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def operator_key(admin: httpx.Client, role: str, name: str) -> tuple[str, str]:
    r = admin.post("/api/admin/operators", json={"name": name, "role": role})
    assert r.status_code == 201, r.text
    return r.json()["operator"]["id"], r.json()["key"]


def rich_rooms(admin: httpx.Client) -> None:
    """Rooms with every kind of setting: lists, objects, instants, a brand with a logo, events and rules."""
    create_room(
        admin,
        "shop",
        name="The shop",
        ratePerMinute=120,
        maxConcurrent=50,
        opensAt="2030-01-01T09:00:00+07:00",
        returnOrigins=["https://shop.example", "https://*.shop.example"],
        tagOrigins=["https://shop.example"],
        rules=[{"pattern": "/sale/*", "action": "queue"}],
        protection={"mode": "monitor"},
        autotune={"enabled": True, "minRate": 10, "maxRate": 600},
        brand={
            "displayName": "Shop",
            "background": "#ffffff",
            "accent": "#0b5394",
            "message": {"en": "Hi", "th": "สวัสดี"},
        },
        events=[
            {"id": "flash", "startsAt": "2030-02-01T10:00:00Z", "endsAt": "2030-02-01T12:00:00Z", "ratePerMinute": 500}
        ],
    )
    r = admin.post("/api/admin/rooms/shop/logo", content=LOGO, headers={"Content-Type": "image/svg+xml"})
    assert r.status_code == 200, r.text
    create_room(admin, "blog", rate=30, queueing="random")


def rooms_by_id(admin: httpx.Client) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in admin.get("/api/admin/rooms").json()["rooms"]}


def test_export_applied_to_a_fresh_server_exports_the_same(make_server: Any, tmp_path: Path) -> None:
    first, second = make_server(), make_server()
    with first.admin() as admin:
        rich_rooms(admin)
    done = qm(first, first.admin_key, "export", "-o", str(tmp_path / "rooms.yaml"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "rooms.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["version"] == 1 and [r["id"] for r in doc["rooms"]] == ["blog", "shop"]
    shop = doc["rooms"][1]
    assert next(iter(shop)) == "id" and list(shop)[1:] == sorted(list(shop)[1:])
    assert "waiting" not in shop and "generation" not in shop and "rate" not in shop and "eventInForce" not in shop
    assert "matchCount" not in shop["rules"][0] and shop["rules"][0]["pattern"] == "/sale/*"
    assert "logo" not in shop["brand"] and shop["brand"]["message"]["th"] == "สวัสดี"
    assert shop["opensAt"] == "2030-01-01T02:00:00.000Z" and shop["events"][0]["id"] == "flash"

    applied = qm(second, second.admin_key, "apply", str(tmp_path / "rooms.yaml"), "--yes")
    assert applied.returncode == 0, applied.stderr
    assert "+ room blog" in applied.stdout and "+ room shop" in applied.stdout
    again = qm(second, second.admin_key, "export")
    assert again.returncode == 0, again.stderr
    assert again.stdout == text
    # applying the same file twice changes nothing: the second plan is empty
    twice = qm(second, second.admin_key, "apply", str(tmp_path / "rooms.yaml"), "--dry-run")
    assert twice.returncode == 0, twice.stdout + twice.stderr
    assert "No changes" in twice.stdout

    # the logo travels only when asked, as its bytes; the copy holds the same file
    with_logos = qm(first, first.admin_key, "export", "--logos", "--format", "json")
    assert with_logos.returncode == 0, with_logos.stderr
    logo = json.loads(with_logos.stdout)["rooms"][1]["brand"]["logo"]
    assert logo["type"] == "image/svg+xml" and set(logo) == {"type", "data"}
    (tmp_path / "logos.json").write_text(with_logos.stdout)
    plan = qm(second, second.admin_key, "apply", str(tmp_path / "logos.json"), "--dry-run")
    assert plan.returncode == 2 and "~ brand.logo: null → " in plan.stdout, plan.stdout
    assert qm(second, second.admin_key, "apply", str(tmp_path / "logos.json"), "--yes").returncode == 0
    with first.admin() as a, second.admin() as b:
        held = rooms_by_id(a)["shop"]["brand"]["logo"]
        assert rooms_by_id(b)["shop"]["brand"]["logo"] == held
        assert held["sha256"] == hashlib.sha256(base64.b64decode(logo["data"])).hexdigest()
    assert qm(second, second.admin_key, "apply", str(tmp_path / "logos.json"), "--dry-run").returncode == 0


def test_a_change_is_planned_applied_as_the_operator_and_pruned_by_the_owner(make_server: Any, tmp_path: Path) -> None:
    srv = make_server()
    with srv.admin() as admin:
        create_room(admin, "alpha", ratePerMinute=60)
        create_room(admin, "beta")
        operator_id, key = operator_key(admin, "operator", "Deploy bot")
    exported = qm(srv, key, "export")
    assert exported.returncode == 0, exported.stderr
    doc = yaml.safe_load(exported.stdout)
    doc["rooms"][0]["ratePerMinute"] = 90
    doc["rooms"] = [r for r in doc["rooms"] if r["id"] != "beta"]
    # a snippet room as export writes it (proxyOrigin null) is the operator's to create
    doc["rooms"].append({**doc["rooms"][0], "id": "gamma", "ratePerMinute": 30})
    path = tmp_path / "rooms.yaml"
    path.write_text(yaml.safe_dump(doc))

    dry = qm(srv, key, "apply", str(path), "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "~ room alpha" in dry.stdout and "ratePerMinute: 60 → 90" in dry.stdout
    assert "+ room gamma" in dry.stdout and "+ ratePerMinute: 30" in dry.stdout
    assert "beta" not in dry.stdout  # not named, not touched without --prune
    no_tty = qm(srv, key, "apply", str(path))
    assert no_tty.returncode == 1 and "--yes" in no_tty.stderr
    declined = qm_on_a_terminal(srv, key, "n", "apply", str(path))
    assert declined.returncode == 1 and "Apply these changes? [y/N]" in declined.stdout, declined.stdout
    assert "not applied" in declined.stderr
    with srv.admin() as admin:
        assert rooms_by_id(admin)["alpha"]["ratePerMinute"] == 60  # neither wrote anything

    done = qm_on_a_terminal(srv, key, "y", "apply", str(path))
    assert done.returncode == 0, done.stderr
    assert "updated alpha (ratePerMinute)" in done.stdout and "created gamma" in done.stdout, done.stdout
    with srv.admin() as admin:
        rooms = rooms_by_id(admin)
        assert rooms["alpha"]["ratePerMinute"] == 90 and "beta" in rooms
        assert rooms["gamma"]["ratePerMinute"] == 30 and rooms["gamma"]["proxyOrigin"] is None
        audit = admin.get("/api/admin/audit", params={"roomId": "alpha"}).json()["audit"]
    update = next(a for a in audit if a["action"] == "room.update")
    assert update["actorId"] == operator_id and update["role"] == "operator"
    assert update["detail"]["fields"] == ["ratePerMinute"]

    pruned = qm(srv, key, "apply", str(path), "--prune", "--dry-run")
    assert pruned.returncode == 2 and "- room beta" in pruned.stdout, pruned.stdout
    refused = qm(srv, key, "apply", str(path), "--prune", "--yes")  # deleting a room is the owner's
    assert refused.returncode == 1 and "owner" in refused.stderr and "delete beta" in refused.stderr
    with srv.admin() as admin:
        assert "beta" in rooms_by_id(admin)
    owner = qm(srv, srv.admin_key, "apply", str(path), "--prune", "--yes")
    assert owner.returncode == 0, owner.stderr
    with srv.admin() as admin:
        assert admin.get("/api/admin/rooms/beta").status_code == 404
    assert qm(srv, key, "apply", str(path), "--prune", "--dry-run").returncode == 0


def test_a_bad_field_is_refused_by_room_and_field_before_anything_is_sent(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "rooms.json"
    good = {"id": "ascode-good", "targetUrl": "https://good.example/"}
    bad = {"id": "ascode-bad", "targetUrl": "https://bad.example/", "ratePerMinute": -5}
    path.write_text(json.dumps({"version": 1, "rooms": [good, bad]}))
    done = qm(server, server.admin_key, "apply", str(path), "--yes")
    assert done.returncode == 1
    assert "room 'ascode-bad', field ratePerMinute: invalid_rate" in done.stderr, done.stderr
    assert "Nothing was changed" in done.stderr
    with server.admin() as admin:
        assert admin.get("/api/admin/rooms/ascode-good").status_code == 404

    path.write_text(json.dumps({"version": 1, "rooms": [{**good, "colour": "red"}]}))
    unknown = qm(server, server.admin_key, "apply", str(path), "--dry-run")
    assert unknown.returncode == 1 and "field colour: unknown_field" in unknown.stderr, unknown.stderr
    path.write_text("rooms: [")
    broken = qm(server, server.admin_key, "apply", str(path), "--dry-run")
    assert broken.returncode == 1 and "not valid JSON" in broken.stderr


def test_a_key_without_the_write_grant_plans_but_is_refused(server: Server, tmp_path: Path) -> None:
    with server.admin() as admin:
        _, key = operator_key(admin, "viewer", "Reviewer")
    path = tmp_path / "rooms.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "rooms": [{"id": "ascode-viewer", "targetUrl": "https://v.example/"}]})
    )
    dry = qm(server, key, "apply", str(path), "--dry-run")  # a pull request's check needs only reading
    assert dry.returncode == 2 and "+ room ascode-viewer" in dry.stdout, dry.stdout + dry.stderr
    done = qm(server, key, "apply", str(path), "--yes")
    assert done.returncode == 1
    assert "403 insufficient_role" in done.stderr and "ascode-viewer" in done.stderr, done.stderr
    with server.admin() as admin:
        assert admin.get("/api/admin/rooms/ascode-viewer").status_code == 404


def test_access_rules_are_exported_without_counters_or_secrets_and_applied_back(
    make_server: Any, tmp_path: Path
) -> None:
    """A room's access rules travel in the file without their counters and with the header's value withheld:
    applied back to the same server the file is no change and the secret stays; on a server that does not
    hold the secret the plan refuses the rule before anything is sent, naming it."""
    secret = "ascode-probe-" + "4" * 12
    first, second = make_server(), make_server()
    rules = [
        {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": secret}}},
        {"id": "geo", "action": "block", "match": {"countries": ["DE"]}},
    ]
    with first.admin() as admin:
        create_room(admin, "guarded", accessRules=rules)
    done = qm(first, first.admin_key, "export", "-o", str(tmp_path / "rooms.yaml"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "rooms.yaml").read_text()
    assert secret not in text and "matchCount" not in text
    (room,) = yaml.safe_load(text)["rooms"]
    assert room["accessRules"][0]["match"]["header"] == {"name": "x-probe", "set": True}
    same = qm(first, first.admin_key, "apply", str(tmp_path / "rooms.yaml"), "--dry-run")
    assert same.returncode == 0 and "No changes" in same.stdout, same.stdout + same.stderr
    r = httpx.get(f"{first.base_url}/api/check", params={"roomId": "guarded"}, headers={"X-Probe": secret})
    assert r.json()["accessRule"] == "probe"
    fresh = qm(second, second.admin_key, "apply", str(tmp_path / "rooms.yaml"), "--yes")
    assert fresh.returncode != 0 and "no value to keep" in fresh.stdout + fresh.stderr
    with second.admin() as admin:
        assert "guarded" not in rooms_by_id(admin)
