"""The job-wide restart count in ``status.restarts``: who counts what, never twice (pure).

The rule (docs/operator.md, "Restart semantics"):

- Group restarts that agents see (``failure``, ``timer``, ``membership``, ``preemption``) are
  counted by the agents in etcd, once per torn-down round. The operator copies them into its
  status as a per-reason maximum of its own value and every agent's report, so the durable count
  never decreases, also when etcd is lost and the agents start again from a lower number.
- ``etcd-recovered`` is counted by the operator alone, once per managed etcd it recreates; what
  agents report under that reason is ignored.
- ``pod-failure`` and ``pod-lost`` are counted by the operator alone, for a replaced worker pod
  whose agent never joined a completed round: no agent could have counted the restart.
  A replaced pod whose agent had joined is not counted by the operator (the agents counted the
  group restart its loss caused).
- ``failure``, ``timer`` and ``pod-failure`` spend ``maxRestarts``; the job fails when they
  exceed it. The rest is free.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from elasticjob_agent.protocol.health import HealthReport
from elasticjob_agent.protocol.keys import RestartReason

POD_FAILURE = "pod-failure"
"""A worker pod failed before its agent joined a round; spends the budget."""
POD_LOST = "pod-lost"
"""A worker pod was lost (node lost, evicted, deleted) before its agent joined a round; free."""
ETCD_RECOVERED = RestartReason.ETCD_RECOVERED.value

AGENT_COUNTED = frozenset(r.value for r in RestartReason if r is not RestartReason.ETCD_RECOVERED)
SPENDS_BUDGET = frozenset({RestartReason.FAILURE.value, RestartReason.TIMER.value, POD_FAILURE})


def merge_reports(
    counts: Mapping[str, int], reports: Iterable[HealthReport], run_id: str
) -> dict[str, int]:
    """``counts`` raised to the highest count any report of ``run_id`` gives per agent reason."""
    merged = dict(counts)
    for report in reports:
        if report.run_id != run_id:
            continue
        for reason, value in report.restarts_by_reason.items():
            if reason in AGENT_COUNTED and value > merged.get(reason, 0):
                merged[reason] = value
    return merged


def bump(counts: Mapping[str, int], reason: str, by: int = 1) -> dict[str, int]:
    result = dict(counts)
    result[reason] = result.get(reason, 0) + by
    return result


def total(counts: Mapping[str, int]) -> int:
    return sum(counts.values())


def failures(counts: Mapping[str, int]) -> int:
    """Restarts that spend ``maxRestarts``."""
    return sum(v for k, v in counts.items() if k in SPENDS_BUDGET)


def budget_spent(counts: Mapping[str, int], max_restarts: int) -> bool:
    return failures(counts) > max_restarts


def seed_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """What goes into a recreated etcd: only the reasons agents know, and only non-zero ones."""
    known = {r.value for r in RestartReason}
    return {k: v for k, v in sorted(counts.items()) if k in known and v > 0}


def seed_json(counts: Mapping[str, int]) -> str:
    """The ``restart-seed`` value (docs/contracts.md): only the reasons agents know."""
    return json.dumps({"byReason": seed_counts(counts)}, sort_keys=True)
