"""Access rules: who skips the line, who takes it, who is refused, before a room's queue is asked.

A room's ``accessRules`` is an ordered list (the first rule that matches decides, at most
``MAX_ACCESS_RULES``) of ``{"id"?, "action", "match", "note"?}``. ``action`` is ``bypass`` (let through
without a place, counted), ``queue`` (the normal path: an exception carved before a broader bypass) or
``block`` (refused). ``match`` holds one or more conditions, all of which must hold:

* ``cidrs``: IPv4/IPv6 networks the client's address lies in;
* ``header``: ``{"name", "value"}``, a request header equal to a value (compared in constant time; the
  value is a secret, never read back: a read shows ``{"name", "set": true}``);
* ``pathPrefix``: the checked URL's path starts with it; ``extensions``: it ends in one of them;
* ``countries``: ISO 3166 alpha-2 codes of the country a trusted CDN names;
* ``verifiedCrawlers``: names from :data:`CRAWLERS`, the User-Agent naming one that DNS verified.

Pure: the facts of one request (:class:`Facts`) come from the HTTP layer, the crawler already verified
(or not) by it. URL targeting (``rules``, engine/targeting.py) is a different list and is untouched.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Literal

from queue_manager.engine.errors import EngineError, bad_field

MAX_ACCESS_RULES = 50
MAX_CIDRS = 100
MAX_EXTENSIONS = 50
MAX_COUNTRIES = 250
ACTIONS = ("bypass", "queue", "block")
MATCH_KEYS = ("cidrs", "header", "pathPrefix", "extensions", "countries", "verifiedCrawlers")
RULE_KEYS = frozenset({"id", "action", "match", "note", "matchCount", "lastMatchAt"})
NOTE_MAX = 200
CODE = "invalid_access_rules"

AccessAction = Literal["bypass", "queue", "block"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_EXTENSION_RE = re.compile(r"^\.[A-Za-z0-9]{1,16}$")
_COUNTRY_RE = re.compile(r"^[A-Z]{2}$")
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


@dataclass(frozen=True, slots=True)
class Crawler:
    """A search engine's crawler whose vendor documents verification by reverse DNS: its User-Agent
    token, and the domains its addresses' PTR names end in (each name then resolves back to the address)."""

    name: str
    agent: re.Pattern[str]
    domains: tuple[str, ...]


CRAWLERS: dict[str, Crawler] = {
    c.name: c
    for c in (
        Crawler("googlebot", re.compile(r"googlebot", re.I), ("googlebot.com", "google.com")),
        Crawler("bingbot", re.compile(r"bingbot", re.I), ("search.msn.com",)),
        Crawler("applebot", re.compile(r"applebot", re.I), ("applebot.apple.com",)),
        Crawler(
            "yandex",
            re.compile(r"yandex(bot|images|mobilebot|[a-z]*bot)", re.I),
            ("yandex.ru", "yandex.net", "yandex.com"),
        ),
        Crawler("baiduspider", re.compile(r"baiduspider", re.I), ("baidu.com", "baidu.jp")),
    )
}


def claimed_crawler(user_agent: str) -> Crawler | None:
    """The crawler a User-Agent names (a claim only: anyone can send it), or None."""
    if not user_agent:
        return None
    for crawler in CRAWLERS.values():
        if crawler.agent.search(user_agent):
            return crawler
    return None


def in_domains(name: str, domains: tuple[str, ...]) -> bool:
    """Whether a DNS name (a trailing dot allowed) is one of ``domains`` or below one of them."""
    host = name.rstrip(".").lower()
    return any(host == d or host.endswith("." + d) for d in domains)


@dataclass(frozen=True, slots=True)
class Facts:
    """What one request shows the rules. ``headers``: lower-cased names; ``country``: the trusted
    CDN's country (None when untrusted or absent); ``crawler``: the crawler DNS verified, else None."""

    ip: str
    path: str | None = None
    headers: dict[str, str] | None = None
    country: str | None = None
    crawler: str | None = None


