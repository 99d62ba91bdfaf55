"""Progress and hangs on a real cluster: status.progress and its columns, then a hung rank.

A worker process is stopped (SIGSTOP: it does nothing at all, as a rank stuck in user code would)
while its peer waits in the next all-reduce. The agents restart the group for want of progress
(``spec.progressTimeoutSeconds``); the job shows ``Stalled=True`` reason ``NoProgress``, a Warning
Event, the ``hang`` restart and the stall metric, recovers when the new group steps, and finishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, condition, get_job, phase, st, wait_job
from tests.support.operator_e2e import OperatorProcess, agent_status, job_manifest

pytestmark = pytest.mark.e2e


def _events(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    return list(json.loads(out)["items"])


def test_a_stopped_rank_is_no_progress_restarted_as_hang_and_the_job_finishes(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    name = "hang"
    manifest = job_manifest(
        name,
        args=["--steps", "400", "--step-sleep", "0.1", "--checkpoint-every", "20"],
        progressTimeoutSeconds=10,
    )
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    # Steps reach the status (sampled every 10 s of the agents' time here), with a rate.
    job = wait_job(
        cluster,
        ns,
        name,
        "a sampled rate",
        lambda j: (st(j).get("progress") or {}).get("stepsPerSecond") is not None,
        timeout=240,
    )
    progress = st(job)["progress"]
    assert progress["step"] >= 1 and progress["stepsPerSecond"] > 0, progress
    table = cluster.kubectl("get", "ej", name, "-n", ns).stdout
    header = table.splitlines()[0].split()
    assert "STEP" in header and "STEPS/S" in header, table

    def stepping() -> dict[str, Any] | None:
        report = agent_status(cluster, ns, f"{name}-worker-0-0")
        if report is None or report.get("lastStep") is None or not report.get("workers"):
            return None
        return report

    report = cluster.wait_for("worker-0-0's report of a step", stepping, timeout=60)
    victim = int(report["workers"][0]["pid"])  # pods are host processes here
    os.kill(victim, signal.SIGSTOP)
    try:
        # The stall may be short (it ends when the restarted group reports a step, and warm
        # workers resume quickly): the hang count is what is waited for, the condition and the
        # Event are checked in whichever state they are by then.
        job = wait_job(
            cluster,
            ns,
            name,
            "a hang restart",
            lambda j: by_reason(j).get("hang", 0) >= 1,
            timeout=180,
        )
        cond = condition(job, "Stalled")
        if cond.get("status") == "True":
            assert cond.get("reason") == "NoProgress", cond
            assert "progressTimeoutSeconds (10 s)" in cond["message"], cond
        else:
            assert cond == {} or "NoProgress" in cond.get("message", ""), cond
        job = wait_job(
            cluster, ns, name, "Succeeded", lambda j: phase(j) == "Succeeded", timeout=400
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    assert by_reason(job).get("hang") == 1, by_reason(job)
    assert by_reason(job).get("failure", 0) == 0, by_reason(job)
    cond = condition(job, "Stalled")
    assert (cond.get("status"), cond.get("reason")) == ("False", "Recovered"), cond
    assert "NoProgress" in cond["message"], cond
    events = _events(cluster, ns, name)
    no_progress = [e for e in events if e["reason"] == "NoProgress"]
    assert no_progress and no_progress[0]["type"] == "Warning", events
    assert "progressTimeoutSeconds (10 s)" in no_progress[0]["message"], no_progress
    restarted = [e["message"] for e in events if e["reason"] == "Restarted"]
    assert any("(hang)" in m and "no training step" in m for m in restarted), restarted
    # The root cause is the silence, not a peer's lost connection.
    assert "no training step" in (st(job).get("lastFailure") or {}).get("message", ""), st(job)
    assert any(e["reason"] == "Recovered" for e in events), [e["reason"] for e in events]
    metrics = operator.metrics()
    labels = f'job="{name}",namespace="{ns}"'
    assert f'elasticjob_job_stalls_total{{{labels},reason="NoProgress"}} 1.0' in metrics
    assert f'elasticjob_job_restarts{{{labels},reason="hang"}} 1.0' in metrics
    # Sampled again after the restart (whatever step it resumed from).
    last = get_job(cluster, ns, name)["status"]["progress"]
    assert last["sampledAt"] > progress["sampledAt"], (progress, last)
