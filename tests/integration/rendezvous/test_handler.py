"""``EtcdRendezvousHandler`` against a real etcd: torch's dynamic rendezvous semantics."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from elasticjob_agent.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousStateError,
    RendezvousTimeoutError,
)
from elasticjob_agent.rendezvous.backend import create_backend
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousParameters
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

from tests.support.etcd_server import EtcdServer
from tests.support.rendezvous_handlers import (
    Result,
    assert_one_group,
    make_handler,
    new_run_id,
    node_keys,
    rendezvous_all,
)


class Handlers:
    """Creates handlers for one run id and shuts them all down at the end."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.run_id = new_run_id()
        self.all: list[EtcdRendezvousHandler] = []

    def __call__(self, n: int, **overrides: object) -> list[EtcdRendezvousHandler]:
        start = len(self.all)
        made = [
            make_handler(self.endpoint, self.run_id, f"node-{start + i:03d}", **overrides)
            for i in range(n)
        ]
        self.all.extend(made)
        return made

    def close(self) -> None:
        for h in self.all:
            h.shutdown()


def _wait_keys(endpoint: str, h: EtcdRendezvousHandler, held: bool, what: str) -> None:
    """Until ``h``'s node holds a key of its run in etcd (joined or waiting), or none."""
    deadline = time.monotonic() + 30
    while bool(node_keys(endpoint, h.config.run_id, h.config.node_id)) is not held:
        assert time.monotonic() < deadline, f"{h.config.node_id}: never {what}"
        time.sleep(0.05)


@pytest.fixture
def handlers(etcd_server_session: EtcdServer) -> Iterator[Handlers]:
    made = Handlers(etcd_server_session.endpoint)
    yield made
    made.close()


def test_completes_at_max_nodes_with_contiguous_ranks(handlers: Handlers) -> None:
    hs = handlers(4, min_nodes=4, max_nodes=4, last_call_timeout=30)
    started = time.monotonic()
    results = rendezvous_all(hs)
    assert_one_group(results, 4)
    # At max_nodes the round completes at once, not after the (30 s) last call.
    assert time.monotonic() - started < 10
    assert results[0].master is not None and results[0].master[0] == "127.0.0.1"


def test_completes_after_last_call_with_min_nodes(handlers: Handlers) -> None:
    hs = handlers(3, min_nodes=2, max_nodes=5, last_call_timeout=1.0)
    started = time.monotonic()
    results = rendezvous_all(hs)
    assert_one_group(results, 3)
    assert time.monotonic() - started >= 1.0


def test_join_timeout_is_final_error(handlers: Handlers) -> None:
    (h,) = handlers(1, min_nodes=2, max_nodes=2, join_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RendezvousTimeoutError):
        h.next_rendezvous()
    assert time.monotonic() - started < 5


