"""The job-wide restart count in ``status.restarts``: who counts what, never twice (pure).

The rule (docs/operator.md, "Restart semantics"):

- Group restarts that agents see (``failure``, ``timer``, ``hang``, ``membership``,
  ``preemption``) are counted by the agents in etcd, once per torn-down round. The operator
  copies them into its status as a per-reason maximum of its own value and every agent's
  report, so the durable count never decreases, also when etcd is lost and the agents start
  again from a lower number.
- ``etcd-recovered`` is counted by the operator alone, once per managed etcd it recreates; what
  agents report under that reason is ignored.
- ``pod-failure`` and ``pod-lost`` are counted by the operator alone, for a replaced worker pod
  whose agent never joined a completed round: no agent could have counted the restart.
  A replaced pod whose agent had joined is not counted by the operator (the agents counted the
  group restart its loss caused).
- ``straggler`` is counted by the operator alone, per pod it replaced because its node was a
  straggler (``spec.health.stragglers.action: Replace``); free.
- ``failure``, ``timer``, ``hang`` and ``pod-failure`` spend ``maxRestarts``
  (``SPENDS_BUDGET``); the job fails when they exceed it (``budget_spent``, the agents' own
  rule). The rest is free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from elasticjob_agent.protocol.failure import FinalCounts
from elasticjob_agent.protocol.health import HealthReport
from elasticjob_agent.protocol.restarts import (
    AGENT_COUNTED,
    ETCD_RECOVERED,
    POD_FAILURE,
    POD_IGNORED,
    POD_LOST,
    SPENDS_BUDGET,
    STRAGGLER,
    RestartReason,
)
from elasticjob_agent.protocol.restarts import budget_exhausted as budget_spent
from elasticjob_agent.protocol.restarts import encode_seed as seed_json
from elasticjob_agent.protocol.restarts import spent as failures

__all__ = [
    "AGENT_COUNTED",
    "ETCD_RECOVERED",
    "POD_FAILURE",
    "POD_IGNORED",
    "POD_LOST",
    "SPENDS_BUDGET",
    "STRAGGLER",
    "budget_spent",
    "bump",
    "failures",
    "merge_reports",
    "seed_counts",
    "seed_json",
    "total",
]


def merge_reports(
    counts: Mapping[str, int],
    reports: Iterable[HealthReport],
    run_id: str,
    final: Iterable[FinalCounts] = (),
) -> dict[str, int]:
    """``counts`` raised to the highest count any report of ``run_id``, or any final count an
    exited agent of ``run_id`` left (``final``), gives per agent reason."""
    merged = dict(counts)
    seen = [(r.run_id, r.restarts_by_reason) for r in reports]
    seen += [(f.run_id, f.by_reason) for f in final]
    for seen_run, by_reason in seen:
        if seen_run != run_id:
            continue
        for reason, value in by_reason.items():
            if reason in AGENT_COUNTED and value > merged.get(reason, 0):
                merged[reason] = value
    return merged


def bump(counts: Mapping[str, int], reason: str, by: int = 1) -> dict[str, int]:
    result = dict(counts)
    result[reason] = result.get(reason, 0) + by
    return result


def total(counts: Mapping[str, int]) -> int:
    return sum(counts.values())


def seed_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """What goes into a recreated etcd: only the reasons agents know, and only non-zero ones."""
    known = {r.value for r in RestartReason}
    return {k: v for k, v in sorted(counts.items()) if k in known and v > 0}
