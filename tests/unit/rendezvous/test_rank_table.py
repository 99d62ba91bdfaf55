"""The rank table: what a completion publishes, and every node finding its own rank in one
bucket. Pure."""

from __future__ import annotations

import pytest
from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous import rank_table
from elasticjob_agent.rendezvous.state import Joiner, Roster
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode, encode

K = RendezvousKeys("/t/run/rdzv")
MASTER = ("10.0.0.7", 29500)


def _roster(n: int) -> Roster:
    return Roster(tuple(Joiner(f"node-{i:05d}", 100 + i) for i in range(n)), MASTER, joins_mod=1)


def _published(n: int) -> tuple[rank_table.Record, dict[bytes, bytes]]:
    """What etcd holds after the completion of a round of ``n``: record and bucket values."""
    record, buckets = rank_table.table(_roster(n), 3)
    stored = {K.ranks(3, b): rank_table.encode_bucket(e) for b, e in buckets.items()}
    return rank_table.decode_record(K.complete(3), rank_table.encode_record(record)), stored


def _lookup(
    record: rank_table.Record, stored: dict[bytes, bytes], node: str, create: int, max_nodes: int
) -> int:
    key = K.ranks(3, rank_table.bucket_of(node, record.buckets))
    entry = rank_table.decode_entry(key, stored.get(key), node)
    m = rank_table.membership(
        K, record, entry, node=node, my_create=create, max_nodes=max_nodes, revision=50
    )
    assert m.world_size == record.world
    assert m.master == MASTER
    assert m.members_end == K.joined(3, record.last) + b"\0"
    return m.rank


@pytest.mark.parametrize("n", [1, 2, 64, 65, 1000, 4096, 20000])
def test_every_member_finds_its_rank_in_its_own_bucket(n: int) -> None:
    record, stored = _published(n)
    assert record.world == n
    assert len(stored) == record.buckets == rank_table.bucket_count(n)
    assert record.buckets <= rank_table.MAX_BUCKETS
    ranks = [_lookup(record, stored, f"node-{i:05d}", 100 + i, n) for i in range(n)]
    assert ranks == list(range(n))
    if n >= 4096:
        # The point of the table: a node reads a bucket of about BUCKET_SIZE entries.
        largest = max(len(decode(k, v)["ranks"]) for k, v in stored.items())
        assert largest < 3 * max(rank_table.BUCKET_SIZE, n / rank_table.MAX_BUCKETS)


def test_a_node_not_in_the_table_or_with_another_key_is_not_a_member() -> None:
    record, stored = _published(10)
    assert _lookup(record, stored, "late-joiner", 500, 10) == 10
    # Same node id, a later process (a new joined key): not the member the table names.
    assert _lookup(record, stored, "node-00003", 999, 10) == 10
    assert _lookup(record, stored, "node-00003", 0, 10) == 10


def test_an_empty_roster_cannot_complete() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        rank_table.table(Roster((), None, joins_mod=0), 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"not json", "corrupt rendezvous state"),
        (encode(round=3, world=2, buckets=1, last="n"), "'master'"),
        (encode(round=3, world=2, buckets=1, master=["a", 1]), "'last'"),
        (encode(round=3, world=0, buckets=1, last="n", master=["a", 1]), "'world'"),
        (encode(round=3, world=2, buckets=True, last="n", master=["a", 1]), "'buckets'"),
    ],
)
def test_a_corrupt_record_is_a_state_error(value: bytes, message: str) -> None:
    with pytest.raises(RendezvousStateError, match=message):
        rank_table.decode_record(K.complete(3), value)


@pytest.mark.parametrize(
    "value",
    [
        encode(ranks=[1, 2]),
        encode(ranks={"n": [1]}),
        encode(ranks={"n": [-1, 2]}),
        encode(ranks={"n": "first"}),
        b"{}",
        None,
    ],
)
def test_a_corrupt_or_missing_bucket_is_a_state_error(value: bytes | None) -> None:
    with pytest.raises(RendezvousStateError, match=r"corrupt rendezvous state.*ranks/0"):
        rank_table.decode_entry(K.ranks(3, 0), value, "n")


def test_a_rank_past_the_world_is_a_state_error() -> None:
    record, _ = _published(4)
    with pytest.raises(RendezvousStateError, match="rank >= world"):
        rank_table.membership(K, record, (9, 7), node="x", my_create=7, max_nodes=10, revision=5)
