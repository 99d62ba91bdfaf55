"""Kill the operator anywhere: no duplicate pod, no lost or doubled count (property test).

The executor's contract (reconciler.py): if the plan says ``commit_first`` the status is written
before any action; the status is written again after the actions. A crash may happen before the
first write, between any two actions, or before the last write. Here a random crash point is
chosen at every step while random worker pods fail; after a final clean step the operator must
have counted every failure exactly once and created exactly one pod per (index, attempt).
"""

from __future__ import annotations

from collections import Counter

from elasticjob_operator.core import planning, restarts
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.status import JobStatus
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.operator_model import JOB, T0, Cluster, job_spec

SPEC = job_spec(replicas=3, maxRestarts=100)


def _plan(cluster: Cluster, status: JobStatus, now: float) -> planning.Plan:
    return planning.plan(
        JOB,
        spec=SPEC,
        generation=1,
        status=status,
        observed=cluster.observed(etcd_reachable=True),
        now=now,
        services=frozenset(cluster.services),
    )


step_strategy = st.tuples(
    st.one_of(st.none(), st.integers(min_value=0, max_value=2)),  # which index fails, if any
    st.one_of(st.none(), st.integers(min_value=0, max_value=12)),  # crash after n actions
    st.booleans(),  # if crashing: before the commit write (True) or after it
)


@given(st.lists(step_strategy, min_size=1, max_size=12))
@settings(max_examples=150, deadline=None)
def test_crash_anywhere_counts_every_failure_once(
    steps: list[tuple[int | None, int | None, bool]],
) -> None:
    cluster = Cluster()
    stored = JobStatus()  # what the API server holds
    injected = 0
    now = T0
    for fail_index, crash_after, crash_before_commit in steps:
        now += 1
        if fail_index is not None:
            current = [
                p
                for p in cluster.workers()
                if p.index == fail_index and p.phase is PodPhase.RUNNING
            ]
            if current:
                cluster.set(current[-1].name, phase=PodPhase.FAILED, exit_code=1)
                injected += 1
        result = _plan(cluster, stored, now)
        if crash_after is None:
            if result.commit_first:
                stored = result.status
            cluster.apply(result)
            stored = result.status
        elif crash_before_commit and result.commit_first:
            pass  # died before writing anything
        else:
            if result.commit_first:
                stored = result.status
            cluster.apply(result, upto=crash_after)
        cluster.run_all()
    for _ in range(2):  # a restarted operator finishes the work
        now += 1
        result = _plan(cluster, stored, now)
        cluster.apply(result)
        stored = result.status
        cluster.run_all()

    assert stored.restarts.get(restarts.POD_FAILURE, 0) == injected
    names = Counter(cluster.created)
    assert all(n == 1 for n in names.values()), names
    live = Counter(p.index for p in cluster.workers() if p.phase is PodPhase.RUNNING)
    assert live == {0: 1, 1: 1, 2: 1}
    assert len([p for p in cluster.workers() if p.index < 3]) == 3  # failed ones were deleted
