"""deploy/: the systemd unit passes ``systemd-analyze verify``, keeps the promises its comments make to the
operator, and its environment file template names only real settings and, filled in, starts clean.

The figures the unit is held to come from the code, not from copies: the connection defaults from the
settings' declarations, the Valkey pool from the store, the shutdown drains from config and the
supervisor's slack from workers.py. A default that changes fails this test until the unit follows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from queue_manager.config import (
    DECLARATIONS,
    DEFAULT_SHUTDOWN_DRAIN_MS,
    ENV_VARS,
    INLINE_SHUTDOWN_DRAIN_FLOOR_MS,
    ConfigRefusal,
    load_settings,
)
from queue_manager.store.valkey.client import POOL_CONNECTIONS
from queue_manager.workers import STOP_SLACK_SEC

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "queue-manager.service"
ENV_TEMPLATE = ROOT / "deploy" / "queue-manager.env"
EXEC_START = "/opt/queue-manager/bin/qm serve"
ENV_FILE_PATH = "/etc/queue-manager/queue-manager.env"

#: Units systemd adds to every service as default dependencies (Requires/After sysinit.target and
#: basic.target, Conflicts/Before shutdown.target), plus those the unit names itself. verify must find
#: the default ones; stand-ins keep the check independent of the units installed on the machine.
STAND_IN_TARGETS = ("sysinit.target", "basic.target", "shutdown.target", "network-online.target", "multi-user.target")

#: Upper-case words with an underscore that the comments may use and that are not settings.
NOT_SETTINGS = frozenset({"AF_INET", "AF_INET6", "AF_UNIX", "CAP_NET_BIND_SERVICE"})


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unit() -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}}; an empty assignment resets a list, as systemd reads it."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in UNIT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"keep every setting of the unit on one line: {line!r}"
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, line
        key, _, value = line.partition("=")
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return sections


def _service(key: str) -> str:
    values = _unit()["Service"].get(key, [])
    assert values, f"the unit sets no {key}="
    return values[-1]


def _seconds(span: str) -> float:
    """A systemd time span as the unit writes it: 60, 60s, 1min 30s, 500ms."""
    units = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "ms": 0.001}
    parts = re.findall(r"(\d+)\s*(ms|min|sec|s|)\b", span)
    assert parts and re.fullmatch(r"(\s*\d+\s*(ms|min|sec|s)?)+\s*", span), span
    return sum(int(n) * units[u] for n, u in parts)


def _comments(path: Path) -> str:
    """Every comment line, without its #, joined and with runs of spaces made one: a phrase is found
    whatever the line breaks."""
    text = " ".join(
        line.lstrip("#;").strip() for line in path.read_text(encoding="utf-8").splitlines() if line[:1] in "#;"
    )
    return re.sub(r"\s+", " ", text)


def _template() -> tuple[dict[str, str], set[str]]:
    """The template's active assignments {NAME: value}, and every name it assigns, commented out or not."""
    active: dict[str, str] = {}
    named: set[str] = set()
    for line in ENV_TEMPLATE.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"(#?)([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if m is None:
            continue
        named.add(m.group(2))
        if not m.group(1):
            active[m.group(2)] = m.group(3)
    return active, named


def _filled(active: dict[str, str]) -> dict[str, str]:
    """The template as an operator leaves it: every FILL value given."""
    return {
        **active,
        "DATABASE_URL": "postgresql://queue_manager:a-password@127.0.0.1:5432/queue_manager",
        "SECRET": "s" * 64,
        "ADMIN_KEY": "a" * 64,
        "PUBLIC_API_KEY": "p" * 64,
        "PUBLIC_URL": "https://queue.example.com",
    }


# ------------------------------------------------------------------------------- systemd-analyze verify


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze") or (
        "/usr/bin/systemd-analyze" if Path("/usr/bin/systemd-analyze").exists() else None
    )
    if found is None:
        message = "systemd-analyze is not installed (Debian: apt-get install systemd)"
        if _in_ci():
            pytest.fail(f"{message}: CI must verify the unit")
        pytest.skip(message)
    return found


