"""Turn e-mails (EMAIL_NOTIFY): a visitor's address, one e-mail through a real SMTP server when their turn
comes, and the address gone when the ticket ends. The SMTP server is aiosmtpd (mailsink.py).

On the valkey store the address is also looked for where it must and must not be: its Valkey key (gone
when the ticket ends) and every PostgreSQL table of the server's schema (never there).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import (
    Server,
    create_room,
    fleet_keys,
    free_port,
    join,
    metric,
    status,
    sync_valkey,
    wait_for_state,
    wait_until,
)
from mailsink import MailSink

ServerFactory = Callable[..., Server]

FROM = "Shop queue <queue@shop.example>"
PROXY = {"X-Forwarded-Host": "queue.shop.example", "X-Forwarded-Proto": "https"}
PAGE = "https://shop.example/page"


@pytest.fixture(scope="module")
def sink() -> Iterator[MailSink]:
    with MailSink() as s:
        yield s


@pytest.fixture(scope="module")
def mailer(make_module_server: ServerFactory, sink: MailSink) -> Server:
    return make_module_server(
        {
            "EMAIL_NOTIFY": "1",
            "SMTP_URL": sink.url,
            "SMTP_FROM": FROM,
            "TRUST_PROXY": "1",
            "TRUST_PROXY_IPS": "127.0.0.1",
            "LAPSED_TTL_MS": "3000",
            "PROXY_ALLOW_PRIVATE": "1",  # the inline room's app address (never reached: /__qm/ is the queue's)
        }
    )


@pytest.fixture(scope="module")
def mail_admin(mailer: Server) -> Iterator[httpx.Client]:
    with mailer.admin() as client:
        yield client


def sign_up(client: httpx.Client, room_id: str, email: str, **extra: Any) -> httpx.Response:
    return client.post("/api/notify", json={"roomId": room_id, "email": email, **extra})


def kept(client: httpx.Client, room_id: str, token: str | None = None) -> dict[str, Any]:
    params = {"roomId": room_id} if token is None else {"roomId": room_id, "token": token}
    r = client.get("/api/notify", params=params)
    assert r.status_code == 200, r.text
    payload: dict[str, Any] = r.json()
    return payload


def valkey_client(srv: Server) -> Any:
    if srv.env.get("STORE") != "valkey":
        return None
    return sync_valkey(srv.env["VALKEY_URL"], decode_responses=True)


def mail_keys(srv: Server) -> list[str]:
    """Every turn-e-mail key the server holds in Valkey (empty on the memory store)."""
    client = valkey_client(srv)
    if client is None:
        return []
    with client:
        return sorted(client.scan_iter(match=f"{fleet_keys(srv.env)}mail:*", count=1000))


def postgres_dump(srv: Server) -> str:
    """Every row of every table of the server's own schema, as text."""
    done = subprocess.run(
        ["pg_dump", "--data-only", f"--schema={srv.env['PG_SCHEMA']}", srv.env["DATABASE_URL"]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def open_outflow(admin: httpx.Client, room_id: str, rate: int = 600) -> None:
    r = admin.post(f"/api/admin/rooms/{room_id}/rate", json={"ratePerMinute": rate})
    assert r.status_code == 200, r.text


def health(srv: Server) -> dict[str, Any]:
    with srv.admin() as a:
        r = a.get("/api/admin/health")
        assert r.status_code == 200, r.text
        block: dict[str, Any] = r.json()["turnEmails"]
        return block


# --------------------------------------------------------------------------- the turn e-mail


def test_one_email_in_the_visitors_language_with_the_link_back(
    mailer: Server, mail_admin: httpx.Client, sink: MailSink
) -> None:
    rid = create_room(mail_admin, ratePerMinute=0, name="Sneaker drop")["id"]
    address = f"wartet-{rid}@example.com"
    with mailer.client() as first, mailer.client(headers=PROXY) as second:
        join(first, rid)
        mine = join(second, rid).json()  # behind an https proxy the cookie is Secure: the token travels
        assert mine["position"] == 2
        token = mine["token"]
        r = sign_up(second, rid, address, lang="th", token=token)
        assert r.status_code == 200, r.text
        assert r.json()["signedUp"] is True
        assert r.json()["address"] == "w•••@example.com"
        assert kept(second, rid, token)["sent"] is False
        assert kept(first, rid)["signedUp"] is False
        if mailer.env.get("STORE") == "valkey":
            assert len(mail_keys(mailer)) >= 1

        open_outflow(mail_admin, rid)
        [mail] = sink.wait_for(address)
        assert mail.recipients == [address]
        assert mail.sender == "queue@shop.example"
        assert mail.message["From"] == FROM
        assert mail.message["Content-Language"] == "th"
        assert "ถึงคิวของคุณแล้ว" in mail.message["Subject"] and "Sneaker drop" in mail.message["Subject"]
        assert "ถึงคิวของคุณแล้วในห้องรอคิว" in mail.text
        assert f"https://queue.shop.example/w/{rid}" in mail.text  # absolute, from the proxy's host
        assert "นาที" in mail.text or "วินาที" in mail.text  # how long the place is held
        passed = wait_for_state(second, rid, token, ("passed",), timeout=10)
        assert wait_until(lambda: kept(second, rid, token)["sent"], timeout=10, what="sent: true")

        time.sleep(3)  # three more scans of the leader: still the one e-mail
        assert len(sink.to(address)) == 1
        assert wait_until(lambda: health(mailer)["sent"] >= 1, timeout=10, what="turnEmails.sent")
        assert (metric(mailer, "qm_turn_emails_sent_total") or 0) >= 1

        # the visitor walks in: the ticket is used, and the address goes
        pass_token = parse_qs(urlsplit(passed["redirectUrl"]).query)["qm_token"][0]
        r = second.get("/api/check", params={"roomId": rid, "url": PAGE, "qm_token": pass_token})
        assert r.json()["admit"] is True, r.text
        wait_until(lambda: not kept(second, rid, token)["signedUp"], timeout=10, what="the address deleted")
        key = f"{fleet_keys(mailer.env)}mail:{rid}:"
        assert not [k for k in mail_keys(mailer) if k.startswith(key)]
        r = sign_up(second, rid, address, token=token)
        assert r.status_code == 409 and r.json()["code"] == "not_in_line", r.text
        assert len(sink.to(address)) == 1

    if mailer.env.get("STORE") == "valkey":
        dump = postgres_dump(mailer)
        assert rid in dump  # the journal is there: the search looked in the right place
        assert address not in dump and f"wartet-{rid}" not in dump
    assert address not in mailer.stderr and address not in mailer.stdout


def test_a_new_address_replaces_the_old_and_a_cancel_forgets_it(
    mailer: Server, mail_admin: httpx.Client, sink: MailSink
) -> None:
    rid = create_room(mail_admin, ratePerMinute=0)["id"]
    old, new, cancelled = (f"{who}-{rid}@example.com" for who in ("old", "new", "gone"))
    with mailer.client() as v, mailer.client() as w:
        token = join(v, rid).json()["token"]
        join(w, rid)
        assert sign_up(v, rid, old).status_code == 200
        r = sign_up(v, rid, new, lang="de", token=token)
        assert r.status_code == 200 and r.json()["address"] == "n•••@example.com", r.text
        assert sign_up(w, rid, cancelled).status_code == 200
        r = w.delete("/api/notify", params={"roomId": rid})
        assert r.status_code == 200 and r.json() == {**r.json(), "signedUp": False, "removed": True}, r.text
        assert kept(w, rid)["signedUp"] is False

        open_outflow(mail_admin, rid)
        [mail] = sink.wait_for(new)
        assert "Sie sind an der Reihe" in mail.message["Subject"]
        assert f"/w/{rid}" in mail.text
        wait_for_state(w, rid, None, ("passed",), timeout=10)
        time.sleep(2)  # two more scans: the replaced and the cancelled address get nothing
        assert sink.to(old) == [] and sink.to(cancelled) == []


def test_the_address_goes_when_the_line_is_purged_or_the_room_deleted(mailer: Server, mail_admin: httpx.Client) -> None:
    purged = create_room(mail_admin, ratePerMinute=0)["id"]
    deleted = create_room(mail_admin, ratePerMinute=0)["id"]
    with mailer.client() as a, mailer.client() as b:
        join(a, purged)
        join(b, deleted)
        assert sign_up(a, purged, f"p-{purged}@example.com").status_code == 200
        assert sign_up(b, deleted, f"d-{deleted}@example.com").status_code == 200
        assert kept(a, purged)["signedUp"] and kept(b, deleted)["signedUp"]
        assert mail_admin.post(f"/api/admin/rooms/{purged}/purge").status_code == 200
        assert mail_admin.delete(f"/api/admin/rooms/{deleted}").status_code in (200, 204)
        wait_until(lambda: not kept(a, purged)["signedUp"], timeout=10, what="purged: the address deleted")
        prefix = fleet_keys(mailer.env)
        wait_until(
            lambda: not [k for k in mail_keys(mailer) if k.startswith(f"{prefix}mail:{deleted}:")],
            timeout=10,
            what="deleted room: its key gone",
        )
        create_room(mail_admin, deleted, ratePerMinute=0)  # the same id again: a new generation
        assert kept(b, deleted)["signedUp"] is False


def test_a_lapsed_pass_keeps_the_address_lapsed_ttl_then_drops_it(
    mailer: Server, mail_admin: httpx.Client, sink: MailSink
) -> None:
    rid = create_room(mail_admin, ratePerMinute=0, passedTtlSec=10)["id"]
    address = f"late-{rid}@example.com"
    with mailer.client() as v:
        join(v, rid)
        assert sign_up(v, rid, address, lang="es").status_code == 200
        open_outflow(mail_admin, rid)
        [mail] = sink.wait_for(address)
        assert "Es su turno" in mail.message["Subject"]
        assert "segundos" in mail.text  # a 10 s window is told in seconds
        key = f"{fleet_keys(mailer.env)}mail:{rid}:"
        client = valkey_client(mailer)
        if client is not None:  # the pass lapses unused: the key now lives LAPSED_TTL_MS (3 s) at most
            with client:

                def lapsed_ttl() -> int | None:
                    ttls = [client.pttl(k) for k in client.scan_iter(match=key + "*")]
                    return ttls[0] if ttls and 0 < ttls[0] <= 3000 else None

                assert wait_until(lapsed_ttl, timeout=15, interval=0.05, what="the lapsed TTL")
        wait_until(lambda: not kept(v, rid)["signedUp"], timeout=18, what="gone after LAPSED_TTL_MS")
        assert not [k for k in mail_keys(mailer) if k.startswith(key)]
        assert len(sink.to(address)) == 1


def test_signed_up_on_an_inline_host_the_link_is_the_site(
    mailer: Server, mail_admin: httpx.Client, sink: MailSink
) -> None:
    """On an inline host the site's own pages are the waiting page, and /w/ is the app's: the link is targetUrl."""
    rid = create_room(mail_admin, ratePerMinute=0)["id"]
    host = f"shop-{rid}.test"
    r = mail_admin.post(
        "/api/admin/rooms", json={"id": rid, "targetUrl": f"https://{host}/", "proxyOrigin": "http://127.0.0.1:9"}
    )
    assert r.status_code == 200, r.text
    address = f"inline-{rid}@example.com"
    with mailer.client(headers={"Host": host}) as v:
        r = v.post("/__qm/api/join", json={"roomId": rid})
        assert r.status_code == 200, r.text
        r = v.post("/__qm/api/notify", json={"roomId": rid, "email": address, "token": r.json()["token"]})
        assert r.status_code == 200, r.text
    open_outflow(mail_admin, rid)
    [mail] = sink.wait_for(address)
    assert f"https://{host}/" in mail.text and "/w/" not in mail.text


def test_the_waiting_page_offers_the_form(mailer: Server, mail_admin: httpx.Client) -> None:
    rid = create_room(mail_admin)["id"]
    with mailer.client() as v:
        page = v.get(f"/w/{rid}", headers={"Accept-Language": "ja"}).text
    assert '"email":true' in page
    assert 'type="email"' in page and 'for="mail-address"' in page and 'aria-live="polite"' in page
    assert "順番が来たらメールで知らせる" in page


# --------------------------------------------------------------------------- refusals


def test_bad_input_and_no_place_in_line(mailer: Server, mail_admin: httpx.Client) -> None:
    rid = create_room(mail_admin, ratePerMinute=0)["id"]
    with mailer.client() as v:
        for bad in ("nobody", "a@b", "two@@example.com", "a b@example.com", "x@example.com\r\nBcc: y@z.example", 7):
            join(v, rid)
            r = sign_up(v, rid, bad)  # type: ignore[arg-type]
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["code"] == "invalid_email" and r.json()["field"] == "email"
        r = v.post("/api/notify", json={"roomId": rid})
        assert r.status_code == 400 and r.json()["code"] == "invalid_email"
        r = sign_up(v, "no-such-room", "a@example.com")
        assert r.status_code == 404 and r.json()["code"] == "no_room"
    with mailer.client() as stranger:  # no ticket at all
        r = sign_up(stranger, rid, "a@example.com")
        assert r.status_code == 409 and r.json()["code"] == "not_in_line", r.text
        assert kept(stranger, rid)["signedUp"] is False


def test_sign_ups_are_rationed_per_address(make_server: ServerFactory, sink: MailSink) -> None:
    srv = make_server({"EMAIL_NOTIFY": "1", "SMTP_URL": sink.url, "SMTP_FROM": FROM, "NOTIFY_LIMIT_PER_MIN": "2"})
    with srv.admin() as admin:
        rid = create_room(admin, ratePerMinute=0)["id"]
    with srv.client() as v:
        join(v, rid)
        assert sign_up(v, rid, "one@example.com").status_code == 200
        assert sign_up(v, rid, "two@example.com").status_code == 200
        r = sign_up(v, rid, "three@example.com")
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "rate_limited"
        assert int(r.headers["Retry-After"]) >= 1
        assert kept(v, rid)["address"] == "t•••@example.com"  # the second one stands


def test_off_the_route_is_refused_and_the_page_has_no_form(make_server: ServerFactory) -> None:
    off = make_server({"EMAIL_NOTIFY": "0"})
    half = make_server({"EMAIL_NOTIFY": "1"})  # no SMTP_URL: nothing could be sent
    for srv in (off, half):
        with srv.admin() as admin:
            rid = create_room(admin)["id"]
        with srv.client() as v:
            join(v, rid)
            r = sign_up(v, rid, "a@example.com")
            assert r.status_code == 404 and r.json()["code"] == "email_notify_off", r.text
            assert v.get("/api/notify", params={"roomId": rid}).json()["code"] == "email_notify_off"
            assert '"email":false' in v.get(f"/w/{rid}").text
        block = health(srv)
        assert block["offered"] is False
    assert "problem" in health(half)
    with half.admin() as admin:
        warnings = admin.get("/api/admin/health").json()["warnings"]
    assert any(w["variable"] == "EMAIL_NOTIFY" and "SMTP_URL" in w["message"] for w in warnings)


def test_starttls_with_a_private_ca_and_a_password(make_server: ServerFactory, tmp_path: Path) -> None:
    """smtp:// is STARTTLS, checked against SMTP_CA_FILE, then AUTH with the URL's user and password."""
    with MailSink(tls_dir=tmp_path, login=("queue@shop.example", "p@ss:word")) as tls_sink:
        assert tls_sink.ca_file is not None
        srv = make_server(
            {
                "EMAIL_NOTIFY": "1",
                "SMTP_URL": tls_sink.url,
                "SMTP_CA_FILE": str(tls_sink.ca_file),
                "SMTP_FROM": "queue@shop.example",
                "PUBLIC_URL": "https://queue.shop.example",
            }
        )
        with srv.admin() as admin:
            rid = create_room(admin, ratePerMinute=0)["id"]
            with srv.client() as v:
                join(v, rid)
                assert sign_up(v, rid, "secure@example.com", lang="ja").status_code == 200
                open_outflow(admin, rid)
                [mail] = tls_sink.wait_for("secure@example.com")
        assert mail.tls and mail.login == "queue@shop.example"
        assert f"https://queue.shop.example/w/{rid}" in mail.text and "順番が来ました" in mail.message["Subject"]
        block = health(srv)
        assert block["smtp"] == f"starttls 127.0.0.1:{tls_sink.port} with AUTH"
        assert "p@ss" not in str(block) and "p%40ss" not in srv.stderr


def test_an_unreachable_smtp_server_is_retried_then_given_up(make_server: ServerFactory) -> None:
    srv = make_server(
        {"EMAIL_NOTIFY": "1", "SMTP_URL": f"smtp+plain://127.0.0.1:{free_port()}", "SMTP_FROM": "q@shop.example"}
    )
    with srv.admin() as admin:
        rid = create_room(admin, ratePerMinute=0)["id"]
        with srv.client() as v:
            join(v, rid)
            assert sign_up(v, rid, "never@example.com").status_code == 200
            open_outflow(admin, rid)
            wait_for_state(v, rid, None, ("passed",), timeout=10)
    block = wait_until(lambda: (h := health(srv))["failed"] >= 1 and h, timeout=18, what="turnEmails.failed")
    assert block["sent"] == 0 and block["retried"] == 2
    assert (metric(srv, "qm_turn_emails_failed_total") or 0) == 1
    assert "never@example.com" not in srv.stderr


def test_status_still_reads_while_signed_up(mailer: Server, mail_admin: httpx.Client) -> None:
    """Signing up changes nothing about the place: same ticket, same position."""
    rid = create_room(mail_admin, ratePerMinute=0)["id"]
    with mailer.client() as v:
        before = join(v, rid).json()
        assert sign_up(v, rid, f"s-{rid}@example.com").status_code == 200
        after = status(v, rid)
        assert (after["ticket"], after["position"], after["state"]) == (before["ticket"], 1, "waiting")
