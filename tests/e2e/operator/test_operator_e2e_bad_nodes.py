"""Bad nodes on the local cluster's API server (virtual nodes): a node condition set with
``kubectl patch node --subresource=status`` moves a job's pod off the node, and a node whose
workers were killed from outside twice is avoided by the job's replacement pod and, with the
admin's opt-in (``badNodes.taint``), tainted."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_operator.core.quarantine import TAINT_KEY

from tests.support.jobs import by_reason, pods, st, wait_job
from tests.support.operator_e2e import (
    BAD_NODE_CONDITION,
    OperatorProcess,
    agent_status,
    apply_chart_rbac,
    evidence,
    job_manifest,
)

pytestmark = pytest.mark.e2e

LONG = ["--steps", "3000", "--step-sleep", "0.1"]


def _start(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    manifest = job_manifest(name, args=LONG, minNodes=2, maxNodes=2)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    return wait_job(cluster, ns, name, "Running", lambda j: st(j).get("readyNodes") == 2)


def _live(cluster: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    """The job's worker pods not being deleted, by name."""
    return {
        p["metadata"]["name"]: p
        for p in pods(cluster, ns)
        if not p["metadata"].get("deletionTimestamp")
    }


def _set_condition(cluster: LocalCluster, node: str, status: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": BAD_NODE_CONDITION,
        "status": status,
        "reason": "E2ETest",
        "message": "set by the bad-nodes e2e test",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    patch = json.dumps({"status": {"conditions": [condition]}})
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch)


@pytest.fixture
def marked(cluster: LocalCluster) -> Iterator[list[str]]:
    """Nodes the test marks bad; the condition is turned False again afterwards."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        _set_condition(cluster, node, "False")


def test_a_node_condition_moves_the_pod_off_the_node(
    cluster: LocalCluster, ns: str, operator: OperatorProcess, marked: list[str]
) -> None:
    name = "badcond"
    _start(cluster, ns, name)
    before = _live(cluster, ns)
    node = before[f"{name}-worker-1-0"]["spec"]["nodeName"]
    moved = sorted(n for n, p in before.items() if p["spec"]["nodeName"] == node)
    marked.append(node)
    _set_condition(cluster, node, "True")

    def off_the_node(job: dict[str, Any]) -> bool:
        # The job is read before the pods: its status must already show the move, or a job read
        # just before the operator's step and pods listed just after it would pass.
        if not any(e.get("node") == node for e in st(job).get("avoidedNodes") or []):
            return False
        live = _live(cluster, ns)
        on_node = [n for n, p in live.items() if p["spec"].get("nodeName") == node]
        running = [p for p in live.values() if p["status"].get("phase") == "Running"]
        return not on_node and len(running) == 2 and st(job).get("readyNodes") == 2

    try:
        job = wait_job(cluster, ns, name, "moved off the bad node", off_the_node, timeout=180)
        entries = st(job).get("avoidedNodes") or []
        assert [(e["node"], e["reason"], e["avoided"]) for e in entries] == [
            (node, "NodeCondition", True)
        ], entries
        assert BAD_NODE_CONDITION in entries[0]["message"]
        counts = by_reason(job)
        assert not {"failure", "pod-failure"} & counts.keys(), counts
        live = _live(cluster, ns)
        for pod in moved:  # each moved pod's index has a new attempt, elsewhere
            index = pod.split("-")[-2]
            [new] = [n for n in live if n.startswith(f"{name}-worker-{index}-") and n != pod]
            terms = live[new]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert any(node in f["values"] for t in terms for f in t["matchFields"]), terms
        cluster.wait_for(
            "the NodeConditionMove and BadNodeCondition Events",
            lambda: (
                {"NodeConditionMove", "BadNodeCondition"} <= set(_event_reasons(cluster, ns, name))
            ),
            timeout=60,
        )
    except (AssertionError, TimeoutError) as exc:
        raise AssertionError(f"{exc}\n{evidence(cluster, ns, name, operator)}") from None


def _taints(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "node", node, "-o", "json").stdout
    return list(json.loads(out)["spec"].get("taints") or [])


@pytest.fixture
def tainting(cluster: LocalCluster, operator: OperatorProcess) -> Iterator[None]:
    """The operator restarted as the chart runs it with ``badNodes.taint=true`` (its RBAC
    too); afterwards every bad-node taint is removed and the session's operator restored."""
    apply_chart_rbac(cluster, "badNodes.taint=true")
    operator.kill(signal.SIGTERM)
    operator.extra_env = {"ELASTICJOB_TAINT_BAD_NODES": "true"}
    operator.start()
    try:
        yield
    finally:
        nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        for node in nodes:
            if any(t.get("key") == TAINT_KEY for t in node["spec"].get("taints") or []):
                name = node["metadata"]["name"]
                cluster.kubectl("taint", "nodes", name, f"{TAINT_KEY}-", check=False)
        operator.kill(signal.SIGTERM)
        operator.extra_env = {}
        operator.start()
        apply_chart_rbac(cluster)


