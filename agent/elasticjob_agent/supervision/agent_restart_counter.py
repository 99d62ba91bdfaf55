"""Restart counts of one agent, as torchrun keeps them (``--rdzv-backend c10d``).

Without etcd there is no job-wide count: each agent counts the restarts it sees, by the reason
it sees (the node whose worker failed counts a ``failure``; its peers, restarted because it came
back to the rendezvous, count a ``membership``), so ``--max-restarts`` is spent per node, as
with torchrun. The one fact agents share is why the rendezvous was closed: it goes into the
c10d store (the rendezvous' ``TCPStore``), so every agent exits with the same code when one of
them spent its budget.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from elasticjob_agent.protocol.failure_policy import PolicyDecision
from elasticjob_agent.protocol.failure_policy import (
    encode_close_reason as encode_policy_close_reason,
)
from elasticjob_agent.protocol.restarts import (
    RestartCounts,
    RestartReason,
    RestartStateError,
    decode_close_reason,
    encode_close_reason,
)
from elasticjob_agent.supervision.restart_counter import Recorded

logger = logging.getLogger(__name__)


class AgentRestartCounter:
    """The supervisor's ``Counter`` on this agent's memory plus the c10d store's close reason.

    ``store`` is a ``torch.distributed.Store`` shared by the job's agents; a store that cannot
    be reached (its host, rank 0's agent, is gone) makes ``close_reason`` ``None``.
    """

    def __init__(self, store: Any, run_id: str, node: str) -> None:
        self._store = store
        self._key = f"elasticjob.{run_id}.close-reason"
        self._node = node
        self._counts = RestartCounts()

    def read(self) -> RestartCounts:
        return self._counts

    def record(
        self,
        round_: int,
        reason: RestartReason,
        patience: float | None = None,
        *,
        spend: bool = True,
    ) -> Recorded:
        if spend:
            self._counts = self._counts.plus(reason)
        return Recorded(True, reason, self._counts)

    def counted(self, round_: int) -> RestartReason | None:
        """Agents share no counts here: no peer ever counted a restart for us."""
        return None

    def mark_budget_spent(self, counts: RestartCounts, max_restarts: int) -> None:
        self._mark(encode_close_reason(counts.by_reason, self._node, max_restarts, time.time()))

    def mark_failed_by_policy(self, decision: PolicyDecision) -> None:
        self._mark(encode_policy_close_reason(decision, self._node))

    def _mark(self, payload: bytes) -> None:
        try:
            self._store.set(self._key, payload)
        except Exception as exc:  # torch raises RuntimeError subclasses for a lost store
            logger.warning("could not record the close reason in the c10d store: %s", exc)

    def close_reason(self) -> str | None:
        try:
            if not self._store.check([self._key]):
                return None
            raw = bytes(self._store.get(self._key))
        except Exception as exc:  # the store's host is gone: we cannot know
            logger.warning("could not read the close reason from the c10d store: %s", exc)
            return None
        try:
            return decode_close_reason(self._key, raw)
        except RestartStateError as exc:
            logger.warning("%s", exc)
            return None
