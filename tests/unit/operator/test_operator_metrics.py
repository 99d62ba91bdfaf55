"""The per-job series the dashboard's budget, spares, etcd and failure-policy panels read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticjob_agent.protocol.failure_policy import Action, PolicyDecision
from elasticjob_operator import metrics
from elasticjob_operator.core.status import EtcdState, JobStatus
from prometheus_client import REGISTRY

from tests.support.operator_model import T0

NS, JOB = "ns", "metrics-job"
LABELS = {"namespace": NS, "job": JOB}


@pytest.fixture(autouse=True)
def _forgotten() -> Iterator[None]:
    yield
    metrics.forget(NS, JOB)


def _value(name: str, **extra: str) -> float | None:
    return REGISTRY.get_sample_value(name, {**LABELS, **extra})


def _decision(action: Action, round_: int) -> PolicyDecision:
    return PolicyDecision(action, 0, "failure", round_, "exit 3", T0 + round_)


STATUSES = [
    ("reachable, no spares", JobStatus(), 1, 0),
    ("etcd unreachable", JobStatus(etcd=EtcdState(unreachable_since=T0)), 0, 0),
    ("spares ready", JobStatus(ready_spares=2), 1, 2),
]


@pytest.mark.parametrize(
    ("status", "reachable", "spares"), [c[1:] for c in STATUSES], ids=[c[0] for c in STATUSES]
)
def test_status_series(status: JobStatus, reachable: int, spares: int) -> None:
    metrics.publish(NS, JOB, status, max_restarts=5)
    assert _value("elasticjob_job_etcd_reachable") == reachable
    assert _value("elasticjob_job_spares_ready") == spares
    assert _value("elasticjob_job_max_restarts") == 5


def test_each_decision_counts_once_by_action() -> None:
    first, second = _decision(Action.IGNORE, 1), _decision(Action.FAIL_JOB, 2)
    metrics.decision_taken(NS, JOB, None, None)
    metrics.decision_taken(NS, JOB, None, first)
    metrics.decision_taken(NS, JOB, first, first)  # the next step keeps it: not again
    metrics.decision_taken(NS, JOB, first, second)
    total = "elasticjob_job_failure_policy_decisions_total"
    assert _value(total, action="Ignore") == 1
    assert _value(total, action="FailJob") == 1
    assert _value(total, action="Count") is None


def test_a_deleted_jobs_series_are_removed() -> None:
    metrics.publish(NS, JOB, JobStatus(ready_spares=1), max_restarts=3)
    metrics.decision_taken(NS, JOB, None, _decision(Action.COUNT, 1))
    metrics.forget(NS, JOB)
    for name in (
        "elasticjob_job_max_restarts",
        "elasticjob_job_spares_ready",
        "elasticjob_job_etcd_reachable",
    ):
        assert _value(name) is None, name
    assert _value("elasticjob_job_failure_policy_decisions_total", action="Count") is None
