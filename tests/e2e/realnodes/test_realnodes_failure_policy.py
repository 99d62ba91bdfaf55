"""The failure policy on real nodes with the chart installed.

A trainer that exits 3 under a ``FailJob`` rule on exit code 3 fails the job at its first
failure, with no failure restart spent (``maxRestarts: 5`` left whole) and the ``FailurePolicy``
condition naming the rule; a trainer that exits 4 on its first two runs under an ``Ignore`` rule
finishes with ``maxRestarts: 0`` and no failure counted.
"""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import by_reason, condition, phase
from tests.support.realnodes import apply_job, diagnostics, expect_counts, job_manifest, wait_job

pytestmark = pytest.mark.e2e

# Exit with CODE on the first RUNS runs of the group (TORCHELASTIC_RESTART_COUNT), else succeed.
# A str.format template: the f-string's own braces are doubled.
EXIT_CODE_RUNS = (
    "import os, sys; run = int(os.environ['TORCHELASTIC_RESTART_COUNT']); "
    "print(f'run {{run}}: rank {{os.environ[\"RANK\"]}}', flush=True); "
    "sys.exit({code} if run < {runs} else 0)"
)


def _exiting(name: str, code: int, runs: int, **spec: Any) -> dict[str, Any]:
    manifest = job_manifest(name, nproc=1)
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    container["command"] = ["python", "-c", EXIT_CODE_RUNS.format(code=code, runs=runs)]
    container.pop("args", None)
    manifest["spec"].update(spec)
    return manifest


def test_fail_job_on_exit_code_3_fails_with_no_restart_spent(
    cluster: LocalCluster, work: str
) -> None:
    rules = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]
    apply_job(
        cluster, work, _exiting("failfast", 3, 1000, maxRestarts=5, failurePolicy={"rules": rules})
    )
    job = wait_job(cluster, work, "failfast", "Failed", lambda j: phase(j) == "Failed", timeout=300)
    status = job["status"]
    assert status["reason"] == "FailurePolicy", diagnostics(cluster, work, "failfast")
    assert status["restarts"]["failures"] == 0, status["restarts"]
    expect_counts(cluster, work, job, {})
    failed = condition(job, "Failed")
    assert failed["reason"] == "FailurePolicy" and "rules[0] (FailJob)" in failed["message"]
    assert "exited with code 3" in failed["message"], failed
    policy = condition(job, "FailurePolicy")
    assert policy["status"] == "True" and policy["reason"] == "FailJob", policy
    assert "rules[0]" in policy["message"] and "exited with code 3" in policy["message"]
    assert status["failurePolicy"]["rule"] == 0 and status["failurePolicy"]["action"] == "FailJob"
    events = cluster.kubectl(
        "get", "events", "-n", work, "--field-selector", "involvedObject.name=failfast",
        "-o", "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}",
    ).stdout  # fmt: skip
    assert "FailurePolicy: failurePolicy.rules[0] (FailJob)" in events, events


def test_ignore_on_exit_code_4_succeeds_with_no_failure_counted(
    cluster: LocalCluster, work: str
) -> None:
    rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [4]}}]
    apply_job(cluster, work, _exiting("flaky", 4, 2, maxRestarts=0, failurePolicy={"rules": rules}))
    job = wait_job(
        cluster,
        work,
        "flaky",
        "Succeeded or Failed",
        lambda j: phase(j) in ("Succeeded", "Failed"),
        timeout=420,
    )
    assert phase(job) == "Succeeded", diagnostics(cluster, work, "flaky")
    assert job["status"]["restarts"]["failures"] == 0, job["status"]["restarts"]
    expect_counts(cluster, work, job, {**{k: 0 for k in by_reason(job)}, "ignored": 2})
    policy = condition(job, "FailurePolicy")
    assert policy["reason"] == "Ignore" and "rules[0]" in policy["message"], policy
