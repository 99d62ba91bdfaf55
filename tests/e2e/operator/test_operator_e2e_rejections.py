"""Requests the API server refuses are not retried silently, and fields that cannot change on a
running job are refused by the CRD itself (CEL transition rules)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import condition, wait_job
from tests.support.operator_e2e import OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e

RESTRICTED = "pod-security.kubernetes.io/enforce"


def _events(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])


def _rejected(cluster: LocalCluster, ns: str, name: str, reason: str) -> dict[str, Any]:
    job = wait_job(
        cluster,
        ns,
        name,
        f"RequestRejected/{reason}",
        lambda j: condition(j, "RequestRejected").get("reason") == reason,
        timeout=120,
    )
    cond = condition(job, "RequestRejected")
    assert cond["status"] == "True"
    assert cond["observedGeneration"] == job["metadata"]["generation"]
    events = [e for e in _events(cluster, ns, name) if e["reason"] == reason]
    assert events and events[0]["message"] == cond["message"], events
    return cond


def test_a_pod_that_podsecurity_forbids_is_a_condition_and_an_event_with_the_servers_message(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    cluster.kubectl("label", "ns", ns, f"{RESTRICTED}=restricted", "--overwrite")
    try:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job_manifest("psa")))
        cond = _rejected(cluster, ns, "psa", "Forbidden")
        assert "violates PodSecurity" in cond["message"], cond
        assert cond["message"].startswith("create Pod "), cond
    finally:
        cluster.kubectl("label", "ns", ns, f"{RESTRICTED}-")
    wait_job(
        cluster,
        ns,
        "psa",
        "accepted again",
        lambda j: condition(j, "RequestRejected").get("status") == "False",
        timeout=150,
    )


def test_a_pod_the_api_finds_invalid_is_a_condition_and_an_event(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    manifest = job_manifest("badport")
    manifest["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 99999}]
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    cond = _rejected(cluster, ns, "badport", "Invalid")
    assert "containerPort" in cond["message"], cond


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ({"etcd": {"keyPrefix": "/moved"}}, "spec.etcd is immutable"),
        ({"device": "gpu"}, "spec.device is immutable"),
        ({"nprocPerNode": 2}, "spec.nprocPerNode is immutable"),
    ],
)
def test_fields_a_running_job_cannot_change_are_refused(
    cluster: LocalCluster, ns: str, operator: OperatorProcess, patch: dict[str, Any], says: str
) -> None:
    name = "frozen-" + next(iter(patch)).lower()
    manifest = job_manifest(name, runPolicy={"suspend": True})
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    done = cluster.kubectl(
        "patch", "ej", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": patch}),
        check=False,
    )  # fmt: skip
    assert done.returncode != 0 and says in done.stderr, done.stderr
    # What may change still does: the scale subresource.
    cluster.kubectl("scale", f"ej/{name}", "-n", ns, "--replicas=3")
