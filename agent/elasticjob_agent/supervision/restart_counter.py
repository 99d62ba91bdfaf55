"""The job-wide restart counter in etcd: one count per group restart, whichever agent sees it.

Values and their codecs: ``protocol.restarts``; the reads and the counting write as pure
values: ``restart_transactions``. Layout (``protocol.keys``):
``<restarts>/<reason>`` decimal counters, ``<restarts>/events/<round>`` one record per
torn-down round, ``<root>/restart-seed`` written by the operator, and ``<root>/close-reason``
when an agent closed the rendezvous because the budget was spent.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from elasticjob_agent.etcd.messages import op_range, prefix_end
from elasticjob_agent.etcd.retry import retry_until
from elasticjob_agent.etcd.session import EtcdSession
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_agent.protocol.restarts import (
    RestartCounts,
    RestartReason,
    decode_close_reason,
    decode_event_reason,
    encode_close_reason,
)
from elasticjob_agent.supervision import restart_transactions

T = TypeVar("T")


@dataclass(frozen=True)
class Recorded:
    """Outcome of ``record``: whether this call counted it, which reason won, the new counts."""

    counted: bool
    reason: RestartReason
    counts: RestartCounts


class JobRestartCounter:
    """Counts group restarts once per torn-down round, atomically, in etcd.

    Runs on the agent's ``EtcdSession``. Every call retries while etcd is unreachable, for at
    most ``patience`` seconds, then raises ``RendezvousConnectionError``; a stored value that
    is not what an agent or the operator writes raises ``RestartStateError`` naming the key.
    """

    def __init__(
        self,
        session: EtcdSession,
        keys: JobKeys,
        node: str,
        *,
        patience: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._keys = keys
        self._node = node
        self._patience = patience
        self._clock = clock

    def _run(self, op: Callable[[], Awaitable[T]], patience: float | None = None) -> T:
        return self._session.run(
            retry_until(
                op,
                patience=self._patience if patience is None else patience,
                clock=self._clock,
                what="restart counter",
            )
        )

    async def _stored(self) -> restart_transactions.Stored:
        """The counters and the seed in one read (one transaction of two ranges)."""
        prefix = restart_transactions.counters_prefix(self._keys)
        response = await self._session.client.txn(
            [], [op_range(prefix, prefix_end(prefix)), op_range(self._keys.restart_seed.encode())]
        )
        counters, seed = (r.response_range.kvs for r in response.responses)
        return restart_transactions.parse_stored(self._keys, counters, seed)

    def read(self) -> RestartCounts:
        """The job's counts now (the seed when no agent has counted yet)."""

        async def counts() -> RestartCounts:
            return (await self._stored()).counts

        return self._run(counts)

    def record(self, round_: int, reason: RestartReason, patience: float | None = None) -> Recorded:
        """Count the restart that tears down ``round_``, unless another agent already did.

        The event key and the counter bump go in one transaction guarded by the counters' mod
        revisions, so concurrent agents never lose or double an increment. ``patience``
        overrides the instance's etcd patience for this call.
        """
        client = self._session.client
        event_key = self._keys.restart_event(round_)

        async def attempt() -> Recorded | None:
            existing = await client.get(event_key.encode())
            if existing is not None:
                winner = decode_event_reason(event_key, bytes(existing.value))
                return Recorded(False, winner, (await self._stored()).counts)
            stored = await self._stored()
            cas, new = restart_transactions.record(
                self._keys, stored, round_, reason, node=self._node, at=time.time()
            )
            response = await client.cas(cas)
            return Recorded(True, reason, new) if response.succeeded else None

        while True:
            result = self._run(attempt, patience)
            if result is not None:
                return result
            # Lost a race with another agent: read again.

    def counted(self, round_: int) -> RestartReason | None:
        """The reason the restart that tore down ``round_`` was counted under, if any agent
        counted it yet."""
        key = self._keys.restart_event(round_)

        async def winner() -> RestartReason | None:
            got = await self._session.client.get(key.encode())
            return None if got is None else decode_event_reason(key, bytes(got.value))

        return self._run(winner)

    def mark_budget_spent(self, counts: RestartCounts, max_restarts: int) -> None:
        """Say why the rendezvous is being closed, so every agent exits with the same code."""
        payload = encode_close_reason(counts.by_reason, self._node, max_restarts, time.time())
        key = self._keys.close_reason.encode()
        self._run(lambda: self._session.client.put(key, payload))

    def close_reason(self) -> str | None:
        """The reason an agent recorded when it closed the rendezvous, if any.

        Raises ``RestartStateError`` when the stored record is corrupt."""
        key = self._keys.close_reason
        got = self._run(lambda: self._session.client.get(key.encode()))
        return None if got is None else decode_close_reason(key, bytes(got.value))
