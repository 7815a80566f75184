"""Access rules (engine/access_rules.py): each condition, all of them together, first match wins, the
checks of a bad rule (400 invalid_access_rules naming the rule), and the header's secret never read back."""

from __future__ import annotations

import pytest

from queue_manager.engine.access_rules import (
    CRAWLERS,
    Facts,
    claimed_crawler,
    first_match,
    in_domains,
    parse_access_rules,
)
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import RoomConfig, apply_fields, normalise_body

SECRET = "probe-secret-1234"


def rules(*items: dict[str, object]) -> tuple:  # type: ignore[type-arg]
    return parse_access_rules(list(items))


def winner(parsed: tuple, facts: Facts) -> str | None:  # type: ignore[type-arg]
    hit = first_match(parsed, facts)
    return None if hit is None else hit[1].id


def test_cidrs_match_v4_and_v6_and_a_v4_mapped_address() -> None:
    parsed = rules({"id": "office", "action": "bypass", "match": {"cidrs": ["203.0.113.0/24", "2001:db8::/32"]}})
    assert winner(parsed, Facts(ip="203.0.113.9")) == "office"
    assert winner(parsed, Facts(ip="2001:db8::1")) == "office"
    assert winner(parsed, Facts(ip="::ffff:203.0.113.10")) == "office"
    assert winner(parsed, Facts(ip="198.51.100.1")) is None
    assert winner(parsed, Facts(ip="not an address")) is None


def test_header_must_equal_the_secret() -> None:
    parsed = rules({"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}})
    assert winner(parsed, Facts(ip="1.2.3.4", headers={"x-probe": SECRET})) == "probe"
    assert winner(parsed, Facts(ip="1.2.3.4", headers={"x-probe": SECRET + "x"})) is None
    assert winner(parsed, Facts(ip="1.2.3.4", headers={})) is None


def test_path_prefix_and_extensions() -> None:
    parsed = rules(
        {"id": "static", "action": "bypass", "match": {"extensions": [".PNG", ".css"]}},
        {"id": "api", "action": "block", "match": {"pathPrefix": "/internal/"}},
    )
    assert winner(parsed, Facts(ip="1.2.3.4", path="/img/logo.png")) == "static"
    assert winner(parsed, Facts(ip="1.2.3.4", path="/a/site.CSS")) == "static"
    assert winner(parsed, Facts(ip="1.2.3.4", path="/.png")) is None  # a bare extension is no file of that type
    assert winner(parsed, Facts(ip="1.2.3.4", path="/internal/x")) == "api"
    assert winner(parsed, Facts(ip="1.2.3.4", path="/internals")) is None
    assert winner(parsed, Facts(ip="1.2.3.4", path=None)) is None


def test_countries_only_from_a_known_country() -> None:
    parsed = rules({"id": "geo", "action": "block", "match": {"countries": ["de", "FR"]}})
    assert winner(parsed, Facts(ip="1.2.3.4", country="DE")) == "geo"
    assert winner(parsed, Facts(ip="1.2.3.4", country="fr")) == "geo"
    assert winner(parsed, Facts(ip="1.2.3.4", country=None)) is None
    assert winner(parsed, Facts(ip="1.2.3.4", country="US")) is None


def test_verified_crawler_only_when_verified() -> None:
    parsed = rules({"id": "bots", "action": "bypass", "match": {"verifiedCrawlers": ["googlebot", "bingbot"]}})
    assert winner(parsed, Facts(ip="1.2.3.4", crawler="googlebot")) == "bots"
    assert winner(parsed, Facts(ip="1.2.3.4", crawler=None)) is None
    assert winner(parsed, Facts(ip="1.2.3.4", crawler="applebot")) is None


def test_every_condition_of_a_rule_must_hold() -> None:
    parsed = rules({"id": "both", "action": "bypass", "match": {"cidrs": ["10.0.0.0/8"], "pathPrefix": "/health"}})
    assert winner(parsed, Facts(ip="10.1.2.3", path="/health")) == "both"
    assert winner(parsed, Facts(ip="10.1.2.3", path="/shop")) is None
    assert winner(parsed, Facts(ip="11.1.2.3", path="/health")) is None


def test_first_match_wins_so_a_queue_rule_carves_an_exception() -> None:
    parsed = rules(
        {"id": "checkout", "action": "queue", "match": {"pathPrefix": "/checkout"}},
        {"id": "office", "action": "bypass", "match": {"cidrs": ["10.0.0.0/8"]}},
    )
    assert winner(parsed, Facts(ip="10.0.0.1", path="/checkout/pay")) == "checkout"
    assert winner(parsed, Facts(ip="10.0.0.1", path="/shop")) == "office"


def test_user_agent_claims_and_domains() -> None:
    ua = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    crawler = claimed_crawler(ua)
    assert crawler is not None and crawler.name == "googlebot"
    assert claimed_crawler("Mozilla/5.0 (compatible; bingbot/2.0)") is CRAWLERS["bingbot"]
    assert claimed_crawler("Mozilla/5.0 (compatible; YandexBot/3.0)") is CRAWLERS["yandex"]
    assert claimed_crawler("Mozilla/5.0 Firefox/120") is None
    assert in_domains("crawl-66-249-66-1.googlebot.com.", CRAWLERS["googlebot"].domains)
    assert not in_domains("googlebot.com.evil.example", CRAWLERS["googlebot"].domains)
    assert not in_domains("evilgooglebot.com", CRAWLERS["googlebot"].domains)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("nope", "must be a list"),
        ([{"action": "bypass", "match": {"cidrs": ["10.0.0.0/8"]}}] * 51, "at most 50"),
        ([{"action": "allow", "match": {"cidrs": ["10.0.0.0/8"]}}], "accessRules[0]: action"),
        ([{"action": "bypass", "match": {}}], "accessRules[0]: match"),
        ([{"action": "bypass", "match": {"cidr": []}}], "unknown match key"),
        ([{"action": "bypass", "match": {"cidrs": ["10.0.0.300/8"]}}], "not an IPv4 or IPv6 network"),
        ([{"action": "bypass", "match": {"header": {"name": "X-Probe", "value": "short"}}}], "8 to 256"),
        ([{"action": "bypass", "match": {"header": {"name": "X Probe", "value": SECRET}}}], "header name"),
        ([{"action": "bypass", "match": {"pathPrefix": "shop"}}], "starting with '/'"),
        ([{"action": "bypass", "match": {"extensions": ["png"]}}], "not like '.png'"),
        ([{"action": "block", "match": {"countries": ["Germany"]}}], "not like 'DE'"),
        ([{"action": "bypass", "match": {"verifiedCrawlers": ["slurp"]}}], "verifiedCrawlers"),
        (
            [
                {"id": "x", "action": "bypass", "match": {"pathPrefix": "/a"}},
                {"id": "x", "action": "queue", "match": {"pathPrefix": "/b"}},
            ],
            "accessRules[1]: the id 'x'",
        ),
        ([{"action": "bypass", "match": {"pathPrefix": "/"}, "extra": 1}], "unknown key"),
    ],
)
def test_a_bad_rule_is_refused_naming_it(body: object, says: str) -> None:
    with pytest.raises(EngineError) as err:
        parse_access_rules(body)
    assert err.value.status == 400 and err.value.code == "invalid_access_rules"
    assert says in err.value.message


