"""Every operation of the served OpenAPI document, fuzzed against a real server on each store.

The document is read from the server (``GET /api/openapi.json``); schemathesis turns each operation into
requests that fit it (positive) and requests that do not (negative), derandomized so every run sends the
same ones. Each answer must be no 5xx, arrive within the request timeout, carry a documented status and
media type and match its schema, and a 4xx in JSON must name its ``code``. Each operation is run free
(random room ids: mostly unknown rooms) and once more on a room that exists, so the handlers past the
404 are reached too.

``QM_FUZZ_EXAMPLES`` sets the examples per operation, mode and pass (12 here, about 1,950 requests per store;
``make fuzz`` runs 500, about 75,000) and ``QM_FUZZ_ONLY`` narrows the run to the operations whose label
holds it. The requests are generated once and each is sent to a server on every store under test
(``QM_TEST_STORES``), so both stores answer the same requests and the generation, most of the module's CPU,
is paid once (docs/testing.md has its time): the examples are that few because there are over ninety
operations, two modes and two passes each.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from harness import Server, start_server, stores_under_test, unique_id
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = int(os.environ.get("QM_FUZZ_EXAMPLES", "12"))
ONLY = os.environ.get("QM_FUZZ_ONLY", "")  # fuzz only the operations whose "METHOD /path" contains this
TIMEOUT_SEC = 10.0  # "no hang": an answer slower than this fails the case
#: Stops the server under test: fuzzing it would end the run (it is tested in test_access_operators.py and
#: test_workers.py).
NOT_FUZZED = {"POST /api/admin/shutdown"}
#: Event streams never end by themselves: their status and headers are read, then the stream is closed.
STREAMS = {"GET /events", "GET /api/admin/events"}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "fuzz"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schemathesis.check
def error_names_its_code(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Case) -> bool | None:
    """A 4xx answered in JSON is the guide's error body: a ``code`` string (pages answer HTML or text)."""
    if not 400 <= response.status_code < 500:
        return None
    kind = response.headers.get("content-type", [""])[0]
    if not kind.startswith("application/json"):
        return None
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"], (
        f"a JSON {response.status_code} without a code: {response.text[:200]}"
    )
    return True


@pytest.fixture(scope="module")
def targets() -> Iterator[dict[str, Server]]:
    """A server on each store under test, every one sent the same generated requests."""
    started: dict[str, Server] = {}
    try:
        for store in stores_under_test():
            started[store] = start_server({"EMAIL_NOTIFY": "0"}, store=store)
        yield started
    finally:
        for srv in started.values():
            srv.stop()


def _label(case: Case) -> str:
    return f"{case.method.upper()} {case.operation.path}"


def _stream(case: Case, base: str, headers: dict[str, str]) -> None:
    """An event stream: a bounded read of the status and headers (the body never ends on a 200)."""
    kwargs = case.as_transport_kwargs(base_url=base, headers=headers)
    kwargs.pop("timeout", None)
    with requests.request(**kwargs, stream=True, timeout=TIMEOUT_SEC) as resp:
        documented = case.operation.definition.raw["responses"]
        assert str(resp.status_code) in documented, f"{_label(case)}: undocumented {resp.status_code}"
        if resp.status_code == 200:
            assert resp.headers["content-type"].startswith("text/event-stream")
            return
        _ = resp.content  # an error is short: read it whole
        case.validate_response(resp, checks=[*CHECKS, error_names_its_code])


def _run(case: Case, base: str, headers: dict[str, str]) -> None:
    if _label(case) in STREAMS:
        _stream(case, base, headers)
        return
    resp = case.call(base_url=base, headers=headers, timeout=TIMEOUT_SEC)
    case.validate_response(resp, checks=[*CHECKS, error_names_its_code])


