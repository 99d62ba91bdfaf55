"""The thin async executor: reads a ``Snapshot`` from etcd, runs ``decide``, does the action.

Each action is one etcd transaction whose success and failure branches both end with the ranges
of a snapshot, so acting and re-reading cost a single round trip. Waiting is a watch on the
``ctl/`` prefix (closed flag, round pointer, completions) bounded by the next deadline; there is
no polling loop, only a fallback re-check every ``Context.recheck_interval`` (one read).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeVar

from elasticjob_agent.errors import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousStateError,
    RendezvousTimeoutError,
)
from elasticjob_agent.etcd.client import EtcdClient
from elasticjob_agent.etcd.messages import (
    compare_message,
    is_put,
    prefix_end,
    range_message,
    write_message,
)
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.txn import Cas, Put
from elasticjob_agent.rendezvous import rank_table, snapshot_reads, transactions
from elasticjob_agent.rendezvous.deadline import ClockTimer, DeadlineReached, Timer, until
from elasticjob_agent.rendezvous.snapshot_reads import SNAPSHOT_RANGES
from elasticjob_agent.rendezvous.state import (
    Action,
    Context,
    Kind,
    Membership,
    Roster,
    Snapshot,
    decide,
    is_standby,
    renew_deadline,
)
from elasticjob_agent.rendezvous.transactions import Txn
from elasticjob_agent.rendezvous.watching import first_events
from elasticjob_agent.rendezvous.wire import (
    RendezvousKeys,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class LeaseSource(Protocol):
    """The node's lease: ``current()`` grants one if needed; ``lost()`` forgets a dead one."""

    @property
    def id(self) -> int | None: ...

    async def current(self) -> int: ...

    async def lost(self) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """A completed round from this node's point of view."""

    round: int
    rank: int
    world_size: int
    revision: int
    members_end: bytes
    """End of the key range of the members' joined keys (see ``Membership``)."""
    master_addr: str
    master_port: int
    """What rank 0 advertised when it joined: ``MASTER_ADDR``/``MASTER_PORT`` of the round."""


