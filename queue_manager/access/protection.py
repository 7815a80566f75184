"""Bot protection: score a request for a place in line from what this server can observe.

Pure and in-process: no I/O, the clock is injected. ``Protection.assess`` is called once per join
request with the facts the HTTP layer gathered (``RequestFacts``) and answers a ``Decision``: a
0–100 score, the signals that fired, and ``allow`` / ``monitor`` / ``block``.

The weights are calibrated (see docs/protection.md, and the test that enumerates it) so that no
combination of the signals a shared address full of real browsers can produce — a corporate NAT,
a CGNAT pool — reaches the default block threshold on its own. Only a client that declares itself
automation (``automation_client``) gets there without help.

Per-address state (recent arrival instants, recent cookieless joins) lives in one LRU bounded by
``max_tracked``; the address is the resolved client address, never a forwarded header the server
did not believe.
"""

from __future__ import annotations

import ipaddress
import re
from array import array
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from queue_manager.clock import Clock

__all__ = [
    "AUTOMATION_TOKENS",
    "BLOCKED_CODE",
    "CRAWLER_TOKENS",
    "NAT_PRODUCIBLE",
    "SIGNALS",
    "WEIGHTS",
    "Action",
    "Decision",
    "Mode",
    "Protection",
    "RequestFacts",
    "block_header",
    "room_mode_of",
]

Mode = Literal["monitor", "enforce"]
Action = Literal["allow", "monitor", "block"]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The refusal's ``code`` when ``enforce`` blocks (403), and the header that goes with it.
BLOCKED_CODE: Final = "blocked_by_protection"
BLOCK_HEADER: Final = "X-QM-Protection"

# ------------------------------------------------------------------------------------ weights
# Points on a 0–100 scale. docs/protection.md carries the same table (a unit test keeps them equal).
AUTOMATION_CLIENT: Final = 85  # alone >= the default threshold (80), with 5 points of headroom
FORGED_FORWARDED_FOR: Final = 25
MISSING_BROWSER_HEADERS: Final = 25
MACHINE_REGULAR_TIMING: Final = 15
TICKET_SPREAD_WIDE: Final = 10  # tickets_held_by_ip >= TICKET_SPREAD_WIDE_AT
TICKET_SPREAD_HOARD: Final = 20  # tickets_held_by_ip >= TICKET_SPREAD_HOARD_AT (replaces, not adds)
COOKIELESS_REPEAT: Final = 15

#: Every signal, in the order a Decision lists them.
SIGNALS: Final[tuple[str, ...]] = (
    "automation_client",
    "missing_browser_headers",
    "forged_forwarded_for",
    "machine_regular_timing",
    "ticket_spread",
    "cookieless_repeat",
)

#: Each signal's maximum contribution.
WEIGHTS: Final[Mapping[str, int]] = {
    "automation_client": AUTOMATION_CLIENT,
    "missing_browser_headers": MISSING_BROWSER_HEADERS,
    "forged_forwarded_for": FORGED_FORWARDED_FOR,
    "machine_regular_timing": MACHINE_REGULAR_TIMING,
    "ticket_spread": TICKET_SPREAD_HOARD,
    "cookieless_repeat": COOKIELESS_REPEAT,
}

#: Signals one shared address (corporate NAT, CGNAT) full of real browsers can raise by itself.
#: Not automation_client (a browser does not name curl) and not forged_forwarded_for (a NAT rewrites
#: packets, not HTTP headers: those come from the client software). missing_browser_headers is in,
#: conservatively: privacy browsers and header-mangling security software exist.
NAT_PRODUCIBLE: Final[frozenset[str]] = frozenset(
    {"missing_browser_headers", "machine_regular_timing", "ticket_spread", "cookieless_repeat"}
)

# ------------------------------------------------------------------------------------ thresholds
TICKET_SPREAD_WIDE_AT: Final = 8
TICKET_SPREAD_HOARD_AT: Final = 16

