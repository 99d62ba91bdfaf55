"""Queueing through Kueue (pure): labels of core and extras, Queued status, extras only while
the core is admitted, no replacement while a core pod still terminates, refusals reported."""

from __future__ import annotations

import pytest
from elasticjob_operator.core import kueue, kueue_names, planning
from elasticjob_operator.core.conditions import ConditionType, find_condition
from elasticjob_operator.core.manifests import build_worker_pod
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.spec import JobSpec, SpecError, parse_job, parse_kueue, parse_spec
from elasticjob_operator.core.status import JobStatus, Phase

from tests.support.operator_model import JOB, T0, Cluster, raw_spec, step


def queued_spec(**overrides: object) -> JobSpec:
    body = {"spec": raw_spec(replicas=4, minNodes=2, queueName="main", **overrides)}
    body["metadata"] = {
        "labels": {kueue_names.PRIORITY_LABEL: "training"},
        "annotations": {kueue_names.EXTRAS_PRIORITY_ANNOTATION: "opportunistic"},
    }
    return parse_job(body)


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({}, {}, None),
        ({"queueName": "main"}, {}, "main"),
        ({}, {kueue_names.QUEUE_LABEL: "main"}, "main"),
        ({"queueName": "main"}, {kueue_names.QUEUE_LABEL: "main"}, "main"),
    ],
)
def test_queue_name_from_spec_or_label(
    spec: dict[str, str], labels: dict[str, str], expected: str | None
) -> None:
    parsed = parse_kueue(spec, {"labels": labels})
    assert (parsed.queue_name if parsed else None) == expected


@pytest.mark.parametrize(
    ("spec", "metadata", "field"),
    [
        ({"queueName": "a"}, {"labels": {kueue_names.QUEUE_LABEL: "b"}}, "disagree"),
        ({"queueName": "Bad_Name"}, {}, "spec.queueName"),
        (
            {"queueName": "q"},
            {"labels": {kueue_names.PRIORITY_LABEL: "UP"}},
            kueue_names.PRIORITY_LABEL,
        ),
    ],
)
def test_bad_kueue_settings_name_the_field(
    spec: dict[str, str], metadata: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError, match=field):
        parse_kueue(spec, metadata)


def test_core_pods_form_one_group_and_extras_are_single_workloads() -> None:
    spec = queued_spec()
    core = build_worker_pod(JOB, spec, 1, 0)["metadata"]
    extra = build_worker_pod(JOB, spec, 2, 0)["metadata"]
    assert core["labels"][kueue_names.QUEUE_LABEL] == "main"
    assert core["labels"][kueue_names.GROUP_LABEL] == kueue.group_name(JOB)
    assert core["annotations"][kueue_names.GROUP_TOTAL_ANNOTATION] == "2"
    assert core["annotations"][kueue_names.RETRIABLE_ANNOTATION] == "false"
    assert core["labels"][kueue_names.PRIORITY_LABEL] == "training"
    assert extra["labels"][kueue_names.QUEUE_LABEL] == "main"
    assert kueue_names.GROUP_LABEL not in extra["labels"]
    assert kueue_names.GROUP_TOTAL_ANNOTATION not in extra["annotations"]
    assert extra["labels"][kueue_names.PRIORITY_LABEL] == "opportunistic"
    assert len(kueue.group_name(JOB)) <= 63


def test_a_long_job_name_gives_a_valid_group_name() -> None:
    job = type(JOB)("ns", "j" * 50, JOB.uid)
    assert len(kueue.group_name(job)) <= 63


