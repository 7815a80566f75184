"""The turn e-mail itself: plain text, in the language the waiting page spoke at sign-up (pure).

It says the turn has come, how long the place is held (the pass's claim window, what is left of it when
the e-mail is written) and carries the absolute link back to the visitor's place, worked out at sign-up
(``routes/visitor/notify.py``: the waiting page ``<public base>/w/<room>``, or an inline room's ``targetUrl``).
"""

from __future__ import annotations

import math
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

LETTERS: dict[str, dict[str, str]] = {
    "en": {
        "subject": "It’s your turn: {room}",
        "head": "Your turn has come in the waiting room “{room}”.",
        "held": "Your place is held for {time}. Open it here before then:",
        "late": "If you do not enter in time, your turn lapses.",
        "why": "You get this e-mail because this address was left on the waiting page. "
        "It is deleted when your turn ends.",
        "sec": "{n} seconds",
        "min": "{n} minutes",
    },
    "th": {
        "subject": "ถึงคิวของคุณแล้ว: {room}",
        "head": "ถึงคิวของคุณแล้วในห้องรอคิว “{room}”",
        "held": "เราเก็บที่ของคุณไว้ {time} กรุณาเปิดลิงก์นี้ก่อนหมดเวลา:",
        "late": "หากคุณไม่เข้าภายในเวลาที่กำหนด คิวของคุณจะหมดอายุ",
        "why": "คุณได้รับอีเมลนี้เพราะมีการให้ที่อยู่อีเมลนี้ไว้ในหน้าห้องรอคิว ที่อยู่นี้จะถูกลบเมื่อคิวของคุณสิ้นสุด",
        "sec": "{n} วินาที",
        "min": "{n} นาที",
    },
    "es": {
        "subject": "Es su turno: {room}",
        "head": "Ha llegado su turno en la sala de espera «{room}».",
        "held": "Guardamos su lugar durante {time}. Ábralo aquí antes de que termine:",
        "late": "Si no entra a tiempo, su turno caduca.",
        "why": "Recibe este correo porque esta dirección se dejó en la página de espera. "
        "Se borra cuando termina su turno.",
        "sec": "{n} segundos",
        "min": "{n} minutos",
    },
    "ja": {
        "subject": "順番が来ました: {room}",
        "head": "待合室「{room}」であなたの順番が来ました。",
        "held": "あなたの枠は{time}確保されています。それまでにこちらから入場してください:",
        "late": "時間内に入場しないと、順番は失効します。",
        "why": "このメールは、待合室のページでこのアドレスが登録されたため送信されました。"
        "アドレスは順番が終わると削除されます。",
        "sec": "{n}秒間",
        "min": "{n}分間",
    },
    "de": {
        "subject": "Sie sind an der Reihe: {room}",
        "head": "Im Warteraum „{room}“ sind Sie jetzt an der Reihe.",
        "held": "Ihr Platz wird {time} lang für Sie freigehalten. Öffnen Sie ihn vorher hier:",
        "late": "Wenn Sie nicht rechtzeitig eintreten, verfällt Ihr Platz.",
        "why": "Sie erhalten diese E-Mail, weil diese Adresse auf der Warteseite hinterlegt wurde. "
        "Sie wird gelöscht, sobald Ihr Platz endet.",
        "sec": "{n} Sekunden",
        "min": "{n} Minuten",
    },
}


def held_for(table: dict[str, str], seconds: float | None) -> str:
    left = max(0, math.floor(seconds or 0))
    if left < 120:
        return table["sec"].format(n=left)
    return table["min"].format(n=left // 60)


def compose(*, sender: str, to: str, lang: str, room_name: str, link: str, held_sec: float | None) -> EmailMessage:
    """One turn e-mail, ready for SMTP (``held_sec``: what is left of the pass's claim window)."""
    table = LETTERS.get(lang) or LETTERS["en"]
    room_name = " ".join(room_name.split())  # one line, whatever the room's name holds
    body = "\n\n".join(
        [
            table["head"].format(room=room_name),
            table["held"].format(time=held_for(table, held_sec)) + "\n" + link,
            table["late"],
            "-- \n" + table["why"],
        ]
    )
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = table["subject"].format(room=room_name)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2].rstrip(">") or None)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(body + "\n")
    message["Content-Language"] = lang if lang in LETTERS else "en"  # after set_content, which drops Content-*
    return message
