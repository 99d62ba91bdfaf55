"""The operator of the end-to-end suites on virtual nodes: ``OperatorProcess`` (a host process
with the chart's ServiceAccount as its identity), its namespaces, a small CPU job of
examples/train.py, an agent's health report and the evidence a failed assertion needs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from elasticjob_agent.ports import free_port
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import on_virtual_nodes

from tests.support.jobs import pods
from tests.support.paths import REPO

RELEASE = "ejop"
SYSTEM_NS = "ejop-system"
SERVICE_ACCOUNT = f"{RELEASE}-elasticjob-operator"
# What a 403 from RBAC looks like in the operator's log: the API server's message, kopf's error
# class or the status line. Not a bare "403": object uids and log timestamps contain it (a uid
# ending in ...35140327b102 once failed a whole suite).
RBAC_DENIAL = re.compile(
    r'forbidden: User "[^"]*" cannot |APIForbiddenError|\b403 Forbidden\b|["\']code["\']: 403\b'
)
POOL = [f"ejop-{i}" for i in range(1, 25)]
BAD_NODE_CONDITION = "ElasticJobTestUnhealthy"
"""The node condition type the test operator treats as bad (``ELASTICJOB_BAD_NODE_CONDITIONS``):
no real node component sets it, so only the test that sets it moves pods."""
"""Namespaces the operator watches; each test takes the next one."""


class OperatorProcess:
    """``elasticjob-operator`` as a child process, restartable and killable like a pod."""

    def __init__(
        self,
        kubeconfig: Path,
        namespaces: list[str],
        log_dir: Path,
        lease: tuple[str, str] = (SYSTEM_NS, SERVICE_ACCOUNT),
    ) -> None:
        """``lease`` is the (namespace, name) of the leader-election Lease: the one the chart's
        RBAC lets this release's ServiceAccount use."""
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.log_dir = log_dir
        self.lease = lease
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.extra_env: dict[str, str] = {}
        """Settings of the next ``start`` beyond the test defaults (a test that needs one)."""

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "ELASTICJOB_METRICS_PORT": str(self.metrics_port),
            "ELASTICJOB_HEALTH_PORT": str(self.health_port),
            "PYTHONUNBUFFERED": "1",
            # The chart's Lease (its Role allows this name only), with short timings for tests.
            "ELASTICJOB_LEASE_NAMESPACE": self.lease[0],
            "ELASTICJOB_LEASE_NAME": self.lease[1],
            "ELASTICJOB_LEASE_DURATION_SECONDS": "6",
            "ELASTICJOB_LEASE_RENEW_DEADLINE_SECONDS": "4",
            "ELASTICJOB_LEASE_RETRY_PERIOD_SECONDS": "1",
            # The progress test's 40 s of steps see two samples.
            "ELASTICJOB_PROGRESS_SAMPLE_SECONDS": "10",
            "ELASTICJOB_BAD_NODE_CONDITIONS": BAD_NODE_CONDITION,
            **self.extra_env,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        args = [str(REPO / ".venv" / "bin" / "elasticjob-operator")]
        args += [f"--namespace={ns}" for ns in self.namespaces]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"operator exited {self.proc.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
                ) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"operator not healthy after {timeout} s:\n{self.logs()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            return str(r.read().decode())

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("operator-*.log"))
        )

    def forbidden(self) -> list[str]:
        return [line for line in self.logs().splitlines() if RBAC_DENIAL.search(line)]


def apply_chart_rbac(cluster: LocalCluster, *values: str) -> None:
    """The chart's RBAC and ServiceAccount for ``RELEASE`` in ``SYSTEM_NS``, watching ``POOL``,
    rendered with ``values`` (``--set`` pairs, e.g. ``badNodes.taint=true``) and applied."""
    sets = ["--set", "watchNamespaces={" + ",".join(POOL) + "}"]
    for value in values:
        sets += ["--set", value]
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "charts" / "elasticjob-operator"),
        "--namespace", SYSTEM_NS, *sets,
        "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml",
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=rendered)


def sa_kubeconfig(
    cluster: LocalCluster, path: Path, namespace: str = SYSTEM_NS, account: str = SERVICE_ACCOUNT
) -> Path:
    """A kubeconfig at ``path`` whose identity is the ServiceAccount ``namespace/account`` (a
    token of 6 h), on the cluster's API server: the operator then acts with the chart's RBAC."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, "--duration=6h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A small CPU job of examples/train.py on the virtual nodes (the emulator runs the
    command on the host, from the repository); ``spec`` entries override the defaults."""
    args = spec.pop("args", ["--steps", "40", "--step-sleep", "0.1"])
    body: dict[str, Any] = {
        "replicas": 2,
        "minNodes": 1,
        "maxNodes": 3,
        "device": "cpu",
        "nprocPerNode": 1,
        "maxRestarts": 3,
        "stallTimeoutSeconds": 120,
        "rendezvous": {"lastCallTimeoutSeconds": 2, "heartbeatSeconds": 3},
        "template": {
            "spec": on_virtual_nodes({
                "containers": [
                    {
                        "name": "trainer",
                        "image": "ghcr.io/elasticjob/training-example:0.1.0",
                        "command": ["python", "examples/train.py"],
                        "args": [*args, "--checkpoint-dir", "/ckpt"],
                        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "ckpt",
                        "hostPath": {
                            "path": f"/tmp/elasticjob-e2e-ckpt/{name}-{time.time_ns()}",
                            "type": "DirectoryOrCreate",
                        },
                    }
                ],
            })
        },
    }  # fmt: skip
    body.update(spec)
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name},
        "spec": body,
    }


def agent_status(cluster: LocalCluster, ns: str, pod: str) -> dict[str, Any] | None:
    try:
        ip = cluster.pod_ip(ns, pod)
        with urllib.request.urlopen(f"http://{ip}:29401/status", timeout=2) as r:
            return dict(json.loads(r.read()))
    except (OSError, ValueError, RuntimeError):
        return None


def evidence(cluster: LocalCluster, ns: str, name: str, operator: OperatorProcess) -> str:
    """What a failed assertion on job ``ns/name`` needs to find its cause: the status, the
    namespace's Events, the managed etcd pods' status, the operator's lines about the job and
    the end of every agent's log."""
    job = cluster.kubectl("get", "ej", name, "-n", ns, "-o", "json", check=False).stdout
    status = json.dumps((json.loads(job) if job.strip() else {}).get("status"), indent=1)
    events = cluster.kubectl(
        "get", "events", "-n", ns, "--sort-by=.lastTimestamp",
        "-o", "custom-columns=AT:.lastTimestamp,OBJECT:.involvedObject.name,REASON:.reason,"
        "MESSAGE:.message", check=False,
    ).stdout  # fmt: skip
    etcd = "\n".join(
        f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
        + json.dumps({k: p["status"].get(k) for k in ("phase", "conditions", "containerStatuses")})
        for p in pods(cluster, ns, "etcd")
    )
    about = [line for line in operator.logs().splitlines() if name in line][-200:]
    agents = "".join(
        f"\n--- {p['metadata']['name']} (last 60 lines):\n"
        + "\n".join(cluster.pod_logs(ns, p["metadata"]["name"]).splitlines()[-60:])
        for p in pods(cluster, ns)
    )
    return (
        f"\n=== status of {ns}/{name}:\n{status}\n=== events:\n{events}\n=== etcd pods:\n{etcd}"
        f"\n=== operator ({len(about)} lines about {name}):\n"
        + "\n".join(about)
        + f"\n=== agents:{agents}"
    )