WINDOW_MS: Final = 10 * 60 * 1000  # arrivals and cookieless joins older than this are forgotten
TIMING_MIN_ARRIVALS: Final = 5  # >= 5 arrivals, i.e. >= 4 inter-arrival gaps
TIMING_SAMPLES: Final = 8  # the most recent arrivals looked at (this one included)
TIMING_MAX_CV: Final = 0.1  # coefficient of variation below this is machine-regular
COOKIELESS_REPEAT_AT: Final = 3  # cookieless joins within WINDOW_MS, this one included

CHROMIUM_HINTS_FROM: Final = 90  # Chromium majors from here send sec-ch-ua and Sec-Fetch-* on HTTPS

RECENT_DECISIONS: Final = 50
UA_CACHE_MAX: Final = 4096

# ------------------------------------------------------------------------------------ user agents
#: An HTTP library, a command-line client or a scripted browser. Matched case-insensitively as a
#: word: no letter or digit may precede it, nor follow it when it ends in a letter or digit.
AUTOMATION_TOKENS: Final[tuple[str, ...]] = (
    "curl",
    "libcurl",
    "Wget",
    "python-requests",
    "python-urllib",
    "Python-httpx",
    "httpx",
    "aiohttp",
    "urllib3",
    "Go-http-client",
    "okhttp",
    "Java/",
    "Java-http-client",
    "Apache-HttpClient",
    "Jakarta Commons-HttpClient",
    "node-fetch",
    "axios",
    "undici",
    "superagent",
    "libwww-perl",
    "lwp-request",
    "WWW-Mechanize",
    "Mechanize",
    "PHP/",  # with the slash: ".php" ends many a URL inside a crawler's User-Agent
    "GuzzleHttp",
    "Ruby",
    "Faraday",
    "rest-client",
    "http.rb",
    "Typhoeus",
    "reqwest",
    "Dart/",
    "Deno/",
    "PostmanRuntime",
    "insomnia",
    "HTTPie",
    "WinHttp",
    "WindowsPowerShell",
    "PowerShell",
    "Scrapy",
    "colly",
    "HeadlessChrome",
    "PhantomJS",
    "Selenium",
    "WebDriver",
    "Puppeteer",
    "Playwright",
    "Nightmare",
    "Cypress",
    "SlimerJS",
    "zgrab",
    "masscan",
    "Nmap",
    "sqlmap",
    "Nuclei",
)

#: Declared crawlers and monitors, reported and not scored. Matched case-insensitively anywhere in
#: the User-Agent (a false match only spares a request, and anybody can type these names anyway).
CRAWLER_TOKENS: Final[tuple[str, ...]] = (
    "Googlebot",
    "Google-InspectionTool",
    "GoogleOther",
    "AdsBot-Google",
    "Mediapartners-Google",
    "APIs-Google",
    "Storebot-Google",
    "bingbot",
    "BingPreview",
    "msnbot",
    "DuckDuckBot",
    "Baiduspider",
    "YandexBot",
    "YandexMobileBot",
    "YandexImages",
    "Applebot",
    "facebookexternalhit",
    "facebookcatalog",
    "meta-externalagent",
    "Twitterbot",
    "LinkedInBot",
    "Slackbot",
    "Slack-ImgProxy",
    "Discordbot",
    "TelegramBot",
    "WhatsApp",
    "Pinterestbot",
    "redditbot",
    "Slurp",
    "SeznamBot",
    "Qwantify",
    "PetalBot",
    "Sogou web spider",
    "Exabot",
    "ia_archiver",
    "archive.org_bot",
    "SemrushBot",
    "AhrefsBot",
    "MJ12bot",
    "DotBot",
    "Pingdom",
    "UptimeRobot",
    "StatusCake",
    "Uptime-Kuma",
    "Better Uptime",
    "Checkly",
    "Freshping",
    "GTmetrix",
    "Chrome-Lighthouse",
    "Prometheus",
    "Blackbox Exporter",
    "Datadog",
    "NewRelic",
    "New Relic",
    "Site24x7",
    "Zabbix",
    "check_http",
    "Amazon-Route53-Health-Check-Service",
    "ELB-HealthChecker",
    "GoogleHC",
    "kube-probe",
)


