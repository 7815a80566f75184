"""Which language a visitor-facing page speaks: the qm_lang cookie, else Accept-Language, else the room's default."""

from __future__ import annotations

from queue_manager.engine import languages
from queue_manager.http import cookies, negotiate
from queue_manager.http.wire import Request


def pick_language(req: Request, offered: tuple[str, ...] = languages.LANGUAGES) -> str:
    """The qm_lang cookie when it names one of ``offered``, else the best Accept-Language match (regional
    fallbacks: pt-PT → pt-BR, zh-TW → zh-Hant), else the first of ``offered``."""
    chosen = req.cookies.get(cookies.LANGUAGE)
    if chosen is not None:
        tag = languages.canonical(chosen)
        if tag is not None and tag in offered:
            return tag
    return languages.pick(negotiate.weighted(req.header(b"accept-language")), offered)