def test_late_node_waits_and_is_admitted_by_re_rendezvous(handlers: Handlers) -> None:
    first = handlers(2, min_nodes=1, max_nodes=3, last_call_timeout=0.5)
    assert_one_group(rendezvous_all(first), 2)
    (late,) = handlers(1, min_nodes=1, max_nodes=3, last_call_timeout=0.5)
    late_result: list[object] = []
    t = threading.Thread(target=lambda: late_result.append(late.next_rendezvous()), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while first[0].num_nodes_waiting() == 0:
        assert time.monotonic() < deadline, "the late node never showed up on the wait list"
        time.sleep(0.05)
    assert t.is_alive(), "a late node must not form a group of its own"
    results = rendezvous_all(first)
    t.join(20)
    assert late_result, "the late node was not admitted"
    assert all(r.error is None for r in results), results
    info = late_result[0]
    assert isinstance(info, RendezvousInfo)
    assert sorted([info.rank, *(r.rank or 0 for r in results)]) == [0, 1, 2]
    assert {info.world_size, *(r.world_size for r in results)} == {3}
    assert first[0].round == 1 and late.round == 1
    assert first[0].num_nodes_waiting() == 0


def test_re_rendezvous_after_completion_starts_a_new_round(handlers: Handlers) -> None:
    hs = handlers(3, min_nodes=3, max_nodes=3)
    assert_one_group(rendezvous_all(hs), 3)
    assert all(h.members_alive() for h in hs)
    # One member restarts (e.g. its worker failed): the others learn it and follow.
    t = threading.Thread(target=hs[0].next_rendezvous, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while hs[1].num_nodes_waiting() == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    results = rendezvous_all(hs[1:])
    t.join(20)
    assert {r.round for r in results} == {1}
    assert hs[0].round == 1


def test_node_that_dies_before_completion_is_dropped(handlers: Handlers) -> None:
    (doomed,) = handlers(1, min_nodes=2, max_nodes=3, last_call_timeout=0.5, heartbeat=1)
    t = threading.Thread(target=lambda: _swallow(doomed.next_rendezvous), daemon=True)
    t.start()
    _wait_keys(handlers.endpoint, doomed, True, "joined")
    # Crash: the keep-alive stops without revoking the lease.
    doomed._session.close()
    _wait_keys(handlers.endpoint, doomed, False, "dropped")  # the lease TTL: etcd deletes them
    rest = handlers(2, min_nodes=2, max_nodes=3, last_call_timeout=0.5, heartbeat=1)
    results = rendezvous_all(rest)
    assert_one_group(results, 2)


def test_member_death_after_completion_is_visible(handlers: Handlers) -> None:
    hs = handlers(3, min_nodes=2, max_nodes=3, last_call_timeout=1.0)
    assert_one_group(rendezvous_all(hs), 3)
    hs[2].leave()
    assert not hs[0].members_alive()
    assert not hs[1].members_alive()
    # The survivors re-form without it.
    results = rendezvous_all(hs[:2])
    assert_one_group(results, 2)
    assert {r.round for r in results} == {1}
    assert hs[0].members_alive()


def test_new_nodes_re_form_when_every_member_of_the_completed_round_is_gone(
    handlers: Handlers,
) -> None:
    """Suspend/resume, or a whole group preempted: etcd and the run id stay, every member left.

    Nobody is left to start the next round, so the newcomers must: they would otherwise find
    the round complete, go on the wait list and wait for a member that never comes back.
    """
    first = handlers(2, min_nodes=2, max_nodes=2)
    assert_one_group(rendezvous_all(first), 2)
    for h in first:
        h.leave()  # SIGTERM on pod deletion: each leaves at once
    second = handlers(2, min_nodes=2, max_nodes=2, join_timeout=30)
    results = rendezvous_all(second)
    assert_one_group(results, 2)
    assert {r.round for r in results} == {1}


def test_a_completed_round_with_live_members_keeps_newcomers_waiting(handlers: Handlers) -> None:
    first = handlers(2, min_nodes=1, max_nodes=3, heartbeat=1)
    assert_one_group(rendezvous_all(first), 2)
    first[1].leave()  # one member gone, one still training
    (late,) = handlers(1, min_nodes=1, max_nodes=3, heartbeat=1)
    t = threading.Thread(target=lambda: _swallow(late.next_rendezvous), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while first[0].num_nodes_waiting() == 0:
        assert time.monotonic() < deadline, "the late node never showed up on the wait list"
        time.sleep(0.05)
    # A live member remains: the newcomer waits to be admitted (it re-reads every heartbeat and
    # must not start a group of its own with min_nodes=1), until the member re-rendezvouses.
    # Its request count proves it re-read a few times meanwhile.
    client = late._session.client
    reads = client.requests + 3
    deadline = time.monotonic() + 30
    while client.requests < reads and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.requests >= reads, "the newcomer stopped reading"
    assert t.is_alive(), "a newcomer formed a second group beside a live member"
    results = rendezvous_all(first[:1])
    t.join(20)
    assert results[0].error is None and results[0].round == 1
    assert late.round == 1


def test_restarted_agent_with_same_node_id_does_not_reuse_the_old_key(
    handlers: Handlers,
) -> None:
    hs = handlers(2, min_nodes=2, max_nodes=2)
    assert_one_group(rendezvous_all(hs), 2)
    # A new process with the node id of a member whose old lease still lives.
    again = make_handler(
        handlers.endpoint, handlers.run_id, hs[1].config.node_id, min_nodes=2, max_nodes=2
    )
    handlers.all.append(again)
    t = threading.Thread(target=lambda: _swallow(again.next_rendezvous), daemon=True)
    t.start()
    # It waits on the wait list for a new round.
    node = hs[1].config.node_id
    deadline = time.monotonic() + 30
    keys: list[str] = []
    while not any(k.endswith(f"/waiting/{node}") for k in keys):
        assert time.monotonic() < deadline, f"never on the wait list: {keys}"
        keys = node_keys(handlers.endpoint, handlers.run_id, node)
        time.sleep(0.05)
    assert t.is_alive(), "the restarted agent must wait for a new round, not reuse round 0"
    assert hs[0].num_nodes_waiting() == 0  # the round is full: nothing to admit
    hs[1].leave()  # the old process is gone for good
    assert not hs[0].members_alive()
    results = rendezvous_all(hs[:1])
    t.join(20)
    assert results[0].error is None and results[0].round == 1
    assert again.round == 1


def test_closed_is_final_for_everyone(handlers: Handlers) -> None:
    a, b = handlers(2, min_nodes=2, max_nodes=2)
    assert_one_group(rendezvous_all([a, b]), 2)
    assert not b.is_closed()
    a.set_closed()
    assert b.is_closed()
    with pytest.raises(RendezvousClosedError):
        b.next_rendezvous()
    (c,) = handlers(1)
    with pytest.raises(RendezvousClosedError):
        c.next_rendezvous()


def test_close_wakes_a_waiting_node(handlers: Handlers) -> None:
    a, b = handlers(2, min_nodes=2, max_nodes=2)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _swallow(a.next_rendezvous, errors), daemon=True)
    t.start()
    _wait_keys(handlers.endpoint, a, True, "waiting")
    b.set_closed()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RendezvousClosedError)


def test_corrupt_state_raises_state_error(
    handlers: Handlers, etcd_server_session: EtcdServer
) -> None:
    (h,) = handlers(1)
    etcd_server_session.etcdctl("put", f"/elasticjob/{handlers.run_id}/rdzv/ctl/round", "{oops")
    with pytest.raises(RendezvousStateError, match="ctl/round"):
        h.next_rendezvous()
    etcd_server_session.etcdctl("put", f"/elasticjob/{handlers.run_id}/rdzv/ctl/round", '{"v": 9}')
    with pytest.raises(RendezvousStateError):
        h.next_rendezvous()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rounds/0/ranks/0", '{"v": 1, "ranks": ["node-000"]}', "rounds/0/ranks/0"),
        ("ctl/complete/0", '{"v": 1, "round": 0}', "ctl/complete/0.*'master'"),
    ],
)
def test_a_corrupt_rank_table_or_completion_record_is_a_state_error(
    handlers: Handlers, etcd_server_session: EtcdServer, key: str, value: str, message: str
) -> None:
    (first,) = handlers(1, min_nodes=1, max_nodes=1)
    assert first.next_rendezvous().rank == 0
    etcd_server_session.etcdctl("put", f"/elasticjob/{handlers.run_id}/rdzv/{key}", value)
    (second,) = handlers(1, min_nodes=1, max_nodes=1)
    with pytest.raises(RendezvousStateError, match=message):
        second.next_rendezvous()


