"""RBAC is on, and ServiceAccount tokens mounted into pods work against the API server."""

from __future__ import annotations

import json

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import log_contains, python_pod

pytestmark = pytest.mark.e2e

CALL_API = """
import json, os, ssl, sys, urllib.error, urllib.request
sa = '/var/run/secrets/kubernetes.io/serviceaccount/'
ns = open(sa + 'namespace').read()
ctx = ssl.create_default_context(cafile=sa + 'ca.crt')
host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']
base = 'https://%s:%s' % (host, port)
out = {}
for what in ('pods', 'secrets'):
    req = urllib.request.Request(base + '/api/v1/namespaces/%s/%s' % (ns, what),
                                 headers={'Authorization': 'Bearer ' + open(sa + 'token').read()})
    try:
        out[what] = urllib.request.urlopen(req, context=ctx, timeout=5).status
    except urllib.error.HTTPError as err:
        out[what] = err.code
print(json.dumps(out))
"""


def test_service_account_gets_only_what_its_role_grants(
    cluster: LocalCluster, namespace: str
) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl(
        "create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods", "-n", namespace
    )
    cluster.kubectl(
        "create", "rolebinding", "reader", "--role=pod-reader",
        f"--serviceaccount={namespace}:reader", "-n", namespace,
    )  # fmt: skip
    subject = f"system:serviceaccount:{namespace}:reader"
    assert (
        cluster.kubectl(
            "auth", "can-i", "list", "pods", "-n", namespace, f"--as={subject}"
        ).stdout.strip()
        == "yes"
    )
    denied = cluster.kubectl(
        "auth", "can-i", "list", "secrets", "-n", namespace, f"--as={subject}", check=False
    )
    assert denied.stdout.strip() == "no"

    pod = python_pod("caller", CALL_API, extra_spec={"serviceAccountName": "reader"})
    cluster.apply(pod, namespace)
    cluster.wait_pod_phase(namespace, "caller", "Succeeded", "Failed")
    assert log_contains(cluster, namespace, "caller", "{")
    answer = json.loads(cluster.pod_logs(namespace, "caller").strip().splitlines()[-1])
    assert answer == {"pods": 200, "secrets": 403}


IN_CLUSTER_CLIENT = """
import asyncio
from kubernetes_asyncio import client, config

async def main():
    config.load_incluster_config()
    async with client.ApiClient() as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod(open(
            '/var/run/secrets/kubernetes.io/serviceaccount/namespace').read())
        print('pods:', sorted(p.metadata.name for p in pods.items))

asyncio.run(main())
"""


def test_in_cluster_client_config_works_in_pods(cluster: LocalCluster, namespace: str) -> None:
    cluster.kubectl(
        "create", "rolebinding", "view", "--clusterrole=view",
        f"--serviceaccount={namespace}:default", "-n", namespace,
    )  # fmt: skip
    cluster.apply(python_pod("incluster", IN_CLUSTER_CLIENT), namespace)
    pod = cluster.wait_pod_phase(namespace, "incluster", "Succeeded", "Failed")
    logs = cluster.pod_logs(namespace, "incluster")
    assert pod["status"]["phase"] == "Succeeded", logs
    assert "pods: ['incluster']" in logs
