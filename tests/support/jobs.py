"""ElasticJob helpers of the end-to-end suites (virtual and real nodes alike): read a job, wait
for a state, pick fields out of its status, list its pods."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from elasticjob_localcluster import LocalCluster


def get_job(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.get_json("ej", name, "-n", ns))


def pods(cluster: LocalCluster, ns: str, role: str = "worker") -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", ns, "-l", f"elasticjob.dev/role={role}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])


def wait_job(
    cluster: LocalCluster,
    ns: str,
    name: str,
    what: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 180,
) -> dict[str, Any]:
    """Poll the job until ``predicate(job)``; fail with its last status, the namespace's pods
    and the end of each worker's log otherwise."""
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = get_job(cluster, ns, name)
        if predicate(job):
            return job
        time.sleep(1)
    listing = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
    logs = "".join(
        f"\n--- {p['metadata']['name']} (last 30 lines):\n"
        + "\n".join(cluster.pod_logs(ns, p["metadata"]["name"]).splitlines()[-30:])
        for p in pods(cluster, ns)
    )
    raise AssertionError(
        f"{ns}/{name}: not {what} after {timeout} s; status:\n"
        + json.dumps(job.get("status"), indent=1)
        + f"\npods:\n{listing}{logs}"
    )


def st(job: dict[str, Any]) -> dict[str, Any]:
    """The job's status, empty until the operator wrote one."""
    return dict(job.get("status") or {})


def phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase", ""))


def condition(job: dict[str, Any], type_: str) -> dict[str, Any]:
    """The job's condition of ``type_``, or ``{}``."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def by_reason(job: dict[str, Any]) -> dict[str, int]:
    return dict(((job.get("status") or {}).get("restarts") or {}).get("byReason") or {})


def ready_nodes(job: dict[str, Any]) -> int:
    return int((job.get("status") or {}).get("readyNodes") or 0)
