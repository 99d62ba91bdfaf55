"""The job-wide restart counter's reads and its one write, as pure values (``etcd.txn``).

``JobRestartCounter`` sends them; this module decides what they are: which keys the stored
counts come from (``stored_ranges``, ``parse_stored``) and the compare-and-swap that counts one
restart (``record``): the round's event key and the counter bump in one transaction guarded by
the counters' (and, before the first count, the seed's) mod revisions, so concurrent agents
never lose or double an increment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from elasticjob_agent.etcd.txn import Cas, Put, created_at, mod_is
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import (
    RestartCounts,
    RestartReason,
    decode_counter,
    decode_seed,
    encode_counter,
    encode_event,
)


class StoredKey(Protocol):
    """What a range returns per key (etcd's ``KeyValue``, or a model's)."""

    @property
    def key(self) -> bytes: ...

    @property
    def value(self) -> bytes: ...

    @property
    def mod_revision(self) -> int: ...


@dataclass(frozen=True)
class Stored:
    """The counts as stored, with what a write must compare."""

    counts: RestartCounts
    revisions: Mapping[str, int]
    """Mod revision per counter key present."""
    seed: tuple[RestartCounts, int] | None
    """The seed and its mod revision, when no counter exists yet."""


def counters_prefix(keys: JobKeys) -> bytes:
    """Every counter (and event) key starts with this."""
    return (keys.restarts + "/").encode()


def parse_stored(keys: JobKeys, counters: Sequence[StoredKey], seed: Sequence[StoredKey]) -> Stored:
    """The counts from the range of ``counters_prefix`` and the range of the seed key. Raises
    ``RestartStateError`` naming a key whose value is not what an agent or the operator
    writes."""
    stored = {bytes(kv.key).decode(errors="replace"): kv for kv in counters}
    counts: dict[str, int] = {}
    revisions: dict[str, int] = {}
    for reason in RestartReason:
        key = keys.restart_counter(reason)
        kv = stored.get(key)
        if kv is not None:
            counts[reason.value] = decode_counter(key, bytes(kv.value))
            revisions[key] = int(kv.mod_revision)
    if counts or not seed:
        return Stored(RestartCounts(counts), revisions, None)
    seeded = decode_seed(keys.restart_seed, bytes(seed[0].value))
    return Stored(seeded, revisions, (seeded, int(seed[0].mod_revision)))


def record(
    keys: JobKeys,
    stored: Stored,
    round_: int,
    reason: RestartReason,
    *,
    node: str,
    at: float,
) -> tuple[Cas, RestartCounts]:
    """The compare-and-swap that counts ``reason`` for the restart that tore ``round_`` down,
    decided on ``stored``, and the counts it leaves. It fails if another agent counted that
    round first (its event key exists) or changed any counter (or the seed) since ``stored``
    was read. Before the first count, every seeded reason is written, so the seed is taken
    over whole."""
    new = stored.counts.plus(reason)
    to_write = (
        new.by_reason if stored.seed is not None else {reason.value: new.by_reason[reason.value]}
    )
    event_key = keys.restart_event(round_).encode()
    compare = [created_at(event_key, 0)]
    for r in RestartReason:
        key = keys.restart_counter(r)
        compare.append(mod_is(key.encode(), stored.revisions.get(key, 0)))
    if stored.seed is not None:
        compare.append(mod_is(keys.restart_seed.encode(), stored.seed[1]))
    writes = [Put(event_key, encode_event(reason, node, at))]
    for name, value in to_write.items():
        key = keys.restart_counter(RestartReason(name))
        writes.append(Put(key.encode(), encode_counter(value)))
    return Cas(tuple(compare), tuple(writes)), new
