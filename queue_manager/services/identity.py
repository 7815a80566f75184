"""Who a request is: the one client address everything uses, computed once per request.

* The socket peer, unless
* the peer is listed in TRUST_PROXY_IPS and TRUST_PROXY > 0: then the address TRUST_PROXY hops
  back in X-Forwarded-For (and X-Forwarded-Proto decides the scheme), or
* EDGE_SECRET is set: then ``cf-connecting-ip`` (the socket address when it is missing or invalid).

Where this server is, for the absolute URLs it hands out (``IdentityResolver.public_base``): PUBLIC_URL when
set; otherwise, from a listed proxy, the first X-Forwarded-Host value (when it is a host[:port]) with the scheme
above; otherwise the request's Host. X-Forwarded-Host is never believed from anyone else, nor behind EDGE_SECRET.

Fingerprints for ticket binding: the strict tier pins the socket peer; the second tier leaves it
out and is computed only for a request that came through a listed proxy.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

from queue_manager.config import Settings
from queue_manager.engine.model import ClientId
from queue_manager.http.wire import Request

FORWARDED_HEADERS = (b"x-forwarded-for", b"forwarded", b"cf-connecting-ip", b"x-real-ip", b"true-client-ip")


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogateescape"), digest_size=12).digest()


def cookie_hash(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()[:16]


# one DNS label: letters, digits and inner hyphens
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")


def valid_host(text: str) -> str | None:
    """``text`` as a lower-cased ``host[:port]`` (a DNS name, an IPv4 address or a bracketed IPv6 one), or None.

    Nothing else gets through: no user info, path, query, fragment, spaces or a second value."""
    text = text.strip().lower()
    if not text or len(text) > 260:
        return None
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or "%" in text[:end]:  # no zone id: it is not part of a URL's host
            return None
        host, rest = text[: end + 1], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                return None
            port = rest[1:]
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    else:
        if text.count(":") == 1:
            host, port = text.split(":")
        elif ":" in text:
            return None  # an IPv6 address must be bracketed
        name = host[:-1] if host.endswith(".") else host
        if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
            return None
    if port is not None and (not _PORT.fullmatch(port) or not 0 < int(port) < 65536):
        return None
    return host if port is None else f"{host}:{port}"


def valid_ip(text: str) -> str | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


@dataclass(slots=True)
class Identity:
    ip: str
    peer: str
    scheme: str
    trusted_peer: bool
    forwarded: str  # the forwarded chain believed (empty when none)
    user_agent: str
    edge_fallback: bool = False
    public: str | None = None  # IdentityResolver.public_base, once asked for

    def client(self, qms_value: str | None) -> ClientId:
        key = (self.peer, self.forwarded, self.user_agent, self.ip, self.trusted_peer)
        fps = _FP_CACHE.get(key)
        if fps is None:
            fp = _digest(self.peer, self.forwarded, self.user_agent)
            fp2 = _digest(self.ip, self.user_agent) if self.trusted_peer else None
            if len(_FP_CACHE) >= _FP_CACHE_MAX:
                _FP_CACHE.clear()
            _FP_CACHE[key] = fps = (fp, fp2)
        return ClientId(ident=self.ip, fp=fps[0], fp2=fps[1], cookie=cookie_hash(qms_value) if qms_value else None)


# fingerprints of recent (peer, forwarded chain, User-Agent) combinations: a returning visitor costs a look-up
_FP_CACHE: dict[tuple[str, str, str, str, bool], tuple[bytes, bytes | None]] = {}
_FP_CACHE_MAX = 50_000


class IdentityResolver:
    def __init__(self, settings: Settings) -> None:
        self.hops = settings.trust_proxy
        self.nets = settings.trust_proxy_ips
        self.edge = bool(settings.edge_secrets)
        self.cookie_secure = settings.cookie_secure
        self.public_url = settings.public_url.rstrip("/") if settings.public_url else None
        self.fallback_host = _listen_host(settings.host, settings.port)
        self._trusted_cache: dict[str, bool] = {}
        self._peers: dict[str, str] = {}

    def _trusted(self, peer: str) -> bool:
        hit = self._trusted_cache.get(peer)
        if hit is None:
            try:
                addr = ipaddress.ip_address(peer)
                hit = any(addr in net for net in self.nets)
            except ValueError:
                hit = False
            if len(self._trusted_cache) > 10_000:
                self._trusted_cache.clear()
            self._trusted_cache[peer] = hit
        return hit

    def resolve(self, req: Request) -> Identity:
        cached = req.ident
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        req.ident = ident = self._resolve(req)
        return ident

    def _resolve(self, req: Request) -> Identity:
        client = req.scope.get("client")
        raw_peer = client[0] if client else ""
        peer = self._peers.get(raw_peer)
        if peer is None:
            peer = valid_ip(raw_peer) or "0.0.0.0"
            if len(self._peers) > 10_000:
                self._peers.clear()
            self._peers[raw_peer] = peer
        ua = req.header(b"user-agent") or ""
        scheme = req.scope.get("scheme", "http")
        if self.edge:
            cf = req.header(b"cf-connecting-ip")
            ip = valid_ip(cf) if cf else None
            proto = req.header(b"x-forwarded-proto")
            if proto in ("http", "https"):
                scheme = proto
            return Identity(ip or peer, peer, scheme, False, ip or "", ua, edge_fallback=ip is None)
        trusted = bool(self.hops) and bool(self.nets) and self._trusted(peer)
        if not trusted:
            return Identity(peer, peer, scheme, False, "", ua)
        xff = req.header(b"x-forwarded-for") or ""
        chain = [p.strip() for p in xff.split(",") if p.strip()]
        ip = peer
        if chain:
            pick = chain[-self.hops] if len(chain) >= self.hops else chain[0]
            ip = valid_ip(pick) or peer
        proto = (req.header(b"x-forwarded-proto") or "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scheme = proto
        return Identity(ip, peer, scheme, True, xff, ua)

    def public_base(self, req: Request) -> str:
        """The scheme and host (and PUBLIC_URL's path) of every absolute URL this request is handed; no
        trailing slash. Worked out on first use and kept with the request's identity."""
        ident = self.resolve(req)
        base = ident.public
        if base is None:
            ident.public = base = self._public_base(req, ident)
        return base

    def _public_base(self, req: Request, ident: Identity) -> str:
        if self.public_url:
            return self.public_url
        host = None
        if ident.trusted_peer:  # a listed proxy: never the edge, never a direct client
            forwarded = req.header(b"x-forwarded-host")
            if forwarded:
                host = valid_host(forwarded.split(",")[0])  # the first value, like X-Forwarded-Proto
        if host is None:
            host = req.header(b"host") or self.fallback_host
        return f"{ident.scheme}://{host}"

    def secure(self, ident: Identity) -> bool:
        return self.cookie_secure or ident.scheme == "https"


def _listen_host(host: str, port: int) -> str:
    """host:port for a request without a Host header: the listening address, or localhost for a wildcard."""
    if host in ("", "0.0.0.0", "::"):
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"
