"""A room's access rules applied to one request: the facts it shows, the crawler it proves to be, the
first rule that matches, counted.

The facts: the client's address as the identity resolved it (TRUST_PROXY rules), the path of the URL
being checked, the request's headers a rule names, the country the trusted CDN names in
``COUNTRY_HEADER`` — read only from a request that came through a listed proxy (TRUST_PROXY_IPS) or
carried the edge secret (EDGE_SECRET), the same trust X-Forwarded-For gets; from anyone else the
country is unknown and a country condition never matches — and, when a rule names crawlers and the
User-Agent claims one of them, whether DNS verifies the claim (services/crawlers.py).
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from queue_manager.engine.access_rules import AccessRule, Facts, claimed_crawler, crawlers_named, first_match
from queue_manager.engine.policy import RoomPolicy
from queue_manager.http.wire import Request
from queue_manager.metrics import Counters
from queue_manager.services.crawlers import CrawlerCheck
from queue_manager.services.identity import Identity
from queue_manager.store.base import Store, StoreUnavailable

#: On a connector's vouched check, a visitor's header a rule names travels as this prefix + its name
VISITOR_HEADER_PREFIX = "x-qm-visitor-"


def path_of(url: str | None) -> str | None:
    """The path of a page URL (absolute or a path), or None."""
    if not url:
        return None
    try:
        return urlsplit(url).path or "/"
    except ValueError:
        return None


class AccessGate:
    def __init__(
        self, store: Store, counters: Counters, crawlers: CrawlerCheck, *, country_header: str | None, edge: bool
    ) -> None:
        self.store = store
        self.counters = counters
        self.crawlers = crawlers
        self.country_header = country_header.strip().lower().encode() if country_header else None
        self.edge = edge

    def country(self, req: Request, ident: Identity) -> str | None:
        """The trusted CDN's country of this request, or None (no setting, untrusted sender, no header)."""
        if self.country_header is None or not (ident.trusted_peer or self.edge):
            return None
        value = req.headers.get(self.country_header)
        return None if value is None else _country_code(value.decode("latin-1"))

    async def facts(
        self,
        rules: tuple[AccessRule, ...],
        req: Request,
        ident: Identity,
        path: str | None,
        *,
        vouched: bool = False,
    ) -> Facts:
        """What the request shows ``rules``. ``vouched``: a connector's check made for a visitor (holding the
        Public API key): the visitor's headers a rule names come as ``X-QM-Visitor-<name>``, the country as
        the ``country`` parameter (what the connector's CDN named)."""
        headers: dict[str, str] = {}
        prefix = VISITOR_HEADER_PREFIX if vouched else ""
        for rule in rules:
            if rule.header_name is not None:
                sent = req.headers.get((prefix + rule.header_name).encode())
                if sent is not None:
                    headers[rule.header_name] = sent.decode("latin-1")
        crawler = None
        named = crawlers_named(rules)
        claimed = claimed_crawler(ident.user_agent) if named else None
        if claimed is not None and claimed.name in named and await self.crawlers.verified(ident.ip, claimed):
            crawler = claimed.name
        country = _country_code(req.query.get("country")) if vouched else self.country(req, ident)
        return Facts(ip=ident.ip, path=path, headers=headers, country=country, crawler=crawler)

    async def judge(
        self, policy: RoomPolicy, req: Request, ident: Identity, path: str | None, *, vouched: bool = False
    ) -> AccessRule | None:
        """The room's first access rule this request matches (counted), or None: the room's normal path."""
        rules = policy.access_rules
        if not rules:
            return None
        hit = first_match(rules, await self.facts(rules, req, ident, path, vouched=vouched))
        if hit is None:
            return None
        _, rule = hit
        key = (policy.room_id, rule.action)
        self.counters.access_rule_hits[key] = self.counters.access_rule_hits.get(key, 0) + 1
        with contextlib.suppress(StoreUnavailable):  # a count lost in an outage refuses nobody
            await self.store.note_access_match(policy.room_id, rule.key)
        return rule


def _country_code(text: str | None) -> str | None:
    code = (text or "").strip().upper()
    return code if len(code) == 2 and code.isalpha() else None
