"""The restart counter's and the round store's compare-and-swap writes (pure builders),
interpreted by the tests' model of etcd as the executor's transactions are."""

from __future__ import annotations

import pytest
from elasticjob_agent.etcd.txn import Cas, Put, Range, created_at, mod_is, prefix_end
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import (
    RestartCounts,
    RestartReason,
    RestartStateError,
    encode_seed,
)
from elasticjob_agent.rendezvous import store_transactions
from elasticjob_agent.supervision import restart_transactions

from tests.support.rendezvous_model import ModelEtcd

KEYS = JobKeys("/ej", "job-1")


def stored(etcd: ModelEtcd) -> restart_transactions.Stored:
    """What ``JobRestartCounter._stored`` reads, answered by the model."""
    prefix = restart_transactions.counters_prefix(KEYS)
    counters = etcd.range(Range(prefix, prefix_end(prefix))).kvs
    seed = etcd.range(Range(KEYS.restart_seed.encode())).kvs
    return restart_transactions.parse_stored(KEYS, counters, seed)


def count(etcd: ModelEtcd, round_: int, reason: RestartReason, node: str = "a") -> bool:
    cas, _ = restart_transactions.record(KEYS, stored(etcd), round_, reason, node=node, at=1.0)
    return etcd.apply(cas, 0)


def test_one_restart_per_round_whoever_counts_it() -> None:
    etcd = ModelEtcd()
    assert count(etcd, 3, RestartReason.FAILURE, "a")
    assert not count(etcd, 3, RestartReason.MEMBERSHIP, "b")  # the event key exists
    assert count(etcd, 4, RestartReason.FAILURE, "b")
    assert stored(etcd).counts == RestartCounts({"failure": 2})


def test_a_counter_written_since_the_read_fails_the_write() -> None:
    etcd = ModelEtcd()
    before = stored(etcd)
    assert count(etcd, 1, RestartReason.FAILURE)
    late, _ = restart_transactions.record(KEYS, before, 2, RestartReason.FAILURE, node="b", at=1.0)
    assert not etcd.apply(late, 0)  # would have written failure=1 over failure=1: a lost count
    assert count(etcd, 2, RestartReason.FAILURE, "b")
    assert stored(etcd).counts == RestartCounts({"failure": 2})


def test_the_first_count_takes_the_seed_over_whole() -> None:
    etcd = ModelEtcd()
    etcd.apply(
        Cas(
            (), (Put(KEYS.restart_seed.encode(), encode_seed({"failure": 2, "timer": 1}).encode()),)
        ),
        0,
    )
    assert stored(etcd).counts == RestartCounts({"failure": 2, "timer": 1})
    cas, after = restart_transactions.record(
        KEYS, stored(etcd), 7, RestartReason.PREEMPTION, node="a", at=1.0
    )
    assert (
        mod_is(KEYS.restart_seed.encode(), etcd.kv[KEYS.restart_seed.encode()].mod) in cas.compare
    )
    assert created_at(KEYS.restart_event(7).encode(), 0) in cas.compare
    assert etcd.apply(cas, 0)
    assert (
        stored(etcd).counts == after == RestartCounts({"failure": 2, "timer": 1, "preemption": 1})
    )


def test_a_fail_job_claims_the_round_and_counts_nothing() -> None:
    """A failure policy's ``FailJob``: the round's event key is taken (no peer counts it), no
    counter moves, and a seed is still taken over whole."""
    etcd = ModelEtcd()
    assert count(etcd, 1, RestartReason.FAILURE)
    claim, after = restart_transactions.record(
        KEYS, stored(etcd), 2, RestartReason.FAILURE, node="a", at=1.0, spend=False
    )
    assert etcd.apply(claim, 0)
    assert stored(etcd).counts == after == RestartCounts({"failure": 1})
    assert not count(etcd, 2, RestartReason.FAILURE, "b")  # the round is decided
    seeded = ModelEtcd()
    seed = Put(KEYS.restart_seed.encode(), encode_seed({"failure": 2}).encode())
    seeded.apply(Cas((), (seed,)), 0)
    claim, _ = restart_transactions.record(
        KEYS, stored(seeded), 5, RestartReason.TIMER, node="a", at=1.0, spend=False
    )
    assert seeded.apply(claim, 0)
    assert stored(seeded).counts == RestartCounts({"failure": 2})


def test_a_corrupt_counter_is_named() -> None:
    etcd = ModelEtcd()
    etcd.apply(Cas((), (Put(KEYS.restart_counter(RestartReason.FAILURE).encode(), b"x"),)), 0)
    with pytest.raises(RestartStateError, match="restarts/failure"):
        stored(etcd)


def test_store_add_and_compare_set() -> None:
    etcd = ModelEtcd()
    key, marker = b"/s/counter", b"/s/markers/me/0"
    assert etcd.apply(store_transactions.add(key, marker, 0, b"5"), 0)
    assert not etcd.apply(store_transactions.add(key, b"/s/markers/me/1", 0, b"5"), 0)
    fence = etcd.kv[key].mod
    assert etcd.apply(store_transactions.add(key, b"/s/markers/me/1", fence, b"8"), 0)
    assert (etcd.kv[key].value, etcd.kv[marker].value) == (b"8", b"5")
    swap = store_transactions.compare_set(b"/s/x", b"", b"first")
    assert swap.read_on_failure == (b"/s/x",)
    assert etcd.apply(swap, 0) and not etcd.apply(swap, 0)
    assert etcd.apply(store_transactions.compare_set(b"/s/x", b"first", b"second"), 0)
    assert etcd.kv[b"/s/x"].value == b"second"


def test_backend_state_is_fenced_by_its_token() -> None:
    etcd = ModelEtcd()
    key = b"/r/state"
    assert etcd.apply(store_transactions.set_state(key, b"s1", None), 0)
    token = etcd.kv[key].mod
    assert not etcd.apply(store_transactions.set_state(key, b"s2", None), 0)
    assert not etcd.apply(store_transactions.set_state(key, b"s2", token + 1), 0)
    assert etcd.apply(store_transactions.set_state(key, b"s2", token), 0)
