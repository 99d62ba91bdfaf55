"""Hostile health reports on the real cluster: worker pods of a job serve an endless body, NaN,
deep nesting and wrong types on the agents' port. The operator lists each in the job's
``status.invalidReports`` with the reason, its memory stays bounded, and another job trains to
``Succeeded`` meanwhile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.placement import on_virtual_nodes

from tests.support.jobs import get_job, phase, wait_job
from tests.support.operator_e2e import OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e

SERVER = r"""
import socket, sys, threading
kind = sys.argv[1]
good = (b'{"schemaVersion": 1, "runId": "r", "node": "n", "state": "Running", "round": 1, '
        b'"restarts": {"total": 0, "byReason": {}}, "maxRestarts": 3, '
        b'"etcd": {"reachable": true}, "updatedAt": 1.0}')
bodies = {
    "nan": good.replace(b'"round": 1', b'"round": NaN'),
    "nested": b'{"a":' * 5000 + b"1" + b"}" * 5000,
    "types": good.replace(b'"round": 1', b'"round": "one"'),
}
def serve(conn):
    try:
        conn.recv(65536)
        if kind == "endless":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            while True:
                conn.sendall(b"[" * 65536)
        body = bodies[kind]
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        conn.close()
server = socket.create_server(("0.0.0.0", 29401))
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
KINDS = {"endless": "larger than", "nan": "NaN", "nested": "deeper", "types": "round"}


def _hostile_pod(job: dict[str, Any], index: int, kind: str) -> dict[str, Any]:
    """A worker pod of ``job`` (a newer attempt, so the operator adopts it) serving ``kind``."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-{index}-9",
            "labels": {
                "elasticjob.dev/job-name": name,
                "elasticjob.dev/role": "worker",
                "elasticjob.dev/replica-index": str(index),
                "elasticjob.dev/attempt": "9",
            },
            "ownerReferences": [
                {
                    "apiVersion": "elasticjob.dev/v1alpha1",
                    "kind": "ElasticJob",
                    "name": name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": on_virtual_nodes(
            {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "hostile",
                        "image": "ghcr.io/elasticjob/training-example:0.1.0",
                        "command": ["python", "-c", SERVER, kind],
                    }
                ],
            }
        ),
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_hostile_reports_are_flagged_and_another_job_trains_on(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    assert operator.proc is not None
    before = _rss_mib(operator.proc.pid)
    victim = job_manifest("victim", replicas=4, minNodes=1, maxNodes=4, stallTimeoutSeconds=3600)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(victim))
    job = wait_job(cluster, ns, "victim", "created", lambda j: bool(j.get("status")))
    pods = [_hostile_pod(job, i, kind) for i, kind in enumerate(KINDS)]
    cluster.kubectl(
        "apply", "-n", ns, "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}),
    )  # fmt: skip
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job_manifest("bystander")))

    def flagged(j: dict[str, Any]) -> bool:
        found = {r["pod"]: r["reason"] for r in (j.get("status") or {}).get("invalidReports") or []}
        return all(
            says in found.get(f"victim-worker-{i}-9", "") for i, says in enumerate(KINDS.values())
        )

    job = wait_job(cluster, ns, "victim", "every hostile pod flagged", flagged, timeout=180)
    wait_job(cluster, ns, "bystander", "Succeeded", lambda j: phase(j) == "Succeeded", timeout=300)
    assert flagged(get_job(cluster, ns, "victim"))  # still listed, the loop still runs
    grown = _rss_mib(operator.proc.pid) - before
    # The endless pod alone would have sent gigabytes by now; the operator reads 32 KiB a poll.
    assert grown < 100, f"operator RSS grew by {grown:.0f} MiB"
    events = json.loads(
        cluster.kubectl(
            "get", "events", "-n", ns, "--field-selector", "involvedObject.name=victim",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    assert any(e["reason"] == "InvalidHealthReport" for e in events)
