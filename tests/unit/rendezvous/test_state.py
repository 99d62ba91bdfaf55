"""``decide`` as a table: one snapshot and context in, one action out. No clock, no etcd."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elasticjob_agent.rendezvous.state import (
    Context,
    Joiner,
    Kind,
    Membership,
    Roster,
    Snapshot,
    decide,
    is_standby,
    renew_deadline,
)

NOW = 1000.0
CTX = Context(
    min_nodes=2,
    max_nodes=3,
    last_call_timeout=5.0,
    join_deadline=NOW + 60,
    recheck_interval=2.0,
)
OPEN = Snapshot(
    revision=10,
    closed=False,
    round=4,
    round_mod=7,
    completed=False,
    joined=0,
    my_create=0,
    last_call=None,
    last_call_mod=0,
    waiting=False,
)
JOINED = replace(OPEN, joined=1, my_create=9)
MEMBER = Membership(rank=1, world_size=2, revision=9, members_end=b"z")
OUTSIDER = Membership(rank=3, world_size=3, revision=9, members_end=b"z")
DONE = replace(OPEN, completed=True, joined=2, my_create=8, membership=MEMBER)
ROSTER = Roster((Joiner("a", 8), Joiner("b", 9)), ("10.0.0.1", 29500), joins_mod=9)

CASES = [
    ("closed beats everything", replace(DONE, closed=True), CTX, Kind.CLOSED, None),
    ("not joined: join", OPEN, CTX, Kind.JOIN, None),
    ("join fences on the pointer", OPEN, CTX, Kind.JOIN, 7),
    ("alone below min: wait", JOINED, CTX, Kind.WAIT, NOW + 2.0),
    ("at max: read who joined", replace(JOINED, joined=3), CTX, Kind.ROSTER, None),
    ("over max: read who joined", replace(JOINED, joined=5), CTX, Kind.ROSTER, None),
    (
        "at max, roster read: complete now",
        replace(JOINED, joined=3, roster=ROSTER),
        CTX,
        Kind.COMPLETE,
        0,
    ),
    ("min reached: start last call", replace(JOINED, joined=2), CTX, Kind.LAST_CALL, NOW + 5),
    (
        "a later join restarts the last call",
        replace(JOINED, joined=2, last_call=NOW + 1, last_call_mod=8),
        CTX,
        Kind.LAST_CALL,
        NOW + 5,
    ),
    (
        "last call running, set by us: wait until it ends",
        replace(JOINED, joined=2, last_call=NOW + 1, last_call_mod=11, last_call_mine=True),
        CTX,
        Kind.WAIT,
        NOW + 1,
    ),
    (
        "last call running, set by another: wait until one re-check interval after it",
        replace(JOINED, joined=2, last_call=NOW + 0.5, last_call_mod=11),
        replace(CTX, recheck_interval=1.0),
        Kind.WAIT,
        NOW + 1,
    ),
    (
        "last call over, set by another node: wait one re-check interval for its setter",
        replace(JOINED, joined=2, last_call=NOW - 1, last_call_mod=11),
        CTX,
        Kind.WAIT,
        NOW + 1,
    ),
    (
        "last call over, its setter gone quiet: read who joined",
        replace(JOINED, joined=2, last_call=NOW - 3, last_call_mod=11),
        CTX,
        Kind.ROSTER,
        None,
    ),
    (
        "last call over, set by us: read who joined",
        replace(JOINED, joined=2, last_call=NOW - 1, last_call_mod=11, last_call_mine=True),
        CTX,
        Kind.ROSTER,
        None,
    ),
    (
        "last call over, roster read: complete, fenced on the call",
        replace(
            JOINED,
            joined=2,
            last_call=NOW - 1,
            last_call_mod=11,
            last_call_mine=True,
            roster=ROSTER,
        ),
        CTX,
        Kind.COMPLETE,
        11,
    ),
    ("completed with us: finish", DONE, CTX, Kind.FINISH, None),
    ("completed with us, asked again: bump", DONE, replace(CTX, member_of=4), Kind.BUMP, 7),
    (
        "completed without us: wait list",
        replace(DONE, my_create=0, membership=replace(MEMBER, rank=3)),
        CTX,
        Kind.WAIT_LIST,
        None,
    ),
    (
        "extra joiner past max: wait list",
        replace(DONE, membership=OUTSIDER),
        CTX,
        Kind.WAIT_LIST,
        None,
    ),
    (
        "on the wait list: wait",
        replace(DONE, my_create=0, waiting=True, membership=OUTSIDER),
        CTX,
        Kind.WAIT,
        NOW + 2,
    ),
    (
        "completed, every member gone, on the wait list: start the next round",
        replace(DONE, joined=0, my_create=0, waiting=True, membership=None),
        CTX,
        Kind.BUMP,
        7,
    ),
    (
        "completed, every member gone, newcomer: start the next round",
        replace(DONE, joined=0, my_create=0, membership=None),
        CTX,
        Kind.BUMP,
        7,
    ),
    (
        "completed, one member left: the newcomer waits to be admitted",
        replace(DONE, joined=1, my_create=0, waiting=True, membership=None),
        CTX,
        Kind.WAIT,
        NOW + 2,
    ),
    (
        "a round recorded below min_nodes is void: bump",
        replace(DONE, membership=replace(MEMBER, world_size=1)),
        CTX,
        Kind.BUMP,
        7,
    ),
    ("join deadline passed: timeout", JOINED, replace(CTX, join_deadline=NOW), Kind.TIMEOUT, None),
    (
        "wait list of a round with room past the deadline: timeout",
        replace(DONE, my_create=0, waiting=True, membership=replace(OUTSIDER, world_size=2)),
        replace(CTX, join_deadline=NOW - 1),
        Kind.TIMEOUT,
        None,
    ),
    (
        "spare (its round is full) past the join deadline: keeps standing by",
        replace(DONE, my_create=0, waiting=True, membership=OUTSIDER),
        replace(CTX, join_deadline=NOW - 1),
        Kind.WAIT,
        NOW + 2,
    ),
    (
        "spare, every member gone: start the next round",
        replace(DONE, joined=0, my_create=0, waiting=True, membership=OUTSIDER),
        replace(CTX, join_deadline=NOW - 1),
        Kind.BUMP,
        7,
    ),
    (
        "spare of a closed rendezvous: closed",
        replace(DONE, my_create=0, waiting=True, membership=OUTSIDER, closed=True),
        CTX,
        Kind.CLOSED,
        None,
    ),
    (
        "waits never pass the join deadline",
        JOINED,
        replace(CTX, join_deadline=NOW + 0.5),
        Kind.WAIT,
        NOW + 0.5,
    ),
]


@pytest.mark.parametrize(
    ("snap", "ctx", "kind", "detail"),
    [pytest.param(s, c, k, d, id=name) for name, s, c, k, d in CASES],
)
def test_decide(snap: Snapshot, ctx: Context, kind: Kind, detail: float | None) -> None:
    action = decide(snap, ctx, NOW)
    assert action.kind is kind
    assert action.round == snap.round
    if kind in (Kind.WAIT, Kind.LAST_CALL) and detail is not None:
        assert action.deadline == pytest.approx(detail)
    elif kind in (Kind.JOIN, Kind.BUMP, Kind.COMPLETE) and detail is not None:
        assert action.fence == detail


SPARE = replace(DONE, my_create=0, waiting=True, membership=OUTSIDER)


@pytest.mark.parametrize(
    ("snap", "ctx", "standby"),
    [
        pytest.param(SPARE, CTX, True, id="round full at max_nodes without us: a spare"),
        pytest.param(
            replace(SPARE, membership=replace(OUTSIDER, world_size=2)),
            CTX,
            False,
            id="round with room: a scale-up candidate, not a spare",
        ),
        pytest.param(
            replace(SPARE, membership=replace(OUTSIDER, world_size=2)),
            replace(CTX, min_nodes=2, max_nodes=2),
            True,
            id="fixed-size round: a spare",
        ),
        pytest.param(DONE, CTX, False, id="a member is no spare"),
        pytest.param(replace(SPARE, closed=True), CTX, False, id="closed: no spare"),
        pytest.param(JOINED, CTX, False, id="round open: joining, no spare"),
        pytest.param(replace(SPARE, membership=None), CTX, False, id="no rank table read"),
    ],
)
def test_is_standby(snap: Snapshot, ctx: Context, standby: bool) -> None:
    assert is_standby(snap, ctx) is standby


def test_a_spare_gets_a_whole_join_timeout_for_the_round_that_calls_it_in() -> None:
    ctx = replace(CTX, join_deadline=NOW - 100, join_timeout=60.0)
    renewed = renew_deadline(SPARE, ctx, NOW)
    assert renewed.join_deadline == NOW + 60
    # The next round opens: no longer a spare, the deadline stays where standing by left it.
    assert renew_deadline(JOINED, renewed, NOW + 30) == renewed
    # Never shortened; unchanged without a join timeout or for a node that is no spare.
    later = replace(ctx, join_deadline=NOW + 90)
    assert renew_deadline(SPARE, later, NOW).join_deadline == NOW + 90
    assert renew_deadline(SPARE, replace(ctx, join_timeout=None), NOW) == replace(
        ctx, join_timeout=None
    )
    assert renew_deadline(DONE, ctx, NOW) == ctx
