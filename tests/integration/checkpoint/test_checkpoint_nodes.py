"""Checkpoints across real nodes: one checkpoint service process per node (its own memory, no
shared storage), a real etcd speaking TLS, the peer channel over mutual TLS with the job's
certificates (the operator's ``pki``), ranks as real processes with torch.distributed (gloo)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from elasticjob_agent.checkpoint import peer
from elasticjob_agent.checkpoint.config import TlsPaths
from elasticjob_agent.checkpoint.manifest import HolderRecord, ShardId
from elasticjob_agent.checkpoint.store import ShardStore

from tests.support.checkpoint_harness import Node, run_ranks

pytestmark = pytest.mark.timeout(600)


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_save_restore_and_a_replica_on_the_next_node(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a"), nodes("b")
    saved = run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1,2,3")
    assert all(r["flushed"] and all(ok for _, ok in r["saved"]) for r in saved)
    # Each node keeps the other's rank as a replica (a ring of two), only the 2 newest steps.
    assert b.shard_file(3, 0, 2).exists() and a.shard_file(3, 1, 2).exists()
    assert not a.shard_file(1, 0, 2).exists() and a.shard_file(2, 0, 2).exists()
    loaded = run_ranks(tmp_path, [a.socket, b.socket], "load")
    assert [(r["step"], r["source"], r["ok"]) for r in loaded] == [(3, "memory", True)] * 2


def test_a_lost_node_is_restored_from_its_peer(tmp_path: Path, nodes: Callable[..., Node]) -> None:
    a, b = nodes("a"), nodes("b")
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1,2,3")
    a.lose()  # rank 0's node: its memory and its local disk are gone
    replacement = nodes("a-new")
    loaded = run_ranks(tmp_path, [replacement.socket, b.socket], "load")
    assert [(r["step"], r["ok"]) for r in loaded] == [(3, True), (3, True)]
    assert loaded[0]["source"] == "peer b" and loaded[1]["source"] == "memory"
    assert replacement.shard_file(3, 0, 2).exists()


def test_with_2_replicas_two_nodes_lost_together_are_restored_from_the_survivor(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    # 3 nodes, each shard copied to the next 2 in the ring: a scale from 3 nodes to 1.
    a, b, c = (nodes(n, replicas=2) for n in ("a", "b", "c"))
    saved = run_ranks(tmp_path, [a.socket, b.socket, c.socket], "save", "--steps", "1,2")
    assert all(r["flushed"] and all(ok for _, ok in r["saved"]) for r in saved)
    assert a.shard_file(2, 1, 3).exists() and a.shard_file(2, 2, 3).exists()
    b.lose()
    c.lose()
    loaded = run_ranks(tmp_path, [a.socket, nodes("b-new").socket, nodes("c-new").socket], "load")
    assert [(r["step"], r["ok"]) for r in loaded] == [(2, True)] * 3
    assert [r["source"] for r in loaded] == ["memory", "peer a", "peer a"]


def test_a_corrupt_replica_is_never_loaded_the_disk_copy_is(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a", persist=True), nodes("b", persist=True)
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1,2,3")
    # Rank 0's node restarts with its memory wiped but its local disk intact, and the replica
    # of its shard on b has a flipped byte.
    a.stop()
    shutil.rmtree(a.memory)
    replica = b.shard_file(3, 0, 2)
    data = bytearray(replica.read_bytes())
    data[len(data) // 2] ^= 0xFF
    replica.write_bytes(bytes(data))
    a2 = nodes("a", persist=True, memory=a.memory)
    a2.persist = a.persist
    loaded = run_ranks(tmp_path, [a2.socket, b.socket], "load")
    assert [(r["step"], r["source"], r["ok"]) for r in loaded] == [
        (3, "disk", True),
        (3, "memory", True),
    ]
    assert (
        "fails its checksum" in (tmp_path / "a" / "service.log").read_text()
        or "does not match" in (tmp_path / "a" / "service.log").read_text()
    )


def test_no_step_complete_on_every_rank_falls_back_to_an_older_one(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a"), nodes("b")
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1,2,3")
    # Step 3 of rank 1 is gone everywhere (its node's copy and the replica): step 3 is torn.
    for node in (a, b):
        shutil.rmtree(node.shard_file(3, 1, 2).parent)
    b.stop()
    b2 = nodes("b2", memory=b.memory)
    loaded = run_ranks(tmp_path, [a.socket, b2.socket], "load")
    assert [(r["step"], r["ok"]) for r in loaded] == [(2, True), (2, True)]


def test_a_state_over_the_limit_is_refused_and_the_last_good_one_kept(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a", limit="4Mi"), nodes("b", limit="4Mi")
    saved = run_ranks(
        tmp_path,
        [a.socket, b.socket],
        "save",
        "--steps",
        "1,2",
        "--n",
        "20000",
        "--oversize-step",
        "2",
    )
    for r in saved:
        assert r["saved"] == [[1, True], [2, False]]
        assert "memory limit is 4194304 bytes" in r["error"]
    loaded = run_ranks(tmp_path, [a.socket, b.socket], "load", "--n", "20000")
    assert [(r["step"], r["ok"]) for r in loaded] == [(1, True), (1, True)]


class _BrokenPeer:
    """A peer that announces a shard, sends its header and half of its bytes, then either stalls
    (its host vanished: no FIN ever comes) or closes the connection."""

    def __init__(self, tls: TlsPaths, source: Path, shard: ShardId, *, stall: bool) -> None:
        self._context = peer.server_context(tls)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        store = ShardStore(source, keep=2, limit=1 << 30, origin="reader")
        manifest = store.manifest(shard)
        assert manifest is not None
        self._manifest = manifest
        self._data = (store.shard_dir(shard) / "state.bin").read_bytes()
        self._stall = stall
        self._stop = threading.Event()
        self.served = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import json  # noqa: PLC0415

        while not self._stop.is_set():
            raw, _ = self._listener.accept()
            with self._context.wrap_socket(raw, server_side=True) as sock:
                sock.makefile("rb").readline()
                header = {"ok": True, "manifest": json.loads(self._manifest.encode())}
                sock.sendall(json.dumps(header).encode() + b"\n")
                sock.sendall(self._data[: len(self._data) // 2])
                self.served += 1
                if self._stall:
                    self._stop.wait(120)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.mark.parametrize("stall", [True, False], ids=["stalls", "closes"])
def test_a_peer_gone_mid_transfer_the_next_source_is_tried_within_the_deadline(
    tmp_path: Path,
    nodes: Callable[..., Node],
    etcd_tls_server: object,
    tls: dict[str, Path],
    stall: bool,
) -> None:
    a, b = nodes("a"), nodes("c")
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1,2,3")
    paths = TlsPaths(str(tls["ca"]), str(tls["cert"]), str(tls["key"]))
    broken = _BrokenPeer(paths, b.shards.parent, ShardId(3, 0, 2), stall=stall)
    # The broken peer sorts before c, so a fresh node tries it first.
    from elasticjob_agent.etcd.session import EtcdSession  # noqa: PLC0415
    from elasticjob_agent.protocol.endpoints import TlsFiles, parse_endpoints  # noqa: PLC0415

    session = EtcdSession(
        parse_endpoints(
            etcd_tls_server.endpoint,  # type: ignore[attr-defined]
            TlsFiles(paths.cacert, paths.cert, paths.key),
        ),
        request_timeout=5.0,
        lease_ttl=30,
    )
    try:
        run_id = a.log_path.parent.parent.name  # not used: the run id is in the key below
        del run_id
        from elasticjob_agent.checkpoint.directory import HolderDirectory  # noqa: PLC0415
        from elasticjob_agent.protocol.keys import JobKeys  # noqa: PLC0415

        keys = JobKeys("/elasticjob", _run_id_of(a))
        directory = HolderDirectory(session, keys, "b-broken")
        directory.publish(HolderRecord("b-broken", broken.endpoint, (ShardId(3, 0, 2),)))
        a.lose()
        replacement = nodes("a-new", timeout=3.0)
        started = time.monotonic()
        loaded = run_ranks(tmp_path, [replacement.socket, b.socket], "load")
        took = time.monotonic() - started
        assert broken.served >= 1
        assert [(r["step"], r["ok"]) for r in loaded] == [(3, True), (3, True)]
        assert loaded[0]["source"] == "peer c"
        assert took < 60, f"restore took {took:.1f}s"
        log = (tmp_path / "a-new" / "service.log").read_text()
        assert "b-broken" in log
        directory.close()
    finally:
        broken.close()
        session.close()


def _run_id_of(node: Node) -> str:
    command = [str(a) for a in node.proc.args]  # type: ignore[union-attr]
    return command[command.index("--run-id") + 1]


def test_only_the_jobs_certificates_reach_the_peer_channel(
    tmp_path: Path, nodes: Callable[..., Node], etcd_tls_server: object, tls: dict[str, Path]
) -> None:
    a, b = nodes("a"), nodes("b")
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1")
    endpoint = _endpoint_of(b)
    material = etcd_tls_server.tls  # type: ignore[attr-defined]
    stranger = TlsPaths(
        str(material.stranger_ca), str(material.stranger_cert), str(material.stranger_key)
    )
    store = ShardStore(tmp_path / "thief", keep=2, limit=1 << 30, origin="thief")
    with pytest.raises(peer.PeerError):
        peer.fetch(endpoint, stranger, store, ShardId(1, 1, 2), timeout=10)
    # Trusting the job's CA but presenting another CA's certificate: refused by the server.
    mixed = TlsPaths(str(tls["ca"]), str(material.stranger_cert), str(material.stranger_key))
    with pytest.raises(peer.PeerError):
        peer.fetch(endpoint, mixed, store, ShardId(1, 1, 2), timeout=10)
    # No TLS at all: the server says nothing and closes.
    host, port = peer.split_endpoint(endpoint)
    with socket.create_connection((host, port), timeout=10) as plain:
        plain.sendall(b'{"op":"get","shard":[1,1,2]}\n')
        try:
            answer = plain.recv(1 << 16)
        except ConnectionResetError:
            answer = b""
        assert answer[:1] in (b"", b"\x15")  # closed, or a TLS alert: never data
    assert store.held() == []
    # The job's own certificate works.
    job = TlsPaths(str(tls["ca"]), str(tls["cert"]), str(tls["key"]))
    peer.fetch(endpoint, job, store, ShardId(1, 1, 2), timeout=10)
    assert store.held() == [ShardId(1, 1, 2)]


def _endpoint_of(node: Node) -> str:
    for line in node.log_path.read_text().splitlines():
        if "peers at " in line:
            return line.split("peers at ")[1].split(",")[0].strip()
    raise AssertionError(f"no endpoint in {node.log_path}")


def test_dcp_save_and_load_across_nodes_and_after_a_lost_node(
    tmp_path: Path, nodes: Callable[..., Node]
) -> None:
    a, b = nodes("a"), nodes("b")
    run_ranks(tmp_path, [a.socket, b.socket], "save-dcp", "--steps", "4,5")
    loaded = run_ranks(tmp_path, [a.socket, b.socket], "load-dcp")
    assert [(r["step"], r["ok"]) for r in loaded] == [(5, True), (5, True)]
    a.lose()
    replacement = nodes("a-new")
    loaded = run_ranks(tmp_path, [replacement.socket, b.socket], "load-dcp")
    assert [(r["step"], r["ok"]) for r in loaded] == [(5, True), (5, True)]
    # What each rank restored reaches its node's agent, as the plain API's restore does (the
    # health report, then status.checkpoint.lastRestore): the new node fetched from a peer.
    first, second = (r["report"] for r in loaded)
    for report in (first, second):
        assert report.pop("seconds") >= 0
    assert first.pop("source") == "peer" and first.pop("sourceNode"), loaded
    assert first == {"step": 5, "savedWorldSize": 2, "worldSize": 2}, loaded
    assert second == {"step": 5, "savedWorldSize": 2, "worldSize": 2, "source": "memory"}
    assert (
        "a rank restored step 5 (saved by 2 ranks) into 2 ranks" in replacement.log_path.read_text()
    )