def test_a_node_whose_workers_are_killed_twice_is_avoided_by_the_replacement(
    cluster: LocalCluster, ns: str, operator: OperatorProcess, tainting: None
) -> None:
    name = "quarantine"
    _start(cluster, ns, name)
    victim = f"{name}-worker-1-0"
    node = _live(cluster, ns)[victim]["spec"]["nodeName"]
    killed: set[int] = set()
    try:
        for kills in (1, 2):
            status = cluster.wait_for(
                f"{victim}'s workers running",
                lambda: _running_agent(cluster, ns, victim, killed),
                timeout=120,
            )
            for worker in status["workers"]:
                os.kill(worker["pid"], signal.SIGKILL)  # pods are host processes here
                killed.add(worker["pid"])

            def counted(job: dict[str, Any], kills: int = kills) -> bool:
                entries = st(job).get("avoidedNodes") or []
                return any(e["node"] == node and e["failures"] >= kills for e in entries)

            job = wait_job(cluster, ns, name, f"{kills} failures counted", counted, timeout=120)
        [entry] = [e for e in st(job)["avoidedNodes"] if e["node"] == node]
        assert (entry["reason"], entry["failures"], entry["avoided"]) == ("Failures", 2, True)
        assert "SIGKILL" in entry["message"], entry
        assert "NodeAvoided" in _event_reasons(cluster, ns, name)
        cluster.wait_for(
            f"node {node} tainted {TAINT_KEY}:NoSchedule",
            lambda: {"key": TAINT_KEY, "effect": "NoSchedule"} in _taints(cluster, node),
            timeout=60,
        )
        assert operator.forbidden() == []

        cluster.kubectl("delete", "pod", victim, "-n", ns, "--wait=false")

        def replacement() -> str | None:
            """The new pod of index 1, once scheduled."""
            for pod_name, pod in _live(cluster, ns).items():
                if pod_name.startswith(f"{name}-worker-1-") and pod_name != victim:
                    return pod_name if pod["spec"].get("nodeName") else None
            return None

        new = cluster.wait_for("the replacement of index 1 scheduled", replacement, timeout=120)
        placed = _live(cluster, ns)[new]["spec"]["nodeName"]
        assert placed != node
        terms = _live(cluster, ns)[new]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert all(any(node in f["values"] for f in t["matchFields"]) for t in terms), terms
    except (AssertionError, TimeoutError) as exc:
        raise AssertionError(f"{exc}\n{evidence(cluster, ns, name, operator)}") from None


def _running_agent(
    cluster: LocalCluster, ns: str, pod: str, killed: set[int]
) -> dict[str, Any] | None:
    """The agent's status once it runs workers that were not killed yet."""
    status = agent_status(cluster, ns, pod)
    if status is None or status.get("state") != "Running" or not status.get("workers"):
        return None
    workers = status["workers"]
    if any(w.get("pid") in killed or w.get("exitCode") is not None for w in workers):
        return None
    return status


def _event_reasons(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    out = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    return [e["reason"] for e in json.loads(out)["items"]]
