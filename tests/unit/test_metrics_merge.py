"""Merging the workers' expositions (metrics_merge.py, services/peers.py's merged_text) and the workers'
private sockets (services/peers.py: PeerListener and fetch on real unix sockets in a temporary directory).

Each worker's exposition is rendered by metrics.render, as a worker renders it; the merge must keep
each family's HELP and TYPE once, carry every worker's samples under its own instance (read back
with prometheus_client's parser, sample for sample), and give a single part back byte for byte."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queue_manager.metrics import Counters, render
from queue_manager.metrics_merge import merge, split
from queue_manager.services.peers import PeerListener, Peers, fetch, merged, merged_text


def _exposition(instance: str, waiting: int = 3, rooms: tuple[str, ...] = ("shop",), **counters: int) -> bytes:
    c = Counters(**counters)  # type: ignore[arg-type]
    c.origin_errors[("shop", "connect")] = 2
    return render(
        [{"id": r, "waiting": waiting, "maxConcurrent": None, "effectiveState": "active"} for r in rooms],
        c,
        uptime=12.5,
        start_time=1_700_000_000.25,
        sse_subscribers=1,
        shutting_down=False,
        instance=instance,
    )


def _lines(text: bytes, prefix: str) -> list[str]:
    return [line.split()[2] for line in text.decode().splitlines() if line.startswith(prefix)]


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, key
            out[key] = s.value
    return out


def test_one_part_comes_back_byte_for_byte() -> None:
    one = _exposition("qm-a-w1", unknown_room_checks=4)
    assert merge([split(one)]) == one


def test_every_family_once_with_every_workers_samples() -> None:
    w1 = _exposition("qm-a-w1", waiting=3, unknown_room_checks=4)
    w2 = _exposition("qm-a-w2", waiting=3, rooms=("shop", "blog"), unknown_room_checks=9)
    out = merge([split(w1), split(w2)])
    for prefix in ("# HELP ", "# TYPE "):
        names = _lines(out, prefix)
        assert len(names) == len(set(names))
        assert set(names) == set(_lines(w1, prefix))
    samples = _samples(out)
    assert samples == _samples(w1) | _samples(w2)  # nothing lost, nothing changed
    assert samples[("qm_unknown_room_checks_total", (("instance", "qm-a-w1"),))] == 4
    assert samples[("qm_unknown_room_checks_total", (("instance", "qm-a-w2"),))] == 9
    assert samples[("qm_room_waiting", (("instance", "qm-a-w2"), ("room", "blog")))] == 3
    text = out.decode()
    # a family's samples follow its TYPE line, the first part's before the second's
    block = text[text.index("# TYPE qm_room_waiting gauge") : text.index("# HELP qm_room_active_sessions")]
    assert block.index('instance="qm-a-w1"') < block.index('instance="qm-a-w2"')
    assert 'room="blog"' in block


def test_a_family_only_a_later_part_has_is_kept_and_a_type_clash_is_left_out() -> None:
    first = b'# HELP a_x An x\n# TYPE a_x gauge\na_x{instance="w1"} 1.0\n'
    second = (
        b'# HELP a_x An x, said otherwise\n# TYPE a_x counter\na_x{instance="w2"} 5.0\n'
        b'# HELP a_y A y\n# TYPE a_y gauge\na_y{instance="w2"} 2.0\n'
    )
    out = merge([split(first), split(second)]).decode()
    assert out == (
        '# HELP a_x An x\n# TYPE a_x gauge\na_x{instance="w1"} 1.0\n'
        '# HELP a_y A y\n# TYPE a_y gauge\na_y{instance="w2"} 2.0\n'
    )


def test_a_series_given_twice_is_kept_once() -> None:
    part = b'# HELP a_x An x\n# TYPE a_x gauge\na_x{instance="w1"} 1.0\n'
    again = b'# HELP a_x An x\n# TYPE a_x gauge\na_x{instance="w1"} 7.0\n'
    assert merge([split(part), split(again)]) == part


@pytest.mark.parametrize(
    "text",
    [
        b'# HELP a_x An x\n# TYPE a_x gauge\na_x{instance="w1"} 1.0',  # cut short
        b'a_x{instance="w1"} 1.0\n',  # a sample before any family
        b'# HELP a_x An x\n# TYPE a_x gauge\nb_y{instance="w1"} 1.0\n',  # a sample of another name
        b"# HELP \n",
        b"<html>oops</html>\n",
    ],
)
def test_split_refuses_what_this_server_did_not_write(text: bytes) -> None:
    with pytest.raises(ValueError):
        split(text)


def test_nothing_merges_to_nothing() -> None:
    assert merge([split(b""), []]) == b""


PEERS = Peers("/nowhere", 1, 3, "qm-a")


def test_merged_text_counts_the_workers_that_answered_under_the_servers_name() -> None:
    texts = {2: _exposition("qm-a-w2"), 1: _exposition("qm-a-w1"), 3: _exposition("qm-a-w3")[:-40]}
    out = merged_text(PEERS, texts)
    samples = _samples(out)
    assert samples[("qm_workers", (("instance", "qm-a"),))] == 3
    assert samples[("qm_workers_scraped", (("instance", "qm-a"),))] == 2  # the one cut short is left out
    instances = {dict(labels).get("instance") for (_, labels) in samples}
    assert instances == {"qm-a-w1", "qm-a-w2", "qm-a"}
    text = out.decode()
    assert text.index('instance="qm-a-w1"') < text.index('instance="qm-a-w2"')  # worker order
    assert _lines(out, "# TYPE ")[-2:] == ["qm_workers", "qm_workers_scraped"]


async def test_a_worker_serves_its_metrics_on_its_socket_and_the_others_are_scraped(tmp_path: Path) -> None:
    peers = [Peers(str(tmp_path), k, 3, "qm-a") for k in (1, 2, 3)]
    (tmp_path / "w3.sock").write_text("left by a killed worker")  # replaced by w3's listener
    listeners = [PeerListener(p, lambda k=p.index: _local(k)) for p in peers]
    for listener in listeners:
        await listener.start()
    try:
        assert await fetch(peers[0].path(2)) == _exposition("qm-a-w2")
        out = await merged(peers[0], _local(1))
        assert _samples(out)[("qm_workers_scraped", (("instance", "qm-a"),))] == 3
        await listeners[2].stop()
        assert not (tmp_path / "w3.sock").exists()
        assert await fetch(peers[0].path(3)) is None
        out = await merged(peers[0], _local(1))
        samples = _samples(out)
        assert samples[("qm_workers_scraped", (("instance", "qm-a"),))] == 2
        assert {dict(labels).get("instance") for (_, labels) in samples} == {"qm-a-w1", "qm-a-w2", "qm-a"}
    finally:
        for listener in listeners:
            await listener.stop()


async def _local(k: int) -> bytes:
    return _exposition(f"qm-a-w{k}")


async def test_a_worker_that_never_answers_is_left_out(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await gate.wait()
        writer.close()

    server = await asyncio.start_unix_server(silent, str(tmp_path / "w2.sock"))
    try:
        assert await fetch(str(tmp_path / "w2.sock"), within_sec=0.05) is None
    finally:
        gate.set()
        server.close()
        await server.wait_closed()


async def test_only_get_metrics_is_answered_and_a_failing_render_is_not_200(tmp_path: Path) -> None:
    async def failing() -> bytes:
        raise ConnectionError("the store is unreachable")

    listener = PeerListener(Peers(str(tmp_path), 1, 2, "qm-a"), failing)
    await listener.start()
    try:
        assert await fetch(listener.path) is None
        reader, writer = await asyncio.open_unix_connection(listener.path)
        writer.write(b"GET /api/admin/rooms HTTP/1.0\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.0 404 ")
        writer.close()
    finally:
        await listener.stop()
