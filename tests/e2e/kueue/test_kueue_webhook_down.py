"""Kueue stopped: its pod webhooks fail closed, the API server refuses the job's pods, and the job
says so in status and Events; it recovers by itself when Kueue is back. (Runs last in this
directory: it stops the session's Kueue and starts it again.)"""

from __future__ import annotations

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import phase, st, wait_job
from tests.support.kueue import events, gpu_job

pytestmark = pytest.mark.e2e


def test_refused_pod_creation_is_reported(cluster: LocalCluster, kq: str) -> None:
    cluster.stop_kueue()
    try:
        cluster.apply(gpu_job("blocked", replicas=2, min_nodes=2), kq)
        job = wait_job(
            cluster, kq, "blocked", "reporting the refusal",
            lambda j: st(j).get("reason") == "PodCreationRefused", timeout=120,
        )  # fmt: skip
        assert "mpod.kb.io" in st(job)["message"] and "Kueue" in st(job)["message"]
        warnings = [
            e for e in events(cluster, kq, "blocked") if e["reason"] == "PodCreationRefused"
        ]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert cluster.get_json("pods", "-n", kq)["items"] == []
    finally:
        cluster.start_kueue()
    wait_job(
        cluster, kq, "blocked", "training once Kueue is back",
        lambda j: phase(j) == "Running" and st(j).get("worldSize") == 2, timeout=300,
    )  # fmt: skip
