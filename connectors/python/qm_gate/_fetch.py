"""One request to the queue with the standard library (urllib), redirects not followed, within a timeout."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message


@dataclass(frozen=True, slots=True)
class Fetched:
    status: int
    headers: Message
    body: bytes

    def set_cookies(self) -> list[str]:
        return [str(v) for v in self.headers.get_all("Set-Cookie") or []]


class Unanswered(Exception):
    """The queue gave no answer: ``timeout`` or ``unreachable`` (the X-QM-Failover reason)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


def _timed_out(err: BaseException) -> bool:
    reason = getattr(err, "reason", None)
    return isinstance(err, TimeoutError | socket.timeout) or isinstance(reason, TimeoutError | socket.timeout)


def fetch(
    url: str, headers: dict[str, str], timeout: float, *, method: str = "GET", data: bytes | None = None
) -> Fetched:
    """The queue's answer (any status), or :class:`Unanswered` when there was none in time."""
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            return Fetched(answer.status, answer.headers, answer.read(1 << 20))
    except urllib.error.HTTPError as err:
        with err:
            try:
                body = err.read(1 << 20)
            except OSError:
                body = b""
            return Fetched(err.code, err.headers, body)
    except (OSError, ValueError) as err:
        raise Unanswered("timeout" if _timed_out(err) else "unreachable") from err
