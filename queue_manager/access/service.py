"""Credentials: ADMIN_KEY, named operator keys, console sessions, monitor links and stream tickets.

* Operator keys ``qmo_<id>_<secret>`` are shown once; only an HMAC verifier is stored (v2: keyed with
  HKDF(SECRET, "qm:operator"); legacy: keyed with SECRET). A key verified under SECRET_PREVIOUS is
  re-keyed to SECRET on that request, in the form it had (v2 is never downgraded; legacy moves to v2
  once TOKEN_SIGN_V2 is on).
* A console session is a signed ``qm_console`` cookie naming who signed in and a session id — never
  the key — revocable server-side. One opened with ADMIN_KEY also carries ``ak``, an identifier of that
  key keyed with SECRET (HMAC under HKDF(SECRET, "qm:admin-key-id")), so a changed ADMIN_KEY ends it; it
  tells a reader of the cookie nothing about the key (an unkeyed hash would let them test guesses).
* A monitor link is a signed read-only token (purpose ``monitor``) that expires after
  MONITOR_TOKEN_TTL_SEC and can be revoked one by one, all at once, or with its author.
* Stream tickets are single-use and live 30 s.

Revoking anything tells the listeners (the live admin streams) which credentials just died.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from queue_manager.access.authfail.base import AuthBudget
from queue_manager.access.authfail.memory import AuthFailures
from queue_manager.access.principal import Principal, Role
from queue_manager.access.records.base import AccessStore, AuditRow, MonitorLink, OperatorRecord
from queue_manager.clock import Clock
from queue_manager.config import Settings
from queue_manager.tokens import TokenError, TokenSigner, hkdf_key

SESSION_TTL_SEC = 12 * 3600
TICKET_TTL_MS = 30_000
OPERATOR_ROLES: tuple[Role, ...] = ("owner", "operator", "viewer")
#: Console sessions a key that can change nothing (a viewer's) may open per minute on one instance: each
#: sign-in is an audit row, and a read-only credential must not be able to grow the trail at will.
READ_ONLY_SIGN_INS_PER_MIN = 10

RevocationListener = Callable[[set[str]], None]


#: HKDF info of the key the ADMIN_KEY identifier is an HMAC under (one purpose, nothing else derives it).
ADMIN_KEY_ID_INFO = "qm:admin-key-id"


def _admin_key_id(secret: str, admin_key: str) -> str:
    """An identifier of ``admin_key`` that says nothing about it without ``secret`` (128 bits, hex)."""
    return hmac.new(hkdf_key(secret, ADMIN_KEY_ID_INFO, 32), admin_key.encode(), hashlib.sha256).hexdigest()[:32]


def _role(value: object) -> Role:
    """An operator's stored role; anything unknown reads as the least privilege."""
    if value == "owner":
        return "owner"
    if value == "operator":
        return "operator"
    return "viewer"


