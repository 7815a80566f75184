"""The admin API calls of ``qm export`` and ``qm apply``: one operator key, one server, answers checked.

Every refusal becomes an AdminRefused carrying the server's status, code and message, shown as they are.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

TIMEOUT_SEC = 30.0


class AdminRefused(Exception):
    """The server refused a call, or could not be reached (status 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status, self.code, self.message = status, code, message


class Admin:
    def __init__(self, server: str, key: str) -> None:
        self.server = server.rstrip("/")
        self.http = httpx.Client(base_url=self.server, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT_SEC)

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            answer = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise AdminRefused(0, "unreachable", f"cannot reach {self.server}: {exc}") from None
        if answer.status_code >= 400:
            try:
                error = answer.json()
            except ValueError:
                error = {}
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("error") if isinstance(error, dict) else None
            raise AdminRefused(answer.status_code, str(code or "http_error"), str(message or answer.reason_phrase))
        return answer

    def grants(self) -> list[str]:
        who = self._call("GET", "/api/admin/whoami").json().get("principal", {})
        return [str(g) for g in who.get("grants", [])]

    def rooms(self) -> list[dict[str, Any]]:
        rooms: list[dict[str, Any]] = self._call("GET", "/api/admin/rooms").json()["rooms"]
        return rooms

    def logo(self, room: dict[str, Any]) -> bytes | None:
        """The room's logo file, as its waiting page serves it; None when it has none."""
        brand = room.get("brand")
        held = brand.get("logo") if isinstance(brand, dict) else None
        if not isinstance(held, dict):
            return None
        ext = "png" if held.get("type") == "image/png" else "svg"
        name = f"logo-{str(held.get('sha256'))[:16]}.{ext}"
        return self._call("GET", f"/w/{quote(str(room['id']), safe='')}/{name}").content

    def save(self, body: dict[str, Any]) -> None:
        self._call("POST", "/api/admin/rooms", body)

    def delete(self, room_id: str) -> None:
        self._call("DELETE", f"/api/admin/rooms/{quote(room_id, safe='')}")
