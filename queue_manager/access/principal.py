"""A verified caller of the admin API and what each role may do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["owner", "operator", "viewer", "monitor"]
Grant = Literal["read", "write", "owner", "team"]

# read: look at live numbers; write: run the queue; owner: irreversible and capture-deciding actions;
# team: what a share link must never see (proxyOrigin, origin lists, URL rules, drill-down, audit).
_GRANTS: dict[Role, frozenset[Grant]] = {
    "owner": frozenset({"read", "write", "owner", "team"}),
    "operator": frozenset({"read", "write", "team"}),
    "viewer": frozenset({"read", "team"}),
    "monitor": frozenset({"read"}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    who: str  # "ADMIN_KEY", an operator's name, or "monitor link"
    role: Role
    credential: str  # what revocation names: "admin", "op:<id>", "mon:<link id>", "ses:<session id>"
    via: Literal["bearer", "cookie", "ticket"] = "bearer"
    operator_id: str | None = None
    link_id: str | None = None
    session_id: str | None = None
    # every credential this principal rests on (a console session opened with an operator key rests on both)
    rests_on: tuple[str, ...] = ()

    def may(self, grant: Grant) -> bool:
        return grant in _GRANTS[self.role]

    @property
    def actor_id(self) -> str | None:
        return self.operator_id or ("ADMIN_KEY" if self.credential == "admin" or "admin" in self.rests_on else None)

    def public(self) -> dict[str, object]:
        return {
            "who": self.who,
            "role": self.role,
            "via": self.via,
            "operatorId": self.operator_id,
            "grants": sorted(g for g in _GRANTS[self.role]),
        }
