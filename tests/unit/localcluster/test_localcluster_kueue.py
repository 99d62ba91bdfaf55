"""The pure builders of the local cluster's Kueue: configuration and webhook registrations."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from elasticjob_localcluster.kueue import (
    MANAGED_NAMESPACE_LABEL,
    kueue_configuration,
    webhook_configurations,
)


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                     "path": path}},
        "failurePolicy": "Fail",
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": [resource]}],
        "sideEffects": "None",
    }  # fmt: skip


MANIFESTS: list[dict[str, Any]] = [
    {
        "kind": "MutatingWebhookConfiguration",
        "webhooks": [
            _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
            _hook("mdeployment.kb.io", "apps", "deployments", "/mutate-apps-v1-deployment"),
            _hook("mclusterqueue.kb.io", "kueue.x-k8s.io", "clusterqueues", "/mutate-cq"),
        ],
    },
    {
        "kind": "ValidatingWebhookConfiguration",
        "webhooks": [_hook("vpod.kb.io", "", "pods", "/validate--v1-pod")],
    },
]


def test_only_served_webhooks_are_registered_by_url_with_the_cluster_ca() -> None:
    result = webhook_configurations(MANIFESTS, base_url="https://10.0.0.1:9443", ca_pem=b"CA")
    mutating, validating = result
    assert [h["name"] for h in mutating["webhooks"]] == ["mpod.kb.io", "mclusterqueue.kb.io"]
    pod_hook, cq_hook = mutating["webhooks"]
    assert pod_hook["clientConfig"] == {
        "url": "https://10.0.0.1:9443/mutate--v1-pod",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    # Pods: only namespaces labelled for Kueue; Kueue's own objects: everywhere.
    assert pod_hook["namespaceSelector"] == {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
    assert "namespaceSelector" not in cq_hook
    assert [h["name"] for h in validating["webhooks"]] == ["vpod.kb.io"]
    assert MANIFESTS[0]["webhooks"][0]["clientConfig"].get("service")  # input unchanged


def test_configuration_enables_plain_pods_in_labelled_namespaces() -> None:
    config = kueue_configuration(
        webhook_host="10.0.0.1",
        webhook_port=9443,
        cert_dir=Path("/certs"),
        health_port=1,
        metrics_port=2,
    )
    assert config["integrations"] == {"frameworks": ["pod"]}
    assert config["managedJobsNamespaceSelector"] == {
        "matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}
    }
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "10.0.0.1", "port": 9443, "certDir": "/certs"}
    assert config["manageJobsWithoutQueueName"] is False
