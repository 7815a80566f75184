"""Which of the five languages a visitor-facing page speaks: the qm_lang cookie, else Accept-Language."""

from __future__ import annotations

from queue_manager.http.wire import Request
from queue_manager.web import asset


def pick_language(req: Request) -> str:
    """The qm_lang cookie when it names one of ours, else the best Accept-Language match, else English."""
    chosen = req.cookies.get("qm_lang")
    if chosen in asset.LANGUAGES:
        return chosen
    header = req.header(b"accept-language") or ""
    best, best_q = "en", 0.0
    for position, part in enumerate(header.split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        base = tag.strip().lower().split("-")[0]
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        q -= position * 1e-6  # equal weights: the first listed wins
        if base in asset.LANGUAGES and q > best_q:
            best, best_q = base, q
    return best
