"""Undeclared proxies: forwarded-address headers arriving from a peer nobody listed.

Ten or more such requests from one peer within a minute (whether TRUST_PROXY is set or not) name
that peer an undeclared proxy: a warning on /api/admin/health with the exact TRUST_PROXY_IPS line
to set, ``proxy.ok: false``, and one log line at most every 10 minutes. It never changes whose
header is believed.

The waiting-page guard stands down for such a peer only (it cannot tell the visitors behind it
apart), recognised at 10 forwarded requests a minute or WAITING_LIMIT_PER_MIN if lower, in a list
capped at 1024 that is dropped when full. With TRUST_PROXY and TRUST_PROXY_IPS both set the guard
never stands down: it can charge each visitor.
"""

from __future__ import annotations

import ipaddress
import sys
from collections import OrderedDict, deque

from queue_manager.clock import Clock
from queue_manager.config import Settings
from queue_manager.http.wire import Request

FORWARDED = (b"x-forwarded-for", b"forwarded", b"cf-connecting-ip", b"x-real-ip", b"true-client-ip")
_FORWARDED_SET = frozenset(FORWARDED)
THRESHOLD = 10
WINDOW_MS = 60_000
LOG_EVERY_MS = 600_000
TRACK_MAX = 10_000
EXEMPT_MAX = 1024
UNDECLARED_MAX = 64


class ProxyWatch:
    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.clock = clock
        self.settings = settings
        self.declared = bool(settings.trust_proxy) and bool(settings.trust_proxy_ips)
        self.enabled = not settings.edge_secrets
        waiting = settings.waiting_limit_per_min
        self.exempt_at = min(THRESHOLD, waiting) if waiting > 0 else THRESHOLD
        self._seen: OrderedDict[str, deque[int]] = OrderedDict()
        self.undeclared: OrderedDict[str, int] = OrderedDict()  # peer -> last seen ms
        self.exempt: set[str] = set()
        self._last_log = -LOG_EVERY_MS

    def observe(self, req: Request, peer: str, trusted_peer: bool) -> None:
        if not self.enabled or trusted_peer:
            return
        if _FORWARDED_SET.isdisjoint(req.headers):  # the common case, at C speed
            return
        now = self.clock.mono_ms()
        times = self._seen.get(peer)
        if times is None:
            times = deque(maxlen=THRESHOLD)
            self._seen[peer] = times
            if len(self._seen) > TRACK_MAX:
                self._seen.popitem(last=False)
        self._seen.move_to_end(peer)
        times.append(now)
        recent = sum(1 for t in times if now - t < WINDOW_MS)
        if not self.declared and recent >= self.exempt_at and peer not in self.exempt:
            if len(self.exempt) >= EXEMPT_MAX:
                self.exempt.clear()
            self.exempt.add(peer)
        if recent >= THRESHOLD:
            self.undeclared[peer] = self.clock.wall_ms()
            self.undeclared.move_to_end(peer)
            while len(self.undeclared) > UNDECLARED_MAX:
                self.undeclared.popitem(last=False)
            if now - self._last_log >= LOG_EVERY_MS:
                self._last_log = now
                print(
                    f"WARNING proxy: forwarded-address headers keep arriving from {peer}, which is not in "
                    f"TRUST_PROXY_IPS. If it is your load balancer or CDN: {self.fix_line()}",
                    file=sys.stderr,
                    flush=True,
                )

    def fix_line(self) -> str:
        entries = [str(n) for n in self.settings.trust_proxy_ips]
        for peer in self.undeclared:
            addr = ipaddress.ip_address(peer)
            entries.append(str(addr))
        return "TRUST_PROXY_IPS=" + ",".join(dict.fromkeys(entries))

    def half_configured(self) -> bool:
        return bool(self.settings.trust_proxy) != bool(self.settings.trust_proxy_ips) and self.enabled

    def health(self, *, full: bool) -> dict[str, object]:
        undeclared = bool(self.undeclared)
        out: dict[str, object] = {
            "ok": not undeclared and not self.half_configured(),
            "trustProxy": self.settings.trust_proxy,
            "forwardedFromUndeclaredPeer": undeclared,
            "halfConfigured": self.half_configured(),
        }
        if full:
            out["trustProxyIps"] = [str(n) for n in self.settings.trust_proxy_ips]
            out["undeclaredPeers"] = list(self.undeclared)
        return out

    def warnings(self) -> list[str]:
        if not self.undeclared:
            return []
        peers = ", ".join(self.undeclared)
        return [
            f"Forwarded-address headers arrive from {peers}, which is not a declared proxy: every visitor "
            f"behind it shares one address. If it is your load balancer or CDN, set {self.fix_line()} "
            "(and TRUST_PROXY); if you do not recognise it, it is a client forging the header."
        ]
