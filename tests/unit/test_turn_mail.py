"""Turn e-mails in-process: the address check, SMTP_URL, the settings' rules, the letter, and the leader's
judgement of each signed-up ticket (a memory store on a fake clock, a sender that records)."""

from __future__ import annotations

from email.message import EmailMessage
from typing import Any, cast

import pytest

from queue_manager.assembly.build import memory_parts
from queue_manager.clock import FakeClock, SystemClock
from queue_manager.config import load_settings
from queue_manager.context import Context
from queue_manager.engine.model import ClientId
from queue_manager.engine.visitor import Presented
from queue_manager.http.wire import HttpError
from queue_manager.jobs import smtp, turn_letter
from queue_manager.jobs.shared_state import Solo
from queue_manager.jobs.turn_mail import TurnMail
from queue_manager.routes.visitor.notify import check_address, masked
from queue_manager.sidestores.mailbook.base import Entry, Place
from queue_manager.sidestores.mailbook.memory import MemoryAddressBook
from queue_manager.store.memory import MemoryStore

GOOD = {"ADMIN_KEY": "k" * 40, "SECRET": "s" * 48, "PUBLIC_API_KEY": "p" * 40}
MAIL = {"EMAIL_NOTIFY": "1", "SMTP_URL": "smtp+plain://127.0.0.1:2525", "SMTP_FROM": "queue@shop.example"}


# --------------------------------------------------------------------------- the address


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("visitor@example.com", "visitor@example.com"),
        ("  Visitor.Name+drop@Example.COM ", "Visitor.Name+drop@example.com"),
        ("v@bücher.example", "v@xn--bcher-kva.example"),
        ("o'brien@shop.co.uk", "o'brien@shop.co.uk"),
    ],
)
def test_plain_addresses_are_kept(given: str, kept: str) -> None:
    assert check_address(given) == kept


@pytest.mark.parametrize(
    "bad",
    [
        None,
        7,
        "",
        "nobody",
        "a@b",
        "a@b.123",
        "two@@example.com",
        "a b@example.com",
        ".a@example.com",
        "a..b@example.com",
        "a@-x.example",
        "x@example.com\r\nBcc: y@z.example",
        "Name <a@example.com>",
        "ü@example.com",
        "a" * 65 + "@example.com",
        "a@" + "b" * 250 + ".com",
    ],
)
def test_anything_else_is_invalid_email_on_the_email_field(bad: Any) -> None:
    with pytest.raises(HttpError) as caught:
        check_address(bad)
    assert (caught.value.status, caught.value.code, caught.value.extra) == (400, "invalid_email", {"field": "email"})


def test_the_address_is_shown_back_masked() -> None:
    assert masked("visitor@example.com") == "v•••@example.com"


# --------------------------------------------------------------------------- SMTP_URL and the rules


def test_the_three_schemes_and_their_ports() -> None:
    assert smtp.parse("smtp://u%40x:p%3Aw@mail.example") == smtp.SmtpServer(
        "mail.example", 587, "starttls", "u@x", "p:w"
    )
    assert smtp.parse("smtps://mail.example") == smtp.SmtpServer("mail.example", 465, "tls")
    assert smtp.parse("smtp+plain://127.0.0.1:2525") == smtp.SmtpServer("127.0.0.1", 2525, "none")
    assert "p:w" not in smtp.parse("smtp://u:p%3Aw@mail.example").describe()


@pytest.mark.parametrize(
    "bad", ["http://mail.example", "smtp://", "smtp://mail.example/path", "smtp://mail.example?x=1", "smtp://h:99999"]
)
def test_a_bad_smtp_url_warns_without_its_value_and_nothing_is_offered(bad: str) -> None:
    s = load_settings({**GOOD, **MAIL, "PUBLIC_URL": "https://q.example", "SMTP_URL": bad + "#secret-pw"})
    assert s.smtp_url is None and not s.turn_emails
    smtp_warnings = [w for w in s.warnings if w.variable == "SMTP_URL"]
    assert smtp_warnings and all("secret-pw" not in (w.message + str(w.set_value)) for w in s.warnings)
    assert any(w.variable == "EMAIL_NOTIFY" and "SMTP_URL" in w.message for w in s.warnings)


