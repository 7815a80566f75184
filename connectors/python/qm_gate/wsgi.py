"""The gate as WSGI middleware (Flask, Django's WSGI application, any WSGI app)::

app.wsgi_app = QueueGateWSGI(app.wsgi_app, queue_url="https://QUEUE_HOST", room="shop", key=KEY)  # Flask
application = QueueGateWSGI(get_wsgi_application(), queue_url=..., room=..., key=...)            # Django
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from qm_gate import _rules
from qm_gate._gate import Answer, Check, Continue, Gate, log

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
_STATUS = {302: "302 Found", 303: "303 See Other", 403: "403 Forbidden", 503: "503 Service Unavailable"}


def _visit(environ: Environ) -> _rules.Visit:
    pairs = [(k[5:].replace("_", "-"), str(v)) for k, v in environ.items() if k.startswith("HTTP_")]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            pairs.append((key.replace("_", "-"), str(environ[key])))
    headers = _rules.join_headers(pairs)
    if "host" not in headers:
        port = str(environ.get("SERVER_PORT", ""))
        default = "443" if environ.get("wsgi.url_scheme") == "https" else "80"
        headers["host"] = str(environ.get("SERVER_NAME", "localhost")) + (
            f":{port}" if port and port != default else ""
        )
    # PATH_INFO is decoded as latin-1 by the server: the visitor's own bytes, percent-encoded again
    raw = (str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))) or "/"
    path = quote(raw.encode("latin-1", "replace"), safe="/:@!$&'()*+,;=-._~%")
    return _rules.Visit(
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=path,
        query=str(environ.get("QUERY_STRING", "")),
        scheme=str(environ.get("wsgi.url_scheme", "http")),
        headers=headers,
        peer=str(environ.get("REMOTE_ADDR", "")),
        cookies=_rules.parse_cookies(headers.get("cookie")),
    )


class QueueGateWSGI:
    """Queue Manager in front of a WSGI app (see the package README for every option)."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        queue_url: str,
        room: str,
        key: str,
        timeout: float = 2.0,
        trust_proxy: int | bool = 0,
        on_fail_open: Callable[[str, str], object] | None = None,
        revoked_refresh: float = 5.0,
    ) -> None:
        self.app = app
        self.gate = Gate(
            queue_url=queue_url,
            room=room,
            key=key,
            timeout=timeout,
            trust_proxy=trust_proxy,
            on_fail_open=on_fail_open,
            revoked_refresh=revoked_refresh,
        )

    @property
    def stats(self) -> dict[str, Any]:
        return self.gate.stats

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            visit = _visit(environ)
            outcome = self.gate.begin(visit)
            if isinstance(outcome, Check):
                outcome = self.gate.conclude(visit, outcome, self.gate.ask(outcome))
        except Exception:  # the gate never stands between a visitor and the app by accident
            log.exception("[qm] gate error, continuing to the app")
            outcome = Continue()
        if isinstance(outcome, Answer):
            start_response(_STATUS.get(outcome.status, str(outcome.status)), outcome.headers)
            return [outcome.body]
        environ["qm_gate"] = self  # the app's way to this gate: request.environ["qm_gate"].revoke_session(request)
        if outcome.strip_token:
            environ["QUERY_STRING"] = _rules.strip_token(str(environ.get("QUERY_STRING", "")))
            for key in ("REQUEST_URI", "RAW_URI"):
                if isinstance(environ.get(key), str):
                    path, _, query = environ[key].partition("?")
                    stripped = _rules.strip_token(query)
                    environ[key] = path + (f"?{stripped}" if stripped else "")
        if not outcome.headers:
            return self.app(environ, start_response)
        extra = outcome.headers

        def decorated(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return (
                start_response(status, [*headers, *extra], exc_info)
                if exc_info
                else start_response(status, [*headers, *extra])
            )

        return self.app(environ, decorated)

    def revoke_session(self, request: Any) -> bool:
        """End the visitor's session at the queue (their order is complete): the slot goes to the next in line.

        ``request`` is the WSGI environ or anything with an ``.environ`` (Flask's request, Django's
        WSGIRequest). True when a live session ended; never raises. The app reaches the gate in front of it
        as ``request.environ["qm_gate"]`` (Django: ``request.META["qm_gate"]``).
        """
        environ = getattr(request, "environ", request)
        return self.gate.revoke(_visit(environ).cookies)

    def close(self) -> None:
        self.gate.close()