class Executor:
    """Runs one node's rendezvous against etcd. Not thread-safe: one event loop owns it."""

    def __init__(
        self,
        client: EtcdClient,
        keys: RendezvousKeys,
        node: str,
        lease: LeaseSource,
        *,
        etcd_timeout: float,
        clock: Callable[[], float] = time.time,
        advertise: Callable[[], tuple[str, int]] = lambda: ("127.0.0.1", 29500),
        timer: Timer | None = None,
    ) -> None:
        self._timer: Timer = timer if timer is not None else ClockTimer(clock)
        clock = self._timer.now
        self._advertise = advertise
        self.client = client
        self.keys = keys
        self.node = node
        self._lease = lease
        self.etcd_timeout = etcd_timeout
        self.clock = clock
        self._memberships: dict[tuple[int, int, rank_table.Record], Membership] = {}
        self.joined_at: float | None = None
        """``clock()`` when this node's last successful join committed (for benchmarks)."""
        self.standby_since: float | None = None
        """``clock()`` since when this node stands by as a spare (``state.is_standby``): its
        round completed full without it. ``None`` while it is not a spare."""

    # --- etcd access with bounded retries -------------------------------------------------

    async def call(self, op: Callable[[], Awaitable[T]], deadline: float | None = None) -> T:
        """Run ``op`` through ``retry_until``: retried while etcd is unreachable for at most
        ``etcd_timeout`` (and never past ``deadline``, a ``clock`` time), then
        ``RendezvousConnectionError``; a lost lease is forgotten and ``op`` retried at once."""

        async def attempt() -> T:
            # A backstop: requests carry their own deadline and waits end at theirs (never
            # after ``deadline``), so this bound only ends an attempt that nothing else would.
            # (On the loop's clock: it costs no task, and no test moves it.)
            left = max(0.0, (deadline - self.clock()) if deadline is not None else 0.0)
            try:
                async with asyncio.timeout(left + self.etcd_timeout):
                    return await op()
            except TimeoutError:
                raise RendezvousConnectionError(
                    f"etcd did not answer within {self.etcd_timeout:g}s"
                ) from None

        return await retry_until(
            attempt,
            patience=self.etcd_timeout,
            deadline=deadline,
            clock=self.clock,
            on_lease_lost=self._lease.lost,
            what=f"rendezvous (node={self.node})",
        )

    # --- snapshots ------------------------------------------------------------------------

    def _snapshot_ops(self, p: int) -> list[Any]:
        return [range_message(r) for r in snapshot_reads.snapshot_ranges(self.keys, p, self.node)]

    async def _parse(
        self, response: Any, guess: int, max_nodes: int, roster: Roster | None = None
    ) -> Snapshot | None:
        """The snapshot in the last ranges of ``response``, or ``None`` if ``guess`` was not
        the current round."""
        results = [r.response_range for r in response.responses[-SNAPSHOT_RANGES:]]
        parsed = snapshot_reads.parse_snapshot(
            self.keys,
            results,
            node=self.node,
            lease=self._lease.id,
            revision=int(response.header.revision),
            guess=guess,
            roster=roster,
        )
        if parsed is None:
            return None
        snap = parsed.snapshot
        if parsed.record is not None:
            membership = await self._membership(
                parsed.record, parsed.record_mod, snap.my_create, max_nodes
            )
            snap = replace(snap, membership=membership)
        return snap

    async def _membership(
        self, record: rank_table.Record, revision: int, my_create: int, max_nodes: int
    ) -> Membership:
        """This node's rank (``max_nodes`` or more: not a member), world size and master
        address in the round ``record`` completed (at ``revision``): one read of this node's
        bucket of the rank table the completer published, however large the round."""
        p = record.round
        # Keyed by the whole record too: an etcd recreated by the operator numbers its rounds and
        # revisions from the start again, so (round, create revision) alone can name a round of
        # the lost etcd, whose master is gone (two nodes then wait at two masters).
        cached = self._memberships.get((p, my_create, record))
        if cached is not None:
            return cached
        key = self.keys.ranks(p, rank_table.bucket_of(self.node, record.buckets))
        response = await self.client.range(key)
        value = bytes(response.kvs[0].value) if response.kvs else None
        entry = rank_table.decode_entry(key, value, self.node)
        membership = rank_table.membership(
            self.keys,
            record,
            entry,
            node=self.node,
            my_create=my_create,
            max_nodes=max_nodes,
            revision=revision,
        )
        self._memberships[(p, my_create, record)] = membership
        return membership

    async def read_roster(self, p: int, max_nodes: int) -> Snapshot:
        """The snapshot of round ``p`` with who joined it (``Kind.ROSTER``): the first
        ``max_nodes`` joined keys (keys only) and the first one's address, in one request. The
        completer reads this once per round (an index walk of the round in etcd)."""
        ops = [
            *(range_message(r) for r in snapshot_reads.roster_ranges(self.keys, p, max_nodes)),
            *self._snapshot_ops(p),
        ]
        response = await self.client.txn([], ops)
        results = [r.response_range for r in response.responses[:3]]
        roster = snapshot_reads.parse_roster(self.keys, p, results)
        snap = await self._parse(response, p, max_nodes, roster)
        return snap if snap is not None else await self.read(p, max_nodes)

    async def read(self, guess: int, max_nodes: int) -> Snapshot:
        """A consistent snapshot of the current round (``guess`` saves a round trip if right)."""
        while True:
            response = await self.client.txn([], self._snapshot_ops(guess))
            snap = await self._parse(response, guess, max_nodes)
            if snap is not None:
                return snap
            results = [r.response_range for r in response.responses[-SNAPSHOT_RANGES:]]
            guess = snapshot_reads.pointer_round(self.keys, results)

    async def join_or_read(self, guess: int, max_nodes: int) -> Snapshot:
        """What ``decide`` would do first on a fresh call, without the read before it: join
        round ``guess`` if it is the current round, open and not closed (``blind_join``);
        either way return the snapshot. Saves one round trip per node. (Not for a member of
        ``guess``, which must bump the round instead.)"""
        txn = transactions.blind_join(self.keys, self.node, guess, self._advertise())
        snap = await self.send(txn, max_nodes)
        if snap.my_create and snap.round == guess and not snap.completed:
            self.joined_at = self.clock()
        return snap

    async def write(self, txn: Txn) -> bool:
        """Send ``txn`` without reading anything back; whether its compares held."""
        on_lease = any(isinstance(w, Put) and w.on_lease for w in txn.success)
        lease = await self._lease.current() if on_lease else 0
        response = await self.client.cas(Cas(txn.compare, txn.success), lease)
        return bool(response.succeeded)

    async def send(self, txn: Txn, max_nodes: int) -> Snapshot:
        """Send ``txn`` (both branches read back the snapshot of ``txn.then_read``)."""
        on_lease = any(isinstance(w, Put) and w.on_lease for w in txn.success)
        lease = await self._lease.current() if on_lease else 0
        return await self._act(
            [compare_message(c) for c in txn.compare],
            [write_message(w, lease) for w in txn.success],
            txn.then_read,
            max_nodes,
        )

    async def _act(
        self, compare: Sequence[Any], writes: Sequence[Any], p: int, max_nodes: int
    ) -> Snapshot:
        ops = self._snapshot_ops(p)
        response = await self.client.txn(compare, [*writes, *ops], ops)
        snap = await self._parse(response, p, max_nodes)
        return snap if snap is not None else await self.read(p, max_nodes)

    # --- the loop ---------------------------------------------------------------------------

    async def step(self, snap: Snapshot, action: Action, ctx: Context) -> Snapshot:
        """Do ``action`` (decided on ``snap``) and return the next snapshot."""
        k, p, mx = self.keys, action.round, ctx.max_nodes
        if action.kind is Kind.WAIT:
            assert action.deadline is not None
            events = await self._wait(snap.revision, action.deadline)
            completion = [e for e in events if is_put(e) and bytes(e.kv.key) == k.complete(p)]
            if completion and len(events) == 1 and not snap.waiting:
                # The usual wake-up: our round completed. The completion txn compared the
                # pointer and the closed flag, so the rest of the snapshot still holds; whether
                # we are a member is in our bucket of the rank table written with it.
                kv = completion[0].kv
                record = rank_table.decode_record(k.complete(p), bytes(kv.value))
                membership = await self._membership(
                    record, int(kv.mod_revision), snap.my_create, mx
                )
                return replace(
                    snap, revision=int(kv.mod_revision), completed=True, membership=membership
                )
            return await self.read(p, mx)
        if action.kind is Kind.ROSTER:
            return await self.read_roster(p, mx)
        if action.kind is Kind.COMPLETE:
            log.debug("completing round %d (node=%s, joined=%d)", p, self.node, snap.joined)
        advertise = self._advertise() if action.kind is Kind.JOIN else None
        after = await self.send(transactions.transaction(action, snap, k, self.node, advertise), mx)
        if action.kind is Kind.JOIN and after.my_create and not snap.my_create:
            self.joined_at = self.clock()
        return after

    async def _wait(self, revision: int, deadline: float) -> list[Any]:
        """The events under ``ctl/`` after ``revision``; ``[]`` at ``deadline`` or when the
        watch cannot replay from ``revision`` (compacted): the caller then reads again.

        The whole watch (creation, events, cancellation) is bounded by ``deadline``, so a watch
        that never starts or an event that never comes costs at most one re-check interval."""
        ctl = self.keys.ctl
        watch = first_events(self.client, ctl, prefix_end(ctl), revision, self._timer)
        try:
            return await until(self._timer, deadline, watch)
        except DeadlineReached:
            return []

    async def next_rendezvous(self, ctx: Context, guess: int) -> Outcome:
        """Block until a round completes with this node in it; see ``decide`` for the rules."""
        if ctx.member_of == guess:
            snap = await self.call(lambda: self.read(guess, ctx.max_nodes), ctx.join_deadline)
        else:
            snap = await self.call(
                lambda: self.join_or_read(guess, ctx.max_nodes), ctx.join_deadline
            )
        self.standby_since = None
        try:
            return await self._loop(ctx, snap)
        finally:
            self.standby_since = None

    async def _loop(self, ctx: Context, snap: Snapshot) -> Outcome:
        while True:
            now = self.clock()
            ctx = renew_deadline(snap, ctx, now)
            self._note_standby(snap, ctx, now)
            action = decide(snap, ctx, now)
            log.debug("node=%s round=%d action=%s", self.node, snap.round, action.kind.value)
            if action.kind is Kind.FINISH:
                m = snap.membership
                assert m is not None
                if m.master is None:
                    raise RendezvousStateError(f"round {snap.round} has no master address")
                return Outcome(
                    snap.round, m.rank, m.world_size, m.revision, m.members_end, *m.master
                )
            if action.kind is Kind.CLOSED:
                raise RendezvousClosedError(f"rendezvous {self.keys.root!r} is closed")
            if action.kind is Kind.TIMEOUT:
                await self._leave_round(snap.round)
                raise RendezvousTimeoutError(
                    f"rendezvous round {snap.round} did not complete before the join timeout "
                    f"(min_nodes={ctx.min_nodes}, joined={snap.joined})"
                )
            current, act = snap, action
            # A spare's wait is not bounded by a join deadline (``decide``).
            deadline = max(ctx.join_deadline, action.deadline or 0.0)
            snap = await self.call(partial(self.step, current, act, ctx), deadline)

    def _note_standby(self, snap: Snapshot, ctx: Context, now: float) -> None:
        if not is_standby(snap, ctx):
            if self.standby_since is not None:
                log.info("node=%s: called in from standby (round %d)", self.node, snap.round)
            self.standby_since = None
        elif self.standby_since is None:
            self.standby_since = now
            log.info(
                "node=%s: standing by as a spare (round %d is full at %d nodes)",
                self.node,
                snap.round,
                ctx.max_nodes,
            )

    async def _leave_round(self, p: int) -> None:
        """Best effort: drop our joined and wait-list keys (on a timeout)."""
        try:
            await self.write(transactions.leave(self.keys, self.node, p))
        except Exception as exc:  # cleanup must not hide the timeout
            log.warning("could not leave round %d (node=%s): %s", p, self.node, exc)
