"""Bad-node quarantine in ``plan()``: hardware-like failures counted per node, once each, within
the window; a node with enough of them avoided by the job's new worker pods (``avoidedNodes``,
the ``NodeAvoided`` Event, required anti-affinity on the node's name)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml
from elasticjob_agent.protocol.failure import WorkerFailure
from elasticjob_operator.core import planning, quarantine
from elasticjob_operator.core.evidence import CauseKind, Evidence
from elasticjob_operator.core.manifests import build_worker_pod, with_avoided_nodes
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.quarantine import AvoidedNode, QuarantineSettings
from elasticjob_operator.core.status import JobStatus

from tests.support.operator_model import (
    JOB,
    T0,
    Cluster,
    job_spec,
    report,
    started,
)
from tests.support.paths import REPO

POD = "demo-worker-1-0"
KILLED = WorkerFailure(local_rank=0, time=T0 + 4, rank=2, signal="SIGKILL", round=1)


def _step(
    cluster: Cluster,
    status: JobStatus,
    now: float,
    settings: QuarantineSettings | None = None,
    **observed: Any,
) -> planning.Plan:
    result = planning.plan(
        JOB,
        spec=job_spec(),
        generation=1,
        status=status,
        observed=cluster.observed(etcd_reachable=True, **observed),
        now=now,
        services=frozenset(cluster.services),
        quarantine=settings,
    )
    cluster.apply(result)
    return result


def _on_two_nodes() -> tuple[Cluster, JobStatus]:
    cluster = Cluster()
    status = started(cluster)
    cluster.set("demo-worker-0-0", node="node-a")
    cluster.set(POD, node="node-b")
    return cluster, status


def _failed(failure: WorkerFailure, pod: str = POD) -> dict[str, Any]:
    return {pod: replace(report(pod, round_=failure.round or 1), last_failure=failure)}


def _kept_off(manifest: Any) -> list[str]:
    terms = manifest["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    per_term = [[v for f in t["matchFields"] for v in f["values"]] for t in terms]
    assert all(len(f["values"]) == 1 for t in terms for f in t["matchFields"]), terms
    assert all(p == per_term[0] for p in per_term), terms
    return per_term[0]


@pytest.mark.parametrize(
    ("evidence", "cause"),
    [
        (Evidence(kind=CauseKind.NODE_LOST, at=T0, node="n"), quarantine.NODE_LOST),
        (Evidence.of_failure(KILLED, node="n"), quarantine.SIGNAL),
        (Evidence.of_failure(replace(KILLED, signal="SIGBUS"), node="n"), quarantine.SIGNAL),
        (Evidence.of_failure(replace(KILLED, signal="SIGSEGV"), node="n"), None),
        (Evidence(kind=CauseKind.OOM_KILLED, at=T0, node="n"), None),
        (Evidence(kind=CauseKind.POD_DELETED, at=T0, node="n"), None),
        (
            Evidence.of_failure(
                replace(
                    KILLED,
                    signal=None,
                    exit_code=1,
                    exception_type="RuntimeError",
                    message="CUDA error: uncorrectable ECC error encountered",
                ),
                node="n",
            ),
            quarantine.DEVICE_ERROR,
        ),
        (
            Evidence.of_failure(
                replace(
                    KILLED,
                    signal=None,
                    exit_code=1,
                    exception_type="torch.OutOfMemoryError",
                    message="CUDA error: out of memory",
                ),
                node="n",
            ),
            None,
        ),
        (
            Evidence.of_failure(
                replace(KILLED, signal=None, exit_code=1, output_tail="NVRM: Xid 79, GPU is lost"),
                node="n",
            ),
            quarantine.DEVICE_ERROR,
        ),
        (  # a survivor's symptom is not its node's fault
            Evidence.of_failure(
                replace(
                    KILLED,
                    signal=None,
                    exit_code=1,
                    exception_type="RuntimeError",
                    message="Connection closed by peer [10.0.0.2]:1234",
                ),
                node="n",
            ),
            None,
        ),
    ],
)
def test_what_counts_as_a_hardware_like_failure(evidence: Evidence, cause: str | None) -> None:
    assert quarantine.hardware_cause(evidence) == cause


def test_two_signals_on_one_node_avoid_it_and_the_replacement_keeps_off() -> None:
    cluster, status = _on_two_nodes()
    first = _step(cluster, status, T0 + 5, reports=_failed(KILLED))
    [entry] = first.status.avoided_nodes
    assert (entry.node, entry.failures, entry.avoided) == ("node-b", 1, False)
    assert "NodeAvoided" not in [e.reason for e in first.events]
    # The same record polled again is the same failure: counted once.
    again = _step(cluster, first.status, T0 + 7, reports=_failed(KILLED))
    assert again.status.avoided_nodes == first.status.avoided_nodes

    second = replace(KILLED, time=T0 + 60, round=2)
    result = _step(cluster, again.status, T0 + 61, reports=_failed(second))
    [entry] = result.status.avoided_nodes
    assert (entry.node, entry.reason, entry.failures, entry.avoided, entry.since) == (
        "node-b",
        quarantine.FAILURES,
        2,
        True,
        T0 + 4,
    )
    assert entry.message.startswith(
        "Signal: rank 2 on pod demo-worker-1-0 (node node-b) killed by SIGKILL"
    )
    [avoided] = [e for e in result.events if e.reason == "NodeAvoided"]
    assert avoided.type == "Warning" and "node node-b: 2 hardware-like failures" in avoided.message

    cluster.set(POD, phase=PodPhase.FAILED, exit_code=1)  # its pod fails for good: replaced
    replaced = _step(cluster, result.status, T0 + 70)
    created = [
        a.manifest
        for a in replaced.actions
        if isinstance(a, planning.CreateObject) and a.manifest["kind"] == "Pod"
    ]
    assert [m["metadata"]["name"] for m in created] == ["demo-worker-1-1"]
    assert _kept_off(created[0]) == ["node-b"]
    # The status keeps it (an operator restart reads it back).
    assert JobStatus.from_json(replaced.status.to_json()).avoided_nodes == (
        replaced.status.avoided_nodes
    )


def test_an_admin_who_opted_in_gets_the_avoided_node_tainted_once() -> None:
    taint = QuarantineSettings(taint=True)
    cluster, status = _on_two_nodes()
    first = _step(cluster, status, T0 + 5, taint, reports=_failed(KILLED))
    assert not [a for a in first.actions if isinstance(a, planning.TaintNode)]
    second = replace(KILLED, time=T0 + 60, round=2)
    result = _step(cluster, first.status, T0 + 61, taint, reports=_failed(second))
    assert [a for a in result.actions if isinstance(a, planning.TaintNode)] == [
        planning.TaintNode("node-b")
    ]
    [avoided] = [e for e in result.events if e.reason == "NodeAvoided"]
    assert "tainted elasticjob.dev/bad-node:NoSchedule" in avoided.message
    assert "kubectl taint nodes node-b elasticjob.dev/bad-node-" in avoided.message
    # Later steps do not taint it again; without the opt-in nothing is ever tainted.
    later = _step(cluster, result.status, T0 + 70, taint)
    assert not [a for a in later.actions if isinstance(a, planning.TaintNode)]
    cluster, status = _on_two_nodes()
    first = _step(cluster, status, T0 + 5, reports=_failed(KILLED))
    result = _step(cluster, first.status, T0 + 61, reports=_failed(second))
    assert [e.reason for e in result.events].count("NodeAvoided") == 1
    assert not [a for a in result.actions if isinstance(a, planning.TaintNode)]


@pytest.mark.parametrize(
    ("taints", "expected"),
    [
        (None, [{"key": quarantine.TAINT_KEY, "effect": "NoSchedule"}]),
        (
            [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}],
            [
                {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
                {"key": quarantine.TAINT_KEY, "effect": "NoSchedule"},
            ],
        ),
    ],
)
def test_the_taint_patch_keeps_the_nodes_taints_and_its_version(
    taints: list[dict[str, str]] | None, expected: list[dict[str, str]]
) -> None:
    node: dict[str, Any] = {"metadata": {"name": "n", "resourceVersion": "42"}, "spec": {}}
    if taints is not None:
        node["spec"]["taints"] = taints
    assert quarantine.taint_patch(node) == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"taints": expected},
    }


def test_a_node_tainted_already_is_not_patched() -> None:
    node = {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": [{"key": quarantine.TAINT_KEY, "effect": "NoExecute"}]},
    }
    assert quarantine.taint_patch(node) is None


def test_an_oom_or_a_program_error_is_not_counted() -> None:
    cluster, status = _on_two_nodes()
    crashed = replace(KILLED, signal=None, exit_code=1, exception_type="ValueError", message="x")
    result = _step(cluster, status, T0 + 5, reports=_failed(crashed))
    assert result.status.last_failure is not None
    assert result.status.avoided_nodes == ()
    cluster.set(POD, joined=True, phase=PodPhase.FAILED, oom_killed=True, finished_at=T0 + 9)
    result = _step(cluster, result.status, T0 + 10, reports=_failed(replace(KILLED, round=2)))
    assert result.status.last_failure is not None
    assert result.status.last_failure["kind"] == CauseKind.OOM_KILLED
    assert result.status.avoided_nodes == ()


def test_failures_further_apart_than_the_window_start_the_count_again() -> None:
    settings = QuarantineSettings(failures=2, window=100.0)
    cluster, status = _on_two_nodes()
    first = _step(cluster, status, T0 + 5, settings, reports=_failed(KILLED))
    late = replace(KILLED, time=T0 + 200, round=2)
    result = _step(cluster, first.status, T0 + 201, settings, reports=_failed(late))
    [entry] = result.status.avoided_nodes
    assert (entry.failures, entry.since, entry.avoided) == (1, T0 + 200, False)
    # A watched node whose window passed is dropped; an avoided one stays.
    quiet = _step(cluster, result.status, T0 + 400, settings)
    assert quiet.status.avoided_nodes == ()


def test_zero_failures_turns_the_quarantine_off() -> None:
    cluster, status = _on_two_nodes()
    off = QuarantineSettings(failures=0)
    result = _step(cluster, status, T0 + 5, off, reports=_failed(KILLED))
    assert result.status.avoided_nodes == ()


def test_the_list_is_bounded_and_keeps_avoided_nodes_first() -> None:
    avoided = [AvoidedNode(f"bad-{i}", quarantine.FAILURES, 2, T0 + i, True) for i in range(10)]
    watched = [AvoidedNode(f"w-{i}", quarantine.FAILURES, 1, T0 + 50 + i, False) for i in range(10)]
    kept = quarantine.bounded([*avoided, *watched])
    assert len(kept) == quarantine.MAX_ENTRIES
    assert {e.node for e in kept if e.avoided} == {f"bad-{i}" for i in range(10)}
    assert {e.node for e in kept if not e.avoided} == {f"w-{i}" for i in range(4, 10)}


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "x",
        [{"node": "", "reason": "Failures", "since": 1}],
        [{"node": "n", "reason": "Other", "since": 1}],
        [{"node": "n", "reason": "Failures", "since": -1}],
        [{"node": "n", "reason": "Failures", "since": True}],
        [{"node": "n" * 300, "reason": "Failures", "since": 1}],
    ],
)
def test_a_stored_list_that_is_not_ours_reads_as_empty(stored: Any) -> None:
    assert JobStatus.from_json({"avoidedNodes": stored}).avoided_nodes == ()


def test_a_stored_entry_is_read_leniently() -> None:
    stored = [
        {"node": "n", "reason": "Failures", "since": 5, "failures": "lots", "avoided": "yes"},
        {"node": "n", "reason": "Failures", "since": 6, "failures": 3, "avoided": True},
    ]
    [entry] = JobStatus.from_json({"avoidedNodes": stored}).avoided_nodes
    assert (entry.failures, entry.avoided, entry.since) == (0, False, 5.0)


def test_the_anti_affinity_joins_every_term_of_the_templates_own() -> None:
    pod = build_worker_pod(JOB, job_spec(), 0, 0)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": []}}
            ],
        },
        "podAntiAffinity": {"x": 1},
    }
    kept = with_avoided_nodes(pod, ["n2", "n1", "n1"])
    affinity = kept["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    # One node per requirement: the API server refuses more than one value for a field.
    assert all(
        t["matchFields"]
        == [
            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]},
            {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]},
        ]
        for t in terms
    )
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert "affinity" in pod["spec"] and "matchFields" not in str(pod)  # the input is untouched
    plain = with_avoided_nodes(build_worker_pod(JOB, job_spec(), 0, 0), ["n1"])
    assert _kept_off(plain) == ["n1"]
    assert with_avoided_nodes(plain, []) == plain


def test_the_crd_holds_what_the_operator_writes() -> None:
    crd = yaml.safe_load((REPO / "crds" / "elasticjob.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    schema = status["properties"]["avoidedNodes"]
    assert schema["maxItems"] == quarantine.MAX_ENTRIES
    fields = schema["items"]["properties"]
    assert set(fields["reason"]["enum"]) == {quarantine.FAILURES, quarantine.NODE_CONDITION}
    assert fields["message"]["maxLength"] == quarantine.MAX_MESSAGE
    assert fields["node"]["maxLength"] == quarantine.MAX_NODE_NAME
    entry = AvoidedNode("n", quarantine.NODE_CONDITION, 0, T0, True, "m", saved_step=3)
    assert set(entry.to_json()) == set(fields)
