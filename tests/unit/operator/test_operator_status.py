"""Conditions, restart arithmetic, the status round trip and stall classification."""

from __future__ import annotations

import json

from elasticjob_agent.protocol.health import AgentState
from elasticjob_operator.core import restarts
from elasticjob_operator.core.conditions import (
    ConditionType,
    find_condition,
    rfc3339,
    set_condition,
)
from elasticjob_operator.core.observed import Observed, PodPhase, PodView
from elasticjob_operator.core.stall import EtcdView, StallReason, StallSettings, classify
from elasticjob_operator.core.status import EtcdState, JobStatus, Phase, StallState
from hypothesis import given
from hypothesis import strategies as st

from tests.support.operator_model import RUN_ID, T0, report


def test_condition_transition_time_changes_only_when_status_flips() -> None:
    conds = set_condition([], ConditionType.STALLED, True, "EtcdUnavailable", "a", now=T0)
    conds = set_condition(conds, ConditionType.STALLED, True, "EtcdUnavailable", "b", now=T0 + 9)
    cond = find_condition(conds, ConditionType.STALLED)
    assert cond is not None
    assert (cond["message"], cond["lastTransitionTime"]) == ("b", rfc3339(T0))
    conds = set_condition(conds, ConditionType.STALLED, False, "Recovered", "c", now=T0 + 20)
    cond = find_condition(conds, ConditionType.STALLED)
    assert cond is not None
    assert (cond["status"], cond["lastTransitionTime"]) == ("False", rfc3339(T0 + 20))
    conds = set_condition(conds, ConditionType.RUNNING, True, "Running", "r", now=T0, generation=3)
    assert [c["type"] for c in conds] == ["Stalled", "Running"]
    assert conds[1]["observedGeneration"] == 3


def test_merge_takes_the_per_reason_maximum_and_ignores_etcd_recovered_reports() -> None:
    counts = {"failure": 2, "etcd-recovered": 1}
    reports = [
        report("a", restarts={"failure": 1, "membership": 3, "etcd-recovered": 5}),
        report("b", restarts={"failure": 4}),
    ]
    merged = restarts.merge_reports(counts, reports, RUN_ID)
    assert merged == {"failure": 4, "membership": 3, "etcd-recovered": 1}
    assert restarts.failures(merged) == 4 and restarts.total(merged) == 8


@given(
    st.dictionaries(st.sampled_from(["failure", "membership", "timer"]), st.integers(0, 50)),
    st.lists(
        st.dictionaries(st.sampled_from(["failure", "membership", "timer"]), st.integers(0, 50))
    ),
)
def test_merge_never_decreases(counts: dict[str, int], reported: list[dict[str, int]]) -> None:
    merged = restarts.merge_reports(counts, [report("x", restarts=r) for r in reported], RUN_ID)
    assert all(merged.get(k, 0) >= v for k, v in counts.items())
    for r in reported:
        assert all(merged.get(k, 0) >= v for k, v in r.items())


def test_seed_holds_only_reasons_the_agent_knows() -> None:
    seed = json.loads(restarts.seed_json({"failure": 2, "pod-failure": 1, "etcd-recovered": 1}))
    assert seed == {"byReason": {"etcd-recovered": 1, "failure": 2}}


def test_budget() -> None:
    assert not restarts.budget_spent({"failure": 2, "pod-failure": 1, "membership": 9}, 3)
    assert restarts.budget_spent({"failure": 2, "timer": 1, "pod-failure": 1}, 3)


def test_status_round_trips_through_json() -> None:
    status = JobStatus(
        phase=Phase.RUNNING,
        reason="Running",
        restarts={"failure": 1},
        attempts={0: 2, 3: 1},
        etcd=EtcdState(2, 2, 2, None),
        stall=StallState("EtcdUnavailable", "m", T0),
        start_time=T0,
        last_rendezvous_seconds=1.5,
    )
    data = json.loads(json.dumps(status.to_json()))
    assert data["restarts"] == {"total": 1, "failures": 1, "byReason": {"failure": 1}}
    assert JobStatus.from_json(data) == status


def test_status_from_garbage_falls_back_to_defaults() -> None:
    status = JobStatus.from_json({"phase": "Weird", "restarts": {"byReason": {"x": "y"}}})
    assert status.phase is Phase.PENDING and status.restarts == {"x": 0}


def _worker(name: str, **kw: object) -> PodView:
    base: dict[str, object] = {
        "name": name,
        "role": "worker",
        "index": 0,
        "attempt": 0,
        "phase": PodPhase.RUNNING,
    }
    base.update(kw)
    return PodView(**base)  # type: ignore[arg-type]


ETCD_OK = EtcdView("e:2379", None, managed=False, ever_ready=True, unreachable_since=None)


def _classify(observed: Observed, etcd: EtcdView, workers: list[PodView], now: float) -> object:
    result = classify(
        observed,
        etcd,
        current_workers=workers,
        min_nodes=2,
        run_id=RUN_ID,
        now=now,
        settings=StallSettings(),
    )
    return None if result is None else result.reason


def test_stall_table() -> None:
    w = [_worker("a"), _worker("b", index=1)]
    blocked = {"a": report("a", AgentState.RENDEZVOUS, round_=None, waiting_since=T0)}
    down = EtcdView("e:2379", None, managed=False, ever_ready=True, unreachable_since=T0)
    starting = EtcdView("e:2379", None, managed=False, ever_ready=False, unreachable_since=T0)
    cut = {"a": report("a", etcd_reachable=False, unreachable_since=T0)}
    pending = [_worker("a"), _worker("b", index=1, phase=PodPhase.PENDING, unschedulable="no")]
    one = [_worker("a"), _worker("b", index=1, phase=PodPhase.PENDING)]
    table = [
        (Observed(), ETCD_OK, w, T0 + 100, None),
        (Observed(), down, w, T0 + 2, None),  # not yet: below the threshold
        (Observed(), down, w, T0 + 5, StallReason.ETCD_UNAVAILABLE),
        (Observed(), starting, w, T0 + 30, None),  # a new etcd may take its time to start
        (Observed(), starting, w, T0 + 61, StallReason.ETCD_UNAVAILABLE),
        (Observed(reports=cut), ETCD_OK, w, T0 + 5, StallReason.ETCD_UNAVAILABLE),
        (Observed(), ETCD_OK, pending, T0, StallReason.PODS_UNSCHEDULABLE),
        (Observed(reports=blocked), ETCD_OK, one, T0 + 5, None),
        (Observed(reports=blocked), ETCD_OK, one, T0 + 16, StallReason.WAITING_FOR_NODES),
        (Observed(reports=blocked), ETCD_OK, w, T0 + 16, None),  # enough nodes: just forming
    ]
    for observed, etcd, workers, now, expected in table:
        assert _classify(observed, etcd, workers, now) == expected, (etcd, workers, now)


def test_failed_managed_etcd_pod_is_unavailable_at_once() -> None:
    pod = PodView("e-0", "etcd", 0, 0, PodPhase.FAILED, exit_code=137)
    etcd = EtcdView("svc:2379", pod, managed=True, ever_ready=True, unreachable_since=None)
    assert _classify(Observed(), etcd, [], T0) == StallReason.ETCD_UNAVAILABLE