def test_the_header_value_is_never_read_back_and_a_read_sent_back_keeps_it() -> None:
    base = RoomConfig(id="r", target_url="https://shop.example/")
    body = {
        "id": "r",
        "accessRules": [{"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}}],
    }
    cfg, _ = apply_fields(base, normalise_body(body))
    read = cfg.to_public(secrets=False)["accessRules"]
    assert read[0]["match"]["header"] == {"name": "x-probe", "set": True}
    assert SECRET not in repr(read)
    assert cfg.to_public()["accessRules"][0]["match"]["header"]["value"] == SECRET  # the stored form keeps it
    back = {"id": "r", "accessRules": [{**read[0], "matchCount": 3, "lastMatchAt": None}]}
    again, _ = apply_fields(cfg, normalise_body(back))
    assert again.access_rules[0].header_value == SECRET
    assert again.access_rules[0].key == cfg.access_rules[0].key  # the same rule: its counts go on
    with pytest.raises(EngineError, match="no value to keep"):  # "set" with nothing kept to keep
        apply_fields(base, normalise_body(back))


def test_a_changed_rule_has_a_new_key() -> None:
    one = rules({"id": "a", "action": "bypass", "match": {"pathPrefix": "/x"}})[0]
    same = rules({"id": "a", "action": "bypass", "match": {"pathPrefix": "/x"}})[0]
    other = rules({"id": "a", "action": "bypass", "match": {"pathPrefix": "/y"}})[0]
    assert one.key == same.key != other.key
