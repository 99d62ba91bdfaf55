"""The job-wide restart counter against a real etcd: once per round, atomic, seedable."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.endpoints import parse_endpoints
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import BUDGET_SPENT_REASON, RestartReason, RestartStateError
from elasticjob_agent.supervision.restart_counter import JobRestartCounter


def open_session(endpoint: str, request_timeout: float = 2.0) -> EtcdSession:
    return EtcdSession(parse_endpoints(endpoint), request_timeout=request_timeout, lease_ttl=5)


@pytest.fixture
def link(etcd_server_session: Any) -> Iterator[EtcdSession]:
    session = open_session(etcd_server_session.endpoint)
    yield session
    session.close()


def put(session: EtcdSession, key: str, value: bytes) -> None:
    session.run(session.client.put(key.encode(), value))


@pytest.fixture
def keys() -> JobKeys:
    return JobKeys("/elasticjob-test", f"run-{uuid.uuid4().hex[:8]}")


def test_many_agents_count_one_round_once(link: EtcdSession, keys: JobKeys) -> None:
    counters = [JobRestartCounter(link, keys, f"n{i}", patience=5) for i in range(6)]
    results = []
    lock = threading.Lock()

    def record(c: JobRestartCounter, reason: RestartReason) -> None:
        r = c.record(7, reason)
        with lock:
            results.append(r)

    threads = [
        threading.Thread(
            target=record, args=(c, RestartReason.FAILURE if i else RestartReason.TIMER)
        )
        for i, c in enumerate(counters)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.counted for r in results) == 1
    winner = next(r for r in results if r.counted)
    assert all(r.reason is winner.reason for r in results)
    assert counters[0].read().total == 1


def test_distinct_rounds_increment_concurrently(link: EtcdSession, keys: JobKeys) -> None:
    counters = [JobRestartCounter(link, keys, f"n{i}", patience=5) for i in range(4)]
    threads = [
        threading.Thread(target=c.record, args=(round_, RestartReason.MEMBERSHIP))
        for round_, c in enumerate(counters)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters[0].read().by_reason == {"membership": 4}
    assert counters[0].read().spent == 0


def test_seed_is_the_starting_point(link: EtcdSession, keys: JobKeys) -> None:
    put(link, keys.restart_seed, json.dumps({"byReason": {"failure": 2, "preemption": 1}}).encode())
    counter = JobRestartCounter(link, keys, "n", patience=5)
    assert counter.read().by_reason == {"failure": 2, "preemption": 1}
    result = counter.record(1, RestartReason.FAILURE)
    assert result.counts.by_reason == {"failure": 3, "preemption": 1}
    # Once counters exist, a later seed does not reset them.
    put(link, keys.restart_seed, json.dumps({"byReason": {}}).encode())
    assert counter.read().by_reason == {"failure": 3, "preemption": 1}


def test_corrupt_counter_is_a_state_error(link: EtcdSession, keys: JobKeys) -> None:
    put(link, keys.restart_counter(RestartReason.FAILURE), b"lots")
    with pytest.raises(RestartStateError, match="not a non-negative integer"):
        JobRestartCounter(link, keys, "n", patience=5).read()


def test_close_reason(link: EtcdSession, keys: JobKeys) -> None:
    counter = JobRestartCounter(link, keys, "n", patience=5)
    assert counter.close_reason() is None
    counter.mark_budget_spent(counter.record(0, RestartReason.FAILURE).counts, 0)
    assert counter.close_reason() == BUDGET_SPENT_REASON


def test_unreachable_etcd_is_reported_and_bounded(etcd_server: Any) -> None:
    session = open_session(etcd_server.endpoint, request_timeout=0.5)
    try:
        keys = JobKeys("/elasticjob-test", "down")
        counter = JobRestartCounter(session, keys, "n", patience=1.5)
        assert counter.read().total == 0
        assert session.reachability().reachable
        etcd_server.kill()
        with pytest.raises(RendezvousConnectionError, match="restart counter"):
            counter.record(0, RestartReason.FAILURE)
        status = session.reachability()
        assert not status.reachable and status.unreachable_since is not None
        etcd_server.start()
        assert counter.record(0, RestartReason.FAILURE).counted
        assert session.reachability().reachable
    finally:
        session.close()


def test_a_silent_connection_is_given_up(etcd_server: Any) -> None:
    """A cut network answers nothing and sends no reset. The session must give the connection
    up after a few deadlines, so that the next call resolves the Service name again and reaches
    a recreated etcd at its new address, instead of waiting out TCP's retransmissions (~15 min)
    on the old one. A frozen etcd is silent the same way."""
    session = open_session(etcd_server.endpoint, request_timeout=0.5)
    try:
        assert session.probe(timeout=0.5)
        first = session.client._channel
        assert first is not None
        etcd_server.freeze()
        try:
            deadline = time.monotonic() + 10
            while session.client._channel is first:
                assert not session.probe(timeout=0.5)
                assert time.monotonic() < deadline, "the silent connection was kept"
            assert not session.reachability().reachable
        finally:
            etcd_server.thaw()
        assert session.probe(timeout=2.0)
        assert session.client._channel is not first
    finally:
        session.close()
