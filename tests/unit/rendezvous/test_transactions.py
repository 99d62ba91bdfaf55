"""The transactions as data: what each action compares and writes (the schedules test the rest)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.etcd.txn import Compare, Delete, Put, Target
from elasticjob_agent.rendezvous import rank_table, transactions
from elasticjob_agent.rendezvous.state import Action, Joiner, Kind, Roster, Snapshot
from elasticjob_agent.rendezvous.wire import RendezvousKeys, encode

K = RendezvousKeys("/t/run/rdzv")
SNAP = Snapshot(
    revision=10,
    closed=False,
    round=3,
    round_mod=7,
    completed=False,
    joined=2,
    my_create=9,
    last_call=None,
    last_call_mod=8,
    waiting=False,
)


def SNAP_WITH(roster: Roster) -> Snapshot:
    return replace(SNAP, roster=roster)


def test_a_join_is_fenced_on_the_pointer_and_puts_our_key_on_our_lease() -> None:
    txn = transactions.transaction(Action(Kind.JOIN, 3, fence=7), SNAP, K, "n1", ("a", 1))
    assert Compare(K.round, Target.MOD, 7) in txn.compare
    assert Compare(K.complete(3), Target.VERSION, 0) in txn.compare
    assert txn.success == (
        Put(K.joined(3, "n1"), encode(node="n1", addr="a", port=1), on_lease=True),
        Delete(K.waiting("n1")),
        Put(K.joins(3), encode()),
    )
    assert txn.then_read == 3


def test_a_completion_is_create_only_fenced_and_publishes_the_roster_as_the_rank_table() -> None:
    roster = Roster((Joiner("a", 5), Joiner("n1", 9)), ("10.0.0.1", 29500), joins_mod=9)
    txn = transactions.transaction(Action(Kind.COMPLETE, 3, fence=8), SNAP_WITH(roster), K, "n1")
    assert set(txn.compare) == {
        Compare(K.complete(3), Target.VERSION, 0),
        Compare(K.closed, Target.VERSION, 0),
        Compare(K.round, Target.MOD, 7),
        Compare(K.last_call(3), Target.MOD, 8),
        Compare(K.joins(3), Target.MOD, 9),
    }
    record = rank_table.Record(3, world=2, buckets=1, last="n1", master=("10.0.0.1", 29500))
    assert txn.success == (
        Put(K.ranks(3, 0), rank_table.encode_bucket({"a": [0, 5], "n1": [1, 9]})),
        Put(K.complete(3), rank_table.encode_record(record)),
    )


def test_a_completion_without_its_roster_is_refused() -> None:
    with pytest.raises(ValueError, match="roster"):
        transactions.transaction(Action(Kind.COMPLETE, 3, fence=8), SNAP, K, "n1")


def test_a_last_call_names_its_setter() -> None:
    txn = transactions.transaction(Action(Kind.LAST_CALL, 3, deadline=5.0), SNAP, K, "n1")
    assert txn.success == (Put(K.last_call(3), encode(deadline=5.0, by="n1")),)


def test_a_bump_reads_the_next_round() -> None:
    txn = transactions.transaction(Action(Kind.BUMP, 3, fence=7), SNAP, K, "n1")
    assert txn.then_read == 4
    assert Put(K.round, encode(round=4)) in txn.success


def test_a_blind_join_compares_the_pointer_by_value() -> None:
    assert (
        Compare(K.round, Target.VERSION, 0) in transactions.blind_join(K, "n", 0, ("a", 1)).compare
    )
    later = transactions.blind_join(K, "n", 5, ("a", 1))
    assert Compare(K.round, Target.VALUE, encode(round=5)) in later.compare


@pytest.mark.parametrize("kind", [Kind.WAIT, Kind.ROSTER, Kind.FINISH, Kind.CLOSED, Kind.TIMEOUT])
def test_actions_that_are_not_transactions_are_refused(kind: Kind) -> None:
    with pytest.raises(ValueError, match="not a transaction"):
        transactions.transaction(Action(kind, 3, deadline=1.0), SNAP, K, "n1")


def test_a_join_without_an_address_is_refused() -> None:
    with pytest.raises(ValueError, match="advertises"):
        transactions.transaction(Action(Kind.JOIN, 3, fence=7), SNAP, K, "n1")
