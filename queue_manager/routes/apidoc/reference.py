"""The API reference page (``/docs/api``): the OpenAPI document rendered as plain HTML, no script.

It reads the same document ``GET /api/openapi.json`` serves, so the page cannot list an operation the
server does not have or miss one it has: one section per operation (method and path, summary, who may
call it, parameters, body and every answer with its codes), grouped by tag, with a table of contents.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

from queue_manager.routes.apidoc.document import CONSOLE_OPENAPI_PATH, OPENAPI_PATH
from queue_manager.web.docs.render import Heading

METHODS = ("get", "post", "put", "patch", "delete")
GROUPS = {
    "visitor": "The visitor API",
    "pages and files": "Pages and files",
    "admin": "The admin API",
    "system": "The system surface",
}
SIGN_IN = {
    "adminKey": "a key (ADMIN_KEY or an operator's)",
    "monitorLink": "a monitor link",
    "consoleSession": "the console session",
    "csrfHeader": "X-QM-CSRF",
    "streamTicket": "a one-time ?ticket=",
    "publicApiKey": "a Public API key",
}


def _e(text: object) -> str:
    return html.escape(str(text))


def _code(text: object) -> str:
    return f"<code>{_e(text)}</code>"


_INLINE_CODE = re.compile(r"`([^`]+)`")


def _prose(text: object) -> str:
    """A description, escaped, with its Markdown inline code (`like this`) as <code>: the descriptions are
    written once for both the OpenAPI document (where Markdown is the convention) and this page."""
    return _INLINE_CODE.sub(r"<code>\1</code>", _e(text))


def _sign_in(security: list[Mapping[str, Any]]) -> str:
    if not security:
        return "Anyone (no sign-in)."
    ways = []
    for need in security:
        ways.append(" with ".join(SIGN_IN.get(n, n) for n in need) if need else "anyone")
    return "One of: " + "; ".join(ways) + "."


def _schema_text(schema: Mapping[str, Any]) -> str:
    if "$ref" in schema:
        return _e(str(schema["$ref"]).rsplit("/", 1)[-1])
    if "enum" in schema:
        return " | ".join(_code(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    return _e(" or ".join(kind) if isinstance(kind, list) else kind)


def _params(op: Mapping[str, Any]) -> str:
    rows = [
        f"<tr><td>{_code(p['name'])}</td><td>{_e(p['in'])}</td><td>{'yes' if p.get('required') else 'no'}</td>"
        f"<td>{_schema_text(p.get('schema', {}))}</td><td>{_prose(p.get('description', ''))}</td></tr>"
        for p in op.get("parameters", [])
    ]
    if not rows:
        return ""
    head = "<tr><th>name</th><th>in</th><th>required</th><th>type</th><th>what</th></tr>"
    return f'<table class="api-params"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _body(op: Mapping[str, Any], schemas: Mapping[str, Any]) -> str:
    body = op.get("requestBody")
    if body is None:
        return ""
    media = list(body["content"])
    if "application/json" not in media:
        return f"<p>Body: the {' or '.join(_code(m) for m in media)} itself.</p>"
    schema = body["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = schemas[str(schema["$ref"]).rsplit("/", 1)[-1]]
    required = set(schema.get("required", []))
    fields = [
        f"<li>{_code(name)} ({_schema_text(prop)}{', required' if name in required else ''})</li>"
        for name, prop in schema.get("properties", {}).items()
    ]
    need = "required" if body.get("required") else "optional"
    listing = f"<ul>{''.join(fields)}</ul>" if fields else ""
    return f"<p>Body: a JSON object ({need}).</p>{listing}"


def _answers(op: Mapping[str, Any]) -> str:
    rows = []
    for status, answer in op["responses"].items():
        media = ", ".join(answer.get("content", {})) or "no body"
        codes = " ".join(_code(c) for c in answer.get("x-codes", []))
        meaning = _prose(answer["description"].split(" Codes: ", 1)[0])
        rows.append(f"<tr><td>{_e(status)}</td><td>{meaning}</td><td>{codes}</td><td>{_e(media)}</td></tr>")
    head = "<tr><th>status</th><th>meaning</th><th>codes</th><th>media</th></tr>"
    return f'<table class="api-answers"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _operation(path: str, method: str, op: Mapping[str, Any], aliases: list[str], schemas: Mapping[str, Any]) -> str:
    also = f"<p>Also at {', '.join(_code(a) for a in aliases)}.</p>" if aliases else ""
    about = f"<p>{_prose(op['description'])}</p>" if op.get("description") else ""
    return (
        f'<section class="api-op" id="{_e(op["operationId"])}">'
        f"<h3>{_code(f'{method.upper()} {path}')}</h3>"
        f"<p>{_prose(op['summary'])}</p>{about}{also}"
        f"<p>Sign-in: {_sign_in(op.get('security', []))}</p>"
        f"{_params(op)}{_body(op, schemas)}{_answers(op)}</section>"
    )


def render(doc: Mapping[str, Any], base: str = "") -> tuple[str, tuple[Heading, ...]]:
    """The reference's main HTML and its headings (for the table of contents)."""
    schemas = doc["components"]["schemas"]
    groups: dict[str, list[str]] = {tag: [] for tag in GROUPS}
    for path, item in doc["paths"].items():
        aliases = list(item.get("x-aliases", []))
        for method in METHODS:
            op = item.get(method)
            if op is not None:
                groups.setdefault(op["tags"][0], []).append(_operation(path, method, op, aliases, schemas))
    headings: list[Heading] = []
    parts = [
        "<h1>HTTP API reference</h1>",
        f'<p class="lede">Every route this server answers, from its OpenAPI 3.1 document '
        f'<a href="{_e(base + CONSOLE_OPENAPI_PATH)}">{_code(CONSOLE_OPENAPI_PATH)}</a> (signed in: the console\'s '
        f"session or any key with the read grant; {_code(OPENAPI_PATH)} is the same document, for a Bearer key). "
        f"Each {_code('/api/…')} path also answers at {_code('/api/v1/…')}. Errors are JSON with a "
        f"{_code('code')}; a wrong method is {_code('405 method_not_allowed')} with {_code('Allow')}.</p>",
    ]
    for tag, sections in groups.items():
        if not sections:
            continue
        slug = "api-" + tag.replace(" ", "-")
        title = GROUPS.get(tag, tag)
        headings.append(Heading(2, title, slug))
        parts.append(f'<h2 id="{slug}">{_e(title)}</h2>')
        parts.extend(sections)
    return "".join(parts), tuple(headings)
