"""The access rules' dry run (``POST /api/admin/rooms/<room>/rules/test`` with a described request): which
access rule a request from ``address`` for ``path`` (or the ``url``'s path), with ``headers``, ``userAgent``
and ``country``, would meet, and so what it would get. Nothing is counted. The country is taken as given
(the dry run stands for a request that came through the trusted CDN); a User-Agent naming a crawler a rule
lists is looked up in DNS for real, so an operator sees what the crawler itself would get."""

from __future__ import annotations

from typing import Any

from queue_manager.engine.access_rules import AccessRule, Facts, claimed_crawler, crawlers_named, first_match
from queue_manager.http.wire import HttpError
from queue_manager.services.access_gate import path_of
from queue_manager.services.crawlers import CrawlerCheck
from queue_manager.services.identity import valid_ip

FACT_KEYS = ("address", "path", "headers", "userAgent", "country")


def _bad(message: str) -> HttpError:
    return HttpError(400, "bad_request", message)


def facts_of(body: dict[str, Any], url: Any) -> Facts:
    """The described request, checked (400 bad_request naming what is wrong)."""
    address = body.get("address", "0.0.0.0")
    ip = valid_ip(address) if isinstance(address, str) else None
    if ip is None:
        raise _bad("address must be an IPv4 or IPv6 address.")
    path = body.get("path")
    if path is not None and (not isinstance(path, str) or not path.startswith("/") or len(path) > 4096):
        raise _bad("path must be a path starting with '/'.")
    if path is None and isinstance(url, str):
        path = path_of(url)
    headers = body.get("headers") or {}
    if not isinstance(headers, dict) or len(headers) > 50:
        raise _bad("headers must be an object of at most 50 names and values.")
    if not all(isinstance(k, str) and isinstance(v, str) and len(v) <= 1024 for k, v in headers.items()):
        raise _bad("each header is a name and a string value.")
    country = body.get("country")
    if country is not None and (not isinstance(country, str) or len(country) != 2 or not country.isalpha()):
        raise _bad("country must be a two-letter code like DE.")
    agent = body.get("userAgent", "")
    if not isinstance(agent, str) or len(agent) > 512:
        raise _bad("userAgent must be a string of at most 512 characters.")
    return Facts(
        ip=ip,
        path=path,
        headers={k.lower(): v for k, v in headers.items()},
        country=None if country is None else country.upper(),
    )


async def answer(
    crawlers: CrawlerCheck, rules: tuple[AccessRule, ...], facts: Facts, body: dict[str, Any]
) -> dict[str, Any]:
    """``{rule, index, action, crawler, why}``: the rule met (its read form, the header's value withheld)."""
    claimed = claimed_crawler(str(body.get("userAgent") or ""))
    crawler: dict[str, Any] | None = None
    if claimed is not None:
        verified = claimed.name in crawlers_named(rules) and await crawlers.verified(facts.ip, claimed)
        crawler = {"claimed": claimed.name, "verified": verified}
        if verified:
            facts = Facts(facts.ip, facts.path, facts.headers, facts.country, claimed.name)
    hit = first_match(rules, facts)
    if hit is None:
        why = "no access rule matches: the room's normal path" if rules else "the room has no access rules"
        return {"rule": None, "index": None, "action": None, "crawler": crawler, "why": why}
    index, rule = hit
    return {
        "rule": rule.to_public(secrets=False),
        "index": index,
        "action": rule.action,
        "crawler": crawler,
        "why": f"access rule {index + 1} ({rule.id}) matches first: {rule.action}",
    }