def test_pods_of_an_unqueued_job_carry_no_kueue_labels() -> None:
    pod = build_worker_pod(JOB, parse_spec(raw_spec()), 0, 0)
    assert not [k for k in pod["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]


def _names(plan: planning.Plan, kind: type) -> list[str]:
    out = []
    for action in plan.actions:
        if isinstance(action, kind):
            out.append(
                action.manifest["metadata"]["name"]
                if isinstance(action, planning.CreateObject)
                else getattr(action, "name", "")
            )
    return sorted(n for n in out if "-worker-" in n)


def test_queued_core_then_extras_after_admission_then_preemption() -> None:
    spec = queued_spec()
    cluster = Cluster()
    first = step(cluster, JobStatus(), spec, T0)
    # Only the core is created; Kueue's webhook gates it.
    assert _names(first, planning.CreateObject) == ["demo-worker-0-0", "demo-worker-1-0"]
    for name in ("demo-worker-0-0", "demo-worker-1-0"):
        cluster.set(name, gated=True)
    queued = step(cluster, first.status, spec, T0 + 1)
    assert queued.status.phase is Phase.QUEUED
    assert queued.status.reason == "Queued"
    cond = find_condition(queued.status.conditions, ConditionType.QUEUED)
    assert cond is not None and cond["status"] == "True"
    assert any(e.reason == "Queued" for e in queued.events)
    assert _names(queued, planning.CreateObject) == []

    # Kueue's reason, when the reconciler read the Workload, is in the message.
    why = step(cluster, queued.status, spec, T0 + 2, kueue_reason="insufficient quota")
    assert why.status.message.endswith("insufficient quota")

    # Admitted: the gate is gone; the extras are created now.
    for name in ("demo-worker-0-0", "demo-worker-1-0"):
        cluster.set(name, gated=False)
    cluster.run_all()
    admitted = step(cluster, why.status, spec, T0 + 3, etcd_reachable=True)
    assert _names(admitted, planning.CreateObject) == ["demo-worker-2-0", "demo-worker-3-0"]
    assert admitted.status.phase is Phase.PENDING
    cond = find_condition(admitted.status.conditions, ConditionType.QUEUED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Admitted"
    cluster.run_all()

    # Kueue preempts the core (its agents had joined a round): the pods terminate on live
    # nodes. The next attempts are committed but not created yet (Kueue would delete them as
    # excess pods of the group).
    for name in ("demo-worker-0-0", "demo-worker-1-0"):
        cluster.set(name, deleting=True, joined=True)
    preempted = step(cluster, admitted.status, spec, T0 + 4, etcd_reachable=True)
    assert _names(preempted, planning.CreateObject) == []
    assert preempted.commit_first
    assert preempted.status.attempts[0] == 1 and preempted.status.attempts[1] == 1
    held = step(cluster, preempted.status, spec, T0 + 4.5, etcd_reachable=True)
    assert _names(held, planning.CreateObject) == []
    # Core pods gone: replacements join the same group, gated; extras are gone with new names.
    for name in ("demo-worker-0-0", "demo-worker-1-0"):
        cluster.pods.pop(name)
    again = step(cluster, preempted.status, spec, T0 + 5, etcd_reachable=True)
    assert _names(again, planning.CreateObject) == ["demo-worker-0-1", "demo-worker-1-1"]
    for name in ("demo-worker-0-1", "demo-worker-1-1"):
        cluster.set(name, gated=True)
    requeued = step(cluster, again.status, spec, T0 + 6, etcd_reachable=True)
    # Queued again: the extras go (new names later), so the job holds no GPUs while it waits.
    assert _names(requeued, planning.DeletePod) == ["demo-worker-2-0", "demo-worker-3-0"]
    assert requeued.status.phase is Phase.QUEUED
    assert sorted(n for n in cluster.pods if "worker" in n) == [
        "demo-worker-0-1",
        "demo-worker-1-1",
    ]
    assert requeued.status.restarts.get("pod-lost", 0) == 0  # the agents count preemptions


def test_extras_go_when_the_core_is_queued_again() -> None:
    spec = queued_spec()
    cluster = Cluster()
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=True).status
    cluster.run_all()
    assert len([n for n in cluster.pods if "worker" in n]) == 4
    # The core's pods vanished at once (a forced deletion) and came back gated.
    for index in (0, 1):
        cluster.pods.pop(f"demo-worker-{index}-0")
    status = step(cluster, status, spec, T0 + 2, etcd_reachable=True).status
    for index in (0, 1):
        cluster.set(f"demo-worker-{index}-0", gated=True)
    plan = step(cluster, status, spec, T0 + 3, etcd_reachable=True)
    assert _names(plan, planning.DeletePod) == ["demo-worker-2-0", "demo-worker-3-0"]
    assert plan.commit_first and plan.status.attempts[2] == 1 and plan.status.attempts[3] == 1
    assert any(e.reason == "ExtraReleased" for e in plan.events)


def test_a_failed_core_pod_is_replaced_at_once_in_the_same_group() -> None:
    spec = queued_spec()
    cluster = Cluster()
    status = step(cluster, JobStatus(), spec, T0).status
    cluster.run_all()
    status = step(cluster, status, spec, T0 + 1, etcd_reachable=True).status
    cluster.run_all()
    cluster.set("demo-worker-0-0", phase=PodPhase.FAILED, exit_code=1)
    plan = step(cluster, status, spec, T0 + 2, etcd_reachable=True)
    created = [a.manifest for a in plan.actions if isinstance(a, planning.CreateObject)]
    assert [m["metadata"]["name"] for m in created] == ["demo-worker-0-1"]
    assert created[0]["metadata"]["labels"][kueue_names.GROUP_LABEL] == kueue.group_name(JOB)
    assert _names(plan, planning.DeletePod) == ["demo-worker-0-0"]


def test_webhook_refusals_are_recognised_and_reported_once() -> None:
    error = (
        'create Pod ns/demo-worker-0-0: HTTP 500 Internal Server Error: {"message":"Internal '
        'error occurred: failed calling webhook \\"mpod.kb.io\\": failed to call webhook: '
        'Post \\"https://10.200.0.1:4443/mutate--v1-pod?timeout=10s\\": connection refused"}'
    )
    manifest = {"kind": "Pod", "metadata": {"name": "demo-worker-0-0"}}
    message = kueue.refusal_message(manifest, error)
    assert message is not None and "mpod.kb.io" in message and "demo-worker-0-0" in message
    assert kueue.refusal_message(manifest, "HTTP 500: etcdserver: timeout") is None
    status, event = kueue.report_refusal(JobStatus(), JobStatus(), message)
    assert status.reason == kueue.REFUSED_REASON and event is not None and event[0] == "Warning"
    _, again = kueue.report_refusal(status, status, message)
    assert again is None


def test_workload_reason_reads_kueues_condition_message() -> None:
    workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "message": "insufficient quota"}
            ]
        }
    }
    assert kueue.workload_reason(workload) == "insufficient quota"
    assert kueue.workload_reason(None) is None
    assert kueue.workload_reason({"status": {}}) is None
