"""PG_CA_FILE against a real PostgreSQL that accepts TLS connections only (valkey+pg only).

One throwaway cluster per module (tls_cluster.py: a CA of its own, a server certificate for 127.0.0.1,
``hostssl`` only). The server under test:

* with PG_CA_FILE naming that CA starts, journals a join (a row in its events table), and every
  connection it holds, the pool's and the journal writer's own, shows ``ssl = true`` in
  ``pg_stat_ssl``; PG_CA_FILE wins over ``sslmode=disable`` in DATABASE_URL;
* with PG_CA_FILE naming a different CA refuses to start, naming PG_CA_FILE (the certificate does
  not verify: waiting would not mend it, like a Valkey certificate that does not verify).
"""

from __future__ import annotations

import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Server, create_room, join, spawn_server
from tls_cluster import TlsCluster, missing

ServerFactory = Callable[..., Server]

pytestmark = pytest.mark.stores("valkey")  # PostgreSQL is only used with STORE=valkey + SIDESTORE=pg

DATABASE = "qm_tls_test"


@pytest.fixture(scope="module")
def cluster() -> Iterator[TlsCluster]:
    why = missing()
    if why is not None:
        pytest.skip(f"a throwaway TLS PostgreSQL cannot be started here: {why}")
    tls = TlsCluster.start(Path(tempfile.mkdtemp(prefix="qm-pgtls-")))
    try:
        tls.psql(f"CREATE DATABASE {DATABASE}")
        yield tls
    finally:
        tls.stop()


def test_pg_ca_file_verifies_the_server_and_every_connection_is_tls(
    cluster: TlsCluster, make_server: ServerFactory
) -> None:
    schema = f"qmt_{uuid.uuid4().hex[:10]}"
    srv = make_server(
        {
            # sslmode=disable would mean no TLS, and the cluster refuses that: PG_CA_FILE wins
            "DATABASE_URL": cluster.url(DATABASE, "sslmode=disable"),
            "PG_SCHEMA": schema,
            "PG_CA_FILE": str(cluster.ca),
        }
    )
    with srv.admin() as admin, srv.client() as visitor:
        room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        r = join(visitor, room)
        assert r.status_code == 200, r.text  # acknowledged only once the journal committed it
        storage = admin.get("/api/admin/health").json()["storage"]
        assert storage["ok"] is True, storage
    joined = cluster.psql(f"SELECT count(*) FROM {schema}.events WHERE room = '{room}' AND type = 'join'", DATABASE)
    assert int(joined) == 1
    rows = cluster.psql(
        "SELECT a.application_name, s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
        f" WHERE a.datname = '{DATABASE}' AND a.application_name LIKE 'qm-journal%' ORDER BY 1",
        DATABASE,
    ).splitlines()
    names = [row.split("|")[0] for row in rows]
    assert any(n.startswith("qm-journal-writer ") for n in names), rows  # the writer's own connection
    assert any(n.startswith("qm-journal ") for n in names), rows  # the pool
    assert all(row.endswith("|t") for row in rows), rows


def test_pg_ca_file_of_another_ca_refuses_to_start(cluster: TlsCluster) -> None:
    srv = spawn_server(
        {
            "DATABASE_URL": cluster.url(DATABASE),
            "PG_SCHEMA": f"qmt_{uuid.uuid4().hex[:10]}",
            "PG_CA_FILE": str(cluster.other_ca),
        }
    )
    try:
        code = srv.wait(20)
    except subprocess.TimeoutExpired:
        srv.stop()
        pytest.fail(f"the server started with a PG_CA_FILE that does not verify PostgreSQL\n{srv.stdout}")
    srv.stop()
    assert code != 0
    assert srv.listening_line is None
    assert "PG_CA_FILE" in srv.stderr and "does not verify" in srv.stderr, srv.stderr[-2000:]
