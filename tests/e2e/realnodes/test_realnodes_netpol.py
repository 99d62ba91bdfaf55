"""A job's NetworkPolicies enforced on real nodes (kube-router's firewall on each node, see
docs/local-cluster.md), and its managed etcd's mutual TLS seen from a pod that has a network path.

- The cut: pods outside the job (one in another namespace on each real node, one in the job's
  namespace) cannot open a connection to the job's etcd client port nor to the agents' health
  port, while the job's workers and the operator (in-cluster, from the chart) can, and the job
  trains to Succeeded. On a cluster without the enforcer
  (``ELASTICJOB_E2E_NETWORK_POLICIES=0``) this test fails: every port is open to every pod.
- TLS behind the policy: a pod the policy lets in (it carries the operator's labels in the
  operator's namespace) but without the job's client certificate is refused by the etcd; the same
  pod presenting the job's client certificate is served, so the certificate alone decides.
"""

from __future__ import annotations

import base64
import functools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.testing import TRAINING_IMAGE
from elasticjob_operator.core.names import ETCD_CLIENT_PORT, etcd_tls_secret_name

from tests.support.jobs import phase, pods, ready_nodes
from tests.support.realnodes import (
    RESTRICTED,
    RESTRICTED_CONTAINER,
    Release,
    apply_job,
    diagnostics,
    job_manifest,
    wait_job,
)

pytestmark = pytest.mark.e2e


#: Tries a TCP connection to each ``host:port`` argument (3 s each); prints {target: outcome}
#: with outcome ``open``, ``timeout`` (dropped) or the error (e.g. refused).
CONNECT = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        out[target] = "open"
    except socket.timeout:
        out[target] = "timeout"
    except OSError as err:
        out[target] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
"""

#: An etcd v3 range request over HTTPS (etcd's JSON gateway) to ``argv[1]``; ``argv[2]`` is a
#: JSON object of PEM texts: ``ca`` (trusted), and ``cert``/``key`` when the client presents
#: one. Prints {"status": <HTTP status>} or {"error": <exception type>, "message": ...}.
ETCD_RANGE = """
import base64, http.client, json, os, ssl, sys, tempfile
host, port = sys.argv[1].rsplit(":", 1)
pem = json.loads(sys.argv[2])
tmp = tempfile.mkdtemp()
def path(name):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(pem[name])
    return p
ctx = ssl.create_default_context(cafile=path("ca"))
ctx.check_hostname = False
if "cert" in pem:
    ctx.load_cert_chain(path("cert"), path("key"))
body = json.dumps({"key": base64.b64encode(b"rdzv").decode(), "keys_only": True})
try:
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    conn.request("POST", "/v3/kv/range", body, {"Content-Type": "application/json"})
    print(json.dumps({"status": conn.getresponse().status}))
except (OSError, ssl.SSLError) as err:
    print(json.dumps({"error": type(err).__name__, "message": str(err)}))
"""


#: How a TLS server's refusal of the handshake surfaces in Python's ssl module.
TLS_REFUSALS = {"SSLError", "SSLEOFError", "SSLZeroReturnError", "ConnectionResetError"}


def _prober(name: str, ns: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    """An idle pod of the training image (Python) on ``node``, fit for a restricted namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": TRAINING_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", "import time; time.sleep(3600)"],
                    "securityContext": RESTRICTED_CONTAINER,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def _running(cluster: LocalCluster, ns: str, name: str) -> bool:
    return bool(cluster.get_json("pod", name, "-n", ns).get("status", {}).get("phase") == "Running")


def _start(cluster: LocalCluster, pods_: list[dict[str, Any]]) -> None:
    for pod in pods_:
        cluster.apply(pod)
    for pod in pods_:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        running = functools.partial(_running, cluster, ns, name)
        cluster.wait_for(f"pod {ns}/{name} Running", running, timeout=180, interval=1)


