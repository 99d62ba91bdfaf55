"""Checkpoints through an outage of the job's etcd (a real etcd, frozen): the holders cannot be
read, so the steps saved meanwhile are not replicated at once; once etcd answers again they
are, and a node lost after the outage costs no step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.agent_harness import wait_for
from tests.support.checkpoint_harness import Node, run_ranks
from tests.support.etcd_server import EtcdServer

pytestmark = pytest.mark.timeout(600)

#: The retry interval of the agent's replication (checkpoint.node.REPLICATION_RETRY_S) plus a
#: holders read and two pushes, with room for a loaded machine.
REPLICATED_WITHIN_S = 60.0


def test_steps_saved_in_an_etcd_outage_are_replicated_after_it_and_survive_a_lost_node(
    tmp_path: Path, nodes: Callable[..., Node], etcd_tls_server: EtcdServer
) -> None:
    a, b = nodes("a"), nodes("b")
    run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "1")
    assert a.shard_file(1, 1, 2).exists() and b.shard_file(1, 0, 2).exists()

    etcd_tls_server.freeze()
    try:
        run_ranks(tmp_path, [a.socket, b.socket], "save", "--steps", "2,3")
        assert not a.shard_file(3, 1, 2).exists(), "replicated although etcd was frozen"
        # Step 1 is the newest step each node holds complete: kept beyond stepsKept (2).
        assert a.shard_file(1, 1, 2).exists() and b.shard_file(1, 0, 2).exists()
    finally:
        etcd_tls_server.thaw()

    try:
        wait_for(
            lambda: a.shard_file(3, 1, 2).exists() and b.shard_file(3, 0, 2).exists(),
            REPLICATED_WITHIN_S,
            "step 3 replicated to both peers after the outage",
        )
    except AssertionError as exc:
        logs = "".join(
            f"\n--- {n}:\n{(tmp_path / n / 'service.log').read_text()[-3000:]}" for n in "ab"
        )
        raise AssertionError(f"{exc}{logs}") from None

    b.lose()
    replacement = nodes("b-new")
    loaded = run_ranks(tmp_path, [a.socket, replacement.socket], "load")
    assert [(r["step"], r["ok"]) for r in loaded] == [(3, True), (3, True)]
    assert loaded[1]["source"] == "peer a"
