"""The rendezvous as a pure state machine: ``decide(snapshot, ctx, now) -> Action``.

No I/O, no clock: the executor reads a ``Snapshot`` of etcd, asks ``decide`` what to do, does it
with one conditional transaction, and reads again. Every action is safe to repeat and safe to
lose a race with (its transaction compares what the decision was based on), so a node that
crashes at any point, or runs against a stale snapshot, never breaks the invariants:

- at most one completion per round (a create-only key),
- members of a round are the first ``max_nodes`` joined keys (in key order) as the completer
  read them (its ``Roster``, published with the completion as the rank table), so ranks are
  ``0..world_size-1``, unique, and agreed by everyone,
- a node that finds its round completed without it goes on the wait list (never a second group),
  unless no member of that round is left, then it starts the next round,
- no node returns from a round with fewer than ``min_nodes`` members (such a round is void and
  the next one starts),
- a closed rendezvous stays closed.

A node that finds its round completed *full* (``max_nodes`` members) without it is a spare
(``is_standby``): it waits on the wait list with no join deadline, since no scale-up can admit
it, and joins the next round when a member re-rendezvouses (a member failed or left). Its join
timeout starts again when it stops standing by (``renew_deadline``). A wait-list node of a round
with room is a scale-up candidate instead, and the running members admit it.

The randomized schedule tests (tests/unit/rendezvous) drive ``decide`` for many nodes against a
model of etcd's transactions, and the integration tests drive the real executor against etcd.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


@dataclass(frozen=True)
class Membership:
    """This node's place in a completed round."""

    rank: int
    world_size: int
    revision: int
    """The completion's revision."""
    members_end: bytes
    """End of the key range of the members' joined keys: the members are the round's joined
    keys below it (in key order), as of the completion."""
    master: tuple[str, int] | None = None
    """The address rank 0 advertised in its joined key (the round's ``MASTER_ADDR/PORT``)."""


@dataclass(frozen=True)
class Joiner:
    node: str
    create: int
    """Create revision of its joined key."""


@dataclass(frozen=True)
class Roster:
    """A round's joined keys as the completer read them, at the snapshot's revision."""

    members: tuple[Joiner, ...]
    """The first ``max_nodes`` joined keys, in key order: rank = position."""
    master: tuple[str, int] | None
    """The address the first of them advertised (rank 0's ``MASTER_ADDR/PORT``)."""
    joins_mod: int
    """Mod revision of the round's ``joins`` key (every join rewrites it) when read."""


@dataclass(frozen=True)
class Snapshot:
    """What one node sees of the rendezvous at one etcd revision."""

    revision: int
    closed: bool
    round: int
    """The current round (the pointer; 0 when absent)."""
    round_mod: int
    """Mod revision of the pointer key, 0 when absent: the fencing token of a round bump."""
    completed: bool
    """Round ``round`` has a completion record."""
    joined: int
    """How many joined keys round ``round`` has."""
    my_create: int
    """Create revision of this node's joined key in round ``round``; 0 if it has none."""
    last_call: float | None
    """Last-call deadline of round ``round`` (unix time), if ``min_nodes`` were reached."""
    last_call_mod: int
    waiting: bool
    """This node's wait-list key exists."""
    last_call_mine: bool = False
    """This node set the current last call (it completes the round when the call ends)."""
    roster: Roster | None = None
    """Who joined, read at ``revision`` (``Kind.ROSTER``): what a completion is built from."""
    membership: Membership | None = None
    """Filled by the reader when ``completed`` and ``my_create``: this node's rank, if any."""


@dataclass(frozen=True)
class Context:
    """What this node knows that etcd does not tell it."""

    min_nodes: int
    max_nodes: int
    last_call_timeout: float
    join_deadline: float
    """Unix time after which this ``next_rendezvous()`` fails with a timeout."""
    recheck_interval: float
    """Upper bound on a wait without news: the fallback against a completer that died."""
    member_of: int | None = None
    """The round this node last returned from ``next_rendezvous()`` (re-rendezvous if current)."""
    join_timeout: float | None = None
    """How long a join may take once a spare stops standing by (``renew_deadline``); ``None``
    keeps ``join_deadline`` fixed."""


class Kind(StrEnum):
    CLOSED = "closed"
    """Fail with ``RendezvousClosedError``."""
    TIMEOUT = "timeout"
    """Fail with ``RendezvousTimeoutError``."""
    FINISH = "finish"
    """Return ``membership``: the round completed with this node in it."""
    JOIN = "join"
    """Create our joined key in ``round`` (if the pointer and completion are unchanged)."""
    BUMP = "bump"
    """Move the pointer from ``round`` to ``round + 1`` (if unchanged) and leave ``round``."""
    LAST_CALL = "last-call"
    """Set ``round``'s last-call deadline to ``deadline``."""
    ROSTER = "roster"
    """Read who joined ``round`` (with the snapshot), then decide again: a completion is built
    from it. One node reads it per round, not every node (see ``decide``)."""
    COMPLETE = "complete"
    """Write ``round``'s completion and rank table from ``Snapshot.roster`` (create-only;
    fenced on the last-call mod revision)."""
    WAIT_LIST = "wait-list"
    """Put our wait-list key (and drop a joined key of a round that completed without us)."""
    WAIT = "wait"
    """Wait for a change under ``ctl/`` or until ``deadline``, then read again."""


