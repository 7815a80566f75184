"""The command line, run as it is run: ``python -m queue_manager …`` in a process of its own.

``--version``, ``--help`` and each command's ``--help``; ``qm config`` (text and JSON) on the defaults,
with secrets set, and refusing; the surge tools and the server still reached through it. Each process
gets a clean environment: none of the settings of the shell that runs the tests.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from queue_manager import __version__
from queue_manager.cli.main import COMMANDS
from queue_manager.config import ENV_VARS, HARDENING_ADMIN_KEY

from .test_config_effective import MARKERS, SECRETS

ROOT = Path(__file__).resolve().parents[2]


def qm(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    return subprocess.run(
        [sys.executable, "-m", "queue_manager", *argv],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def _config_json(env: dict[str, str] | None = None) -> dict[str, Any]:
    done = qm("config", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_version() -> None:
    done = qm("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"qm {__version__}\n", "")


def test_help_names_every_command_with_its_line() -> None:
    done = qm("--help")
    assert done.returncode == 0, done.stderr
    assert set(COMMANDS) == {"serve", "config", "export", "apply", "rehearse", "simulate"}
    for name, line in COMMANDS.items():
        assert name in done.stdout and " ".join(line.split()[:4]) in " ".join(done.stdout.split()), name


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_has_its_own_help(command: str) -> None:
    done = qm(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: qm {command} "), done.stdout


def test_serve_help_hides_the_workers_own_options() -> None:
    out = qm("serve", "--help").stdout
    assert "--workers" in out
    assert "--worker-index" not in out and "--listen-fd" not in out and "--peer-dir" not in out


def test_a_command_line_that_does_not_parse_exits_2() -> None:
    for argv in (("bogus",), ("config", "--bogus"), ("--bogus",), ("serve", "extra")):
        done = qm(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "usage: qm" in done.stderr, argv


def test_config_on_the_defaults_lists_every_setting_then_warnings_and_hardening() -> None:
    done = qm("config")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["VARIABLE", "SOURCE", "VALUE"]
    rows = [line.split(maxsplit=2) for line in lines[1 : 1 + len(ENV_VARS)]]
    assert [row[0] for row in rows] == list(ENV_VARS)
    by_name = {row[0]: row[1:] for row in rows}
    assert by_name["PORT"] == ["default", "8080"]
    assert by_name["SIDESTORE"] == ["derived", "none"]
    assert by_name["ADMIN_KEY"] == ["default", "unset"]
    assert by_name["CTL_HINTS"] == ["default", "on"]
    assert by_name["QM_INSTANCE_ID"][0] == "derived" and "a new one on each start" in by_name["QM_INSTANCE_ID"][1]
    assert lines[1 + len(ENV_VARS)] == ""
    assert any(line.startswith("WARNING ADMIN_KEY: ") for line in lines)
    assert f"HARDENING: {HARDENING_ADMIN_KEY}" in lines
    assert "qm-dev-admin-key" not in done.stdout


def test_config_shows_where_each_value_comes_from() -> None:
    done = qm("config", env={"PORT": "9000", "TRUST_PROXY": "many"})
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line and " " in line}
    assert rows["PORT"] == ["environment", "9000"]
    assert rows["TRUST_PROXY"] == ["default", "0"]  # set, but not a number: the default is in effect
    assert any(line.startswith("WARNING TRUST_PROXY: ") for line in done.stdout.splitlines())


def test_config_json_is_one_object_in_healths_form() -> None:
    report = _config_json({"PORT": "9000"})
    assert set(report) == {"settings", "warnings", "hardening"}
    assert [s["name"] for s in report["settings"]] == list(ENV_VARS)
    port = next(s for s in report["settings"] if s["name"] == "PORT")
    assert port == {
        "name": "PORT",
        "value": 9000,
        "source": "environment",
        "sensitive": False,
        "set": True,
        "group": "Core and storage",
    }
    assert {w["variable"] for w in report["warnings"]} == {"ADMIN_KEY", "SECRET", "PUBLIC_API_KEY"}
    assert set(report["warnings"][0]) == {"variable", "set", "effective", "message"}
    assert HARDENING_ADMIN_KEY in report["hardening"]


def test_config_never_shows_a_secret() -> None:
    env = {**SECRETS, "STORE": "valkey", "SMTP_FROM": "queue@shop.example", "EMAIL_NOTIFY": "1"}
    text, as_json = qm("config", env=env), qm("config", "--json", env=env)
    assert text.returncode == as_json.returncode == 0, text.stderr + as_json.stderr
    for done in (text, as_json):
        leaked = [m for m in MARKERS if m in done.stdout + done.stderr]
        assert not leaked, leaked
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in text.stdout.splitlines() if line}
    for name in SECRETS:
        assert rows[name] == ["environment", "set (hidden)"], name
    for item in json.loads(as_json.stdout)["settings"]:
        if item["name"] in SECRETS:
            assert (item["value"], item["set"], item["sensitive"]) == (None, True, True), item


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        ({"STORE": "bogus"}, "STORE=bogus is not a store this build has (memory, valkey)."),
        ({"NODE_ENV": "production"}, "NODE_ENV=production refuses STORE=memory with SIDESTORE=none"),
        ({"WORKERS": "2"}, "WORKERS=2 needs STORE=valkey"),
        # the server's own check before it connects to anything: a webhook on this machine
        ({"ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook"}, "ALERT_WEBHOOK_URL: 127.0.0.1 resolves to 127.0.0.1"),
    ],
)
def test_config_refusing_says_what_the_server_says_and_exits_2(env: dict[str, str], refusal: str) -> None:
    done = qm("config", env=env)
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert done.stderr.startswith(f"queue-manager: refusing to start: {refusal}"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    served = qm("serve", env=env)  # the server refuses with the very same line (after its warnings)
    assert served.returncode == 2
    assert served.stderr.splitlines()[-1] == done.stderr.rstrip("\n")


def test_config_json_refusing_names_the_setting() -> None:
    done = qm("config", "--json", env={"STORE": "bogus"})
    assert done.returncode == 2
    assert json.loads(done.stdout)["refusal"]["variable"] == "STORE"
    assert done.stderr.startswith("queue-manager: refusing to start: STORE=bogus")


def test_plain_qm_and_its_options_are_serve() -> None:
    for argv in ((), ("--workers", "2")):
        done = qm(*argv, env={"STORE": "bogus"})
        assert done.returncode == 2 and "refusing to start: STORE=bogus" in done.stderr, (argv, done.stderr)
    done = qm("--workers", "2")  # the option overrides WORKERS, as with qm serve --workers 2
    assert done.returncode == 2 and "WORKERS=2 needs STORE=valkey" in done.stderr, done.stderr


def test_the_surge_tools_keep_their_options_and_errors() -> None:
    done = qm("simulate", "--visitors", "20", "--rate", "600", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scenario"]["visitors"] == 20
    bad = qm("simulate", "--arrival", "nonsense")
    assert bad.returncode == 2 and bad.stderr.startswith("qm simulate: 'nonsense' is not an arrival curve")
    missing = qm("rehearse")
    assert missing.returncode == 2 and "--room" in missing.stderr


def _serve_and_read_the_announcement(env: dict[str, str]) -> tuple[list[str], str]:
    """Start the server as ``make run`` does (``python -m queue_manager``, a clean environment plus ``env``, any
    free port); its lines up to the connectors hint, and its base URL. The caller stops it (``_served``)."""
    clean = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    proc = subprocess.Popen(
        [sys.executable, "-m", "queue_manager"],
        env={**clean, "PORT": "0", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    _served.append(proc)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout or ()], daemon=True).start()
    seen: list[str] = []
    while not any(x.startswith("  connectors:") for x in seen):
        try:
            seen.append(lines.get(timeout=60))  # an upper bound for a slow machine, not a timing assertion
        except queue.Empty:
            raise AssertionError(f"no connectors line: {seen}") from None
    base = seen[0].split(" listening on ")[1].split()[0]
    return seen, base


_served: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=False)
def served() -> Any:
    yield
    while _served:
        proc = _served.pop()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_make_run_prints_a_public_api_key_that_a_connector_can_use_at_once(served: None) -> None:
    """make run (the development defaults) prints the development Public API key beside the admin key, and the
    server accepts it: a connector set up from the README works without restarting (and losing the rooms)."""
    lines, base = _serve_and_read_the_announcement({})
    assert "sign in with the default key qm-dev-admin-key" in lines[1], lines
    connectors = lines[-1]
    assert connectors.startswith("  connectors: Public API key qm-dev-public-key "), connectors
    key = connectors.split("Public API key ")[1].split()[0]
    verified = httpx.get(f"{base}/api/verify", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert verified.status_code == 200, verified.text
    assert verified.json()["keyAccepted"] is True and verified.json()["problems"] == []


def test_with_an_admin_key_of_ones_own_the_development_public_key_is_gone(served: None) -> None:
    lines, base = _serve_and_read_the_announcement({"ADMIN_KEY": "a" * 40, "SECRET": "s" * 48})
    assert (
        lines[-1]
        == "  connectors: PUBLIC_API_KEY is not set: set it (and restart) before creating rooms for a connector"
    )
    refused = httpx.get(f"{base}/api/verify", headers={"Authorization": "Bearer qm-dev-public-key"}, timeout=10)
    assert refused.status_code == 401 and refused.json()["keyAccepted"] is False
    lines, _ = _serve_and_read_the_announcement({"ADMIN_KEY": "a" * 40, "PUBLIC_API_KEY": "p" * 40})
    assert lines[-1] == "  connectors: Public API key: your PUBLIC_API_KEY" and "p" * 40 not in "\n".join(lines)