def _alternation(tokens: tuple[str, ...], *, word: bool) -> str:
    """One alternation over the lower-cased tokens, factored as a trie so that sre rejects a position
    on its first character. Longer tokens are tried before a token that is their prefix. With
    ``word``, no letter or digit may precede a token, nor follow one that ends in a letter or digit."""
    root: dict[str, Any] = {}
    for token in {t.lower() for t in tokens}:
        node = root
        for ch in token:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any], last: str) -> str:
        alts = [re.escape(ch) + emit(child, ch) for ch, child in sorted(node.items()) if ch]
        if "" in node:  # a token ends here; tried after every longer one
            alts.append(r"(?![a-z0-9])" if word and last.isalnum() else "")
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return (r"(?<![a-z0-9])" if word else "") + emit(root, "")


# Case-insensitive by lower-casing the User-Agent once and matching lower-case tokens: the same
# answer as re.IGNORECASE, which costs sre an order of magnitude more per search. Compiled once, here.
_AUTOMATION_RE: Final = re.compile(_alternation(AUTOMATION_TOKENS, word=True))
_CRAWLER_RE: Final = re.compile(_alternation(CRAWLER_TOKENS, word=False))
_CRAWLER_NAMES: Final[Mapping[str, str]] = {t.lower(): t for t in CRAWLER_TOKENS}
_CHROMIUM_RE: Final = re.compile(r"(?:chrome|chromium)/(\d{1,4})")


@dataclass(frozen=True, slots=True)
class _UaClass:
    automation: bool
    crawler: str | None  # set only when not automation
    chromium_major: int | None  # a Chromium whose hints we expect (not an Android WebView)


def _classify(ua: str) -> _UaClass:
    low = ua.lower()
    if not low.strip():
        return _UaClass(True, None, None)
    if _AUTOMATION_RE.search(low) is not None:
        return _UaClass(True, None, None)
    crawler: str | None = None
    m = _CRAWLER_RE.search(low)
    if m is not None:
        crawler = _CRAWLER_NAMES.get(m.group(0), m.group(0))
    chromium: int | None = None
    c = _CHROMIUM_RE.search(low)
    if c is not None and "; wv)" not in low:
        chromium = int(c.group(1))
    return _UaClass(False, crawler, chromium)


# ------------------------------------------------------------------------------------ data


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the HTTP layer observed about one join request (built once per request)."""

    ip: str  # the resolved client address (already trust-proxy aware)
    user_agent: str
    accept: str | None
    accept_language: str | None
    accept_encoding: str | None
    sec_fetch_site: str | None
    sec_fetch_mode: str | None
    sec_fetch_dest: str | None
    sec_ch_ua: str | None
    forwarded_from_untrusted: bool  # forwarded-address headers from a peer NOT in TRUST_PROXY_IPS
    has_valid_queue_cookie: bool  # a qm_<room> token this server signed, for that room, in date
    tickets_held_by_ip: int  # places this address holds in the room's line right now


@dataclass(frozen=True, slots=True)
class Decision:
    score: int  # 0..100, clamped
    signals: tuple[str, ...]  # the signals that fired, in SIGNALS order
    crawler: str | None  # a declared crawler's name when it was reported and not scored
    action: Action  # block only when mode == "enforce" and score >= block_at
    allowlisted: bool


def block_header(decision: Decision) -> tuple[str, str]:
    """The ``X-QM-Protection`` header that goes with a 403 ``blocked_by_protection``."""
    return BLOCK_HEADER, f"block score={decision.score}"


def room_mode_of(protection: Mapping[str, Any] | None) -> Mode | None:
    """A room's ``protection`` setting as ``assess``'s ``room_mode``: None inherits the server's."""
    if protection is None:
        return None
    mode = protection.get("mode")
    if mode == "enforce":
        return "enforce"
    if mode == "monitor":
        return "monitor"
    return None


