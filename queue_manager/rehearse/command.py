"""The ``qm rehearse`` and ``qm simulate`` command lines: options, errors (exit 2), output."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import httpx
import orjson

from queue_manager.config import ConfigRefusal, read_settings
from queue_manager.engine.errors import EngineError
from queue_manager.rehearse import progress
from queue_manager.rehearse.chart import chart_html
from queue_manager.rehearse.drive import Plan, RehearseError, Tally, rehearse
from queue_manager.rehearse.processes import rehearse_from, run_loop
from queue_manager.rehearse.ramp import SPEC_HELP, RampError, parse_ramp
from queue_manager.rehearse.report import rehearsal_report, render_rehearsal, render_simulation, simulation_report
from queue_manager.rehearse.simulate import Scenario, simulate

COMMANDS = ("rehearse", "simulate")
ROOM_SETTINGS = ("ratePerMinute", "maxConcurrent", "passedTtlSec", "sessionTtlSec", "sessionMaxSec", "presenceSec")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        _fail(f"{self.prog}: {message}")


def _fail(message: str) -> NoReturn:
    print(message, file=sys.stderr, flush=True)
    sys.exit(2)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _server_settings(*fields: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings of the server on this machine, read from the environment as the server reads them
    (``config.read_settings``); one it would refuse is this command's error too."""
    try:
        values, _warnings = read_settings(*fields, environ=environ)
    except ConfigRefusal as refusal:
        _fail(f"qm: {refusal.message}")
    return values


def default_server(environ: Mapping[str, str] | None = None) -> str:
    """This machine's server: HOST and PORT as the server reads them, a wildcard host asked on loopback."""
    values = _server_settings("host", "port", environ=environ)
    host = str(values["host"]) or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{values['port']}"


def _crowd(p: argparse.ArgumentParser) -> None:
    p.add_argument("--visitors", type=_count, metavar="N", help="how many visitors arrive")
    p.add_argument("--arrival", default="burst", metavar="SPEC", help=f"the arrival curve: {SPEC_HELP}")
    p.add_argument("--no-show", type=_share, default=0.0, metavar="SHARE", help="share that joins and never returns")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--poll", action="store_true", help="every visitor polls /api/status (the default)")
    how.add_argument("--stream", type=_share, default=0.0, metavar="SHARE", help="share that holds /events open")
    p.add_argument("--poll-every", type=_positive, default=5.0, metavar="SEC", help="a poll's interval (5, the page's)")
    p.add_argument("--stay", type=float, default=0.0, metavar="SEC", help="how long an admitted visitor browses")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="qm", description="Rehearse a surge against a server, or simulate one.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("rehearse", help="drive a synthetic surge against a running server")
    r.add_argument("--room", required=True, metavar="ID", help="the room to rehearse on (it must exist)")
    r.add_argument("--server", default=None, metavar="URL", help="the queue (default: this machine, HOST/PORT)")
    r.add_argument("--admin-key", default=None, help="the admin key (default: ADMIN_KEY, else the dev key)")
    r.add_argument("--target", default=None, metavar="URL", help="the protected site: GET it once admitted")
    r.add_argument("--duration", type=_positive, default=None, metavar="SEC", help="stop after this long")
    r.add_argument("--connections", type=_count, default=200, metavar="N", help="the request pool's size (200)")
    r.add_argument("--health-every", type=_positive, default=5.0, metavar="SEC", help="health sampling (5 s)")
    r.add_argument(
        "--forwarded-for",
        action="store_true",
        help="give each visitor an address of its own in X-Forwarded-For (for a server whose TRUST_PROXY_IPS "
        "lists this machine)",
    )
    r.add_argument("--seed", type=int, default=None, help="which visitors are no-shows and streams")
    r.add_argument(
        "--processes",
        type=_count,
        default=1,
        metavar="N",
        help="drive the crowd from N processes (one a core), merged into one report (1)",
    )
    _crowd(r)
    s = sub.add_parser("simulate", help="predict waits and depth with the queue's engine, no server")
    s.add_argument("--rate", type=int, metavar="PER_MIN", help="ratePerMinute (60)")
    s.add_argument("--max-concurrent", type=int, metavar="N", help="maxConcurrent (none)")
    s.add_argument("--session-ttl", type=int, metavar="SEC", help="sessionTtlSec (1800)")
    s.add_argument("--session-max", type=int, metavar="SEC", help="sessionMaxSec (none)")
    s.add_argument("--passed-ttl", type=int, metavar="SEC", help="passedTtlSec (600)")
    s.add_argument("--presence", metavar="SEC|off", help="presenceSec (30), or off")
    s.add_argument(
        "--opens-after",
        type=_positive,
        metavar="SEC",
        help="a scheduled drop: the doors open SEC after the first arrival",
    )
    s.add_argument("--room", metavar="ID", help="start from this room's settings, read from --server")
    s.add_argument("--server", default=None, metavar="URL", help="where --room is read (default: this machine)")
    s.add_argument("--admin-key", default=None, help="the admin key for --room")
    s.add_argument("--seed", type=int, default=1, help="which visitors are no-shows and streams (1)")
    s.add_argument("--until", type=_positive, default=6 * 3600.0, metavar="SEC", help="simulated time at most (6 h)")
    s.add_argument("--chart", metavar="FILE.html", help="write the depth and wait chart (self-contained HTML)")
    _crowd(s)
    return parser


