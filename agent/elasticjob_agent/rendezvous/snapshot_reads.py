"""The read side of the rendezvous, as plain data: which ranges make a ``Snapshot`` and a
``Roster``, and how their results become one. Pure: no I/O, no client.

The executor sends these ranges (in the same transaction as an action, or alone) and parses
etcd's answer with ``parse_snapshot``/``parse_roster``; the tests' model of etcd
(tests/support/rendezvous_model.py) answers the same ranges from its keys and parses them with the
same functions, so the randomized schedules check the snapshots production reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.etcd.txn import Range, prefix_end
from elasticjob_agent.rendezvous import rank_table
from elasticjob_agent.rendezvous.state import Joiner, Roster, Snapshot
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode, decode_float, decode_int


class KeyValue(Protocol):
    """One key of a range result (etcd's ``KeyValue``, or the model's)."""

    @property
    def key(self) -> bytes: ...

    @property
    def value(self) -> bytes: ...

    @property
    def create_revision(self) -> int: ...

    @property
    def mod_revision(self) -> int: ...

    @property
    def lease(self) -> int: ...


class RangeResult(Protocol):
    """The answer to one ``Range`` (etcd's ``RangeResponse``, or the model's)."""

    @property
    def kvs(self) -> Sequence[KeyValue]: ...

    @property
    def count(self) -> int: ...


SNAPSHOT_RANGES = 7
"""How many ranges ``snapshot_ranges`` returns (the last ones of a transaction's answer)."""


def snapshot_ranges(keys: RendezvousKeys, p: int, node: str) -> tuple[Range, ...]:
    """What ``node`` reads of round ``p``: the closed flag, the round pointer, its wait-list key,
    the completion record, how many joined, its own joined key and the last call."""
    joined = keys.joined_prefix(p)
    return (
        Range(keys.closed),
        Range(keys.round),
        Range(keys.waiting(node)),
        Range(keys.complete(p)),
        Range(joined, prefix_end(joined), count_only=True),
        Range(keys.joined(p, node)),
        Range(keys.last_call(p)),
    )


def pointer_round(keys: RendezvousKeys, results: Sequence[RangeResult]) -> int:
    """The current round named by the pointer in the answer to ``snapshot_ranges``."""
    pointer = results[1].kvs
    return decode_int(keys.round, pointer[0].value, "round") if pointer else 0


@dataclass(frozen=True)
class Parsed:
    """A snapshot before its membership is read, and what that read needs."""

    snapshot: Snapshot
    record: rank_table.Record | None
    """The round's completion record, when it completed."""
    record_mod: int
    """The completion record's mod revision (the revision the round completed at)."""


def parse_snapshot(
    keys: RendezvousKeys,
    results: Sequence[RangeResult],
    *,
    node: str,
    lease: int | None,
    revision: int,
    guess: int,
    roster: Roster | None = None,
) -> Parsed | None:
    """The snapshot in the answer to ``snapshot_ranges(keys, guess, node)`` read at
    ``revision``, or ``None`` if ``guess`` was not the current round. ``lease``: the node's
    lease, the only one its own joined key may be on."""
    closed, pointer, waiting, complete, joined, mine, last_call = results
    p = pointer_round(keys, results)
    if p != guess:
        return None
    last_call_kv = last_call.kvs[0] if last_call.kvs else None
    record = (
        rank_table.decode_record(keys.complete(p), bytes(complete.kvs[0].value))
        if complete.kvs
        else None
    )
    snap = Snapshot(
        revision=revision,
        closed=bool(closed.kvs),
        round=p,
        round_mod=int(pointer.kvs[0].mod_revision) if pointer.kvs else 0,
        completed=record is not None,
        joined=int(joined.count),
        # A key left by an earlier process with our node id is not ours: it is on another
        # lease. Treating it as ours would put a new process into a round it never joined.
        my_create=(
            int(mine.kvs[0].create_revision) if mine.kvs and mine.kvs[0].lease == lease else 0
        ),
        last_call=(
            decode_float(keys.last_call(p), last_call_kv.value, "deadline")
            if last_call_kv is not None
            else None
        ),
        last_call_mod=int(last_call_kv.mod_revision) if last_call_kv is not None else 0,
        waiting=bool(waiting.kvs),
        last_call_mine=(
            last_call_kv is not None
            and decode(keys.last_call(p), bytes(last_call_kv.value)).get("by") == node
        ),
        roster=roster,
    )
    return Parsed(snap, record, int(complete.kvs[0].mod_revision) if record is not None else 0)


def roster_ranges(keys: RendezvousKeys, p: int, max_nodes: int) -> tuple[Range, ...]:
    """Who joined round ``p``: the first ``max_nodes`` joined keys (keys only), the first one
    with its value (the master's address) and the joins counter."""
    joined = keys.joined_prefix(p)
    end = prefix_end(joined)
    return (
        Range(joined, end, limit=max_nodes, keys_only=True),
        Range(joined, end, limit=1),
        Range(keys.joins(p)),
    )


def parse_roster(keys: RendezvousKeys, p: int, results: Sequence[RangeResult]) -> Roster:
    """The roster in the answer to ``roster_ranges(keys, p, ...)``."""
    names, first, joins = results
    joined = keys.joined_prefix(p)
    members = tuple(
        Joiner(bytes(kv.key)[len(joined) :].decode(), int(kv.create_revision)) for kv in names.kvs
    )
    master: tuple[str, int] | None = None
    if first.kvs:
        master = _advertised(bytes(first.kvs[0].key), bytes(first.kvs[0].value))
    return Roster(members, master, int(joins.kvs[0].mod_revision) if joins.kvs else 0)


def _advertised(key: bytes, value: bytes) -> tuple[str, int]:
    data = decode(key, value)
    addr, port = data.get("addr"), data.get("port")
    if not isinstance(addr, str) or not isinstance(port, int) or isinstance(port, bool):
        raise RendezvousStateError(
            f"corrupt rendezvous state at {key.decode()!r}: joined key without addr/port"
        )
    return addr, port
