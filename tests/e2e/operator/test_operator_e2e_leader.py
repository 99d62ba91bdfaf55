"""Two operator processes at once against the real API server: exactly one acts (the Lease
holder), and through a chaos sequence (a killed worker, a SIGKILLed leader, a deleted pod, a
leader that hands over on SIGTERM) no restart count ever decreases and no replica index ever has
two live pods."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, get_job, phase, st, wait_job
from tests.support.operator_e2e import OperatorProcess, agent_status, job_manifest

pytestmark = pytest.mark.e2e

ACQUIRED = "acquired by"
STANDING_BY = "standing by"


class Watcher(threading.Thread):
    """Samples the job's restart counts and live pods until stopped; records every violation."""

    def __init__(self, cluster: LocalCluster, ns: str, name: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.ns, self.name = cluster, ns, name
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.samples = 0

    def run(self) -> None:
        highest: dict[str, int] = {}
        while not self.stop.is_set():
            try:
                counts = by_reason(get_job(self.cluster, self.ns, self.name))
                out = self.cluster.kubectl(
                    "get", "pods", "-n", self.ns, "-l", "elasticjob.dev/role=worker", "-o", "json"
                ).stdout
            except Exception:  # the API server is the one thing not under test here
                continue
            for reason, value in counts.items():
                if value < highest.get(reason, 0):
                    self.violations.append(f"{reason} went {highest[reason]} -> {value}")
                highest[reason] = max(highest.get(reason, 0), value)
            for reason in highest:
                if reason not in counts:
                    self.violations.append(f"{reason} vanished from {counts}")
            live: dict[str, list[str]] = {}
            for pod in json.loads(out)["items"]:
                meta, status = pod["metadata"], pod.get("status") or {}
                if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
                    continue
                live.setdefault(meta["labels"].get("elasticjob.dev/replica-index", "?"), []).append(
                    meta["name"]
                )
            self.violations += [
                f"index {i} has live pods {p}" for i, p in live.items() if len(p) > 1
            ]
            self.samples += 1
            self.stop.wait(0.5)


def _acts(operator: OperatorProcess, ns: str) -> list[str]:
    """Log lines of ``operator`` about jobs in ``ns`` (kopf logs them only where it runs)."""
    return [
        line
        for line in operator.log_path.read_text(errors="replace").splitlines()
        if f"[{ns}/" in line
    ]


def _wait_log(cluster: LocalCluster, operator: OperatorProcess, text: str) -> None:
    cluster.wait_for(
        f"operator {operator.starts} logs {text!r}",
        lambda: text in operator.log_path.read_text(errors="replace"),
        timeout=60,
    )


@pytest.fixture
def second(
    cluster: LocalCluster, operator: OperatorProcess, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """A second operator on the same Lease, watching the same namespaces."""
    other = OperatorProcess(operator.kubeconfig, operator.namespaces, tmp_path, operator.lease)
    other.start()  # healthy while standing by
    yield other
    other.kill(signal.SIGTERM)
    if operator.proc is None or operator.proc.poll() is not None:
        operator.start()
    _wait_log(cluster, operator, ACQUIRED)  # later tests get their operator back as leader


def test_two_operators_one_acts_through_chaos_and_no_count_decreases(
    cluster: LocalCluster, ns: str, operator: OperatorProcess, second: OperatorProcess
) -> None:
    _wait_log(cluster, second, STANDING_BY)
    name = "leader"
    manifest = job_manifest(
        name, args=["--steps", "400", "--step-sleep", "0.2", "--checkpoint-every", "10"]
    )
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    wait_job(cluster, ns, name, "Running", lambda j: st(j).get("readyNodes") == 2)
    watcher = Watcher(cluster, ns, name)
    watcher.start()
    try:
        # 1. A worker process dies under the first leader: one failure restart.
        report = agent_status(cluster, ns, f"{name}-worker-0-0")
        assert report is not None
        os.kill(report["workers"][0]["pid"], signal.SIGKILL)  # pods are host processes here
        wait_job(cluster, ns, name, "failure counted", lambda j: by_reason(j).get("failure") == 1)
        _wait_log(cluster, operator, f"reconcile loop started for {ns}/{name}")
        assert not _acts(second, ns), "the standby acted"
        # 2. The leader dies without a word: the standby takes over once the Lease expires.
        operator.kill(signal.SIGKILL)
        _wait_log(cluster, second, ACQUIRED)
        _wait_log(cluster, second, f"reconcile loop started for {ns}/{name}")
        wait_job(cluster, ns, name, "Running again", lambda j: st(j).get("readyNodes") == 2)
        # 3. A worker pod is deleted under the new leader, while the old one restarts as standby.
        operator.start()
        _wait_log(cluster, operator, STANDING_BY)
        cluster.kubectl("delete", "pod", "-n", ns, f"{name}-worker-1-0", "--wait=false")
        wait_job(
            cluster, ns, name, "pod replaced", lambda j: st(j).get("attempts", {}).get("1") == 1
        )
        assert not _acts(operator, ns), "the restarted operator acted while standing by"
        # 4. The new leader stops cleanly: it hands the Lease back and the standby takes over.
        second.kill(signal.SIGTERM)
        assert "released" in second.log_path.read_text(errors="replace")
        _wait_log(cluster, operator, ACQUIRED)
        _wait_log(cluster, operator, f"reconcile loop started for {ns}/{name}")
        job = wait_job(
            cluster, ns, name, "Succeeded", lambda j: phase(j) == "Succeeded", timeout=420
        )
    finally:
        watcher.stop.set()
        watcher.join(timeout=30)
    assert watcher.samples > 10
    assert watcher.violations == [], watcher.violations[:10]
    counts = by_reason(job)
    assert counts.get("failure") == 1, counts
    assert counts.get("failure", 0) + counts.get("pod-failure", 0) <= 1
    # No pod name was ever created twice (each scheduled pod has its own uid).
    scheduled = _scheduled(cluster, ns)
    assert len({name for name, _ in scheduled}) == len(scheduled), scheduled


def _scheduled(cluster: LocalCluster, ns: str) -> set[tuple[str, str]]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", "reason=Scheduled", "-o", "json"
    ).stdout
    return {
        (e["involvedObject"]["name"], e["involvedObject"].get("uid", ""))
        for e in json.loads(out)["items"]
    }
