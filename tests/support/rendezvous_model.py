"""A model of etcd for driving ``decide`` in unit tests: it interprets the transactions
production sends.

An in-memory fake at our own boundary. Each action is turned into a ``Txn`` by the same pure
builders the executor uses (``elasticjob_agent.rendezvous.transactions``); ``apply`` evaluates
its compares on the model's keys (versions, mod revisions, values, leases) and applies its writes
atomically at one new revision, as etcd does. The snapshot is read back with the executor's own
ranges and parsers (``elasticjob_agent.rendezvous.snapshot_reads``), answered from the same keys.
A completion is recorded with the members its rank table published.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from elasticjob_agent.etcd.txn import Cas, Compare, Delete, Put, Range, Target
from elasticjob_agent.rendezvous import rank_table, snapshot_reads, transactions
from elasticjob_agent.rendezvous.state import (
    Action,
    Context,
    Snapshot,
)
from elasticjob_agent.rendezvous.transactions import Txn
from elasticjob_agent.rendezvous.wire import RendezvousKeys, decode, decode_int

KEYS = RendezvousKeys("/model/run/rdzv")
ADVERTISE = ("10.0.0.1", 29500)


@dataclass
class Entry:
    value: bytes
    create: int
    mod: int
    version: int
    lease: int


@dataclass(frozen=True)
class ModelKv:
    """One key of a range answer, with etcd's field names."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class ModelRange:
    kvs: tuple[ModelKv, ...]
    count: int


@dataclass
class Completion:
    round: int
    revision: int
    members: tuple[str, ...]
    """Node ids of the members its rank table published, by rank."""
    joined: tuple[tuple[str, int], ...]
    """(node id, create revision) of the round's joined keys just before it."""
    table: dict[str, int]
    """node id -> create revision of the joined key each member's entry names."""


