"""The agent's ways out: SIGTERM (preemption), success through the exit barrier, closing the
rendezvous for every node, and the last status and log line."""

from __future__ import annotations

import logging
import time
from typing import Any, NoReturn

from elasticjob_agent.etcd.client import EtcdRequestError
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import AgentState
from elasticjob_agent.protocol.restarts import RestartReason, RestartStateError
from elasticjob_agent.rendezvous import RendezvousConnectionError, RendezvousError
from elasticjob_agent.supervision.context import AgentExit, Supervision

logger = logging.getLogger(__name__)

EXIT_KEY = "elasticjob/exit/{}"
FINISHED_KEY = "elasticjob/finished"
"""Written by every node that enters the exit barrier (the last one's rank stays): one read
tells whether any node of the round finished, however many nodes the round has."""
EXIT_BARRIER_TIMEOUT = 300.0


def preempted(sup: Supervision) -> NoReturn:
    sup.status.update(state=AgentState.STOPPING)
    sup.events.info("sigterm_received")
    try:
        # Short patience: the grace period matters more than the count during an outage.
        sup.counter.record(sup.round, RestartReason.PREEMPTION, patience=2.0)
    except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
        logger.warning("could not count the preemption: %s", exc)
    leave(sup)
    sup.workers.stop(sup.settings.shutdown_timeout)
    raise AgentExit(ExitCode.TERMINATED, "SIGTERM")


def leave(sup: Supervision) -> None:
    try:
        sup.handler.leave()
    except RendezvousError as exc:
        logger.warning("leaving the rendezvous failed: %s", exc)


def close_rendezvous(sup: Supervision) -> None:
    """Close the rendezvous for every node (the job ends); a failure only costs the peers the
    time to notice otherwise."""
    try:
        sup.handler.set_closed()
    except RendezvousError as exc:
        logger.warning("closing the rendezvous failed: %s", exc)


def succeeded(sup: Supervision, store: Any, group_rank: int, group_world: int) -> NoReturn:
    sup.events.info("workers_succeeded")
    sup.status.update(state=AgentState.SUCCEEDED)
    # Exit barrier (like torchrun's): stay a live member until every node is done, so
    # nobody mistakes our exit for a lost member and restarts a finished job.
    try:
        store.set(FINISHED_KEY, str(group_rank).encode())
        store.set(EXIT_KEY.format(group_rank), b"1")
        deadline = time.monotonic() + EXIT_BARRIER_TIMEOUT
        keys = [EXIT_KEY.format(r) for r in range(group_world)]
        while not store.check(keys) and time.monotonic() < deadline:
            sup.status.beat()
            if sup.stop_signal.wait(0.1):
                break
    except Exception as exc:  # the job is done; a broken barrier must not fail it
        logger.warning("exit barrier failed: %s", exc)
    try:
        sup.handler.shutdown()
    except RendezvousError as exc:
        logger.warning("rendezvous shutdown failed: %s", exc)
    # The last round's restarts may have come after the operator's last poll.
    sup.write_termination(final=True, headline="all workers exited 0")
    raise AgentExit(ExitCode.SUCCEEDED, "all workers exited 0")


def finish(sup: Supervision, code: ExitCode, detail: str) -> ExitCode:
    state = AgentState.SUCCEEDED if code is ExitCode.SUCCEEDED else AgentState.FAILED
    sup.status.update(state=state, exit_reason=code.reason, waiting_since=None)
    log = sup.events.info if code is ExitCode.SUCCEEDED else sup.events.error
    log("agent_exiting", exit_code=int(code), reason=code.reason, detail=repr(detail))
    return code
