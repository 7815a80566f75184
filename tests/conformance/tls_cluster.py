"""A throwaway PostgreSQL 15 cluster that accepts TLS connections only, for the PG_CA_FILE tests.

``TlsCluster.start(workdir)`` writes a CA, a second CA nobody trusts and a server certificate for
``127.0.0.1`` and ``localhost`` (signed by the first), runs ``initdb`` as the ``postgres`` OS user
(initdb refuses root) and starts ``postgres`` on a free port with ``ssl=on`` and one ``hba`` line for
TCP, ``hostssl all all 127.0.0.1/32 trust``: a connection without TLS is refused. ``psql`` talks to it
over its own Unix socket. ``stop()`` stops it (``pg_ctl stop -m immediate``, then the postmaster's pid
if that failed) and removes the directory.

``missing()`` says why such a cluster cannot be made here (None: it can).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from harness import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def missing() -> str | None:
    """Why a throwaway cluster cannot be started on this machine; None when it can."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return f"no PostgreSQL 15 server binaries under {PG_BIN} (initdb, pg_ctl)"
    if shutil.which("psql") is None:
        return "no psql on PATH"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres OS user to run initdb as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        return "initdb must run as the postgres OS user: run the tests as root (runuser) or as postgres"
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "the cryptography package is not installed (it writes the test certificates)"
    return None


def _as_postgres(argv: list[str]) -> list[str]:
    return argv if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


def write_ca(directory: Path, name: str) -> tuple[Path, object, object]:
    """A self-signed CA: its PEM path, its key and its certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def write_server_cert(directory: Path, ca_key: object, ca_cert: object) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 and localhost signed by the CA; (certificate, key) paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    assert isinstance(ca_cert, x509.Certificate) and isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class TlsCluster:
    """One running throwaway cluster (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.sockets = workdir / "sockets"
        self.port = free_port()
        self.ca: Path
        self.other_ca: Path
        self._started = False

    @classmethod
    def start(cls, workdir: Path) -> TlsCluster:
        cluster = cls(workdir)
        try:
            cluster._start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self) -> None:
        certs = self.workdir / "certs"
        certs.mkdir(parents=True)
        self.sockets.mkdir()
        self.ca, ca_key, ca_cert = write_ca(certs, "qm-test-ca")
        self.other_ca, _, _ = write_ca(certs, "qm-test-other-ca")
        cert, key = write_server_cert(certs, ca_key, ca_cert)
        os.chmod(key, 0o600)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for path in (self.workdir, certs, self.sockets, cert, key):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        subprocess.run(
            _as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"]),
            check=True,
            capture_output=True,
            timeout=60,
        )
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n", encoding="utf-8"
        )
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.sockets}",
                "-c listen_addresses=127.0.0.1",
                "-c ssl=on",
                f"-c ssl_cert_file={cert}",
                f"-c ssl_key_file={key}",
                "-c fsync=off",
                "-c max_connections=40",
            ]
        )
        self._started = True
        subprocess.run(
            _as_postgres(
                [
                    *(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options),
                    *("-l", str(self.workdir / "log"), "-w", "-t", "30", "start"),
                ]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def url(self, database: str, query: str = "") -> str:
        """A URL over TCP to 127.0.0.1 (TLS is the only way in)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}" + (f"?{query}" if query else "")

    def psql(self, sql: str, database: str = "postgres") -> str:
        """One statement over the cluster's Unix socket; its rows, unaligned."""
        return socket_psql(self.sockets, self.port, sql, database)

    def stop(self) -> None:
        if self._started:
            stop_hard(self.data)
        shutil.rmtree(self.workdir, ignore_errors=True)


def socket_psql(sockets: Path, port: int, sql: str, database: str = "postgres") -> str:
    """One statement to a throwaway cluster over its Unix socket; its rows, unaligned."""
    done = subprocess.run(
        [
            *("psql", "-h", str(sockets), "-p", str(port), "-U", "postgres", "-d", database),
            *("-v", "ON_ERROR_STOP=1", "-AtXqc", sql),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip()


def stop_hard(data: Path) -> None:
    """Stop a throwaway cluster at once (``pg_ctl stop -m immediate``, then its postmaster's pid)."""
    with contextlib.suppress(Exception):
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            timeout=30,
            check=False,
        )
    pid_file = data / "postmaster.pid"
    if pid_file.exists():  # pg_ctl could not stop it: the postmaster by its own pid
        with contextlib.suppress(Exception):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
