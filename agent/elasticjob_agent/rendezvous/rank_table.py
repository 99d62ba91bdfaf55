"""The rank table a round's completer publishes, and how a node finds its rank in it. Pure.

Why a table: a node's rank is its place among the members' joined keys (in key order). Counting
that place in etcd walks the round's index (etcd counts a range key by key), so N nodes each
counting it cost N x N key visits for one round: at N = 4096 that walk was most of etcd's CPU
(bench/RESULTS.md). Instead, the node that completes the round reads the joined keys once (its
``Roster``), and the completion transaction writes every member's rank into a few bucket keys
beside the completion record. Each node then reads one bucket (about ``BUCKET_SIZE`` entries),
so etcd's work per node does not grow with the round.

A node's bucket is ``crc32(node id) % buckets``; the record says how many buckets there are.
Each entry keeps the create revision of the member's joined key, so a later process with the
same node id (a new key, on another lease) is never mistaken for the member.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.rendezvous.state import Membership, Roster
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode, encode

BUCKET_SIZE = 64
"""Members per bucket the table aims at: one bucket read is a few KiB."""
MAX_BUCKETS = 100
"""etcd refuses a transaction of more than ``--max-txn-ops`` (128) operations; the completion
writes one bucket per operation plus the record and the snapshot it reads back."""


@dataclass(frozen=True)
class Record:
    """The completion record of a round (``ctl/complete/<p>``)."""

    round: int
    world: int
    buckets: int
    last: str
    """Node id of the last member in key order (members' keys end right after it)."""
    master: tuple[str, int]


def bucket_count(world: int) -> int:
    return max(1, min(MAX_BUCKETS, math.ceil(world / BUCKET_SIZE)))


def bucket_of(node: str, buckets: int) -> int:
    return zlib.crc32(node.encode()) % buckets


def table(roster: Roster, p: int) -> tuple[Record, dict[int, dict[str, list[int]]]]:
    """The record and the buckets (bucket -> {node: [rank, create]}) that publish ``roster``."""
    if not roster.members or roster.master is None:
        raise ValueError("a round completes with at least one member and its master address")
    buckets = bucket_count(len(roster.members))
    filled: dict[int, dict[str, list[int]]] = {b: {} for b in range(buckets)}
    for rank, m in enumerate(roster.members):
        filled[bucket_of(m.node, buckets)][m.node] = [rank, m.create]
    record = Record(p, len(roster.members), buckets, roster.members[-1].node, roster.master)
    return record, filled


def encode_record(r: Record) -> bytes:
    return encode(
        round=r.round, world=r.world, buckets=r.buckets, last=r.last, master=list(r.master)
    )


def encode_bucket(entries: Mapping[str, list[int]]) -> bytes:
    return encode(ranks=dict(entries))


def _corrupt(key: bytes, what: str) -> RendezvousStateError:
    return RendezvousStateError(f"corrupt rendezvous state at {key.decode()!r}: {what}")


def _count(data: dict[str, Any], field: str, key: bytes, least: int) -> int:
    raw = data.get(field)
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < least:
        raise _corrupt(key, f"{field!r} must be an integer >= {least}")
    return raw


def decode_record(key: bytes, value: bytes) -> Record:
    data = decode(key, value)
    master = data.get("master")
    last = data.get("last")
    if (
        not isinstance(master, list)
        or len(master) != 2
        or not isinstance(master[0], str)
        or not isinstance(master[1], int)
        or isinstance(master[1], bool)
    ):
        raise _corrupt(key, "'master' must be [address, port]")
    if not isinstance(last, str) or not last:
        raise _corrupt(key, "'last' must name the last member")
    return Record(
        round=_count(data, "round", key, 0),
        world=_count(data, "world", key, 1),
        buckets=_count(data, "buckets", key, 1),
        last=last,
        master=(master[0], master[1]),
    )


def decode_entry(key: bytes, value: bytes | None, node: str) -> tuple[int, int] | None:
    """``node``'s (rank, create revision) in the bucket stored at ``key`` (``value``, ``None``
    if the key is absent); ``None`` if it has no entry. Checks the bucket's shape and this
    entry only: every node of a large round reads a bucket of dozens of entries, and
    validating all of them cost each node more than the rest of its membership read."""
    if value is None:
        raise _corrupt(key, "the round completed without this bucket of its rank table")
    ranks = decode(key, value).get("ranks")
    if not isinstance(ranks, dict):
        raise _corrupt(key, "'ranks' must map node ids to [rank, create revision]")
    entry = ranks.get(node)
    if entry is None:
        return None
    if (
        not isinstance(entry, list)
        or len(entry) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in entry)
    ):
        raise _corrupt(key, f"the entry of {node!r} must be [rank, create revision]")
    return entry[0], entry[1]


def membership(
    keys: RendezvousKeys,
    record: Record,
    entry: tuple[int, int] | None,
    *,
    node: str,
    my_create: int,
    max_nodes: int,
    revision: int,
) -> Membership:
    """This node's place in the round ``record`` completed, from its ``entry`` in its bucket
    (``keys.ranks(p, bucket_of(node, record.buckets))``, see ``decode_entry``; ``None`` if it
    has none). Rank ``max_nodes`` (not a member) unless the entry is this very joined key
    (``my_create``)."""
    p = record.round
    rank = max_nodes
    if my_create and entry is not None and entry[1] == my_create:
        rank = entry[0]
        if rank >= record.world:
            raise _corrupt(keys.ranks(p, bucket_of(node, record.buckets)), "rank >= world")
    return Membership(
        rank=rank,
        world_size=min(record.world, max_nodes),
        revision=revision,
        members_end=keys.joined(p, record.last) + b"\0",
        master=record.master,
    )
