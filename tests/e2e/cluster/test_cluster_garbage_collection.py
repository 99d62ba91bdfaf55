"""The controller-manager's garbage collector follows owner references to custom resources."""

from __future__ import annotations

import json

import pytest
from elasticjob_localcluster import LocalCluster

pytestmark = pytest.mark.e2e

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.gc.example.com"},
    "spec": {
        "group": "gc.example.com",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


def test_objects_owned_by_a_custom_resource_are_collected(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.apply(CRD)
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.gc.example.com", "--timeout=30s"
    )
    cluster.apply(
        {"apiVersion": "gc.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, namespace
    )
    owner = cluster.get_json("widget", "w", "-n", namespace)
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "owned",
            "ownerReferences": [
                {
                    "apiVersion": "gc.example.com/v1",
                    "kind": "Widget",
                    "name": "w",
                    "uid": owner["metadata"]["uid"],
                }
            ],
        },
        "data": {"k": "v"},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(child))
    cluster.kubectl("delete", "widget", "w", "-n", namespace)
    # The collector learns new resource types on its periodic rediscovery (about 30 s).
    cluster.wait_for(
        "the owned ConfigMap to be collected",
        lambda: (
            cluster.kubectl("get", "configmap", "owned", "-n", namespace, check=False).returncode
            != 0
        ),
        timeout=90,
        interval=1,
    )
