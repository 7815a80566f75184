"""The turn e-mail itself: plain text, in the language the waiting page spoke at sign-up (pure).

It says the turn has come, how long the place is held (the pass's claim window, what is left of it when
the e-mail is written) and carries the absolute link back to the visitor's place, worked out at sign-up
(``routes/visitor/notify.py``: the waiting page ``<public base>/w/<room>``, or an inline room's ``targetUrl``).
"""

from __future__ import annotations

import math
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from queue_manager.web import translations


def letters() -> dict[str, dict[str, str]]:
    """The e-mail's text in every language (the ``letter`` section of web/i18n/<tag>.json)."""
    return translations.section("letter")


def held_for(table: dict[str, str], seconds: float | None) -> str:
    left = max(0, math.floor(seconds or 0))
    if left < 120:
        return table["sec"].format(n=left)
    return table["min"].format(n=left // 60)


def compose(*, sender: str, to: str, lang: str, room_name: str, link: str, held_sec: float | None) -> EmailMessage:
    """One turn e-mail, ready for SMTP (``held_sec``: what is left of the pass's claim window)."""
    lang = lang if lang in letters() else "en"
    table = letters()[lang]
    room_name = " ".join(room_name.split())  # one line, whatever the room's name holds
    # a right-to-left language: each paragraph opens with a right-to-left mark, so a mail reader aligns it right
    # even when it starts with the room's name or the link (plain text has no dir)
    mark = "\u200f" if lang in translations.RTL else ""
    body = "\n\n".join(
        mark + part
        for part in [
            table["head"].format(room=room_name),
            table["held"].format(time=held_for(table, held_sec)) + "\n" + link,
            table["late"],
        ]
    )
    body += "\n\n-- \n" + mark + table["why"]
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = table["subject"].format(room=room_name)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2].rstrip(">") or None)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(body + "\n")
    message["Content-Language"] = lang  # after set_content, which drops Content-*
    return message