def _run_each(case: Case, targets: dict[str, Server]) -> None:
    """The case on every store's server; a finding names the stores that failed it."""
    found: list[str] = []
    for store, target in targets.items():
        try:
            _run(case, target.base_url, dict(target.admin_headers))
        except (Exception, BaseExceptionGroup) as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
            found.append(f"[{store}] {_finding(exc)}")
    if found:
        raise AssertionError(" / ".join(found))


def _fuzz(op: Any, targets: dict[str, Server], fixed: dict[str, Any], counts: dict[str, int]) -> None:
    label = f"{op.method.upper()} {op.path}"
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=mode, **fixed))
        def run(case: Case) -> None:
            counts[label] = counts.get(label, 0) + 1
            _run_each(case, targets)

        try:
            run()
        except Unsatisfiable:
            if mode is GenerationMode.POSITIVE:
                raise
            # no request can break this operation's rules (no parameters, or free strings only): nothing to negate


def _on_room(op: Any, room: str) -> dict[str, Any]:
    """The parameters that name a room, fixed to one that exists."""
    names = {p.name: p.location for p in op.iter_parameters()}
    fixed: dict[str, Any] = {}
    if "room" in names:
        fixed["path_parameters"] = {"room": room}
    if names.get("roomId") == "query":
        fixed["query"] = {"roomId": room}
    return fixed


def _finding(exc: BaseException) -> str:
    """What went wrong in one line per failure, with the request to reproduce it."""
    text = "".join(traceback.format_exception_only(exc)).strip()
    lines = [ln.strip(" |") for ln in text.splitlines()]
    kept = [ln for ln in lines if ln and not ln.startswith(("+", "-"))]
    return " / ".join(kept)[:1200]


@pytest.mark.all_stores_at_once
def test_every_operation_answers_as_documented_under_fuzzing(targets: dict[str, Server]) -> None:
    first = next(iter(targets.values()))
    headers = dict(first.admin_headers)
    schema = schemathesis.openapi.from_url(f"{first.base_url}/api/openapi.json", headers=headers, timeout=TIMEOUT_SEC)
    operations = sorted(
        (r.ok() for r in schema.get_all_operations()), key=lambda op: (op.method == "delete", op.path, op.method)
    )
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert NOT_FUZZED <= labels and STREAMS <= labels, "the exclusions name operations that are gone"
    room = unique_id("fz")
    counts: dict[str, int] = {}
    failures: list[str] = []
    admins = {store: srv.admin() for store, srv in targets.items()}
    try:
        for op in operations:
            label = f"{op.method.upper()} {op.path}"
            if label in NOT_FUZZED or ONLY not in label:
                continue
            for admin in admins.values():
                made = admin.post("/api/admin/rooms", json={"id": room, "targetUrl": "https://shop.example/"})
                assert made.status_code in (200, 201), made.text  # again each time: a DELETE may have taken it
            on_room = _on_room(op, room)
            for fixed in ({}, on_room) if on_room else ({},):
                try:
                    _fuzz(op, targets, fixed, counts)
                except (Exception, BaseExceptionGroup) as exc:  # every operation is fuzzed; findings reported at once
                    failures.append(f"{label} {'on a room' if fixed else 'free'}: {_finding(exc)}")
    finally:
        for admin in admins.values():
            admin.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # what ran, for make fuzz's report (its workers print nothing)
    for store in targets:
        summary = {"store": store, "examples": EXAMPLES, "cases": sum(counts.values()), "perOperation": counts}
        (ARTIFACTS / f"{store}.json").write_text(json.dumps(summary, indent=1) + "\n" + "\n\n".join(failures))
    if failures:  # what each server logged meanwhile, to tell a product fault from the run's conditions
        failures += [f"--- [{name}] server stderr, its end ---\n{srv.stderr[-3000:]}" for name, srv in targets.items()]
    assert not failures, "\n\n".join(failures)
    for srv in targets.values():
        assert httpx.get(f"{srv.base_url}/healthz", timeout=TIMEOUT_SEC).status_code == 200