def _verify(tmp_path: Path, exec_path: str) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` on a copy of the unit whose ExecStart names ``exec_path``, with only the
    copy and stand-in targets on the unit path: no systemd running, no other unit of this machine read."""
    units = tmp_path / "units"
    units.mkdir(exist_ok=True)
    text = UNIT.read_text(encoding="utf-8")
    assert text.count(f"ExecStart={EXEC_START}\n") == 1
    (units / UNIT.name).write_text(
        text.replace(f"ExecStart={EXEC_START}\n", f"ExecStart={exec_path} serve\n"), encoding="utf-8"
    )
    for target in STAND_IN_TARGETS:
        (units / target).write_text("[Unit]\nDescription=stand-in for the test\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSTEMD_")}
    # the unit path is exactly this folder (no trailing ':', which would append the machine's own)
    env |= {"SYSTEMD_UNIT_PATH": str(units), "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""}
    command = [
        _systemd_analyze(),
        "verify",
        "--no-pager",
        "--man=no",  # the unit names no man page; never look one up
        "--generators=no",  # generators read the machine's fstab and the like, nothing of this unit
        "--recursive-errors=yes",  # the stand-ins too: all of it is ours
        str(units / UNIT.name),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """The unit as shipped, but for ExecStart, which names an executable that exists here.

    Nothing in the output is tolerated. verify (systemd 252) does not look the User= up, so the missing
    queue-manager user needs no allowance; the ExecStart binary it does check, hence the stand-in."""
    qm = tmp_path / "bin" / "qm"
    qm.parent.mkdir()
    qm.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    qm.chmod(0o755)
    done = _verify(tmp_path, str(qm))
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and output == "", f"systemd-analyze verify exited {done.returncode}:\n{output}"


def test_verify_reads_the_unit_and_would_say_so(tmp_path: Path) -> None:
    """The check above is not empty by accident: the same run on a missing ExecStart fails, naming it."""
    done = _verify(tmp_path, str(tmp_path / "no-such-qm"))
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "no-such-qm" in output and "not executable" in output, output


# ----------------------------------------------------------------------------- what the unit promises


def test_the_unit_runs_qm_serve_as_its_own_user_with_the_environment_file() -> None:
    assert _service("ExecStart") == EXEC_START
    assert _service("EnvironmentFile") == ENV_FILE_PATH
    assert _service("User") == "queue-manager" and _service("Group") == "queue-manager"
    assert "DynamicUser" not in _unit()["Service"]
    assert _service("Type") == "exec"


def test_the_unit_is_sandboxed() -> None:
    assert _service("NoNewPrivileges") == "yes"
    assert _service("ProtectSystem") == "strict"
    assert _service("ProtectHome") == "yes"
    assert _service("PrivateTmp") == "yes"
    assert _unit()["Service"].get("CapabilityBoundingSet") == [], "no capabilities: PORT is above 1024"
    # TCP to visitors, Valkey, PostgreSQL, SMTP and webhooks; unix sockets for the workers' metrics
    families = set(_service("RestrictAddressFamilies").split())
    assert families == {"AF_INET", "AF_INET6", "AF_UNIX"}, families


def test_restart_on_failure_but_not_on_a_refused_configuration_or_a_stop() -> None:
    assert _service("Restart") == "on-failure"
    # cli: a refusal exits 2; a stop that was asked for but not clean (WITH STORAGE FAILING) exits 4
    assert _service("RestartPreventExitStatus").split() == ["2", "4"]


def test_the_spool_lives_in_the_state_directory() -> None:
    """ProtectSystem=strict leaves only StateDirectory writable: SPOOL_DIR must be inside it."""
    state = Path("/var/lib") / _service("StateDirectory")
    assert state == Path("/var/lib/queue-manager")
    assert Path(_service("WorkingDirectory")) == state  # the default SPOOL_DIR (./data/spool) lands there too
    active, _ = _template()
    spool = Path(active["SPOOL_DIR"])
    assert spool.is_absolute() and state in spool.parents, spool
    assert "ReadWritePaths" not in _unit()["Service"]


def test_the_unit_orders_after_the_network_and_local_databases_without_requiring_them() -> None:
    unit = _unit()["Unit"]
    after = " ".join(unit.get("After", [])).split()
    assert {"network-online.target", "postgresql.service", "valkey-server.service", "redis-server.service"} <= set(
        after
    )
    pulled = " ".join(unit.get("Wants", []) + unit.get("Requires", []) + unit.get("BindsTo", [])).split()
    assert pulled == ["network-online.target"], "a database on another machine must not stop the service starting"


def test_open_files_cover_the_connections_the_docs_promise_per_process() -> None:
    """Per process: MAX_CONNECTIONS + CONNECTION_RESERVE client sockets (SSE_MAX_TOTAL streams among them),
    as many to an inline room's app, the Valkey pool, and a hundred for PostgreSQL, spool and Python."""
    defaults = load_settings({})
    assert defaults.sse_max_total <= defaults.max_connections
    clients = defaults.max_connections + defaults.connection_reserve
    needed = 2 * clients + POOL_CONNECTIONS + 2 + 5 + 100
    limit = int(_service("LimitNOFILE").split(":")[0])
    assert limit >= needed, f"LimitNOFILE={limit} is below the {needed} open files the defaults can take"
    said = _comments(UNIT)
    for phrase in (
        f"MAX_CONNECTIONS {defaults.max_connections:,}",
        f"CONNECTION_RESERVE {defaults.connection_reserve}",
        f"= {clients:,} client sockets",
        f"SSE_MAX_TOTAL's {defaults.sse_max_total:,} live streams",
        f"Valkey pool ({POOL_CONNECTIONS},",
        f"total ~ {2 * clients + POOL_CONNECTIONS + 2 + 5 + 100:,}",
    ):
        assert phrase in said, f"the unit's arithmetic no longer says {phrase!r}"


def test_the_stop_timeout_outlasts_the_longest_drain() -> None:
    """systemd's SIGKILL must never cut a graceful stop: TimeoutStopSec is above the supervisor's own kill
    bound (the longest drain, the 15 s inline floor, plus its slack), with room for the final commit."""
    grace_s = load_settings({}).shutdown_grace_ms / 1000
    bound = max(DEFAULT_SHUTDOWN_DRAIN_MS / 1000, INLINE_SHUTDOWN_DRAIN_FLOOR_MS / 1000, grace_s) + STOP_SLACK_SEC
    timeout = _seconds(_service("TimeoutStopSec"))
    assert timeout >= bound + 30, f"TimeoutStopSec={timeout:g} s leaves under 30 s past the {bound:g} s bound"
    # the values the template offers (commented out) stay inside it too
    for line in ENV_TEMPLATE.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"#?(SHUTDOWN_(?:DRAIN|GRACE)_MS)=(\d+)", line)
        if m:
            assert int(m.group(2)) / 1000 + STOP_SLACK_SEC + 30 <= timeout, line
    said = _comments(UNIT)
    assert f"{INLINE_SHUTDOWN_DRAIN_FLOOR_MS // 1000} s while an inline room exists" in said
    assert f"kills one still running {STOP_SLACK_SEC:g} s past" in said
    assert f"{bound:g} s with the defaults" in said
    assert f"TimeoutStopSec is {timeout:g} s" in said
    assert _service("KillMode") == "mixed"  # the supervisor passes SIGTERM on to its workers itself


def test_the_unit_names_only_real_settings() -> None:
    set_here = {value.split("=", 1)[0] for value in _unit()["Service"].get("Environment", [])}
    assert set_here <= set(ENV_VARS), set_here - set(ENV_VARS)
    named = set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b", _comments(UNIT)))
    assert named - NOT_SETTINGS <= set(ENV_VARS), sorted(named - NOT_SETTINGS - set(ENV_VARS))


# ---------------------------------------------------------------------------- the environment template


def test_every_variable_in_the_template_is_a_real_setting() -> None:
    _, named = _template()
    unknown = sorted(named - set(ENV_VARS))
    assert not unknown, f"deploy/queue-manager.env names variables no setting reads: {unknown}"
    mentioned = set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b", _comments(ENV_TEMPLATE)))
    assert mentioned - NOT_SETTINGS <= set(ENV_VARS), sorted(mentioned - NOT_SETTINGS - set(ENV_VARS))
    for name in (
        "NODE_ENV",
        "STORE",
        "SIDESTORE",
        "WORKERS",
        "VALKEY_URL",
        "DATABASE_URL",
        "SPOOL_DIR",
        "SECRET",
        "ADMIN_KEY",
        "PUBLIC_API_KEY",
        "PUBLIC_URL",
        "TRUST_PROXY",
        "TRUST_PROXY_IPS",
        "SHUTDOWN_GRACE_MS",
        "SHUTDOWN_DRAIN_MS",
    ):
        assert name in named, f"the template leaves out {name}"


def test_the_template_is_read_by_systemd_as_written() -> None:
    """EnvironmentFile= takes everything after '=' as the value: no trailing comments, no export."""
    for line in ENV_TEMPLATE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*=[^#\s]*", line), f"not a plain NAME=value line: {line!r}"


def test_no_secret_is_filled_in_the_template() -> None:
    active, _ = _template()
    sensitive = {d.env for d in DECLARATIONS.values() if d.sensitive}
    for name, value in active.items():
        if name in sensitive:
            assert value == "" or "@" not in value, f"{name} in the template carries a credential"
    for name in ("SECRET", "ADMIN_KEY", "PUBLIC_API_KEY", "DATABASE_URL"):
        assert active.get(name) == "", f"{name} is a value to fill, left empty so that forgetting it is flagged"


def test_the_template_as_shipped_refuses_and_warns_about_what_is_left_to_fill() -> None:
    active, _ = _template()
    with pytest.raises(ConfigRefusal, match="DATABASE_URL"):
        load_settings(active)
    unfilled = {**_filled(active), "SECRET": "", "ADMIN_KEY": ""}
    warned = {w.variable for w in load_settings(unfilled).warnings}
    assert {"SECRET", "ADMIN_KEY"} <= warned, warned


def test_the_template_filled_in_is_a_production_install_without_a_warning() -> None:
    settings = load_settings(_filled(_template()[0]))
    assert not settings.warnings, settings.warnings
    assert settings.is_production and settings.store == "valkey" and settings.sidestore == "pg"
    assert settings.workers >= 1 and settings.trust_proxy == 1