@dataclass(frozen=True, slots=True)
class AccessRule:
    id: str
    action: AccessAction
    cidrs: tuple[Network, ...] = ()
    header_name: str | None = None  # lower-cased
    header_value: str | None = None
    path_prefix: str | None = None
    extensions: tuple[str, ...] = ()  # lower-cased, with the dot
    countries: frozenset[str] = frozenset()
    crawlers: tuple[str, ...] = ()
    note: str | None = None
    #: the rule's identity for its counters: its id and everything it matches (a changed rule counts anew)
    key: str = ""

    def to_public(self, *, secrets: bool = True) -> dict[str, Any]:
        """The rule by its API names; ``secrets`` False: the header's value withheld (``"set": true``)."""
        match: dict[str, Any] = {}
        if self.cidrs:
            match["cidrs"] = [str(n) for n in self.cidrs]
        if self.header_name is not None:
            match["header"] = (
                {"name": self.header_name, "value": self.header_value}
                if secrets
                else {"name": self.header_name, "set": True}
            )
        if self.path_prefix is not None:
            match["pathPrefix"] = self.path_prefix
        if self.extensions:
            match["extensions"] = list(self.extensions)
        if self.countries:
            match["countries"] = sorted(self.countries)
        if self.crawlers:
            match["verifiedCrawlers"] = list(self.crawlers)
        out: dict[str, Any] = {"id": self.id, "action": self.action, "match": match}
        if self.note is not None:
            out["note"] = self.note
        return out

    def matches(self, facts: Facts) -> bool:
        if self.cidrs and not _in_networks(facts.ip, self.cidrs):
            return False
        if self.header_name is not None:
            sent = (facts.headers or {}).get(self.header_name)
            if sent is None or not hmac.compare_digest(sent.encode(), (self.header_value or "").encode()):
                return False
        if self.path_prefix is not None and (facts.path is None or not facts.path.startswith(self.path_prefix)):
            return False
        if self.extensions:
            if facts.path is None:
                return False
            last = facts.path.rsplit("/", 1)[-1].lower()
            if not any(last.endswith(ext) and len(last) > len(ext) for ext in self.extensions):
                return False
        if self.countries and (facts.country is None or facts.country.upper() not in self.countries):
            return False
        return not (self.crawlers and facts.crawler not in self.crawlers)


def _in_networks(ip: str, networks: tuple[Network, ...]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr.version == n.version and addr in n for n in networks)


def first_match(rules: tuple[AccessRule, ...], facts: Facts) -> tuple[int, AccessRule] | None:
    """The first rule (its index and itself) that ``facts`` match, or None: the room's normal path."""
    for index, rule in enumerate(rules):
        if rule.matches(facts):
            return index, rule
    return None


def crawlers_named(rules: tuple[AccessRule, ...]) -> frozenset[str]:
    """Every crawler some rule names: a claim by any other is never looked up."""
    return frozenset(name for rule in rules for name in rule.crawlers)


# ---------------------------------------------------------------------- validation


def _bad(index: int | None, message: str) -> EngineError:
    where = "accessRules" if index is None else f"accessRules[{index}]"
    return bad_field("accessRules", f"{where}: {message}", CODE)