def _connect(
    cluster: LocalCluster, ns: str, pod: str, targets: list[str], container: str | None = None
) -> dict[str, str]:
    done = cluster.exec_in_pod(
        ns, pod, ["python", "-c", CONNECT, *targets], container=container, timeout=120, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _ip(pod: dict[str, Any]) -> str:
    return str(pod["status"]["podIP"])


@pytest.fixture
def foreign_ns(cluster: LocalCluster) -> Iterator[str]:
    """A namespace with nothing of the job in it (restricted, like the job's)."""
    name = f"ejrforeign-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, RESTRICTED)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _running_job(cluster: LocalCluster, ns: str, name: str, steps: int) -> dict[str, Any]:
    apply_job(cluster, ns, job_manifest(name, steps=steps))
    return wait_job(
        cluster, ns, name, "Running with 2 ready nodes",
        lambda j: phase(j) == "Running" and ready_nodes(j) == 2, timeout=420,
    )  # fmt: skip


def _operator_pod(cluster: LocalCluster, release: Release) -> str:
    items = cluster.get_json(
        "pods", "-n", release.system, "-l", "app.kubernetes.io/name=elasticjob-operator"
    )["items"]
    assert len(items) == 1, [p["metadata"]["name"] for p in items]
    return str(items[0]["metadata"]["name"])


def test_network_policies_cut_pods_outside_the_job_off_its_etcd_and_health_ports(
    cluster: LocalCluster, release: Release, work: str, foreign_ns: str
) -> None:
    enforced = cluster.network_policies
    nodes = sorted(cluster.real_nodes)
    # The probers start first: the job then runs only as long as the probes need.
    strangers = [
        _prober(f"stranger-{node}", foreign_ns, node, {"app": "stranger"}) for node in nodes
    ] + [_prober("neighbour", work, nodes[0], {"app": "neighbour"})]
    _start(cluster, strangers)
    name = "cut"
    _running_job(cluster, work, name, steps=300)
    workers = pods(cluster, work)
    (etcd,) = pods(cluster, work, role="etcd")
    etcd_client = f"{_ip(etcd)}:{ETCD_CLIENT_PORT}"
    health = [f"{_ip(w)}:{DEFAULT_HEALTH_PORT}" for w in workers]
    targets = [etcd_client, *health]

    # Outside the job: nothing opens, from either node and from the job's own namespace.
    seen = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": _connect(
            cluster, p["metadata"]["namespace"], p["metadata"]["name"], targets
        )
        for p in strangers
    }
    opened = {pod: [t for t, r in out.items() if r == "open"] for pod, out in seen.items()}
    assert not any(opened.values()), (
        f"pods outside the job reached its ports (enforcer on the real nodes: {enforced}): "
        f"{opened}; every outcome: {seen}"
    )
    # The job's workers reach their etcd and each other's health port; the operator (a pod of
    # the chart) reaches the etcd and every agent's health port.
    for worker in workers:
        out = _connect(cluster, work, worker["metadata"]["name"], targets, container="trainer")
        assert set(out.values()) == {"open"}, (worker["metadata"]["name"], out)
    operator = _connect(cluster, release.system, _operator_pod(cluster, release), targets)
    assert set(operator.values()) == {"open"}, operator

    # The policies let the job's own traffic through to the end (rendezvous, collectives, the
    # operator's probes). Restarts are not asserted: on this loaded machine the etcd pod itself
    # sometimes stalls long enough for a lease to lapse ("request timed out", a `failure`
    # restart), with or without policies.
    job = wait_job(
        cluster, work, name, "Succeeded", lambda j: phase(j) in ("Succeeded", "Failed"),
        timeout=600,
    )  # fmt: skip
    assert phase(job) == "Succeeded", f"{job.get('status')}\n{diagnostics(cluster, work, name)}"


def test_a_pod_the_policy_lets_in_is_refused_by_the_tls_etcd_without_the_job_certificate(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    nodes = sorted(cluster.real_nodes)
    # The operator pod's labels in the operator's namespace: the etcd's policy lets this pod in.
    # (Without pod-template-hash: the chart's ReplicaSet does not adopt it.)
    operator = cluster.get_json("pod", _operator_pod(cluster, release), "-n", release.system)
    labels = dict(operator["metadata"]["labels"])
    labels.pop("pod-template-hash", None)
    impostor = _prober("impostor", release.system, nodes[-1], labels)
    _start(cluster, [impostor])
    name = "tlsgate"
    _running_job(cluster, work, name, steps=300)
    (etcd,) = pods(cluster, work, role="etcd")
    target = f"{_ip(etcd)}:{ETCD_CLIENT_PORT}"
    reached = _connect(cluster, release.system, "impostor", [target])
    assert reached == {target: "open"}, f"the policy should let this pod in: {reached}"

    secret = cluster.get_json("secret", etcd_tls_secret_name(name), "-n", work)["data"]
    pem = {k: base64.b64decode(secret[v]).decode() for k, v in
           (("ca", "ca.crt"), ("cert", "client.crt"), ("key", "client.key"))}  # fmt: skip

    def etcd_range(presented: dict[str, str]) -> dict[str, Any]:
        done = cluster.exec_in_pod(
            release.system, "impostor", ["python", "-c", ETCD_RANGE, target, json.dumps(presented)],
            timeout=120, check=True,
        )  # fmt: skip
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    # Trusting the job's CA but presenting no certificate: etcd ends the TLS session (an alert
    # or a bare close, depending on when the client reads), before any HTTP answer.
    without = etcd_range({"ca": pem["ca"]})
    assert without.get("error") in TLS_REFUSALS, without
    # The same pod and path with the job's client certificate: served.
    assert etcd_range(pem) == {"status": 200}
    # The job trains on.
    wait_job(cluster, work, name, "still Running", lambda j: phase(j) == "Running")
    cluster.kubectl("delete", "pod", "impostor", "-n", release.system, "--wait=false")