class Access:
    def __init__(
        self,
        settings: Settings,
        signer: TokenSigner,
        clock: Clock,
        store: AccessStore,
        failures: AuthBudget | None = None,
    ) -> None:
        self.settings = settings
        self.signer = signer
        self.clock = clock
        self.store = store
        # ADMIN_AUTH_FAIL_PER_MIN: this process's budget, or on STORE=valkey the fleet's
        # (authfail.SharedAuthFailures, chosen with the store's parts)
        self.failures: AuthBudget = (
            failures
            if failures is not None
            else AuthFailures(settings.admin_auth_fail_per_min, settings.rate_limit_max_keys, clock)
        )
        self._secrets = [settings.secret] + ([settings.secret_previous] if settings.secret_previous else [])
        # ADMIN_KEY's identifier under SECRET (what a new session carries), then under SECRET_PREVIOUS (a
        # session opened before the rotation keeps working while its signature does)
        self._admin_ids = [_admin_key_id(secret, settings.admin_key) for secret in self._secrets]
        # compared as digests of one length, so the comparison says nothing about the key's length; this
        # digest stays in the process (never in a cookie or an answer)
        self._admin_digest = hashlib.sha256(settings.admin_key.encode()).digest()
        self._listeners: list[RevocationListener] = []

    def on_revoke(self, listener: RevocationListener) -> None:
        self._listeners.append(listener)

    def _revoked(self, credentials: set[str]) -> None:
        for listener in self._listeners:
            listener(credentials)

    # ------------------------------------------------------------------ audit

    async def audit(
        self,
        actor: Principal | None,
        action: str,
        *,
        target: str | None = None,
        room_id: str | None = None,
        ip: str | None = None,
        ok: bool = True,
        **detail: Any,
    ) -> None:
        row = AuditRow(
            ts=self.clock.wall_ms(),
            actor=actor.who if actor else "system",
            actor_id=actor.actor_id if actor else None,
            role=actor.role if actor else None,
            action=action,
            target=target,
            room_id=room_id,
            ip=ip,
            ok=ok,
            detail=detail,
        )
        await self.store.append_audit(row)

    # ------------------------------------------------------------------ operator keys

    def _verifier(self, key: str, form: str, secret: str) -> dict[str, Any]:
        if form == "v2":
            mac = hmac.new(hkdf_key(secret, "qm:operator", 32), key.encode(), hashlib.sha256).hexdigest()
            kid = hkdf_key(secret, "qm:kid", 4).hex()
            return {"form": "v2", "kid": kid, "mac": mac}
        return {
            "form": "legacy",
            "kid": None,
            "mac": hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest(),
        }

    async def mint_operator(self, name: str, role: Role, actor: Principal) -> tuple[OperatorRecord, str]:
        op_id = secrets.token_hex(4)
        while await self.store.get_operator(op_id) is not None:
            op_id = secrets.token_hex(4)
        key = f"qmo_{op_id}_{secrets.token_urlsafe(24)}"
        form = "v2" if self.settings.token_sign_v2 else "legacy"
        record = OperatorRecord(
            id=op_id,
            name=name,
            role=role,
            verifier=self._verifier(key, form, self.settings.secret),
            created_at=self.clock.wall_ms(),
            created_by=actor.who,
        )
        await self.store.put_operator(record)
        return record, key

    async def _operator_from_key(self, key: str) -> OperatorRecord | None:
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != "qmo" or not parts[1] or len(key) > 200:
            return None
        record = await self.store.get_operator(parts[1])
        if record is None or not record.active:
            return None
        form = record.verifier.get("form", "legacy")
        stored = str(record.verifier.get("mac", ""))
        for i, secret in enumerate(self._secrets):
            candidate = self._verifier(key, form, secret)
            if hmac.compare_digest(candidate["mac"], stored):
                new_form = "v2" if (form == "v2" or self.settings.token_sign_v2) else "legacy"
                if i > 0 or new_form != form:  # re-key to the current SECRET (never downgraded)
                    record.verifier = self._verifier(key, new_form, self.settings.secret)
                    await self.store.put_operator(record)
                return record
        return None

    async def list_operators(self) -> list[dict[str, Any]]:
        now = self.clock.wall_ms()
        links = await self.store.list_links()
        out = []
        for op in await self.store.list_operators():
            live = sum(1 for link in links if link.created_by_id == op.id and link.live(now))
            out.append({**op.public(), "liveLinks": live})
        return out

    async def revoke_operator(self, op_id: str, *, purge: bool) -> tuple[OperatorRecord | None, int]:
        record = await self.store.get_operator(op_id)
        if record is None:
            return None, 0
        now = self.clock.wall_ms()
        closed = await self._revoke_links(lambda link: link.created_by_id == op_id)
        if purge:
            await self.store.delete_operator(op_id)
        elif record.revoked_at is None:
            record.revoked_at = now
            await self.store.put_operator(record)
        self._revoked({f"op:{op_id}"})
        return record, closed

    # ------------------------------------------------------------------ bearer credentials

    async def from_bearer(self, credential: str) -> Principal | None:
        if hmac.compare_digest(hashlib.sha256(credential.encode()).digest(), self._admin_digest):
            return Principal("ADMIN_KEY", "owner", "admin", rests_on=("admin",))
        if credential.startswith("qmo_"):
            op = await self._operator_from_key(credential)
            if op is None:
                return None
            role = _role(op.role)
            cred = f"op:{op.id}"
            return Principal(op.name, role, cred, operator_id=op.id, rests_on=(cred,))
        return await self._from_monitor_token(credential)

    async def _from_monitor_token(self, token: str) -> Principal | None:
        try:
            payload = self.signer.verify(token, "monitor", max_age_sec=self.settings.monitor_token_ttl_sec)
        except TokenError:
            return None
        link_id = payload.get("id")
        if payload.get("t") != "mon" or not isinstance(link_id, str):
            return None
        link = await self.store.get_link(link_id)
        if link is None or not link.live(self.clock.wall_ms()) or not hmac.compare_digest(link.token, token):
            return None
        cred = f"mon:{link_id}"
        return Principal("monitor link", "monitor", cred, link_id=link_id, rests_on=(cred,))

    # ------------------------------------------------------------------ console sessions

    def open_session(self, principal: Principal) -> tuple[str, str]:
        """The qm_console cookie value and its session id (the payload names who, never the key)."""
        sid = secrets.token_urlsafe(12)
        payload: dict[str, Any] = {"t": "ses", "sid": sid, "who": principal.who, "role": principal.role}
        if principal.operator_id:
            payload["op"] = principal.operator_id
        else:
            payload["ak"] = self._admin_ids[0]
        return self.signer.sign(payload, "session"), sid

    async def from_session(self, cookie: str) -> Principal | None:
        try:
            payload = self.signer.verify(cookie, "session", max_age_sec=SESSION_TTL_SEC)
        except TokenError:
            return None
        sid, who, role = payload.get("sid"), payload.get("who"), payload.get("role")
        if payload.get("t") != "ses" or not isinstance(sid, str) or not isinstance(who, str):
            return None
        if role not in ("owner", "operator", "viewer") or await self.store.session_revoked(sid):
            return None
        op_id = payload.get("op")
        if isinstance(op_id, str):
            op = await self.store.get_operator(op_id)
            if op is None or not op.active:
                return None
            role = op.role  # a role change applies to open sessions at once
            base = f"op:{op_id}"
        else:
            # ADMIN_KEY changed: every session it opened ends. A cookie from before ``ak`` (it carried ``kh``,
            # an unkeyed hash of the key) has none and ends too: its owner signs in again.
            ak = payload.get("ak")
            presented = ak.encode() if isinstance(ak, str) else b""
            if not any(hmac.compare_digest(presented, known.encode()) for known in self._admin_ids):
                return None
            base = "admin"
        cred = f"ses:{sid}"
        return Principal(
            who,
            _role(role),
            cred,
            via="cookie",
            operator_id=op_id if isinstance(op_id, str) else None,
            session_id=sid,
            rests_on=(base, cred),
        )

    async def end_session(self, principal: Principal) -> None:
        if principal.session_id:
            until = self.clock.wall_ms() + SESSION_TTL_SEC * 1000
            await self.store.revoke_session(principal.session_id, until)
            self._revoked({f"ses:{principal.session_id}"})

    # ------------------------------------------------------------------ monitor links

    async def mint_link(self, actor: Principal) -> MonitorLink:
        link_id = secrets.token_hex(6)
        now = self.clock.wall_ms()
        token = self.signer.sign({"t": "mon", "id": link_id}, "monitor")
        link = MonitorLink(
            id=link_id,
            token=token,
            created_at=now,
            expires_at=now + self.settings.monitor_token_ttl_sec * 1000,
            created_by=actor.who,
            created_by_id=actor.actor_id,
        )
        await self.store.put_link(link)
        return link

    async def list_links(self) -> list[dict[str, Any]]:
        now = self.clock.wall_ms()
        return [link.public(now) for link in sorted(await self.store.list_links(), key=lambda x: -x.created_at)]

    async def reveal_link(self, link_id: str) -> MonitorLink | None:
        link = await self.store.get_link(link_id)
        if link is None or not link.live(self.clock.wall_ms()):
            return None  # a revoked or expired link can never be re-copied
        return link

    async def revoke_link(self, link_id: str) -> bool:
        return await self._revoke_links(lambda link: link.id == link_id) > 0

    async def revoke_all_links(self) -> int:
        return await self._revoke_links(lambda link: True)

    async def _revoke_links(self, which: Callable[[MonitorLink], bool]) -> int:
        now = self.clock.wall_ms()
        closed: set[str] = set()
        for link in await self.store.list_links():
            if which(link) and link.live(now):
                link.revoked_at = now
                await self.store.put_link(link)
                closed.add(f"mon:{link.id}")
        if closed:
            self._revoked(closed)
        return len(closed)

    # ------------------------------------------------------------------ stream tickets

    async def mint_ticket(self, principal: Principal, credential_token: str | None) -> str:
        ticket = secrets.token_urlsafe(24)
        data = {
            "who": principal.who,
            "role": principal.role,
            "credential": principal.credential,
            "via": principal.via,
            "op": principal.operator_id,
            "link": principal.link_id,
            "sid": principal.session_id,
            "restsOn": list(principal.rests_on),
        }
        await self.store.put_ticket(ticket, data, self.clock.wall_ms() + TICKET_TTL_MS)
        return ticket

    async def spend_ticket(self, ticket: str) -> Principal | None:
        if not ticket or len(ticket) > 100:
            return None
        data = await self.store.take_ticket(ticket, self.clock.wall_ms())
        if data is None:
            return None
        principal = Principal(
            data["who"],
            data["role"],
            data["credential"],
            via="ticket",
            operator_id=data.get("op"),
            link_id=data.get("link"),
            session_id=data.get("sid"),
            rests_on=tuple(data.get("restsOn") or ()),
        )
        return principal if await self.still_valid(principal) else None

    async def still_valid(self, principal: Principal) -> bool:
        """Re-check what a long-lived stream rests on (revocation and expiry)."""
        now = self.clock.wall_ms()
        for cred in principal.rests_on:
            kind, _, ident = cred.partition(":")
            if kind == "op":
                op = await self.store.get_operator(ident)
                if op is None or not op.active:
                    return False
            elif kind == "mon":
                link = await self.store.get_link(ident)
                if link is None or not link.live(now):
                    return False
            elif kind == "ses" and await self.store.session_revoked(ident):
                return False
        return True
