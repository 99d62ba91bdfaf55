"""A steady job on a real cluster: probed on the steady cadence, no status write but the
progress sample, and a cut etcd still found and remediated from there (``cadence.py``)."""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import condition, get_job, pods, st, wait_job
from tests.support.operator_e2e import OperatorProcess, job_manifest

pytestmark = pytest.mark.e2e

_STEADY_OK = re.compile(r'^elasticjob_steady_checks_total\{result="ok"\} (\S+)$', re.M)


def _steady_checks(operator: OperatorProcess) -> float:
    found = _STEADY_OK.search(operator.metrics())
    return float(found.group(1)) if found else 0.0


# What the progress sample writes: the step rate, and the goodput accounted with it.
_SAMPLE = frozenset({"progress", "goodput"})


def _without_progress(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in _SAMPLE}


def test_a_steady_job_writes_only_progress_and_a_cut_etcd_is_still_stalled(
    cluster: LocalCluster, ns: str, operator: OperatorProcess
) -> None:
    name = "steady"
    # The straggler watch writes an entry the moment a node's compute time per step stands out
    # (status.stragglers), a real change of the job's story; two trainers on one loaded host
    # differ by chance, so it is turned off here (factor 100), where only the cadence is tested.
    manifest = job_manifest(
        name,
        args=["--steps", "100000", "--step-sleep", "0.2"],
        health={"stragglers": {"factor": 100}},
    )
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    wait_job(cluster, ns, name, "Running", lambda j: st(j).get("readyNodes") == 2)
    checks = _steady_checks(operator)
    cluster.wait_for(
        "the job to be checked on the steady cadence (etcd only, no plan)",
        lambda: _steady_checks(operator) > checks + 2,
        timeout=120,
    )

    # 30 s of steady training: every status change the operator makes is the progress sample.
    seen = [st(get_job(cluster, ns, name))]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = st(get_job(cluster, ns, name))
        if status != seen[-1]:
            seen.append(status)
        time.sleep(1)
    moved = [
        (a, b) for a, b in itertools.pairwise(seen) if _without_progress(a) != _without_progress(b)
    ]
    # Only the fields that moved: a whole status twice does not fit a CI log's excerpt.
    changed = [
        {
            k: (a.get(k), b.get(k))
            for k in sorted((a.keys() | b.keys()) - _SAMPLE)
            if a.get(k) != b.get(k)
        }
        for a, b in moved
    ]
    assert not moved, "steady job's status changed beyond progress:\n" + json.dumps(
        changed, indent=1
    )

    etcd = next(
        p["metadata"]["name"]
        for p in pods(cluster, ns, "etcd")
        if not p["metadata"].get("deletionTimestamp")
    )
    began = time.monotonic()
    cluster.cut_pod(ns, etcd)
    wait_job(
        cluster,
        ns,
        name,
        "Stalled/EtcdUnavailable",
        lambda j: (
            condition(j, "Stalled").get("reason") == "EtcdUnavailable"
            or j["status"].get("etcd", {}).get("generation", 0) >= 1
        ),
        timeout=60,
    )
    print(f"steady job, etcd cut off: stalled or recreated after {time.monotonic() - began:.1f} s")
    wait_job(
        cluster,
        ns,
        name,
        "recovered on a new etcd",
        lambda j: (
            j["status"].get("etcd", {}).get("seededGeneration") == 1
            and condition(j, "Stalled").get("status") == "False"
        ),
        timeout=240,
    )