def parse_access_rules(value: Any, before: tuple[AccessRule, ...] = ()) -> tuple[AccessRule, ...]:
    """Check a room's ``accessRules``; 400 ``invalid_access_rules`` naming the rule and what is wrong.

    A header condition sent back as a read shows it (``{"name", "set": true}``, no value) keeps the value
    of the rule with the same id and header name in ``before`` (the room's rules now)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad(None, "must be a list of rules.")
    if len(value) > MAX_ACCESS_RULES:
        raise _bad(None, f"at most {MAX_ACCESS_RULES} rules (got {len(value)}).")
    held = {r.id: r for r in before}
    out: list[AccessRule] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        rule = _parse_rule(i, item, held)
        if rule.id in seen:
            raise _bad(i, f"the id {rule.id!r} is used by an earlier rule.")
        seen.add(rule.id)
        out.append(rule)
    return tuple(out)


def _parse_rule(i: int, item: Any, held: dict[str, AccessRule]) -> AccessRule:
    if not isinstance(item, dict):
        raise _bad(i, 'each rule is {"action", "match", "id"?, "note"?}.')
    unknown = sorted(set(item) - RULE_KEYS)
    if unknown:
        raise _bad(i, f"unknown key(s) {', '.join(unknown)}.")
    rid = item.get("id", f"a{i + 1}")
    if not isinstance(rid, str) or not _ID_RE.match(rid):
        raise _bad(i, "id must be 1-40 letters, digits, '.', '_' or '-'.")
    action = item.get("action")
    if action not in ACTIONS:
        raise _bad(i, "action must be bypass, queue or block.")
    note = item.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > NOTE_MAX):
        raise _bad(i, f"note must be a string of at most {NOTE_MAX} characters.")
    match = item.get("match")
    if not isinstance(match, dict) or not match:
        raise _bad(i, f"match must be an object with one or more of {', '.join(MATCH_KEYS)}.")
    extra = sorted(set(match) - set(MATCH_KEYS))
    if extra:
        raise _bad(i, f"unknown match key(s) {', '.join(extra)}; known: {', '.join(MATCH_KEYS)}.")
    fields: dict[str, Any] = {}
    if "cidrs" in match:
        fields["cidrs"] = _cidrs(i, match["cidrs"])
    if "header" in match:
        fields["header_name"], fields["header_value"] = _header(i, match["header"], held.get(rid))
    if "pathPrefix" in match:
        prefix = match["pathPrefix"]
        if not isinstance(prefix, str) or not prefix.startswith("/") or len(prefix) > 500:
            raise _bad(i, "match.pathPrefix must be a path starting with '/' (at most 500 characters).")
        fields["path_prefix"] = prefix
    if "extensions" in match:
        fields["extensions"] = _list(i, match["extensions"], "extensions", MAX_EXTENSIONS, _EXTENSION_RE, ".png")
        fields["extensions"] = tuple(e.lower() for e in fields["extensions"])
    if "countries" in match:
        raw = match["countries"]
        raw = [c.upper() if isinstance(c, str) else c for c in raw] if isinstance(raw, list) else raw
        countries = _list(i, raw, "countries", MAX_COUNTRIES, _COUNTRY_RE, "DE")
        fields["countries"] = frozenset(countries)
    if "verifiedCrawlers" in match:
        names = match["verifiedCrawlers"]
        if not isinstance(names, list) or not names or any(n not in CRAWLERS for n in names):
            raise _bad(i, f"match.verifiedCrawlers must be a non-empty list of {', '.join(CRAWLERS)}.")
        fields["crawlers"] = tuple(dict.fromkeys(names))
    rule = AccessRule(id=rid, action=action, note=note, **fields)
    key = hashlib.sha256(repr(rule.to_public()).encode()).hexdigest()[:16]
    return AccessRule(id=rid, action=action, note=note, key=key, **fields)


def _cidrs(i: int, value: Any) -> tuple[Network, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CIDRS:
        raise _bad(i, f"match.cidrs must be a list of 1 to {MAX_CIDRS} networks.")
    out = []
    for text in value:
        try:
            if not isinstance(text, str):
                raise ValueError
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise _bad(i, f"match.cidrs: {text!r} is not an IPv4 or IPv6 network (like 203.0.113.0/24).") from None
    return tuple(out)


def _header(i: int, value: Any, held: AccessRule | None) -> tuple[str, str]:
    if not isinstance(value, dict) or set(value) - {"name", "value", "set"}:
        raise _bad(i, 'match.header must be {"name", "value"}.')
    name = value.get("name")
    if not isinstance(name, str) or not _HEADER_NAME_RE.match(name):
        raise _bad(i, "match.header.name must be a header name (1-64 token characters).")
    name = name.lower()
    secret = value.get("value")
    if secret is None and value.get("set") is True and held is not None and held.header_name == name:
        secret = held.header_value  # a read sent back: the value kept
    if secret is None and value.get("set") is True:
        raise _bad(i, "match.header.value: the room holds no value to keep for this header; give its value.")
    if not isinstance(secret, str) or not 8 <= len(secret) <= 256:
        raise _bad(i, "match.header.value must be a string of 8 to 256 characters (a secret your probe sends).")
    return name, secret


def _list(i: int, value: Any, name: str, most: int, pattern: re.Pattern[str], example: str) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= most:
        raise _bad(i, f"match.{name} must be a list of 1 to {most} entries.")
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise _bad(i, f"match.{name}: {item!r} is not like {example!r}.")
    return list(value)
