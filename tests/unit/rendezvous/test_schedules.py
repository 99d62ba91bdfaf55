"""Randomized schedules: many nodes running ``decide`` against the etcd model (which interprets
the transactions production sends, ``rendezvous/transactions.py``), interleaved with joins,
crashes at any point, restarts, late joiners, re-rendezvous, clock jumps, closes and etcd wipes,
and re-sent transactions: a transaction etcd applied whose answer the node never got (its request
deadline passed) is sent again by the node's retry, and sometimes the abandoned copy is applied
late, after the retry (it was still queued in etcd). The invariants are checked after every
single step; the run prints how many schedules and steps it checked. A failure names its seed:
rerun with ``SEED=<n>``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from elasticjob_agent.rendezvous.state import (
    Context,
    Kind,
    Snapshot,
    decide,
    is_standby,
    renew_deadline,
)

from tests.support.rendezvous_model import ModelEtcd, context

SCHEDULES = int(os.environ.get("SCHEDULES", "1500"))
STEPS = 80
RESENT = 0.15
"""Share of transactions applied, unanswered, and sent again by the node's retry."""
LATE = 0.3
"""Share of those whose abandoned copy etcd applies once more, a few events later."""


@dataclass
class Node:
    id: str
    lease: int
    ctx: Context | None = None
    snap: Snapshot | None = None
    epoch: int = 0
    member_of: int | None = None
    alive: bool = True
    results: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(epoch, round, rank, world_size) of every completed rendezvous."""
    failures: list[Kind] = field(default_factory=list)


class Schedule:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.min = self.rng.randint(1, 3)
        self.max = self.min + self.rng.choice([0, 0, 1, 2, 3])
        self.etcd = ModelEtcd()
        self.epoch = 0
        self.now = 1000.0
        self.nodes: list[Node] = []
        self.steps = 0
        self.finished = 0
        self.standby_steps = 0
        # (epoch, round) -> (world_size, {rank: node id})
        self.groups: dict[tuple[int, int], tuple[int, dict[int, str]]] = {}
        # Its own stream: the schedules' events stay those of the seed without re-sends.
        self.resend_rng = random.Random(seed + 1_000_003)
        self.late: list[Callable[[], object]] = []
        """Abandoned copies of applied transactions that etcd will apply once more."""

    def send(self, apply: Callable[[], object]) -> None:
        """A node's transaction (``apply`` runs it on the model), with its possible re-sends:
        the first copy applied but unanswered, then the retry (what the node sees); or a copy
        left in etcd's queue that lands later."""
        if self.resend_rng.random() < RESENT:
            apply()  # applied; the answer is lost; the executor retries the same step
            if self.resend_rng.random() < LATE:
                self.late.append(apply)
        apply()

    def land_late(self) -> None:
        if self.late and self.resend_rng.random() < 0.3:
            self.late.pop(self.resend_rng.randrange(len(self.late)))()

    # --- events ----------------------------------------------------------------------------

    def start(self, node: Node) -> None:
        node.ctx = context(self.min, self.max, self.now, node.member_of)
        node.snap = None

    def new_node(self) -> None:
        node = Node(f"n{len(self.nodes):02d}", self.etcd.grant())
        self.nodes.append(node)
        self.start(node)

    def crash(self, node: Node) -> None:
        node.alive = False
        node.ctx = None
        self.etcd.expire(node.lease)
        if self.rng.random() < 0.5:  # the pod comes back: same node id, a new process
            again = Node(node.id, self.etcd.grant())
            self.nodes.append(again)
            self.start(again)

    def wipe(self) -> None:
        """etcd recreated empty: every lease is gone, agents get new ones on their next call."""
        self.etcd.wipe()
        self.epoch += 1
        for node in self.nodes:
            if node.alive:
                node.lease = self.etcd.grant()

    def step(self, node: Node) -> None:
        assert node.ctx is not None
        if node.snap is None:
            if node.member_of is None:
                # A fresh process joins round 0 blindly; a member re-rendezvousing reads first.
                lease = node.lease
                self.send(lambda: self.etcd.join_blindly(node.id, lease, 0))
            node.snap, node.epoch = self.etcd.snapshot(node.id, node.lease, self.max), self.epoch
            return
        snap = node.snap
        # As the executor does: a spare's join deadline runs from when a round calls it in.
        node.ctx = ctx = renew_deadline(snap, node.ctx, self.now)
        action = decide(snap, ctx, self.now)
        if is_standby(snap, ctx):
            self.standby_steps += 1
        if action.kind is Kind.FINISH:
            assert snap.membership is not None
            m = snap.membership
            node.results.append((node.epoch, snap.round, m.rank, m.world_size))
            self.record(node, snap)
            node.member_of, node.ctx, node.snap = snap.round, None, None
            self.finished += 1
        elif action.kind in (Kind.CLOSED, Kind.TIMEOUT):
            if action.kind is Kind.CLOSED:
                assert snap.closed
            node.failures.append(action.kind)
            node.ctx, node.snap = None, None
        elif action.kind is Kind.ROSTER:
            node.snap = self.etcd.snapshot(node.id, node.lease, self.max, roster=True)
            node.epoch = self.epoch
        elif action.kind is Kind.WAIT:
            assert action.deadline is not None and action.deadline > self.now
            if self.etcd.ctl_changed_since(snap.revision) or self.rng.random() < 0.1:
                node.snap = None  # woken by the watch (or the fallback re-check)
        else:
            lease = node.lease
            self.send(lambda: self.etcd.act(node.id, lease, snap, action))
            node.snap, node.epoch = self.etcd.snapshot(node.id, node.lease, self.max), self.epoch

    # --- invariants ------------------------------------------------------------------------

    def record(self, node: Node, snap: Snapshot) -> None:
        m = snap.membership
        assert m is not None
        where = f"seed={self.seed} step={self.steps} node={node.id} round={snap.round}"
        assert not snap.closed, f"finished on a closed rendezvous: {where}"
        assert self.min <= m.world_size <= self.max, f"world {m.world_size} out of range: {where}"
        assert 0 <= m.rank < m.world_size, f"rank {m.rank} of {m.world_size}: {where}"
        key = (node.epoch, snap.round)
        world, ranks = self.groups.setdefault(key, (m.world_size, {}))
        assert world == m.world_size, f"two world sizes in one round: {where}"
        holder = ranks.setdefault(m.rank, node.id)
        assert holder == node.id, f"rank {m.rank} given to {holder} and {node.id}: {where}"
        if node.epoch == self.epoch:
            (completion,) = self.etcd.completions[snap.round]
            assert node.id in completion.members[: self.max], f"late node in a group: {where}"
            assert completion.members.index(node.id) == m.rank, where

    def check(self) -> None:
        where = f"seed={self.seed} step={self.steps}"
        for p, completions in self.etcd.completions.items():
            assert len(completions) <= 1, f"round {p} completed twice: {where}"
            for c in completions:
                # Ranks follow key order; every member's entry names a key that joined the
                # round (it may have died since); nobody joined is skipped before a member.
                assert list(c.members) == sorted(c.members), f"ranks out of key order: {where}"
                joined = dict(c.joined)
                for n in c.members:
                    assert joined.get(n, c.table[n]) == c.table[n], f"stale key of {n}: {where}"
                missing = [n for n in joined if n not in c.table and n < c.members[-1]]
                assert not missing, f"skipped {missing}: {where}"
            if self.etcd.closed_at is not None:
                for c in completions:
                    assert c.revision < self.etcd.closed_at, f"completed after close: {where}"
        for node in self.nodes:
            if node.ctx is not None and node.snap is not None:
                assert node.snap.round >= 0

    # --- the schedule ----------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(self.rng.randint(1, self.max + 2)):
            self.new_node()
        for _ in range(STEPS):
            self.steps += 1
            self.random_event()
            self.check()
        self.settle()

    def random_event(self) -> None:
        rng = self.rng
        self.land_late()
        active = [n for n in self.nodes if n.alive and n.ctx is not None]
        idle = [n for n in self.nodes if n.alive and n.ctx is None and not n.failures]
        roll = rng.random()
        if active and roll < 0.62:
            self.step(rng.choice(active))
        elif roll < 0.72:
            self.now += rng.choice([0.2, 0.5, 1.1, 3.0])
        elif roll < 0.79 and len(self.nodes) < 12:
            self.new_node()  # a late or early joiner
        elif roll < 0.86 and idle:
            self.start(rng.choice(idle))  # re-rendezvous (failure, scale-up, member lost)
        elif roll < 0.93:
            alive = [n for n in self.nodes if n.alive]
            if alive:
                self.crash(rng.choice(alive))
        elif roll < 0.96:
            self.wipe()
        elif roll < 0.975:
            self.etcd.close()
        elif active:
            self.step(rng.choice(active))

    def standing_by(self, node: Node) -> bool:
        """``node`` is a spare on the wait list of the current round, which is full: it stays
        until a member re-rendezvouses (which the supervisor, not the model, decides)."""
        if node.ctx is None:
            return False
        fresh = self.etcd.snapshot(node.id, node.lease, self.max)
        standing = is_standby(fresh, node.ctx) and fresh.waiting and not fresh.my_create
        if not standing or fresh.joined == 0:  # nobody left in the round: the spare bumps it
            return False
        assert fresh.membership is not None
        where = f"seed={self.seed} step={self.steps} node={node.id}"
        assert fresh.membership.world_size == self.max, f"a spare of a round with room: {where}"
        return True

    def settle(self) -> None:
        """No more faults: every node still in a rendezvous must leave it (no deadlock), but
        a spare of a full round, which stands by until a member re-rendezvouses."""
        for _ in range(5000):
            active = [
                n for n in self.nodes if n.alive and n.ctx is not None and not self.standing_by(n)
            ]
            if not active:
                return
            self.steps += 1
            progressed = False
            for node in active:
                before = (node.snap, node.ctx)
                self.step(node)
                progressed |= before != (node.snap, node.ctx)
                self.check()
            if not progressed:
                self.now += 0.5
        raise AssertionError(f"seed={self.seed}: nodes never left the rendezvous")


def test_random_schedules_keep_the_invariants() -> None:
    seeds = [int(os.environ["SEED"])] if "SEED" in os.environ else range(SCHEDULES)
    total_steps = 0
    completed = 0
    standby = 0
    for seed in seeds:
        schedule = Schedule(seed)
        schedule.run()
        total_steps += schedule.steps
        completed += schedule.finished
        standby += schedule.standby_steps
    print(
        f"\nchecked {len(seeds)} schedules, {total_steps} steps, "
        f"{completed} completed rendezvous calls, {standby} steps of spares standing by"
    )
    assert completed > len(seeds) // 2, "the schedules hardly ever complete: the model is off"
    if "SEED" not in os.environ:
        assert standby > 0, "no schedule had a spare standing by: the model is off"
