"""Hot spares on the etcd model, step by step: a fixed-size job (min = max = 2) with a third
node. The third waits as a spare with no join deadline, a member's crash calls it into the next
round, and the spare's own crash touches nothing the members watch."""

from __future__ import annotations

from dataclasses import dataclass

from elasticjob_agent.rendezvous.state import (
    Context,
    Kind,
    Snapshot,
    decide,
    is_standby,
    renew_deadline,
)

from tests.support.rendezvous_model import ModelEtcd, context

SIZE = 2


@dataclass
class Node:
    id: str
    lease: int
    ctx: Context
    snap: Snapshot | None = None


class Run:
    def __init__(self) -> None:
        self.etcd = ModelEtcd()
        self.now = 1000.0

    def node(self, name: str, member_of: int | None = None) -> Node:
        return Node(name, self.etcd.grant(), context(SIZE, SIZE, self.now, member_of))

    def again(self, node: Node, member_of: int) -> None:
        """``next_rendezvous()`` again (a member re-rendezvousing after a failure)."""
        node.ctx, node.snap = context(SIZE, SIZE, self.now, member_of), None

    def drive(self, node: Node, limit: int = 20) -> Kind:
        """Run ``node`` as the executor does until it must wait or it is done."""
        if node.snap is None:
            if node.ctx.member_of is None:
                self.etcd.join_blindly(node.id, node.lease, 0)
            node.snap = self.etcd.snapshot(node.id, node.lease, SIZE)
        for _ in range(limit):
            node.ctx = renew_deadline(node.snap, node.ctx, self.now)
            action = decide(node.snap, node.ctx, self.now)
            if action.kind in (Kind.FINISH, Kind.TIMEOUT, Kind.CLOSED):
                return action.kind
            if action.kind is Kind.WAIT:
                if not self.etcd.ctl_changed_since(node.snap.revision):
                    return Kind.WAIT
                node.snap = self.etcd.snapshot(node.id, node.lease, SIZE)
                continue
            if action.kind is Kind.ROSTER:
                node.snap = self.etcd.snapshot(node.id, node.lease, SIZE, roster=True)
                continue
            self.etcd.act(node.id, node.lease, node.snap, action)
            node.snap = self.etcd.snapshot(node.id, node.lease, SIZE)
        raise AssertionError(f"{node.id} neither waited nor finished in {limit} steps")

    def members_alive(self, p: int, world: int) -> bool:
        """What a member's supervisor checks: every member of round ``p`` holds its key."""
        return len(self.etcd.joined(p)) >= world


def formed() -> tuple[Run, Node, Node, Node]:
    run = Run()
    a, b, c = run.node("a"), run.node("b"), run.node("c")
    assert run.drive(a) is Kind.WAIT
    assert run.drive(b) is Kind.FINISH  # the round fills at max: b completes it
    assert run.drive(a) is Kind.FINISH
    assert run.drive(c) is Kind.WAIT
    assert c.snap is not None and is_standby(c.snap, c.ctx)
    return run, a, b, c


def test_the_extra_node_stands_by_past_any_join_deadline() -> None:
    run, _, _, c = formed()
    assert c.snap is not None and c.snap.waiting and not c.snap.my_create
    run.now += 10 * 3600  # hours past its join deadline
    assert run.drive(c) is Kind.WAIT
    assert c.ctx.join_deadline >= run.now + 30  # renewed while it stands by


def test_a_member_lost_calls_the_spare_into_the_next_round() -> None:
    run, a, b, c = formed()
    run.now += 3600  # the spare has stood by for an hour
    run.etcd.expire(b.lease)  # b's node is lost
    assert not run.members_alive(0, SIZE)
    run.again(a, member_of=0)
    assert run.drive(a) is Kind.WAIT  # a bumped to round 1 and joined it
    assert run.drive(c) is Kind.FINISH  # woken by the bump: joins, fills, completes
    assert run.drive(a) is Kind.FINISH
    assert c.snap is not None and a.snap is not None
    assert c.snap.round == a.snap.round == 1
    ranks = {c.snap.membership.rank, a.snap.membership.rank}  # type: ignore[union-attr]
    assert ranks == {0, 1}
    assert not is_standby(c.snap, c.ctx)


def test_the_spare_crashing_is_invisible_to_the_members() -> None:
    run, a, _, c = formed()
    assert a.snap is not None
    revision = run.etcd.rev
    run.etcd.expire(c.lease)
    assert run.members_alive(0, SIZE)
    assert not run.etcd.ctl_changed_since(revision)  # nothing wakes or restarts the group
    assert run.etcd.kv.get(run.etcd.keys.waiting("c")) is None
    # Its replacement stands by in turn.
    d = run.node("d")
    assert run.drive(d) is Kind.WAIT
    assert d.snap is not None and is_standby(d.snap, d.ctx)
