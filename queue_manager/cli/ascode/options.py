"""The options of ``qm export`` and ``qm apply`` (argparse only: ``qm --help`` loads nothing more)."""

from __future__ import annotations

import argparse

EXPORT = "write every room's settings as one YAML or JSON document (rooms kept as code)"
APPLY = "make a server's rooms what a document says: a plan, then each change through the admin API"


def _server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        "--url",
        dest="server",
        metavar="URL",
        help="the server (default: QM_URL, else this machine's HOST and PORT)",
    )
    p.add_argument(
        "--admin-key",
        "--key",
        dest="admin_key",
        metavar="KEY",
        help="an operator's API key (default: QM_ADMIN_KEY, else ADMIN_KEY); the environment keeps it out of "
        "the process list",
    )


def add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = commands.add_parser(
        "export",
        help=EXPORT,
        description="Read every room from a running server and write its writable settings as one document, "
        "{version: 1, rooms: [...]}: rooms sorted by id, keys in a stable order, no live figures, the logo "
        "left out unless --logos. Needs a key with the team grant (owner, operator or viewer). Exit 0 "
        "written, 1 the server refused or could not be reached.",
    )
    export.add_argument("--format", choices=("yaml", "json"), help="yaml (the default) or json; -o FILE.json: json")
    export.add_argument("--logos", action="store_true", help="write each room's logo file too (base64)")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: standard output)")
    _server_options(export)

    apply = commands.add_parser(
        "apply",
        help=APPLY,
        description="Read a rooms document (YAML or JSON), compare it with the server's rooms and print the "
        "plan, then apply it through the admin API as the key's operator (each change audited). A field "
        "the file leaves out keeps the server's value; rooms the file does not name are left alone unless "
        "--prune. Exit 0 applied or nothing to change; 1 an invalid file, a refusal, or no confirmation; "
        "2 with --dry-run when changes are pending (and for a command line that does not parse).",
    )
    apply.add_argument("file", metavar="FILE", help="the rooms document (.yaml, .yml or .json; - for standard input)")
    apply.add_argument("--yes", "-y", action="store_true", help="apply without asking")
    apply.add_argument("--dry-run", action="store_true", help="print the plan only: exit 0 no change, 2 pending")
    apply.add_argument("--prune", action="store_true", help="delete the server's rooms the file does not name")
    _server_options(apply)