def _admin_key(args: argparse.Namespace) -> str:
    key: str = args.admin_key or _server_settings("admin_key")["admin_key"]
    return key


def _room_settings(args: argparse.Namespace) -> dict[str, Any]:
    room: dict[str, Any] = {"id": "simulated", "targetUrl": "https://shop.example"}
    if args.room:
        server = args.server or default_server()
        try:
            r = httpx.get(
                f"{server}/api/admin/rooms/{args.room}",
                headers={"Authorization": f"Bearer {_admin_key(args)}"},
                timeout=10,
            )
        except httpx.HTTPError as exc:
            _fail(f"qm simulate: cannot read room {args.room!r} from {server}: {exc}")
        if r.status_code != 200:
            _fail(f"qm simulate: reading room {args.room!r} from {server} answered {r.status_code}")
        read = r.json()["room"]
        room.update({k: read[k] for k in ROOM_SETTINGS if k in read})
    flags = {
        "ratePerMinute": args.rate,
        "maxConcurrent": args.max_concurrent,
        "sessionTtlSec": args.session_ttl,
        "sessionMaxSec": args.session_max,
        "passedTtlSec": args.passed_ttl,
    }
    room.update({k: v for k, v in flags.items() if v is not None})
    if args.presence is not None:
        if args.presence == "off":
            room["presenceSec"] = None
        elif args.presence.isdigit():
            room["presenceSec"] = int(args.presence)
        else:
            _fail(f"qm simulate: --presence {args.presence!r} is not a number of seconds or off")
    return room


def _simulate(args: argparse.Namespace) -> int:
    try:
        ramp = parse_ramp(args.arrival)
        n = ramp.visitors(args.visitors)
        scenario = Scenario(
            _room_settings(args),
            ramp,
            n,
            no_show=args.no_show,
            stream=args.stream,
            poll_every=args.poll_every,
            stay=max(0.0, args.stay),
            seed=args.seed,
            until=args.until,
            opens_after=args.opens_after,
        )
        report = simulation_report(simulate(scenario))
    except RampError as exc:
        _fail(f"qm simulate: {exc}")
    except EngineError as exc:
        _fail(f"qm simulate: the room's settings are refused: {exc.code}: {exc.message}")
    if args.chart:
        with open(args.chart, "w", encoding="utf-8") as f:
            f.write(chart_html(report))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_simulation(report))
        if args.chart:
            print(f"\n  chart              {args.chart}")
    return 0


def _warn_about(room: dict[str, Any], plan: Plan) -> None:
    """What will make a rehearsal from one address differ from a real surge, said before it starts."""
    per_ip = room.get("queueMaxPerIp")
    if not plan.forwarded_for and isinstance(per_ip, int) and plan.visitors > per_ip:
        print(
            f"qm rehearse: room {plan.room} has queueMaxPerIp {per_ip} and every visitor comes from this one "
            "address: past that, joins are refused. Set queueMaxPerIp to null on a rehearsal room, or use "
            "--forwarded-for against a server whose TRUST_PROXY_IPS lists this machine.",
            file=sys.stderr,
            flush=True,
        )
    if room.get("effectiveState") != "active":
        print(f"qm rehearse: room {plan.room} is {room.get('effectiveState')}, not active", file=sys.stderr)


async def _run_rehearsal(plan: Plan, out: Any) -> dict[str, Any]:
    tally = Tally()
    shown: list[asyncio.Task[None]] = []

    def start(room: dict[str, Any]) -> None:  # the room is there: warn, then show the run
        _warn_about(room, plan)
        shown.append(asyncio.create_task(progress.show(plan, tally, out)))

    try:
        outcome = await rehearse(plan, tally, on_start=start)
    finally:
        for task in shown:
            task.cancel()
        await asyncio.gather(*shown, return_exceptions=True)
    return rehearsal_report(outcome)


def _rehearse(args: argparse.Namespace) -> int:
    try:
        ramp = parse_ramp(args.arrival)
        n = ramp.visitors(args.visitors)
        ramp.arrival_times(n)  # a curve that cannot bring everyone is refused before anything starts
    except RampError as exc:
        _fail(f"qm rehearse: {exc}")
    server = (args.server or default_server()).rstrip("/")
    if not server.startswith(("http://", "https://")):
        _fail(f"qm rehearse: --server {server!r} is not an http(s) URL")
    if args.target is not None and not args.target.startswith(("http://", "https://")):
        _fail(f"qm rehearse: --target {args.target!r} is not an http(s) URL")
    plan = Plan(
        server=server,
        room=args.room,
        ramp=ramp,
        visitors=n,
        admin_key=_admin_key(args),
        no_show=args.no_show,
        stream=args.stream,
        poll_every=args.poll_every,
        stay=max(0.0, args.stay),
        target=args.target,
        duration=args.duration,
        connections=args.connections,
        health_every=args.health_every,
        forwarded_for=args.forwarded_for,
        seed=args.seed,
    )
    try:
        if args.processes > 1:
            print(f"qm rehearse: driving from {args.processes} processes (no live panel)", file=sys.stderr, flush=True)
            outcome = rehearse_from(plan, args.processes, on_start=lambda room: _warn_about(room, plan))
            report = rehearsal_report(outcome)
        else:
            report = run_loop(_run_rehearsal(plan, sys.stderr if args.json else sys.stdout))
    except RehearseError as exc:
        _fail(f"qm rehearse: {exc}")
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_rehearsal(report))
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "simulate":
        return _simulate(args)
    return _rehearse(args)
