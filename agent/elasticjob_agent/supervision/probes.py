"""The rendezvous reads the monitor and the restart make, each with what a failed read means:
etcd is only needed to re-form, so a read that fails leaves the group as it is."""

from __future__ import annotations

import logging
import time
from typing import Any

from elasticjob_agent.etcd.client import EtcdRequestError
from elasticjob_agent.protocol.restarts import RestartStateError
from elasticjob_agent.rendezvous import RendezvousConnectionError, RendezvousError
from elasticjob_agent.supervision.context import Supervision
from elasticjob_agent.supervision.exits import FINISHED_KEY, preempted
from elasticjob_agent.supervision.observation import ExitBarrier, Membership

logger = logging.getLogger(__name__)

PEER_COUNT_GRACE = 3.0
"""How long an agent that sees a member vanish waits for that member to count the restart
itself (its lease lapsed while it ran) before counting a ``failure``: a few membership checks of
a slow peer."""


def membership(sup: Supervision) -> Membership | None:
    """A membership check (``observation.Membership`` says which answers it reads); ``None``
    when the rendezvous could not be read: keep training, the probe reports the outage."""
    try:
        waiting = sup.handler.num_nodes_waiting()
        alive = sup.handler.members_alive()
    except RendezvousError as exc:
        logger.debug("membership check failed: %s", exc)
        return None
    if alive:
        return Membership(waiting)
    if round_state_lost(sup):
        return Membership(waiting, members_alive=False, round_state_lost=True)
    return Membership(waiting, members_alive=False, holds_membership=holds_membership(sup))


def holds_membership(sup: Supervision) -> bool:
    """Our own joined key is still there. Gone while we run: etcd saw no keep-alive of ours
    within the lease TTL (it or this agent was starved), so nobody failed. The group re-forms
    (the others saw us vanish), and the restart is a free ``membership`` one."""
    try:
        lapsed = not sup.handler.holds_membership()
    except RendezvousError as exc:
        logger.debug("membership check failed: %s", exc)
        return True
    if lapsed:
        sup.events.warning(
            "lease_lapsed", detail="etcd dropped this node's keys while it ran (lease TTL)"
        )
    return not lapsed


def round_state_lost(sup: Supervision) -> bool:
    """etcd no longer holds our completed round (it was recreated or restored empty): the
    group re-forms, and what looked like a lost member or a failed worker is that loss (a
    peer that re-formed first stopped its workers, and ours lost their connections)."""
    try:
        gone = sup.handler.round_state_lost()
    except RendezvousError as exc:
        logger.debug("round state check failed: %s", exc)
        return False
    if gone:
        sup.events.warning("rendezvous_state_lost", detail="etcd lost the round's state")
    return gone


def exit_barrier(store: Any) -> ExitBarrier:
    """Whether a node of this round entered the exit barrier (``exits.succeeded``). Once one
    has, the training is done: a member that vanishes now (its lease lapsed while its workers
    were exiting, say) must not restart the group."""
    try:
        if not store.check([FINISHED_KEY]):
            return ExitBarrier(None)
        return ExitBarrier(int(store.get(FINISHED_KEY)))
    except Exception as exc:  # unknown: re-form, as without this check
        logger.debug("could not read the exit barrier: %s", exc)
        return ExitBarrier(None)


def await_peer_count(sup: Supervision) -> None:
    """A member's key is gone: it died, or its lease lapsed while it ran. A live one counts
    the restart itself (``membership``, see ``holds_membership``) when it notices; give it
    ``PEER_COUNT_GRACE`` seconds to be first before counting a ``failure``. A dead member
    counts nothing, so this costs a lost node that grace, once."""
    deadline = time.monotonic() + PEER_COUNT_GRACE
    while time.monotonic() < deadline:
        try:
            if sup.counter.counted(sup.round) is not None:
                return
        except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
            logger.debug("could not read the round's restart record: %s", exc)
            return
        sup.status.beat()
        if sup.stop_signal.wait(0.1):
            preempted(sup)