def test_torch_dynamic_handler_runs_on_our_backend(etcd_server_session: EtcdServer) -> None:
    run_id = new_run_id()
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint=etcd_server_session.endpoint,
        run_id=run_id,
        min_nodes=3,
        max_nodes=3,
        join_timeout="30",
        last_call_timeout="1",
        local_addr="127.0.0.1",
    )
    pairs = [create_backend(params) for _ in range(3)]
    torch_handlers = [create_handler(store, backend, params) for backend, store in pairs]
    infos: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        info = torch_handlers[i].next_rendezvous()
        with lock:
            infos.append((info.rank, info.world_size))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert sorted(infos) == [(0, 3), (1, 3), (2, 3)]
    finally:
        for h in torch_handlers:
            h.shutdown()
        for backend, _ in pairs:
            backend.close()


# --- etcd outages: each test gets its own etcd to stop and start --------------------------


def test_etcd_down_mid_rendezvous_raises_connection_error(etcd_server: EtcdServer) -> None:
    h = make_handler(etcd_server.endpoint, new_run_id(), "lonely", etcd_timeout=2, join_timeout=60)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _swallow(h.next_rendezvous, errors), daemon=True)
    t.start()
    _wait_keys(etcd_server.endpoint, h, True, "waiting")
    etcd_server.kill()
    started = time.monotonic()
    t.join(20)
    try:
        assert not t.is_alive(), "next_rendezvous hung past etcd_timeout"
        assert time.monotonic() - started < 15
        assert len(errors) == 1 and isinstance(errors[0], RendezvousConnectionError), errors
        reachable, _, since = h.etcd_status()
        assert not reachable and since is not None
    finally:
        h.shutdown()


