"""``next_rendezvous()`` in a helper thread, so SIGTERM and the etcd deadline still act while it
blocks, and its errors as the agent's exit codes."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from elasticjob_agent.etcd.client import EtcdRequestError
from elasticjob_agent.protocol.exit_codes import ExitCode
from elasticjob_agent.protocol.health import AgentState
from elasticjob_agent.protocol.restarts import RestartStateError
from elasticjob_agent.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousStateError,
    RendezvousTimeoutError,
)
from elasticjob_agent.supervision.context import AgentExit, Supervision
from elasticjob_agent.supervision.exits import leave
from elasticjob_agent.supervision.restart_policy import exit_for_closed

logger = logging.getLogger(__name__)


def rendezvous(sup: Supervision) -> tuple[Any, float]:
    """The next round's ``RendezvousInfo`` and how long it took (from the call, or from when a
    spare was called in). Raises ``AgentExit`` on SIGTERM, a long etcd outage or a rendezvous
    error (``exit_for``)."""
    sup.attempt += 1
    started = time.time()
    sup.status.update(state=AgentState.RENDEZVOUS, waiting_since=started, workers=())
    sup.events.info("rendezvous_started", attempt=sup.attempt)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["info"] = sup.handler.next_rendezvous()
        except BaseException as exc:  # handed to the main thread below
            box["error"] = exc

    thread = threading.Thread(target=call, name="rendezvous", daemon=True)
    thread.start()
    standby: float | None = None
    while thread.is_alive():
        sup.status.beat()
        thread.join(0.1)
        was = standby
        standby = _note_standby(sup, standby)
        if was is not None and standby is None:
            started = time.time()  # a spare's rendezvous starts when a round calls it in
        if sup.stop_signal.is_set():
            leave(sup)
            raise AgentExit(ExitCode.TERMINATED, "SIGTERM while in rendezvous")
        sup.check_etcd_deadline("rendezvous")
    error = box.get("error")
    if error is not None:
        mapped = exit_for(sup, error)
        if mapped is error:
            raise error
        raise mapped from error
    return box["info"], time.time() - started


def _note_standby(sup: Supervision, was: float | None) -> float | None:
    """Report a spare (``Standby``, not waiting for anything the job lacks) while the
    rendezvous says this node stands by; back to ``Rendezvous`` when a round calls it in.
    Returns since when it stands by, or None."""
    standing = sup.handler.standby_since() is not None
    warm = sup.note_warm()
    now = time.time()
    if standing and was is None:
        sup.events.info("standing_by", warm_workers=warm)
        sup.status.update(state=AgentState.STANDBY, waiting_since=None)
        return now
    if not standing and was is not None:
        sup.events.info("called_in", standby_s=f"{now - was:.3f}", warm_workers=warm)
        sup.status.update(state=AgentState.RENDEZVOUS, waiting_since=now)
    return was if standing else None


def exit_for(sup: Supervision, error: BaseException) -> BaseException:
    """What a rendezvous error ends the agent with (``AgentExit``); any other error as is."""
    if isinstance(error, RendezvousClosedError):
        reason = _closed_reason(sup)
        return AgentExit(exit_for_closed(reason), f"rendezvous closed (reason: {reason})")
    if isinstance(error, RendezvousTimeoutError):
        return AgentExit(ExitCode.JOIN_TIMEOUT, str(error))
    if isinstance(error, RendezvousConnectionError):
        return AgentExit(ExitCode.ETCD_UNREACHABLE, str(error))
    if isinstance(error, RendezvousStateError):
        return AgentExit(ExitCode.WORKER_FAILED, f"corrupt rendezvous state: {error}")
    if isinstance(error, RendezvousError):
        return AgentExit(ExitCode.WORKER_FAILED, f"rendezvous failed: {error}")
    return error


def _closed_reason(sup: Supervision) -> str | None:
    try:
        return sup.counter.close_reason()
    except (RendezvousConnectionError, EtcdRequestError, RestartStateError) as exc:
        logger.warning("could not read why the rendezvous was closed: %s", exc)
        return None