class _Track:
    """One address's recent history: arrival instants and cookieless-join instants (mono ms)."""

    __slots__ = ("arrivals", "cookieless")

    def __init__(self) -> None:
        self.arrivals: array[int] = array("q")
        self.cookieless: array[int] = array("q")


def _push(buf: array[int], now: int, keep: int) -> None:
    buf.append(now)
    if len(buf) > keep:
        del buf[: len(buf) - keep]


def _regular(arrivals: array[int], since: int) -> bool:
    """True when >= TIMING_MIN_ARRIVALS arrivals in the window have inter-arrival CV < TIMING_MAX_CV."""
    n = len(arrivals)
    first = 0
    while first < n and arrivals[first] < since:
        first += 1
    count = n - first
    if count < TIMING_MIN_ARRIVALS:
        return False
    gaps = [arrivals[i] - arrivals[i - 1] for i in range(first + 1, n)]
    mean = sum(gaps) / len(gaps)
    if mean <= 0:
        return True  # all in the same millisecond: nothing human arrives like that
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    return var < (TIMING_MAX_CV * mean) ** 2


def _missing(value: str | None) -> bool:
    return value is None or not value.strip()


# ------------------------------------------------------------------------------------ protection


class Protection:
    """Scores join requests; keeps per-address history in a bounded LRU and the Security panel's totals."""

    def __init__(
        self,
        clock: Clock,
        *,
        mode: Mode = "monitor",
        block_at: int = 80,
        allow_ips: tuple[IPNetwork, ...] = (),
        max_tracked: int = 100_000,
    ) -> None:
        if mode not in ("monitor", "enforce"):
            raise ValueError(f"protection mode must be monitor or enforce, not {mode!r}")
        if not 0 <= block_at <= 100:
            raise ValueError(f"block_at must be between 0 and 100, not {block_at}")
        if max_tracked < 1:
            raise ValueError(f"max_tracked must be at least 1, not {max_tracked}")
        self.clock = clock
        self.mode: Mode = mode
        self.block_at = block_at
        self.allow_ips = tuple(allow_ips)
        self.max_tracked = max_tracked
        self._tracks: OrderedDict[str, _Track] = OrderedDict()
        self._ua_cache: dict[str, _UaClass] = {}
        # Security panel
        self.assessed = 0
        self.blocked = 0
        self.warned = 0
        self.allowlisted = 0
        self.crawlers = 0
        self._signal_counts: dict[str, int] = dict.fromkeys(SIGNALS, 0)
        self._crawler_counts: dict[str, int] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)

    # -------------------------------------------------------------------------------- reading

    @property
    def tracked(self) -> int:
        """How many addresses the LRU holds (never more than ``max_tracked``)."""
        return len(self._tracks)

    def is_allowlisted(self, ip: str) -> bool:
        if not self.allow_ips:
            return False
        try:
            addr = ipaddress.ip_address(ip.strip())
        except ValueError:
            return False
        if any(addr in net for net in self.allow_ips):
            return True
        mapped = getattr(addr, "ipv4_mapped", None)
        return mapped is not None and any(mapped in net for net in self.allow_ips)

    def stats(self) -> dict[str, Any]:
        """What the console's Security panel shows."""
        return {
            "mode": self.mode,
            "blockAt": self.block_at,
            "assessed": self.assessed,
            "blocked": self.blocked,
            "warned": self.warned,
            "allowlisted": self.allowlisted,
            "crawlers": self.crawlers,
            "signals": dict(self._signal_counts),
            "crawlerNames": dict(self._crawler_counts),
            "weights": dict(WEIGHTS),
            "tracked": len(self._tracks),
            "maxTracked": self.max_tracked,
            "recent": [dict(d, signals=list(d["signals"])) for d in reversed(self._recent)],  # newest first
        }

    # -------------------------------------------------------------------------------- scoring

    def _ua(self, ua: str) -> _UaClass:
        hit = self._ua_cache.get(ua)
        if hit is None:
            hit = _classify(ua)
            if len(self._ua_cache) >= UA_CACHE_MAX:
                self._ua_cache.clear()
            self._ua_cache[ua] = hit
        return hit

    def _track(self, ip: str) -> _Track:
        tracks = self._tracks
        t = tracks.get(ip)
        if t is None:
            t = _Track()
            tracks[ip] = t
            while len(tracks) > self.max_tracked:
                tracks.popitem(last=False)
        else:
            tracks.move_to_end(ip)
        return t

    def assess(self, facts: RequestFacts, *, room_mode: Mode | None = None) -> Decision:
        """Score one request for a place in line. ``room_mode`` is the room's override (None inherits)."""
        self.assessed += 1
        if self.is_allowlisted(facts.ip):
            self.allowlisted += 1
            return Decision(0, (), None, "allow", True)

        ua = self._ua(facts.user_agent)
        if ua.crawler is not None:
            self.crawlers += 1
            self._crawler_counts[ua.crawler] = self._crawler_counts.get(ua.crawler, 0) + 1
            decision = Decision(0, (), ua.crawler, "allow", False)
            self._remember(facts.ip, decision)
            return decision

        now = self.clock.mono_ms()
        since = now - WINDOW_MS
        track = self._track(facts.ip)
        _push(track.arrivals, now, TIMING_SAMPLES)
        cookieless = 0
        if not facts.has_valid_queue_cookie:
            _push(track.cookieless, now, COOKIELESS_REPEAT_AT)
            cookieless = sum(1 for t in track.cookieless if t >= since)

        fired: list[str] = []
        score = 0
        if ua.automation:
            fired.append("automation_client")
            score += AUTOMATION_CLIENT
        if self._missing_headers(facts, ua):
            fired.append("missing_browser_headers")
            score += MISSING_BROWSER_HEADERS
        if facts.forwarded_from_untrusted:
            fired.append("forged_forwarded_for")
            score += FORGED_FORWARDED_FOR
        if _regular(track.arrivals, since):
            fired.append("machine_regular_timing")
            score += MACHINE_REGULAR_TIMING
        if facts.tickets_held_by_ip >= TICKET_SPREAD_WIDE_AT:
            fired.append("ticket_spread")
            score += TICKET_SPREAD_HOARD if facts.tickets_held_by_ip >= TICKET_SPREAD_HOARD_AT else TICKET_SPREAD_WIDE
        if cookieless >= COOKIELESS_REPEAT_AT:
            fired.append("cookieless_repeat")
            score += COOKIELESS_REPEAT
        score = max(0, min(100, score))

        mode = room_mode if room_mode in ("monitor", "enforce") else self.mode
        action: Action = "allow"
        if fired and score >= self.block_at:
            if mode == "enforce":
                action = "block"
                self.blocked += 1
            else:
                action = "monitor"
                self.warned += 1
        for name in fired:
            self._signal_counts[name] += 1
        decision = Decision(score, tuple(fired), None, action, False)
        self._remember(facts.ip, decision)
        return decision

    @staticmethod
    def _missing_headers(facts: RequestFacts, ua: _UaClass) -> bool:
        if _missing(facts.accept) or _missing(facts.accept_language) or _missing(facts.accept_encoding):
            return True
        if ua.chromium_major is not None and ua.chromium_major >= CHROMIUM_HINTS_FROM:
            return (
                _missing(facts.sec_ch_ua)
                or _missing(facts.sec_fetch_site)
                or _missing(facts.sec_fetch_mode)
                or _missing(facts.sec_fetch_dest)
            )
        return False

    def _remember(self, ip: str, decision: Decision) -> None:
        self._recent.append(
            {
                "ts": self.clock.wall_ms(),
                "ip": ip,
                "score": decision.score,
                "signals": decision.signals,
                "action": decision.action,
                "crawler": decision.crawler,
            }
        )
