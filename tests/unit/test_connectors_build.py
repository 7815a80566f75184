"""The connectors' artefacts are built from their folders reproducibly, with the build's tokens filled in."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_manager.web import asset, connectors


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(connectors, "root", lambda: tmp_path)
    connectors.build.cache_clear()
    yield tmp_path
    connectors.build.cache_clear()


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_worker_is_packed_with_its_version_and_this_builds_offline_page(sources: Path) -> None:
    _write(
        sources / "cloudflare-failover",
        {
            "package.json": json.dumps({"name": "qm-failover", "version": "2.1.0"}),
            "README.md": "# failover\n",
            "src/worker.js": 'const PAGE = "__QM_OFFLINE_HTML__";\nconst V = "__QM_CONNECTOR_VERSION__";\n',
            "node_modules/x/index.js": "ignored",
            ".wrangler/state": "ignored",
        },
    )
    built = connectors.build("cloudflare-failover")
    assert built is not None and built.version == "2.1.0"
    assert built.script is not None and built.script.filename == "cloudflare-failover-2.1.0.js"
    script = built.script.body.decode()
    literal = script.split("const PAGE = ", 1)[1].split(";\n", 1)[0]
    assert json.loads(literal.replace("<\\/", "</")) == asset.offline_page().decode()
    assert "</" not in literal  # cannot end a script element it is pasted into
    assert 'const V = "2.1.0"' in script
    with tarfile.open(fileobj=io.BytesIO(built.archive.body)) as tar:
        names = tar.getnames()
        assert names == ["qm-failover/README.md", "qm-failover/package.json", "qm-failover/src/worker.js"]
        assert all(m.mtime == connectors.EPOCH and m.uid == 0 and m.uname == "" for m in tar.getmembers())
        member = tar.extractfile("qm-failover/src/worker.js")
        assert member is not None and member.read() == built.script.body


def test_the_same_sources_give_the_same_bytes(sources: Path) -> None:
    _write(sources / "node", {"package.json": json.dumps({"version": "1.1.0"}), "index.js": "module.exports = 1;\n"})
    first = connectors.build("node")
    connectors.build.cache_clear()
    (sources / "node" / "index.js").touch()  # a newer mtime changes nothing
    second = connectors.build("node")
    assert first is not None and second is not None
    assert first.archive.body == second.archive.body and first.archive.sha256 == second.archive.sha256
    assert gzip.decompress(first.archive.body)  # a real gzip
    assert first.archive.body[4:8] == b"\0\0\0\0"  # no time in the gzip header


def test_the_wordpress_plugin_is_a_zip_versioned_by_its_header(sources: Path) -> None:
    _write(
        sources / "wordpress",
        {"queue-manager.php": "<?php\n/**\n * Plugin Name: Queue Manager\n * Version: 1.2.0\n */\n", "readme.txt": "x"},
    )
    built = connectors.build("wordpress")
    assert built is not None and built.version == "1.2.0" and built.script is None
    with zipfile.ZipFile(io.BytesIO(built.archive.body)) as zf:
        assert zf.namelist() == ["queue-manager/queue-manager.php", "queue-manager/readme.txt"]
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    connectors.build.cache_clear()
    again = connectors.build("wordpress")
    assert again is not None and again.archive.body == built.archive.body


def test_unknown_or_absent_connectors_are_none(sources: Path) -> None:
    assert connectors.build("cloudflare") is None  # no folder in this checkout
    assert connectors.build("../etc") is None
    assert connectors.built() == []
    assert connectors.tag_version().count(".") == 2
