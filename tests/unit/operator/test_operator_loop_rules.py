"""Rules a job's loop and its plan share: which etcd pod is the job's current one, and how long
the loop waits after the API server failed or refused a request."""

from __future__ import annotations

import pytest
from elasticjob_operator.core import names, retry
from elasticjob_operator.core.observed import PodPhase, PodView, current_etcd


def _etcd(generation: int) -> PodView:
    return PodView(f"demo-etcd-{generation}", names.ROLE_ETCD, generation, 0, PodPhase.RUNNING)


@pytest.mark.parametrize(
    ("pods", "generation", "expected"),
    [
        ([], 0, None),
        ([0], 0, 0),
        # The status moved on (a new generation committed) before its pod exists or is seen:
        # the old pod is abandoned, not current, though it is the newest the index holds.
        ([0], 1, None),
        ([0, 1], 1, 1),
        # A status write was lost after a pod was created: the pod's generation is adopted.
        ([0, 1, 2], 1, 2),
        ([2], 0, 2),
    ],
)
def test_the_current_etcd_pod(pods: list[int], generation: int, expected: int | None) -> None:
    current = current_etcd([_etcd(g) for g in pods], generation)
    assert (current.index if current is not None else None) == expected


@pytest.mark.parametrize(
    ("interval", "doublings", "rejected", "expected"),
    [
        (2.0, 0, True, 2.0),
        (2.0, 1, True, 4.0),
        (2.0, 4, True, 32.0),
        (2.0, 5, True, retry.REJECTED_BACKOFF_MAX),
        (2.0, 4, False, retry.TRANSIENT_BACKOFF_MAX),
        (0.1, 20, True, 6.4),  # at most six doublings
        (10.0, 0, True, 10.0),
    ],
)
def test_backed_off(interval: float, doublings: int, rejected: bool, expected: float) -> None:
    assert retry.backed_off(interval, doublings, rejected=rejected) == pytest.approx(expected)
