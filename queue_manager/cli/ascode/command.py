"""``qm export`` and ``qm apply``: the two command lines, their output and exit codes.

Exit codes: 0 done (export written; apply applied, or nothing to change); 1 an invalid file, the server
refusing or unreachable, or apply without confirmation; 2 ``qm apply --dry-run`` with changes pending
(a CI check fails on it), and, as for every qm command, a command line that does not parse.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from queue_manager.cli.ascode.admin import Admin, AdminRefused
from queue_manager.cli.ascode.document import DocumentError, Format, document, exported, parse, render
from queue_manager.cli.ascode.plan import Change, Plan, RoomInvalid, RoomStep, make_plan
from queue_manager.config import ConfigRefusal, read_settings

DONE, FAILED, PENDING = 0, 1, 2
MARK = {"create": "+", "update": "~", "delete": "-"}


class _Stop(Exception):
    """The command ends with this message on stderr and exit 1."""


def _server(args: argparse.Namespace) -> str:
    if args.server:
        return str(args.server)
    if os.environ.get("QM_URL"):
        return os.environ["QM_URL"]
    values = _settings("host", "port")
    host = str(values["host"]) or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{values['port']}"


def _key(args: argparse.Namespace) -> str:
    return str(args.admin_key or os.environ.get("QM_ADMIN_KEY") or _settings("admin_key")["admin_key"])


def _settings(*fields: str) -> dict[str, Any]:
    try:
        values, _warnings = read_settings(*fields)
    except ConfigRefusal as refusal:
        raise _Stop(refusal.message) from None
    return values


def run(args: argparse.Namespace) -> int:
    name = f"qm {args.command}"
    try:
        admin = Admin(_server(args), _key(args))
        try:
            return export(args, admin) if args.command == "export" else apply(args, admin)
        finally:
            admin.close()
    except AdminRefused as refused:
        print(f"{name}: the server answered {refused}", file=sys.stderr, flush=True)
    except (_Stop, DocumentError) as stop:
        print(f"{name}: {stop}", file=sys.stderr, flush=True)
    return FAILED


# ---------------------------------------------------------------------------------------------- export


def export(args: argparse.Namespace, admin: Admin) -> int:
    if "team" not in admin.grants():
        raise _Stop(
            "this key may not read the rooms' origins and URL rules (the team grant); use an owner's, "
            "operator's or viewer's key."
        )
    rooms = [exported(r, logo=admin.logo(r) if args.logos else None) for r in admin.rooms()]
    as_json = args.format == "json" or (args.format is None and str(args.output or "").endswith(".json"))
    fmt: Format = "json" if as_json else "yaml"
    text = render(document(rooms), fmt)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{len(rooms)} room(s) written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return DONE


# ---------------------------------------------------------------------------------------------- apply


def _shown(value: Any) -> str:
    return orjson.dumps(value).decode()


def _change(change: Change, action: str) -> str:
    if action == "create":
        return f"    + {change.path}: {_shown(change.new)}"
    return f"    ~ {change.path}: {_shown(change.old)} → {_shown(change.new)}"


def render_plan(plan: Plan, prune: bool) -> str:
    if plan.empty:
        return "No changes: the server's rooms are what the file says.\n"
    counts = f"{plan.count('create')} to create, {plan.count('update')} to update"
    counts += f", {plan.count('delete')} to delete" if prune else ""
    lines = [f"Plan: {counts}.", ""]
    for step in plan.steps:
        gone = " (deleted with its line)" if step.action == "delete" else ""
        lines.append(f"{MARK[step.action]} room {step.room_id}{gone}")
        lines.extend(_change(c, step.action) for c in step.changes)
    return "\n".join(lines) + "\n"


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except (OSError, UnicodeDecodeError) as exc:
        raise _Stop(f"cannot read {path}: {exc}") from None


def _owner_needed(plan: Plan, server: dict[str, dict[str, Any]]) -> list[str]:
    """The steps only the owner role may take, as the server judges them: a delete, and an inline change (a
    room created with a proxyOrigin; a proxyOrigin changed; the targetUrl of a room served inline)."""
    needs = []
    for step in plan.steps:
        body = step.body or {}
        proxied = body.get("proxyOrigin") is not None
        if step.action == "create":
            inline = proxied
        else:
            held = (server.get(step.room_id) or {}).get("proxyOrigin") is not None
            inline = "proxyOrigin" in body or ("targetUrl" in body and (held or proxied))
        if step.action == "delete" or inline:
            needs.append(f"{step.action} {step.room_id}")
    return needs


def apply(args: argparse.Namespace, admin: Admin) -> int:
    text, name = _read(args.file)
    wanted = parse(text, name)
    held = admin.rooms()
    try:
        plan = make_plan(wanted, held, prune=args.prune)
    except RoomInvalid as invalid:
        said = f"{name}: {invalid}".rstrip()
        said += "" if said.endswith(".") else "."
        raise _Stop(said if "Nothing was changed" in said else f"{said} Nothing was changed.") from None
    sys.stdout.write(render_plan(plan, args.prune))
    sys.stdout.flush()
    if plan.empty:
        return DONE
    if args.dry_run:
        return PENDING
    if not args.yes:
        if not sys.stdin.isatty() or args.file == "-":
            raise _Stop("not applied: there is no terminal to confirm on; run with --yes to apply.")
        if input("Apply these changes? [y/N] ").strip().lower() not in ("y", "yes"):
            raise _Stop("not applied.")
    owner_only = _owner_needed(plan, {str(r["id"]): r for r in held})
    if owner_only and "owner" not in admin.grants():
        raise _Stop(
            f"not applied: {', '.join(owner_only)} needs the owner role (the server answers 403 "
            "insufficient_role or inline_requires_owner to this key). Nothing was changed."
        )
    return _carry_out(plan, admin)


def _carry_out(plan: Plan, admin: Admin) -> int:
    done = 0
    for step in plan.steps:
        try:
            _take(step, admin)
        except AdminRefused as refused:
            left = len(plan.steps) - done
            print(
                f"qm apply: room {step.room_id!r} ({step.action}): the server answered {refused}. "
                f"{done} change(s) applied before it; it and the {left - 1} after it were not.",
                file=sys.stderr,
                flush=True,
            )
            return FAILED
        done += 1
        what = {"create": "created", "update": "updated", "delete": "deleted"}[step.action]
        fields = sorted({c.path.split(".", 1)[0] for c in step.changes})
        print(f"{what} {step.room_id}" + (f" ({', '.join(fields)})" if step.action == "update" else ""))
    print(f"Applied {done} change(s).")
    return DONE


def _take(step: RoomStep, admin: Admin) -> None:
    if step.action == "delete":
        admin.delete(step.room_id)
    else:
        assert step.body is not None
        admin.save(step.body)
