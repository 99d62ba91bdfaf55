"""``EtcdStore`` implements ``torch.distributed.Store`` on a real etcd, and gloo boots on it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.rendezvous.store import EtcdStore

from tests.support.etcd_server import EtcdServer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def prefix() -> str:
    return f"/elasticjob/store-{uuid.uuid4().hex[:8]}/rdzv/rounds/0/store/"


@pytest.fixture
def store(etcd_server_session: EtcdServer, prefix: str) -> Iterator[EtcdStore]:
    s = EtcdStore.connect(etcd_server_session.endpoint, prefix, timeout=timedelta(seconds=5))
    yield s
    s.close()


def test_set_get_and_bytes(store: EtcdStore) -> None:
    store.set("a", "text")
    store.set("b", b"\x00\xffbin")
    assert store.get("a") == b"text"
    assert store.get("b") == b"\x00\xffbin"


def test_add_is_atomic_and_readable(store: EtcdStore) -> None:
    assert store.add("n", 1) == 1
    assert store.add("n", 5) == 6
    assert store.add("n", -2) == 4
    assert store.get("n") == b"4"


def test_add_counts_once_when_etcd_applied_it_but_the_answer_was_lost(
    store: EtcdStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = store._session.client
    real_txn = client.txn
    lost: list[bool] = []

    async def answer_lost_once(compare: Any, success: Any, *rest: Any) -> Any:
        response = await real_txn(compare, success, *rest)
        if compare and not lost:  # etcd applied the conditional write; its answer never came
            lost.append(True)
            raise RendezvousConnectionError("answer lost")
        return response

    monkeypatch.setattr(client, "txn", answer_lost_once)
    assert store.add("once", 3) == 3
    assert lost == [True]
    assert store.get("once") == b"3"
    assert store.add("once", 1) == 4
    assert store.num_keys() == 1  # the markers live outside the store's keys


def test_compare_set_follows_torch_semantics(store: EtcdStore) -> None:
    assert store.compare_set("k", "x", "y") == b"x"  # missing key, non-empty expected
    assert store.compare_set("k", "", "first") == b"first"  # missing key, empty expected
    assert store.compare_set("k", "wrong", "z") == b"first"
    assert store.compare_set("k", "first", "second") == b"second"
    assert store.get("k") == b"second"


def test_check_delete_and_num_keys(store: EtcdStore) -> None:
    assert not store.check(["p"])
    store.set("p", "1")
    store.set("q", "2")
    assert store.check(["p", "q"])
    assert store.num_keys() == 2
    assert store.delete_key("p")
    assert not store.delete_key("p")
    assert not store.check(["p", "q"])
    assert store.num_keys() == 1


def test_wait_times_out_with_store_error(store: EtcdStore) -> None:
    started = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="never"):
        store.wait(["never"], timedelta(seconds=0.5))
    assert 0.4 < time.monotonic() - started < 5
    store.set_timeout(timedelta(seconds=0.3))
    with pytest.raises(dist.DistStoreError):
        store.get("never")


def test_get_blocks_until_another_client_sets(
    store: EtcdStore, etcd_server_session: EtcdServer, prefix: str
) -> None:
    other = EtcdStore.connect(etcd_server_session.endpoint, prefix)
    try:
        timer = threading.Timer(0.3, lambda: other.set("late", "here"))
        timer.start()
        assert store.get("late") == b"here"
        timer.join()
    finally:
        other.close()


def test_prefixes_are_isolated(store: EtcdStore, etcd_server_session: EtcdServer) -> None:
    other = EtcdStore.connect(
        etcd_server_session.endpoint, f"/elasticjob/other-{uuid.uuid4().hex[:6]}/store/"
    )
    try:
        store.set("shared-name", "mine")
        assert not other.check(["shared-name"])
        assert other.num_keys() == 0
    finally:
        other.close()


@pytest.mark.timeout(120)
def test_gloo_process_group_boots_on_the_store(
    etcd_server_session: EtcdServer, prefix: str
) -> None:
    world = 3
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "agent"))
    worker = Path(__file__).with_name("gloo_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), etcd_server_session.endpoint, prefix, str(r), str(world)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outputs = [p.communicate(timeout=90)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
        assert "sum=6" in out, out[-3000:]


def test_check_and_multi_get_of_more_keys_than_one_etcd_transaction_holds(
    store: EtcdStore,
) -> None:
    keys = [f"many/{i:04d}" for i in range(300)]
    for key in keys[:-1]:
        store.set(key, key)
    assert not store.check(keys)
    store.set(keys[-1], keys[-1])
    assert store.check(keys)
    assert store.multi_get(keys) == [k.encode() for k in keys]