@dataclass(frozen=True)
class Action:
    kind: Kind
    round: int
    deadline: float | None = None
    fence: int = 0
    """The mod revision the transaction compares (pointer for JOIN/BUMP, last call for
    COMPLETE)."""


def is_member(snap: Snapshot, ctx: Context) -> bool:
    m = snap.membership
    return snap.completed and m is not None and m.rank < ctx.max_nodes


def is_standby(snap: Snapshot, ctx: Context) -> bool:
    """This node is a spare: the current round completed with ``max_nodes`` members, not it.
    It waits without a deadline and joins the next round (a hot spare); members do not
    re-rendezvous for it (``num_nodes_waiting`` counts the wait list only when a round has room)."""
    m = snap.membership
    return (
        snap.completed
        and not snap.closed
        and m is not None
        and m.world_size >= ctx.max_nodes
        and not is_member(snap, ctx)
    )


def renew_deadline(snap: Snapshot, ctx: Context, now: float) -> Context:
    """``ctx`` with the join deadline ``join_timeout`` from ``now`` while the node stands by,
    so a spare that waited for hours gets a whole join timeout for the round that calls it in."""
    if ctx.join_timeout is None or not is_standby(snap, ctx):
        return ctx
    deadline = now + ctx.join_timeout
    return ctx if deadline <= ctx.join_deadline else replace(ctx, join_deadline=deadline)


def decide(snap: Snapshot, ctx: Context, now: float) -> Action:
    """The next step of ``next_rendezvous()`` for one node. Pure and total."""
    p = snap.round
    if snap.closed:
        return Action(Kind.CLOSED, p)
    if snap.completed:
        m = snap.membership
        if m is not None and m.world_size < ctx.min_nodes:
            # Never written by a completer (it counts min_nodes first); a round recorded below
            # min_nodes is void rather than a group too small to run.
            return Action(Kind.BUMP, p, fence=snap.round_mod)
        if is_member(snap, ctx):
            if ctx.member_of == p:
                # We are in the current group and were asked for a new round: start it.
                return Action(Kind.BUMP, p, fence=snap.round_mod)
            return Action(Kind.FINISH, p)
        standby = is_standby(snap, ctx)
        if now >= ctx.join_deadline and not standby:
            return Action(Kind.TIMEOUT, p)
        if snap.joined == 0:
            # Every member is gone (joined keys live on their leases): nobody is left to start
            # the next round, so the waiting nodes do (suspend/resume, a whole group preempted).
            # Fenced on the pointer: one bump however many newcomers decide it at once.
            return Action(Kind.BUMP, p, fence=snap.round_mod)
        if not snap.waiting or snap.my_create:
            return Action(Kind.WAIT_LIST, p)
        wake = now + ctx.recheck_interval
        return Action(Kind.WAIT, p, deadline=wake if standby else min(ctx.join_deadline, wake))
    if now >= ctx.join_deadline:
        return Action(Kind.TIMEOUT, p)
    if not snap.my_create:
        return Action(Kind.JOIN, p, fence=snap.round_mod)
    if snap.joined >= ctx.max_nodes:
        # Only the join that fills the round sees this at once (and a node re-checking in the
        # moment before the completion lands).
        return _complete(snap)
    wake = min(ctx.join_deadline, now + ctx.recheck_interval)
    if snap.joined >= ctx.min_nodes:
        # Every join past min_nodes restarts the last call (torch's semantics): the joiner does it.
        if snap.last_call is None or snap.last_call_mod < snap.my_create:
            return Action(Kind.LAST_CALL, p, deadline=now + ctx.last_call_timeout)
        # When the call ends, its setter completes the round; the others wait one re-check
        # interval more before they step in (it died), so that a roster is read once, not by
        # every node at the same instant.
        end = snap.last_call if snap.last_call_mine else snap.last_call + ctx.recheck_interval
        if now >= end:
            return _complete(snap)
        wake = min(wake, end)
    return Action(Kind.WAIT, p, deadline=wake)


def _complete(snap: Snapshot) -> Action:
    if snap.roster is None:
        return Action(Kind.ROSTER, snap.round)
    return Action(Kind.COMPLETE, snap.round, fence=snap.last_call_mod)