def test_email_notify_needs_smtp_and_a_from_address() -> None:
    s = load_settings({**GOOD, "EMAIL_NOTIFY": "1"})
    assert s.email_notify and not s.turn_emails
    [w] = [w for w in s.warnings if w.variable == "EMAIL_NOTIFY"]
    assert "SMTP_URL and SMTP_FROM" in w.message and "404" in w.message

    s = load_settings({**GOOD, **MAIL, "SMTP_FROM": "not an address", "PUBLIC_URL": "https://q.example"})
    assert s.smtp_from is None and not s.turn_emails
    assert {w.variable for w in s.warnings} == {"SMTP_FROM", "EMAIL_NOTIFY"}

    s = load_settings({**GOOD, **MAIL, "SMTP_FROM": "Shop queue <queue@shop.example>"})
    assert s.turn_emails
    assert [w.variable for w in s.warnings] == ["PUBLIC_URL"]  # the link would name the visitor's Host

    s = load_settings({**GOOD, **MAIL, "PUBLIC_URL": "https://q.example"})
    assert s.turn_emails and s.warnings == ()


# --------------------------------------------------------------------------- the letter


@pytest.mark.parametrize(
    ("lang", "subject", "held"),
    [
        ("en", "It’s your turn: Drop", "9 minutes"),
        ("th", "ถึงคิวของคุณแล้ว: Drop", "9 นาที"),
        ("es", "Es su turno: Drop", "9 minutos"),
        ("ja", "順番が来ました: Drop", "9分間"),
        ("de", "Sie sind an der Reihe: Drop", "9 Minuten"),
        ("fr", "C’est votre tour : Drop", "9 minutes"),
        ("zh-Hant", "輪到您了：Drop", "9 分鐘"),
        ("ko", "차례가 되었습니다: Drop", "9분"),
        ("ar", "حان دورك: Drop", "9 د"),
    ],
)
def test_the_letter_in_each_language(lang: str, subject: str, held: str) -> None:
    m = turn_letter.compose(
        sender="Shop <q@shop.example>",
        to="v@example.com",
        lang=lang,
        room_name="Drop",
        link="https://queue.example/w/drop-1",
        held_sec=599.5,
    )
    assert (m["Subject"], m["To"], m["From"], m["Content-Language"]) == (
        subject,
        "v@example.com",
        "Shop <q@shop.example>",
        lang,
    )
    text = m.get_content()
    assert "https://queue.example/w/drop-1\n" in text and held in text


def test_short_windows_are_told_in_seconds_and_names_stay_on_one_line() -> None:
    m = turn_letter.compose(
        sender="q@shop.example",
        to="v@example.com",
        lang="xx",
        room_name="A\r\nBcc: x",
        link="http://h/w/r",
        held_sec=42.9,
    )
    assert m["Content-Language"] == "en" and m["Subject"] == "It’s your turn: A Bcc: x"
    assert "42 seconds" in m.get_content()


@pytest.mark.parametrize("lang", ["ar", "he"])
def test_a_right_to_left_letter_opens_each_paragraph_right_to_left(lang: str) -> None:
    m = turn_letter.compose(
        sender="q@shop.example", to="v@example.com", lang=lang, room_name="Drop", link="http://h/w/r", held_sec=300
    )
    paragraphs = [p.removeprefix("-- \n") for p in m.get_content().strip().split("\n\n")]
    assert len(paragraphs) == 4 and all(p.startswith("\u200f") for p in paragraphs), paragraphs
    left = turn_letter.compose(
        sender="q@shop.example", to="v@example.com", lang="fr", room_name="Drop", link="http://h/w/r", held_sec=300
    )
    assert "\u200f" not in left.get_content()


