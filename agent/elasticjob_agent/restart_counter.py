"""The job-wide restart counter in etcd: one count per group restart, whichever agent sees it.

Layout (``protocol.keys``): ``<restarts>/<reason>`` decimal counters, ``<restarts>/events/<round>``
one record per torn-down round, ``<root>/restart-seed`` written by the operator, and
``<root>/close-reason`` when an agent closed the rendezvous because the budget was spent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.etcd.client import cmp_create, cmp_mod, op_put
from elasticjob_agent.etcd_link import EtcdLink, EtcdUnavailableError
from elasticjob_agent.protocol.keys import JobKeys, RestartReason
from elasticjob_agent.restart_budget import (
    RestartCounts,
    decode_counter,
    decode_event_reason,
    decode_seed,
    encode_event,
)

BUDGET_SPENT_REASON = "MaxRestartsExceeded"


@dataclass(frozen=True)
class Recorded:
    """Outcome of ``record``: whether this call counted it, which reason won, the new counts."""

    counted: bool
    reason: RestartReason
    counts: RestartCounts


class JobRestartCounter:
    """Counts group restarts once per torn-down round, atomically, in etcd.

    Every call retries while etcd is unreachable, for at most ``patience`` seconds, then raises
    ``EtcdUnavailableError``.
    """

    def __init__(
        self,
        link: EtcdLink,
        keys: JobKeys,
        node: str,
        *,
        patience: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._link = link
        self._keys = keys
        self._node = node
        self._patience = patience
        self._clock = clock
        self._sleep = sleep

    def _retrying(self, fn: Callable[[], Any], patience: float | None = None) -> Any:
        deadline = self._clock() + (self._patience if patience is None else patience)
        while True:
            try:
                return fn()
            except EtcdUnavailableError:
                if self._clock() >= deadline:
                    raise
                self._sleep(0.5)

    def _counters(self) -> tuple[RestartCounts, dict[str, int], tuple[RestartCounts, int] | None]:
        """(counts, mod revision per counter key, seed and its revision if counters are absent)."""
        stored = self._link.get_prefix(self._keys.restarts + "/")
        counts: dict[str, int] = {}
        revisions: dict[str, int] = {}
        for reason in RestartReason:
            key = self._keys.restart_counter(reason)
            if key in stored:
                raw, rev = stored[key]
                counts[reason.value] = decode_counter(key, raw)
                revisions[key] = rev
        if counts:
            return RestartCounts(counts), revisions, None
        seed = self._link.get(self._keys.restart_seed)
        if seed is None:
            return RestartCounts(), revisions, None
        seeded = decode_seed(self._keys.restart_seed, seed[0])
        return seeded, revisions, (seeded, seed[1])

    def read(self) -> RestartCounts:
        """The job's counts now (the seed when no agent has counted yet)."""
        counts: RestartCounts = self._retrying(lambda: self._counters()[0])
        return counts

    def record(self, round_: int, reason: RestartReason, patience: float | None = None) -> Recorded:
        """Count the restart that tears down ``round_``, unless another agent already did.

        The event key and the counter bump go in one transaction guarded by the counters' mod
        revisions, so concurrent agents never lose or double an increment. ``patience``
        overrides the instance's etcd patience for this call.
        """

        def attempt() -> Recorded | None:
            event_key = self._keys.restart_event(round_)
            existing = self._link.get(event_key)
            if existing is not None:
                return Recorded(
                    False, decode_event_reason(event_key, existing[0]), self._counters()[0]
                )
            counts, revisions, seed = self._counters()
            new = counts.plus(reason)
            to_write = (
                new.by_reason if seed is not None else {reason.value: new.by_reason[reason.value]}
            )

            compare = [cmp_create(event_key.encode(), "==", 0)]
            for r in RestartReason:
                key = self._keys.restart_counter(r)
                compare.append(cmp_mod(key.encode(), "==", revisions.get(key, 0)))
            if seed is not None:
                compare.append(cmp_mod(self._keys.restart_seed.encode(), "==", seed[1]))
            success = [op_put(event_key.encode(), encode_event(reason, self._node, time.time()))]
            for name, value in to_write.items():
                key = self._keys.restart_counter(RestartReason(name))
                success.append(op_put(key.encode(), str(value).encode()))

            if self._link.transaction(compare, success):
                return Recorded(True, reason, new)
            return None  # lost a race: read again

        while True:
            result: Recorded | None = self._retrying(attempt, patience)
            if result is not None:
                return result

    def mark_budget_spent(self, counts: RestartCounts, max_restarts: int) -> None:
        """Say why the rendezvous is being closed, so every agent exits with the same code."""
        payload = json.dumps(
            {
                "reason": BUDGET_SPENT_REASON,
                "node": self._node,
                "byReason": dict(counts.by_reason),
                "maxRestarts": max_restarts,
                "at": time.time(),
            },
            sort_keys=True,
        ).encode()
        self._retrying(lambda: self._link.put(self._keys.close_reason, payload))

    def close_reason(self) -> str | None:
        """The reason an agent recorded when it closed the rendezvous, if any."""
        got = self._retrying(lambda: self._link.get(self._keys.close_reason))
        if got is None:
            return None
        try:
            reason = json.loads(got[0]).get("reason")
        except (json.JSONDecodeError, AttributeError):
            return None
        return reason if isinstance(reason, str) else None