@dataclass
class ModelEtcd:
    rev: int = 1
    kv: dict[bytes, Entry] = field(default_factory=dict)
    completions: dict[int, list[Completion]] = field(default_factory=dict)
    closed_at: int | None = None
    next_lease: int = 1
    keys: RendezvousKeys = KEYS

    def grant(self) -> int:
        self.next_lease += 1
        return self.next_lease

    def expire(self, lease: int) -> None:
        """The lease is gone: etcd deletes its keys in one revision."""
        doomed = [k for k, e in self.kv.items() if e.lease == lease]
        if doomed:
            self.rev += 1
            for k in doomed:
                del self.kv[k]

    def wipe(self) -> None:
        """A recreated, empty etcd: a fresh start (the closed flag is gone too)."""
        self.kv.clear()
        self.completions.clear()
        self.closed_at = None

    # --- the interpreter ------------------------------------------------------------------

    def _holds(self, c: Compare) -> bool:
        e = self.kv.get(c.key)
        if c.target is Target.VERSION:
            return (e.version if e else 0) == c.expected
        if c.target is Target.MOD:
            return (e.mod if e else 0) == c.expected
        if c.target is Target.CREATE:
            return (e.create if e else 0) == c.expected
        return e is not None and e.value == c.expected

    def apply(self, txn: Txn | Cas, lease: int) -> bool:
        """Evaluate ``txn`` as etcd would; ``lease`` is the sender's lease. True if it committed."""
        if not all(self._holds(c) for c in txn.compare):
            return False
        if not txn.success:
            return True
        self.rev += 1
        self._on_txn(txn)
        for w in txn.success:
            if isinstance(w, Put):
                old = self.kv.get(w.key)
                self.kv[w.key] = Entry(
                    w.value,
                    old.create if old else self.rev,
                    self.rev,
                    (old.version if old else 0) + 1,
                    lease if w.on_lease else 0,
                )
            elif isinstance(w, Delete):
                self.kv.pop(w.key, None)
        return True

    def _on_txn(self, txn: Txn | Cas) -> None:
        """Record completions and the close for the invariant checks (before the writes land)."""
        k = self.keys
        written = {w.key: w.value for w in txn.success if isinstance(w, Put)}
        if k.closed in written and k.closed not in self.kv:
            self.closed_at = self.rev
        prefix = k.complete(0)[:-1]
        for key, value in written.items():
            if not key.startswith(prefix):
                continue
            record = rank_table.decode_record(key, value)
            entries: dict[str, tuple[int, int]] = {}
            for b in range(record.buckets):
                bucket = k.ranks(record.round, b)
                for n, (rank, create) in decode(bucket, written[bucket])["ranks"].items():
                    entries[n] = (rank, create)
            members = tuple(sorted(entries, key=lambda n: entries[n][0]))
            joined = tuple(
                (n, self.kv[k.joined(record.round, n)].create) for n in self.joined(record.round)
            )
            table = {n: c for n, (_, c) in entries.items()}
            completion = Completion(record.round, self.rev, members, joined, table)
            self.completions.setdefault(record.round, []).append(completion)

    # --- reads ----------------------------------------------------------------------------

    def joined(self, p: int) -> list[str]:
        prefix = self.keys.joined_prefix(p)
        return sorted(k[len(prefix) :].decode() for k in self.kv if k.startswith(prefix))

    def ctl_changed_since(self, revision: int) -> bool:
        return any(k.startswith(self.keys.ctl) and e.mod > revision for k, e in self.kv.items())

    def range(self, r: Range) -> ModelRange:
        """Answer the read ``r`` as etcd would: keys in order, ``limit``, ``count``."""
        if r.end:
            found = sorted(k for k in self.kv if r.key <= k < r.end)
        else:
            found = [r.key] if r.key in self.kv else []
        count = len(found)
        if r.limit:
            found = found[: r.limit]
        if r.count_only:
            return ModelRange((), count)
        kvs = tuple(
            ModelKv(
                key,
                b"" if r.keys_only else self.kv[key].value,
                self.kv[key].create,
                self.kv[key].mod,
                self.kv[key].lease,
            )
            for key in found
        )
        return ModelRange(kvs, count)

    def snapshot(self, node: str, lease: int, max_nodes: int, roster: bool = False) -> Snapshot:
        """What the executor reads (the same ranges, parsed by the same functions); with
        ``roster``, who joined too (``Kind.ROSTER``)."""
        k = self.keys
        pointer = self.kv.get(k.round)
        p = decode_int(k.round, pointer.value, "round") if pointer else 0
        listed = None
        if roster:
            ranges = snapshot_reads.roster_ranges(k, p, max_nodes)
            listed = snapshot_reads.parse_roster(k, p, [self.range(r) for r in ranges])
        parsed = snapshot_reads.parse_snapshot(
            k,
            [self.range(r) for r in snapshot_reads.snapshot_ranges(k, p, node)],
            node=node,
            lease=lease,
            revision=self.rev,
            guess=p,
            roster=listed,
        )
        assert parsed is not None  # the round was read from the same keys
        snap = parsed.snapshot
        if parsed.record is None:
            return snap
        record = parsed.record
        bucket_key = k.ranks(p, rank_table.bucket_of(node, record.buckets))
        stored = self.kv.get(bucket_key)
        entry = rank_table.decode_entry(bucket_key, stored.value if stored else None, node)
        membership = rank_table.membership(
            k,
            record,
            entry,
            node=node,
            my_create=snap.my_create,
            max_nodes=max_nodes,
            revision=parsed.record_mod,
        )
        return replace(snap, membership=membership)

    # --- what the executor sends ----------------------------------------------------------

    def act(self, node: str, lease: int, snap: Snapshot, action: Action) -> bool:
        """Send the transaction of ``action`` as the executor would; True if it committed."""
        txn = transactions.transaction(action, snap, self.keys, node, ADVERTISE)
        return self.apply(txn, lease)

    def join_blindly(self, node: str, lease: int, guess: int) -> bool:
        """The first transaction of a fresh ``next_rendezvous()`` (no read before it)."""
        return self.apply(transactions.blind_join(self.keys, node, guess, ADVERTISE), lease)

    def close(self, node: str = "closer") -> None:
        self.apply(transactions.close(self.keys, node), 0)


def context(min_nodes: int, max_nodes: int, now: float, member_of: int | None = None) -> Context:
    return Context(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        last_call_timeout=1.0,
        join_deadline=now + 30.0,
        recheck_interval=1.0,
        member_of=member_of,
        join_timeout=30.0,
    )
