"""queue_manager.access.protection: signals, weights, the NAT calibration, modes, allowlist, crawlers, the LRU."""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_manager.access import protection as P
from queue_manager.access.protection import (
    AUTOMATION_TOKENS,
    CRAWLER_TOKENS,
    NAT_PRODUCIBLE,
    SIGNALS,
    WEIGHTS,
    Decision,
    Mode,
    Protection,
    RequestFacts,
    block_header,
    room_mode_of,
)
from queue_manager.clock import FakeClock

DOC = Path(__file__).resolve().parents[2] / "docs" / "protection.md"

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36"
)
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:126.0) Gecko/20100101 Firefox/126.0"
BROWSERS = (
    CHROME,
    FIREFOX,
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 "
    "Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36 Edg/124.0.2478.80",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36 OPR/110.0.0.0",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 "
    "Chrome/117.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "CriOS/124.0.6367.88 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "FxiOS/125.0 Mobile/15E148 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 "
    "[FBAN/FBIOS;FBDV/iPhone14,2;FBMD/iPhone;FBSN/iOS;FBSV/17.4;FBSS/3;FBID/phone;FBLC/en_US;FBOP/5]",
    "Mozilla/5.0 (Linux; Android 13; Pixel 7 Build/TQ3A.230805.001; wv) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Version/4.0 Chrome/124.0.6367.82 Mobile Safari/537.36 Instagram 329.0.0.0.58 Android",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0 "
    "YaBrowser/24.4.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36 Vivaldi/6.7",
    "Mozilla/5.0 (Linux; U; Android 10; en-US; RMX2020 Build/QP1A.190711.020) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Version/4.0 Chrome/78.0.3904.108 UCBrowser/13.4.0.1306 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36 Edg/124.0.0.0 (Electron-less; corporate build; JavaScript enabled)",
)
AUTOMATION_UAS = (
    "curl/8.4.0",
    "Wget/1.21.4",
    "python-requests/2.31.0",
    "Python-urllib/3.11",
    "python-httpx/0.27.0",
    "Python/3.11 aiohttp/3.9.5",
    "Go-http-client/1.1",
    "okhttp/4.12.0",
    "Java/17.0.9",
    "Apache-HttpClient/4.5.14 (Java/17.0.9)",
    "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
    "axios/1.6.8",
    "undici",
    "libwww-perl/6.72",
    "PHP/8.2",
    "Scrapy/2.11.1 (+https://scrapy.org)",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
    "Mozilla/5.0 (Windows NT; Windows NT 10.0; en-US) WindowsPowerShell/5.1.19041.4291",
    "",
    "   ",
)
CRAWLER_UAS = (
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Pingdom.com_bot_version_1.4_(http://www.pingdom.com/)",
    "Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)",
    "Prometheus/2.51.0",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Mozilla/5.0 (compatible; Yahoo! Slurp; http://help.yahoo.com/help/us/ysearch/slurp)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm) "
    "Chrome/116.0.1938.76 Safari/537.36",
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.6367.91 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
    "Mozilla/5.0 (compatible; Site24x7)",
    "Datadog Agent/7.52.0",
)
NAT_SIGNALS = tuple(s for s in SIGNALS if s in NAT_PRODUCIBLE)
PROXY_SIGNALS = ("forged_forwarded_for", "machine_regular_timing", "ticket_spread", "cookieless_repeat")


def facts(**over: Any) -> RequestFacts:
    """A modern Chrome over HTTPS with every header it sends, a valid queue cookie, nothing held."""
    base: dict[str, Any] = {
        "ip": "203.0.113.7",
        "user_agent": CHROME,
        "accept": "*/*",
        "accept_language": "en-GB,en;q=0.9",
        "accept_encoding": "gzip, deflate, br, zstd",
        "sec_fetch_site": "same-origin",
        "sec_fetch_mode": "cors",
        "sec_fetch_dest": "empty",
        "sec_ch_ua": '"Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"',
        "forwarded_from_untrusted": False,
        "has_valid_queue_cookie": True,
        "tickets_held_by_ip": 0,
    }
    base.update(over)
    return RequestFacts(**base)


def prot(clock: FakeClock | None = None, **kw: Any) -> Protection:
    return Protection(clock or FakeClock(), **kw)


# ------------------------------------------------------------------------------------ weights & docs


def test_weights_table_in_docs_matches_the_module() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (\d+(?: / \d+)?) \|", text, re.M))
    expected = {name: str(WEIGHTS[name]) for name in SIGNALS}
    expected["ticket_spread"] = f"{P.TICKET_SPREAD_WIDE} / {P.TICKET_SPREAD_HOARD}"
    assert rows == expected


def test_docs_state_the_thresholds_used() -> None:
    text = DOC.read_text(encoding="utf-8")
    for needle in (
        f"≥ {P.TICKET_SPREAD_WIDE_AT}",
        f"≥ {P.TICKET_SPREAD_HOARD_AT}",
        f"{P.TIMING_MIN_ARRIVALS} arrivals",
        f"{P.COOKIELESS_REPEAT_AT} cookieless joins",
        "blocked_by_protection",
        "X-QM-Protection: block score=NN",
    ):
        assert needle in text, needle


def test_signals_and_weights_are_consistent() -> None:
    assert set(WEIGHTS) == set(SIGNALS) and len(SIGNALS) == len(set(SIGNALS))
    assert NAT_PRODUCIBLE < set(SIGNALS)
    assert "automation_client" not in NAT_PRODUCIBLE and "forged_forwarded_for" not in NAT_PRODUCIBLE
    assert P.TICKET_SPREAD_WIDE < P.TICKET_SPREAD_HOARD == WEIGHTS["ticket_spread"]
    assert all(0 < w <= 100 for w in WEIGHTS.values())


# ------------------------------------------------------------------------------------ calibration


def realize(p: Protection, clock: FakeClock, wanted: tuple[str, ...], ip: str) -> Decision:
    """Drive ``p`` so that the next request from ``ip`` fires exactly ``wanted``, each at its maximum."""
    regular = "machine_regular_timing" in wanted
    cookieless = "cookieless_repeat" in wanted
    if regular:  # four earlier arrivals exactly 2 s apart; the fifth below completes the pattern
        for _ in range(4):
            p.assess(facts(ip=ip, has_valid_queue_cookie=not cookieless))
            clock.advance(2)
    elif cookieless:  # two earlier cookieless joins at irregular gaps (too few for timing anyway)
        p.assess(facts(ip=ip, has_valid_queue_cookie=False))
        clock.advance(1)
        p.assess(facts(ip=ip, has_valid_queue_cookie=False))
        clock.advance(7)
    return p.assess(
        facts(
            ip=ip,
            user_agent="curl/8.4.0" if "automation_client" in wanted else CHROME,
            accept_language=None if "missing_browser_headers" in wanted else "en",
            forwarded_from_untrusted="forged_forwarded_for" in wanted,
            tickets_held_by_ip=10**6 if "ticket_spread" in wanted else 0,
            has_valid_queue_cookie=not cookieless,
        )
    )


def subsets(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [combo for k in range(len(names) + 1) for combo in itertools.combinations(names, k)]


def test_nat_producible_signals_are_the_four_crowd_and_header_signals() -> None:
    assert set(NAT_SIGNALS) == {
        "missing_browser_headers",
        "machine_regular_timing",
        "ticket_spread",
        "cookieless_repeat",
    }


@pytest.mark.parametrize("subset", subsets(NAT_SIGNALS), ids=lambda s: "+".join(s) or "none")
def test_no_combination_a_nat_can_produce_reaches_the_block_threshold(subset: tuple[str, ...]) -> None:
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    d = realize(p, clock, subset, ip="198.51.100.1")
    assert d.signals == tuple(s for s in SIGNALS if s in subset)
    assert d.score == sum(WEIGHTS[s] for s in subset)  # every signal at its maximum
    assert d.score < 80
    assert d.action != "block"


def test_nat_calibration_arithmetic_has_margin() -> None:
    assert sum(WEIGHTS[s] for s in NAT_PRODUCIBLE) < 80
    assert sum(WEIGHTS[s] for s in PROXY_SIGNALS) < 80


@pytest.mark.parametrize("subset", subsets(PROXY_SIGNALS), ids=lambda s: "+".join(s) or "none")
def test_a_header_adding_corporate_proxy_cannot_block_its_browsers_either(subset: tuple[str, ...]) -> None:
    """A TLS-inspecting office proxy adds X-Forwarded-For; its real browsers still send browser headers."""
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    d = realize(p, clock, subset, ip="198.51.100.2")
    assert d.signals == tuple(s for s in SIGNALS if s in subset)
    assert d.score < 80 and d.action != "block"


def test_automation_client_alone_reaches_the_block_threshold() -> None:
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    d = realize(p, clock, ("automation_client",), ip="192.0.2.9")
    assert d.signals == ("automation_client",)
    assert d.score == WEIGHTS["automation_client"] >= 80
    assert d.action == "block"


def test_with_help_a_non_declaring_script_can_reach_the_threshold() -> None:
    """Forged forwarding plus missing browser headers is not a NAT; with crowd signals it gets there."""
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    wanted = ("missing_browser_headers", "forged_forwarded_for", "machine_regular_timing", "cookieless_repeat")
    d = realize(p, clock, wanted, ip="192.0.2.10")
    assert d.signals == wanted and d.score >= 80 and d.action == "block"


def test_every_signal_at_once_clamps_to_100() -> None:
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    d = realize(p, clock, SIGNALS, ip="192.0.2.11")
    assert d.signals == SIGNALS and d.score == 100 and d.action == "block"


# ------------------------------------------------------------------------------------ automation_client


@pytest.mark.parametrize("token", AUTOMATION_TOKENS)
def test_every_automation_token_is_recognised_in_any_case(token: str) -> None:
    p = prot()
    ua = f"{token}1.0" if token.endswith("/") else f"{token}/1.0"
    for variant in (ua, ua.lower(), ua.upper(), f"Mozilla/5.0 (compatible) {ua}"):
        assert "automation_client" in p.assess(facts(user_agent=variant)).signals, variant


@pytest.mark.parametrize("ua", AUTOMATION_UAS)
def test_real_automation_user_agents(ua: str) -> None:
    d = prot(mode="enforce").assess(facts(user_agent=ua))
    assert d.signals[0] == "automation_client" and d.action == "block" and d.crawler is None


@pytest.mark.parametrize("ua", BROWSERS)
def test_browsers_with_their_headers_score_zero(ua: str) -> None:
    d = prot(mode="enforce").assess(facts(user_agent=ua))
    assert d == Decision(0, (), None, "allow", False)


@pytest.mark.parametrize(
    "ua", ["xcurl/1", "phpcrawlish", "Rubygems", "javascript", "Gotham", "Darts", "see /index.php", "Javanese"]
)
def test_tokens_match_as_words_only(ua: str) -> None:
    assert "automation_client" not in prot().assess(facts(user_agent=ua)).signals


# ------------------------------------------------------------------------------------ crawlers


@pytest.mark.parametrize("token", CRAWLER_TOKENS)
def test_every_declared_crawler_is_reported_and_not_scored(token: str) -> None:
    p = prot(mode="enforce", block_at=1)
    worst = facts(
        user_agent=f"Mozilla/5.0 (compatible; {token}/2.1)",
        accept=None,
        forwarded_from_untrusted=True,
        has_valid_queue_cookie=False,
        tickets_held_by_ip=500,
    )
    d = p.assess(worst)
    assert d == Decision(0, (), token, "allow", False)
    assert p.assess(dataclasses.replace(worst, user_agent=token.upper())).crawler == token


@pytest.mark.parametrize("ua", CRAWLER_UAS)
def test_real_crawler_user_agents(ua: str) -> None:
    d = prot(mode="enforce").assess(facts(user_agent=ua, accept_language=None))
    assert d.crawler is not None and d.score == 0 and d.action == "allow"


@pytest.mark.parametrize(
    "ua",
    [
        "python-requests/2.31 googlebot",
        "Googlebot/2.1 curl/8.0",
        "HeadlessChrome/120 (UptimeRobot/2.0)",
        "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)",  # its real UA
    ],
)
def test_a_crawler_name_next_to_a_library_is_scored_as_the_library(ua: str) -> None:
    d = prot(mode="enforce").assess(facts(user_agent=ua))
    assert d.crawler is None and d.signals[0] == "automation_client" and d.action == "block"


def test_crawlers_are_not_tracked_and_are_counted() -> None:
    p = prot()
    for _ in range(3):
        p.assess(facts(user_agent="Googlebot/2.1", has_valid_queue_cookie=False))
    assert p.tracked == 0
    s = p.stats()
    assert s["crawlers"] == 3 and s["crawlerNames"] == {"Googlebot": 3}
    assert s["recent"][0]["crawler"] == "Googlebot"


# ------------------------------------------------------------------------------------ missing_browser_headers


@pytest.mark.parametrize("field", ["accept", "accept_language", "accept_encoding"])
@pytest.mark.parametrize("value", [None, "", "  "])
def test_missing_accept_headers(field: str, value: str | None) -> None:
    for ua in (CHROME, FIREFOX):
        d = prot().assess(facts(user_agent=ua, **{field: value}))
        assert d.signals == ("missing_browser_headers",) and d.score == WEIGHTS["missing_browser_headers"]


@pytest.mark.parametrize("field", ["sec_ch_ua", "sec_fetch_site", "sec_fetch_mode", "sec_fetch_dest"])
def test_a_modern_chromium_without_its_hints(field: str) -> None:
    assert prot().assess(facts(**{field: None})).signals == ("missing_browser_headers",)


def test_hints_are_not_expected_where_a_browser_does_not_send_them() -> None:
    none = {"sec_ch_ua": None, "sec_fetch_site": None, "sec_fetch_mode": None, "sec_fetch_dest": None}
    old_chrome = CHROME.replace("Chrome/124", "Chrome/85")
    webview = BROWSERS[9]
    for ua in (FIREFOX, BROWSERS[2], BROWSERS[6], old_chrome, webview):
        assert prot().assess(facts(user_agent=ua, **none)).signals == (), ua


# ------------------------------------------------------------------------------------ forged_forwarded_for


def test_forged_forwarded_for() -> None:
    d = prot().assess(facts(forwarded_from_untrusted=True))
    assert d.signals == ("forged_forwarded_for",) and d.score == WEIGHTS["forged_forwarded_for"]


# ------------------------------------------------------------------------------------ ticket_spread


@pytest.mark.parametrize(
    ("held", "points"),
    [(0, 0), (7, 0), (8, P.TICKET_SPREAD_WIDE), (15, P.TICKET_SPREAD_WIDE), (16, P.TICKET_SPREAD_HOARD), (10**6, 20)],
)
def test_ticket_spread_tiers(held: int, points: int) -> None:
    d = prot().assess(facts(tickets_held_by_ip=held))
    assert d.score == points
    assert d.signals == (("ticket_spread",) if points else ())


# ------------------------------------------------------------------------------------ cookieless_repeat


def test_cookieless_repeat_fires_on_the_third_cookieless_join_in_ten_minutes() -> None:
    clock = FakeClock()
    p = prot(clock)
    no_cookie = facts(has_valid_queue_cookie=False)
    assert p.assess(no_cookie).signals == ()
    clock.advance(37)
    assert p.assess(no_cookie).signals == ()
    clock.advance(400)
    assert p.assess(no_cookie).signals == ("cookieless_repeat",)
    assert p.assess(dataclasses.replace(no_cookie, ip="203.0.113.8")).signals == ()  # per address


def test_a_valid_queue_cookie_is_what_keeps_a_returning_browser_clear() -> None:
    clock = FakeClock()
    p = prot(clock)
    for _ in range(2):
        p.assess(facts(has_valid_queue_cookie=False))
        clock.advance(13)
    assert p.assess(facts(has_valid_queue_cookie=True)).signals == ()  # not fired, not counted
    clock.advance(11)
    # the cookie did not wipe the address's history: the next cookieless join is the third
    assert p.assess(facts(has_valid_queue_cookie=False)).signals == ("cookieless_repeat",)


def test_cookieless_joins_older_than_the_window_are_forgotten() -> None:
    clock = FakeClock()
    p = prot(clock)
    p.assess(facts(has_valid_queue_cookie=False))
    clock.advance(5)
    p.assess(facts(has_valid_queue_cookie=False))
    clock.advance(600)  # the first one is now 605 s old
    assert p.assess(facts(has_valid_queue_cookie=False)).signals == ()
    clock.advance(1)  # and now the second one has left the window too
    assert p.assess(facts(has_valid_queue_cookie=False)).signals == ()
    clock.advance(1)  # three within ten minutes again
    assert p.assess(facts(has_valid_queue_cookie=False)).signals == ("cookieless_repeat",)


# ------------------------------------------------------------------------------------ machine_regular_timing


def test_machine_regular_arrivals_fire_from_the_fifth() -> None:
    clock = FakeClock()
    p = prot(clock)
    for _ in range(4):
        assert p.assess(facts()).signals == ()
        clock.advance(3)
    assert p.assess(facts()).signals == ("machine_regular_timing",)


def test_small_jitter_is_still_machine_regular_and_human_gaps_are_not() -> None:
    clock = FakeClock()
    p = prot(clock)
    for gap in (2.0, 2.05, 1.95, 2.02):  # CV ≈ 0.02
        p.assess(facts(ip="a"))
        clock.advance(gap)
    assert p.assess(facts(ip="a")).signals == ("machine_regular_timing",)
    for gap in (1.0, 7.5, 3.2, 0.4, 12.0, 2.2):  # a household behind one address
        p.assess(facts(ip="b"))
        clock.advance(gap)
    assert p.assess(facts(ip="b")).signals == ()


def test_a_burst_in_the_same_millisecond_is_machine_regular() -> None:
    p = prot()
    decisions = [p.assess(facts()) for _ in range(5)]
    assert decisions[-1].signals == ("machine_regular_timing",)


def test_regular_arrivals_spread_beyond_the_window_do_not_count() -> None:
    clock = FakeClock()
    p = prot(clock)
    for _ in range(4):
        p.assess(facts())
        clock.advance(200)  # five arrivals span 800 s > 600 s
    assert p.assess(facts()).signals == ()


def test_timing_looks_at_the_recent_arrivals_only() -> None:
    clock = FakeClock()
    p = prot(clock)
    for gap in (1.0, 9.0, 0.3, 4.0):  # irregular start
        p.assess(facts())
        clock.advance(gap)
    for _ in range(P.TIMING_SAMPLES):  # then a metronome
        p.assess(facts())
        clock.advance(1.5)
    assert p.assess(facts()).signals == ("machine_regular_timing",)


# ------------------------------------------------------------------------------------ modes


def test_monitor_is_the_default_and_warns_instead_of_blocking() -> None:
    p = prot()
    d = p.assess(facts(user_agent="curl/8"))
    assert p.mode == "monitor" and p.block_at == 80
    assert d.action == "monitor" and d.score == WEIGHTS["automation_client"]
    s = p.stats()
    assert (s["warned"], s["blocked"], s["assessed"]) == (1, 0, 1)


def test_below_the_threshold_is_allow_in_either_mode() -> None:
    for mode in ("monitor", "enforce"):
        d = prot(mode=mode).assess(facts(forwarded_from_untrusted=True))
        assert d.action == "allow" and d.score > 0


@pytest.mark.parametrize(
    ("server", "room", "action"),
    [
        ("monitor", None, "monitor"),
        ("monitor", "monitor", "monitor"),
        ("monitor", "enforce", "block"),
        ("enforce", None, "block"),
        ("enforce", "enforce", "block"),
        ("enforce", "monitor", "monitor"),
    ],
)
def test_a_room_overrides_the_server_mode(server: Mode, room: Mode | None, action: str) -> None:
    assert prot(mode=server).assess(facts(user_agent="curl/8"), room_mode=room).action == action


def test_room_mode_of_reads_a_rooms_protection_setting() -> None:
    assert room_mode_of(None) is None
    assert room_mode_of({"mode": "enforce"}) == "enforce"
    assert room_mode_of({"mode": "monitor"}) == "monitor"
    assert room_mode_of({}) is None


def test_the_threshold_is_inclusive_and_a_request_without_signals_is_never_refused() -> None:
    p = prot(mode="enforce", block_at=WEIGHTS["forged_forwarded_for"])
    assert p.assess(facts(forwarded_from_untrusted=True)).action == "block"
    p0 = prot(mode="enforce", block_at=0)
    assert p0.assess(facts()).action == "allow"
    assert p0.assess(facts(ip="203.0.113.99", forwarded_from_untrusted=True)).action == "block"


def test_block_header() -> None:
    d = prot(mode="enforce").assess(facts(user_agent="Wget/1.21"))
    assert block_header(d) == ("X-QM-Protection", f"block score={d.score}")
    assert P.BLOCKED_CODE == "blocked_by_protection"


@pytest.mark.parametrize(
    "kw", [{"block_at": -1}, {"block_at": 101}, {"max_tracked": 0}, {"mode": "strict"}], ids=lambda k: str(k)
)
def test_bad_construction_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        prot(**kw)


# ------------------------------------------------------------------------------------ allowlist

ALLOW = (ipaddress.ip_network("192.0.2.0/28"), ipaddress.ip_network("2001:db8:1::/48"))


@pytest.mark.parametrize("ip", ["192.0.2.1", "192.0.2.15", "2001:db8:1::42", "::ffff:192.0.2.3"])
def test_allowlisted_addresses_are_never_scored(ip: str) -> None:
    p = prot(mode="enforce", allow_ips=ALLOW)
    d = p.assess(facts(ip=ip, user_agent="curl/8", forwarded_from_untrusted=True, tickets_held_by_ip=99))
    assert d == Decision(0, (), None, "allow", True)
    assert p.tracked == 0 and p.stats()["allowlisted"] == 1 and p.stats()["recent"] == []


@pytest.mark.parametrize("ip", ["192.0.2.16", "2001:db8:2::1", "not-an-address", "", "10.0.0.1"])
def test_addresses_outside_the_allowlist_are_scored(ip: str) -> None:
    d = prot(mode="enforce", allow_ips=ALLOW).assess(facts(ip=ip, user_agent="curl/8"))
    assert not d.allowlisted and d.action == "block"


# ------------------------------------------------------------------------------------ stats & LRU


def test_stats_show_totals_signal_counts_and_the_last_50_decisions_newest_first() -> None:
    clock = FakeClock()
    p = prot(clock, mode="enforce")
    for i in range(60):
        clock.advance(0.5 + (i % 7))
        p.assess(facts(ip=f"10.0.0.{i}", user_agent="curl/8" if i % 2 else CHROME))
    s = p.stats()
    assert s["assessed"] == 60 and s["blocked"] == 30 and s["warned"] == 0
    assert s["signals"]["automation_client"] == 30 and set(s["signals"]) == set(SIGNALS)
    recent = s["recent"]
    assert len(recent) == 50
    assert recent[0]["ip"] == "10.0.0.59" and recent[-1]["ip"] == "10.0.0.10"
    assert recent[0] == {
        "ts": clock.wall_ms(),
        "ip": "10.0.0.59",
        "score": WEIGHTS["automation_client"],
        "signals": ["automation_client"],
        "action": "block",
        "crawler": None,
    }
    assert s["tracked"] == 60 and s["maxTracked"] == 100_000 and s["mode"] == "enforce" and s["blockAt"] == 80


def test_the_lru_evicts_the_least_recently_seen_address() -> None:
    clock = FakeClock()
    p = prot(clock, max_tracked=2)
    for _ in range(2):
        p.assess(facts(ip="a", has_valid_queue_cookie=False))
        clock.advance(1)
    p.assess(facts(ip="b"))
    p.assess(facts(ip="a"))  # a is now the most recent
    p.assess(facts(ip="c"))  # evicts b
    assert p.tracked == 2
    assert p.assess(facts(ip="a", has_valid_queue_cookie=False)).signals == ("cookieless_repeat",)
    p.assess(facts(ip="d"))  # evicts c
    p.assess(facts(ip="e"))  # evicts a, and with it a's history
    assert p.assess(facts(ip="a", has_valid_queue_cookie=False)).signals == ()
    assert p.tracked == 2


def test_no_regex_is_compiled_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    p = prot()

    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("regex compiled during assess")

    monkeypatch.setattr(re, "compile", boom)
    monkeypatch.setattr(re, "search", boom)
    monkeypatch.setattr(re, "match", boom)
    for i, ua in enumerate((*BROWSERS, *AUTOMATION_UAS, *CRAWLER_UAS)):
        p.assess(facts(ip=f"10.1.0.{i}", user_agent=ua))


def test_user_agent_classification_cache_is_bounded() -> None:
    p = prot()
    for i in range(P.UA_CACHE_MAX + 10):
        p.assess(facts(user_agent=f"{CHROME} build/{i}"))
    assert len(p._ua_cache) <= P.UA_CACHE_MAX


# ------------------------------------------------------------------------------------ properties

_uas = st.one_of(
    st.sampled_from(BROWSERS + AUTOMATION_UAS + CRAWLER_UAS + ("python-requests/2.31 googlebot",)),
    st.text(max_size=40),
)
_header = st.one_of(st.none(), st.just(""), st.sampled_from(["*/*", "en", "gzip", "?0", "x"]))
_facts = st.builds(
    RequestFacts,
    ip=st.sampled_from(["10.0.0.1", "10.0.0.2", "192.0.2.5", "2001:db8::1", "203.0.113.50", "junk"]),
    user_agent=_uas,
    accept=_header,
    accept_language=_header,
    accept_encoding=_header,
    sec_fetch_site=_header,
    sec_fetch_mode=_header,
    sec_fetch_dest=_header,
    sec_ch_ua=_header,
    forwarded_from_untrusted=st.booleans(),
    has_valid_queue_cookie=st.booleans(),
    tickets_held_by_ip=st.integers(min_value=0, max_value=10**6),
)
_modes = st.sampled_from(["monitor", "enforce"])
_room_modes = st.sampled_from([None, "monitor", "enforce"])
_steps = st.lists(st.tuples(_facts, st.integers(min_value=0, max_value=120_000), _room_modes), min_size=1, max_size=40)


def _drive(p: Protection, clock: FakeClock, steps: list[tuple[RequestFacts, int, Mode | None]]) -> list[Decision]:
    out: list[Decision] = []
    for f, gap_ms, room in steps:
        clock.advance(gap_ms / 1000)
        out.append(p.assess(f, room_mode=room))
    return out


@settings(max_examples=300, deadline=None)
@given(steps=_steps, mode=_modes, block_at=st.integers(min_value=0, max_value=100))
def test_property_score_bounds_and_action_rule(
    steps: list[tuple[RequestFacts, int, Mode | None]], mode: Mode, block_at: int
) -> None:
    clock = FakeClock()
    p = prot(clock, mode=mode, block_at=block_at)
    for (f, _, room), d in zip(steps, _drive(p, clock, steps), strict=True):
        assert 0 <= d.score <= 100
        assert d.signals == tuple(s for s in SIGNALS if s in d.signals)  # known, ordered, no repeats
        assert d.score == min(100, sum(_points(s, f) for s in d.signals))
        effective = room or mode
        expected = "allow"
        if d.signals and d.score >= block_at:
            expected = "block" if effective == "enforce" else "monitor"
        assert d.action == expected
    s = p.stats()
    assert s["assessed"] == len(steps) and s["blocked"] + s["warned"] <= len(steps)


def _points(signal: str, f: RequestFacts) -> int:
    if signal == "ticket_spread" and f.tickets_held_by_ip < P.TICKET_SPREAD_HOARD_AT:
        return P.TICKET_SPREAD_WIDE
    return WEIGHTS[signal]


@settings(max_examples=200, deadline=None)
@given(steps=_steps, block_at=st.integers(min_value=0, max_value=100))
def test_property_monitor_never_blocks(steps: list[tuple[RequestFacts, int, Mode | None]], block_at: int) -> None:
    clock = FakeClock()
    p = prot(clock, mode="monitor", block_at=block_at)
    steps = [(f, gap, None if room == "enforce" else room) for f, gap, room in steps]
    assert all(d.action != "block" for d in _drive(p, clock, steps))
    p2 = prot(clock, mode="enforce", block_at=block_at)  # a room in monitor overrides an enforcing server
    assert all(d.action != "block" for d in _drive(p2, clock, [(f, g, "monitor") for f, g, _ in steps]))
    assert p.stats()["blocked"] == 0 == p2.stats()["blocked"]


@settings(max_examples=200, deadline=None)
@given(steps=_steps, mode=_modes, block_at=st.integers(min_value=0, max_value=100))
def test_property_allowlisted_never_blocks(
    steps: list[tuple[RequestFacts, int, Mode | None]], mode: Mode, block_at: int
) -> None:
    clock = FakeClock()
    allow = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::/32"))
    p = prot(clock, mode=mode, block_at=block_at, allow_ips=allow)
    for (f, _, _), d in zip(steps, _drive(p, clock, steps), strict=True):
        if f.ip in ("10.0.0.1", "10.0.0.2", "2001:db8::1"):
            assert d == Decision(0, (), None, "allow", True)
        else:
            assert not d.allowlisted


@settings(max_examples=200, deadline=None)
@given(
    steps=_steps,
    crawler=st.sampled_from(CRAWLER_TOKENS),
    decoration=st.sampled_from(["{}", "Mozilla/5.0 (compatible; {}/2.1)", "{} Chrome/124.0 Safari", "x {}-y"]),
    mode=_modes,
    block_at=st.integers(min_value=0, max_value=100),
)
def test_property_crawlers_without_a_library_token_are_never_blocked(
    steps: list[tuple[RequestFacts, int, Mode | None]], crawler: str, decoration: str, mode: Mode, block_at: int
) -> None:
    clock = FakeClock()
    p = prot(clock, mode=mode, block_at=block_at)
    ua = decoration.format(crawler)
    steps = [(dataclasses.replace(f, user_agent=ua), gap, room) for f, gap, room in steps]
    for d in _drive(p, clock, steps):
        assert d.action == "allow" and d.score == 0 and d.crawler == crawler


@settings(max_examples=200, deadline=None)
@given(
    ips=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=120),
    max_tracked=st.integers(min_value=1, max_value=12),
)
def test_property_the_lru_never_exceeds_max_tracked(ips: list[int], max_tracked: int) -> None:
    clock = FakeClock()
    p = prot(clock, max_tracked=max_tracked)
    for i in ips:
        clock.advance(0.25)
        p.assess(facts(ip=f"10.9.0.{i}", has_valid_queue_cookie=i % 2 == 0))
        assert p.tracked <= max_tracked
    assert p.tracked == min(max_tracked, len(set(ips)))