# --------------------------------------------------------------------------- the leader's judgement


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore(self.clock)
        settings = load_settings({**GOOD, **MAIL, "PUBLIC_URL": "https://q.example", "LAPSED_TTL_MS": "5000"})
        clock = cast(SystemClock, self.clock)
        self.ctx = Context.build(settings, memory_parts(settings, clock, self.store), clock)
        self.book = MemoryAddressBook(self.clock)
        self.sent: list[EmailMessage] = []
        self.failing = False

        async def send(message: EmailMessage) -> None:
            if self.failing:
                raise ConnectionRefusedError("no SMTP server")
            self.sent.append(message)

        self.job = TurnMail(self.ctx, self.book, Solo(), sender=send)
        self.n = 0

    async def room(self, room_id: str, **fields: Any) -> None:
        await self.store.upsert_room({"id": room_id, "targetUrl": "https://shop.example", "ratePerMinute": 0, **fields})

    async def waiting(self, room_id: str, address: str, lang: str = "en") -> Place:
        self.n += 1
        client = ClientId(ident=f"10.0.0.{self.n}", fp=bytes([self.n]) * 12, fp2=None, cookie=None)
        view = await self.store.join(room_id, client, None, None)
        assert view.ticket is not None
        place = Place(room_id, view.gen, view.ticket)
        await self.book.put(
            Entry(place, address, lang, f"https://q.example/w/{room_id}", self.clock.wall_ms()), 3_600_000
        )
        return place

    async def open(self, room_id: str) -> None:
        await self.store.upsert_room({"id": room_id, "ratePerMinute": 6000})
        self.clock.advance(1.0)
        await self.store.tick()

    async def scan(self) -> None:
        await self.job.scan()
        for task in list(self.job._tasks):
            await task


async def test_a_passed_ticket_is_emailed_once_and_forgotten_when_used() -> None:
    h = Harness()
    await h.room("drop", passedTtlSec=600)
    place = await h.waiting("drop", "v@example.com", "ja")
    await h.scan()
    assert h.sent == [] and (await h.book.get(place)) is not None  # still waiting: kept, not sent

    await h.open("drop")
    await h.scan()
    await h.scan()
    [mail] = h.sent
    assert mail["To"] == "v@example.com" and mail["Content-Language"] == "ja"
    assert "https://q.example/w/drop" in mail.get_content()
    assert h.ctx.counters.turn_emails_sent == 1
    entry = await h.book.get(place)
    assert entry is not None and entry.sent
    assert await h.book.counts() == (1, 0)

    assert await h.book.claim(place) is False  # another leader finds it claimed
    await h.store.check(
        "drop",
        ClientId("10.0.0.1", bytes([1]) * 12, None, None),
        Presented(gen=place.gen, n=place.n),
        None,
        None,
        ("k", b"k" * 32),
    )
    await h.scan()
    assert await h.book.get(place) is None and len(h.sent) == 1


async def test_purge_delete_and_a_new_generation_drop_the_address() -> None:
    h = Harness()
    await h.room("a")
    await h.room("b")
    purged = await h.waiting("a", "a@example.com")
    deleted = await h.waiting("b", "b@example.com")
    await h.store.purge("a")
    await h.store.delete_room("b")
    await h.room("b")
    await h.scan()
    assert await h.book.get(purged) is None and await h.book.get(deleted) is None
    assert h.sent == []


async def test_a_lapsed_pass_keeps_the_address_lapsed_ttl_ms() -> None:
    h = Harness()
    await h.room("late", passedTtlSec=10)
    place = await h.waiting("late", "late@example.com")
    await h.open("late")
    await h.scan()
    assert len(h.sent) == 1
    h.clock.advance(11.0)
    await h.scan()
    entry = await h.book.get(place)
    assert entry is not None and entry.lapsed
    h.clock.advance(4.9)
    assert await h.book.get(place) is not None
    h.clock.advance(0.2)
    assert await h.book.get(place) is None


async def test_a_failing_smtp_server_is_tried_three_times_then_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import queue_manager.jobs.turn_mail as module

    monkeypatch.setattr(module, "BACKOFF_SEC", (0.0, 0.0))
    h = Harness()
    h.failing = True
    await h.room("down")
    await h.waiting("down", "x@example.com")
    await h.open("down")
    await h.scan()
    await h.scan()
    c = h.ctx.counters
    assert (c.turn_emails_sent, c.turn_emails_failed, c.turn_emails_retried) == (0, 1, 2)
