"""`qm` / `python -m queue_manager`: the command line, one command per run.

``qm serve`` runs the server, and so does ``qm`` with no command or with only options (``qm
--workers 4``, and the workers the supervisor starts with their hidden options); ``qm config``
prints the settings the server would start with; ``qm export`` and ``qm apply`` keep the rooms as
code (queue_manager/cli/ascode/); ``qm rehearse`` and ``qm simulate`` are the surge tools, which
parse their own options (queue_manager/rehearse/command.py). Each command's module is
imported only when it runs: ``qm --version`` and ``qm --help`` load nothing else, and a server
process never loads the surge tools.

Exit codes: 0 done (``qm serve``: stopped cleanly); 1 ``qm export`` or ``qm apply`` could not do
what was asked (an invalid file, the server refusing); 2 ``qm apply --dry-run`` with changes
pending, settings that refuse start, a command line that does not parse, or a surge tool's error;
4, ``qm serve`` stopped but not cleanly (WITH STORAGE FAILING, a stop cut short, a worker killed at
the stop); any other non-zero code, the server could not start after reading its settings (3,
uvicorn's start-up failure: the address in use, Valkey or PostgreSQL refusing; 1 from the supervisor
of several workers when it cannot bind).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from queue_manager import __version__
from queue_manager.cli.ascode import options as ascode

__all__ = ["main"]

#: What each command does, as ``qm --help`` lists them.
COMMANDS = {
    "serve": "run the server (what qm does with no command)",
    "config": "print each setting's value and source, warnings and hardening",
    "export": ascode.EXPORT,
    "apply": ascode.APPLY,
    "rehearse": "drive a synthetic surge against a running server",
    "simulate": "predict waits and queue depth with the queue's rules, no server",
}
#: The surge tools: their options are their own (queue_manager/rehearse/command.py).
SURGE_TOOLS = ("rehearse", "simulate")
#: The options of ``qm`` itself; any other leading option belongs to ``qm serve``.
OWN_OPTIONS = ("-h", "--help", "--version")
#: Set by the supervisor on the command line of each worker it starts (queue_manager/workers.py).
WORKER_OPTIONS = ("--worker-index", "--listen-fd", "--ready-fd", "--parent-pid", "--worker-count")


class _Help(argparse.HelpFormatter):
    """Lists the commands under their heading without argparse's ``COMMAND`` line above them."""

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(command) for command in action._get_subactions())
        return super()._format_action(action)


def parser() -> argparse.ArgumentParser:
    qm = argparse.ArgumentParser(
        prog="qm",
        formatter_class=_Help,
        description="Queue Manager, a self-hosted virtual waiting room. Every setting comes from the environment "
        "(docs/configuration.md).",
        epilog="With no command, qm serves. Exit codes: 0 done (qm serve: stopped cleanly); 1 qm export or qm apply "
        "could not do what was asked; 2 settings that refuse start, a command line that does not parse, or qm apply "
        "--dry-run with changes pending; 4 qm serve stopped but not cleanly (WITH STORAGE FAILING); "
        "another non-zero code, the server could not start (the address in use, Valkey or PostgreSQL refusing).",
    )
    qm.add_argument("--version", action="version", version=f"qm {__version__}", help="print qm's version and exit")
    commands = qm.add_subparsers(dest="command", title="commands", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help=COMMANDS["serve"],
        description="Run the server on HOST:PORT with the settings in the environment (docs/configuration.md). "
        "Exit 2 when they refuse start.",
    )
    serve.add_argument(
        "--workers",
        metavar="N",
        help="server processes on the one port, a number or auto (one per core); overrides WORKERS",
    )
    for option in WORKER_OPTIONS:
        serve.add_argument(option, type=int, help=argparse.SUPPRESS)
    serve.add_argument("--peer-dir", help=argparse.SUPPRESS)

    config = commands.add_parser(
        "config",
        help=COMMANDS["config"],
        description="Read the environment as the server would and print every setting's value in effect and its "
        "source (environment, default or derived; secrets only as set or unset), then the warnings and "
        "the hardening list. Nothing is connected to. Exit 0 when the server would start with these "
        "settings, 2 (with the refusal on stderr) when it would refuse.",
    )
    config.add_argument("--json", action="store_true", help="print the same as one JSON object")

    ascode.add(commands)

    for name in SURGE_TOOLS:  # listed here; parsed by the tools themselves
        commands.add_parser(name, help=COMMANDS[name], add_help=False)
    return qm


def main(argv: list[str] | None = None) -> NoReturn:
    given = sys.argv[1:] if argv is None else argv
    if given and given[0] in SURGE_TOOLS:
        from queue_manager.rehearse.command import main as tools

        sys.exit(tools(given))
    if not given or (given[0].startswith("-") and given[0] not in OWN_OPTIONS):
        given = ["serve", *given]
    args = parser().parse_args(given)
    if args.command == "config":
        from queue_manager.cli.config import run
    elif args.command in ("export", "apply"):
        from queue_manager.cli.ascode.command import run
    else:
        from queue_manager.cli.serve import run
    sys.exit(run(args))
