"""Which of the five languages a visitor-facing page speaks: the qm_lang cookie, else Accept-Language."""

from __future__ import annotations

from queue_manager.http import cookies, negotiate
from queue_manager.http.wire import Request
from queue_manager.web import asset


def pick_language(req: Request) -> str:
    """The qm_lang cookie when it names one of ours, else the best Accept-Language match, else English."""
    chosen = req.cookies.get(cookies.LANGUAGE)
    if chosen in asset.LANGUAGES:
        return chosen
    best, best_q = "en", 0.0
    for position, (tag, q) in enumerate(negotiate.weighted(req.header(b"accept-language"))):
        base = tag.split("-")[0]
        q -= position * 1e-6  # equal weights: the first listed wins
        if base in asset.LANGUAGES and q > best_q:
            best, best_q = base, q
    return best
