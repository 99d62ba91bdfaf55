"""A job's managed etcd with mutual TLS on the real cluster: the job trains over TLS, the
operator's probe presents the job's client certificate, the certificates live in a Secret the job
owns and survive an etcd recreation unchanged, and pods without that certificate (in another
namespace, or in the job's namespace but not of the job) can neither read nor write the etcd.
The job's NetworkPolicies exist and are owned by it (the node emulator enforces none)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import on_virtual_nodes
from elasticjob_localcluster.versions import ETCD_IMAGE

from tests.support.jobs import condition, get_job, phase, st, wait_job
from tests.support.operator_e2e import POOL, OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e


def _intruder(name: str, ns: str, endpoint: str, *command: str) -> dict[str, Any]:
    """A pod that tries etcdctl against the job's etcd without the job's client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": on_virtual_nodes(
            {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "etcdctl",
                        "image": ETCD_IMAGE,
                        "command": [
                            "etcdctl",
                            f"--endpoints={endpoint}",
                            "--dial-timeout=5s",
                            "--command-timeout=5s",
                            *command,
                        ],
                    }
                ],
            }
        ),
    }


def _run_intruder(cluster: LocalCluster, pod: dict[str, Any]) -> tuple[str, str]:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 120
    status = ""
    while time.monotonic() < deadline:
        status = cluster.kubectl(
            "get", "pod", name, "-n", ns, "-o", "jsonpath={.status.phase}"
        ).stdout
        if status in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    return status, cluster.pod_logs(ns, name)


def test_managed_etcd_speaks_mutual_tls_and_refuses_strangers(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    name = "tls"
    manifest = job_manifest(
        name, args=["--steps", "300", "--step-sleep", "0.2", "--checkpoint-every", "10"]
    )
    assert "etcd" not in manifest["spec"]  # the default: mutual TLS
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    job = wait_job(cluster, ns, name, "Running over TLS", lambda j: st(j).get("readyNodes") == 2)
    # The operator's own probe presents the client certificate: it sees etcd ready.
    job = wait_job(
        cluster, ns, name, "probed", lambda j: st(j).get("etcd", {}).get("readyGeneration") == 0
    )
    uid = job["metadata"]["uid"]
    secret = json.loads(
        cluster.kubectl("get", "secret", f"{name}-etcd-tls", "-n", ns, "-o", "json").stdout
    )
    assert secret["metadata"]["ownerReferences"][0]["uid"] == uid
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"}
    for policy in (f"{name}-etcd", f"{name}-workers"):
        got = json.loads(
            cluster.kubectl("get", "networkpolicy", policy, "-n", ns, "-o", "json").stdout
        )
        assert got["metadata"]["ownerReferences"][0]["uid"] == uid

    endpoint = f"https://{name}-etcd.{ns}.svc:2379"
    other_ns = POOL[-1]
    attempts = [
        # Another namespace, TLS but no client certificate.
        _intruder(
            "stranger", other_ns, endpoint, "--insecure-skip-tls-verify", "get", "/", "--prefix"
        ),
        # The job's namespace, not the job's pod: a write of the closed flag.
        _intruder(
            "neighbour", ns, endpoint, "--insecure-skip-tls-verify", "put", "/elasticjob/x", "y"
        ),
        # Plain HTTP is not served at all.
        _intruder("plain", ns, endpoint.replace("https", "http"), "get", "/", "--prefix"),
    ]
    for pod in attempts:
        status, logs = _run_intruder(cluster, pod)
        assert status == "Failed", (pod["metadata"]["name"], status, logs)
    # The managed etcd is lost and recreated: the same Secret serves the new generation.
    cluster.kubectl("delete", "pod", f"{name}-etcd-0", "-n", ns, "--grace-period=0", "--force")
    wait_job(
        cluster,
        ns,
        name,
        "recovered on generation 1",
        lambda j: (
            st(j).get("etcd", {}).get("seededGeneration") == 1
            and condition(j, "Stalled").get("status") == "False"
        ),
        timeout=240,
    )
    again = json.loads(
        cluster.kubectl("get", "secret", f"{name}-etcd-tls", "-n", ns, "-o", "json").stdout
    )
    assert again["metadata"]["uid"] == secret["metadata"]["uid"]
    assert again["data"] == secret["data"]  # never regenerated while the job lives
    job = wait_job(cluster, ns, name, "Succeeded", lambda j: phase(j) == "Succeeded", timeout=420)
    assert get_job(cluster, ns, name)["status"]["restarts"]["byReason"].get("etcd-recovered") == 1