def test_etcd_back_within_timeout_recovers(etcd_server: EtcdServer) -> None:
    run_id = new_run_id()
    a = make_handler(etcd_server.endpoint, run_id, "a", etcd_timeout=20, heartbeat=5)
    b = make_handler(etcd_server.endpoint, run_id, "b", etcd_timeout=20, heartbeat=5)
    results: list[object] = []
    t = threading.Thread(target=lambda: results.append(a.next_rendezvous()), daemon=True)
    t.start()
    _wait_keys(etcd_server.endpoint, a, True, "waiting")
    etcd_server.kill()
    time.sleep(1.5)
    etcd_server.start()
    try:
        rb = rendezvous_all([b])
        t.join(20)
        assert rb[0].error is None, rb[0].error
        assert len(results) == 1
        assert a.etcd_status()[0]
    finally:
        a.shutdown()
        b.shutdown()


def test_wiped_etcd_is_a_fresh_start(etcd_server: EtcdServer) -> None:
    run_id = new_run_id()
    hs = [make_handler(etcd_server.endpoint, run_id, f"n{i}", heartbeat=2) for i in range(2)]
    try:
        assert_one_group(rendezvous_all(hs), 2)
        re = rendezvous_all(hs)  # round 1
        assert_one_group(re, 2)
        assert {r.round for r in re} == {1}
        etcd_server.wipe()
        # State vanished: the agents re-form from round 0, no RendezvousStateError.
        results = rendezvous_all(hs)
        assert_one_group(results, 2)
        assert {r.round for r in results} == {0}
    finally:
        for h in hs:
            h.shutdown()


def _swallow(fn: object, errors: list[BaseException] | None = None) -> None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:
        if errors is not None:
            errors.append(exc)


def test_a_recreated_etcd_is_a_new_history_for_every_node(etcd_server: EtcdServer) -> None:
    """The operator recreates a lost etcd empty: rounds and revisions start over there. The
    nodes must form the new round 0 with its own master, never one remembered from the old
    etcd's round 0 (seen once: two nodes waiting at two masters, the job hung)."""
    run_id = new_run_id()
    a = make_handler(etcd_server.endpoint, run_id, "a", etcd_timeout=10, heartbeat=1)
    b = make_handler(etcd_server.endpoint, run_id, "b", etcd_timeout=10, heartbeat=1)
    try:
        before = rendezvous_all([a, b])
        assert all(r.error is None and r.round == 0 for r in before), before
        etcd_server.wipe()
        after: list[Result] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # The first attempts may see the old leases gone; an agent retries the same way.
            after = rendezvous_all([a, b])
            if all(r.error is None for r in after):
                break
            time.sleep(0.5)
        assert all(r.error is None for r in after), after
        assert after[0].round == after[1].round, after
        assert after[0].master == after[1].master, (before, after)
        assert {r.rank for r in after} == {0, 1}, after
    finally:
        a.shutdown()
        b.shutdown()
