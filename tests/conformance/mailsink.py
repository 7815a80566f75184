"""A real SMTP server for the turn-e-mail tests: aiosmtpd on a free loopback port, in a thread of the test
process, keeping every message it accepts (no TLS: the server under test reaches it as smtp+plain://).

    with MailSink() as sink:
        env = {"SMTP_URL": sink.url, ...}
        ...
        [mail] = sink.wait_for(1)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from harness import free_port


@dataclass
class Mail:
    sender: str  # the envelope's MAIL FROM
    recipients: list[str]  # RCPT TO
    message: EmailMessage

    @property
    def text(self) -> str:
        body = self.message.get_body(preferencelist=("plain",))
        assert body is not None, self.message
        return str(body.get_content())


class _Keep:
    def __init__(self, sink: MailSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        parsed = message_from_bytes(raw, _class=EmailMessage, policy=policy.default)
        with self.sink.lock:
            self.sink.mails.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), parsed))
        return "250 OK"


class MailSink:
    def __init__(self) -> None:
        self.port = free_port()
        self.mails: list[Mail] = []
        self.lock = threading.Lock()
        self._controller = Controller(_Keep(self), hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp+plain://127.0.0.1:{self.port}"

    def start(self) -> MailSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> MailSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def to(self, address: str) -> list[Mail]:
        with self.lock:
            return [m for m in self.mails if address in m.recipients]

    def wait_for(self, address: str, count: int = 1, timeout: float = 15.0) -> list[Mail]:
        """The mails to ``address`` once there are ``count`` of them (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.to(address)
            if len(found) >= count:
                return found
            if time.monotonic() >= deadline:
                raise AssertionError(f"{len(found)} e-mails to {address} after {timeout:g} s, expected {count}")
            time.sleep(0.1)
