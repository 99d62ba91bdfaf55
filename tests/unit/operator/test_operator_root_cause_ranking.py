"""The cause, not the symptom: rounds of evidence -> the job's root cause (a table), the
correction when the operator learns of a lost node after the survivors' errors, bad evidence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from elasticjob_agent.protocol.failure import WorkerFailure
from elasticjob_agent.protocol.symptoms import Symptom, classify
from elasticjob_operator.core import root_cause
from elasticjob_operator.core.evidence import STORED_KEYS, Cause, CauseKind, Evidence
from elasticjob_operator.core.observed import PodPhase
from elasticjob_operator.core.status import JobStatus, StallState

from tests.support.operator_model import T0, Cluster, job_spec, report, step
from tests.support.operator_model import started as _started

GLOO_RESET = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.100.1.3]:47024: "
    "Connection reset by peer"
)


def record(
    pod: str,
    at: float,
    *,
    exc: str | None = "RuntimeError",
    msg: str | None = GLOO_RESET,
    **kw: Any,
) -> Evidence:
    failure = WorkerFailure(
        local_rank=0,
        time=at,
        rank=int(pod[-3]),
        pod=pod,
        exit_code=1,
        exception_type=exc,
        message=msg,
        round=2,
    )
    return Evidence.of_failure(replace(failure, **kw), node=f"node-{pod[-3]}")


def seen(kind: CauseKind, pod: str, at: float, **kw: Any) -> Evidence:
    return Evidence(kind=kind, at=at, node=f"node-{pod[-3]}", pod=pod, round=2, **kw)


W0, W1, W2 = "job-worker-0-0", "job-worker-1-0", "job-worker-2-0"
VALUE_ERROR = {"exc": "ValueError", "msg": "loss is nan"}

ROUNDS: list[tuple[str, list[Evidence], list[Evidence], str]] = [
    (
        "node lost + a survivor's reset",
        [record(W0, T0 + 1)],
        [seen(CauseKind.NODE_LOST, W1, T0 + 30)],
        "node node-1 lost (pod job-worker-1-0)",
    ),
    (
        "OOMKilled + the survivors' collective timeouts",
        [
            record(W0, T0 + 5, msg="Watchdog caught collective operation timeout: WorkNCCL(...)"),
            record(W2, T0 + 6, msg="Watchdog caught collective operation timeout: WorkNCCL(...)"),
        ],
        [seen(CauseKind.OOM_KILLED, W1, T0 + 2)],
        "pod job-worker-1-0 OOMKilled (node node-1)",
    ),
    (
        "a rank OOM-killed inside a container that lives on (cgroup v1), the survivors' resets",
        [
            record(W0, T0 + 3),
            record(
                W1, T0 + 1, exc=None, msg=None, exit_code=None, signal="SIGKILL", oom_killed=True
            ),
        ],
        [],
        "rank 1 on pod job-worker-1-0 (node node-1) killed by SIGKILL (the kernel's OOM killer: "
        "the container reached its memory limit)",
    ),
    (
        "one rank's exception first, the others' resets later",
        [record(W1, T0 + 1, **VALUE_ERROR), record(W0, T0 + 2), record(W2, T0 + 3)],
        [],
        "rank 1 on pod job-worker-1-0 (node node-1) exited with code 1: ValueError: loss is nan",
    ),
    (
        "a reset reported before the exception it follows (clocks apart)",
        [record(W0, T0 + 1), record(W1, T0 + 2, **VALUE_ERROR)],
        [],
        "rank 1 on pod job-worker-1-0 (node node-1) exited with code 1: ValueError: loss is nan",
    ),
    (
        "every rank raising the same exception at once: the first rank",
        [record(W2, T0 + 1, **VALUE_ERROR), record(W0, T0 + 1, **VALUE_ERROR)],
        [],
        "rank 0 on pod job-worker-0-0 (node node-0) exited with code 1: ValueError: loss is nan",
    ),
    (
        "pod deleted, then the survivors' resets",
        [record(W0, T0 + 4), record(W2, T0 + 4)],
        [seen(CauseKind.POD_DELETED, W1, T0 + 1)],
        "pod job-worker-1-0 deleted (node node-1)",
    ),
    (
        "evicted",
        [record(W0, T0 + 4)],
        [seen(CauseKind.POD_EVICTED, W1, T0 + 1, message="EvictionByEvictionAPI")],
        "pod job-worker-1-0 evicted (node node-1): EvictionByEvictionAPI",
    ),
    (
        "preempted",
        [record(W0, T0 + 4)],
        [seen(CauseKind.POD_PREEMPTED, W1, T0 + 1)],
        "pod job-worker-1-0 preempted (node node-1)",
    ),
    (
        "image not pulled",
        [record(W0, T0 + 4, **VALUE_ERROR)],
        [seen(CauseKind.IMAGE_NOT_PULLED, W1, T0 + 1, message="ErrImagePull: not found")],
        "pod job-worker-1-0 image not pulled (node node-1): ErrImagePull: not found",
    ),
    (
        "etcd lost, and the ranks' store errors",
        [record(W0, T0 + 3, msg="TCPStore: Broken pipe"), record(W1, T0 + 3, msg="Broken pipe")],
        [Evidence(kind=CauseKind.ETCD_LOST, at=T0 + 1, pod="job-etcd-0", node="node-9")],
        "etcd lost (pod job-etcd-0 on node node-9)",
    ),
    (
        "a hang: the agents' own finding",
        [
            record(W0, T0 + 2, exc=None, msg="no training step for 60 s after step 7"),
            record(W1, T0 + 3, exc=None, msg="no training step for 61 s after step 7"),
        ],
        [],
        "rank 0 on pod job-worker-0-0 (node node-0) exited with code 1: "
        "no training step for 60 s after step 7",
    ),
    (
        "only symptoms: the first survivor's error, marked as a symptom",
        [record(W2, T0 + 2), record(W0, T0 + 1)],
        [],
        f"rank 0 on pod job-worker-0-0 (node node-0) exited with code 1: "
        f"RuntimeError: {GLOO_RESET}",
    ),
]


@pytest.mark.parametrize(
    ("reported", "observed", "headline"),
    [case[1:] for case in ROUNDS],
    ids=[case[0] for case in ROUNDS],
)
def test_a_round_of_evidence_names_the_cause(
    reported: list[Evidence], observed: list[Evidence], headline: str
) -> None:
    decided = root_cause.update(None, reported, observed).cause
    assert decided is not None
    assert decided.summary() == headline
    # Nothing is lost: the rest is secondary evidence, best first.
    assert len(decided.secondary) == len(reported) + len(observed) - 1
    order = [e.order() for e in (decided.headline, *decided.secondary)]
    assert order == sorted(order)
    # It survives the status round trip.
    stored = Cause.from_json(decided.to_json())
    assert stored is not None and stored.summary() == headline


def test_a_symptom_headline_says_it_is_one() -> None:
    decided = root_cause.update(None, [record(W0, T0)], []).cause
    assert decided is not None and decided.kind == Symptom.CONNECTION_LOST
    assert decided.quoted().startswith("root cause not known yet; a survivor's symptom")
    cause = root_cause.update(None, [record(W1, T0, **VALUE_ERROR)], []).cause
    assert cause is not None and cause.quoted().startswith("root cause: rank 1")


@pytest.mark.parametrize(
    ("text", "symptom"),
    [
        ("RuntimeError: " + GLOO_RESET, Symptom.CONNECTION_LOST),
        ("RuntimeError: [pair.cc:561] Connection closed by peer [::1]:1", Symptom.CONNECTION_LOST),
        ("DistNetworkError: Broken pipe", Symptom.CONNECTION_LOST),
        (
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
            Symptom.COLLECTIVE_TIMEOUT,
        ),
        (
            "RuntimeError: Timed out waiting 1800000ms for send operation",
            Symptom.COLLECTIVE_TIMEOUT,
        ),
        ("DistStoreError: wait timeout after 30000ms, keys: /x", Symptom.STORE_ERROR),
        ("RuntimeError: NCCL communicator was aborted on rank 1", Symptom.PEER_ABORTED),
        ("DistBackendError: NCCL error in: ...", Symptom.PEER_ABORTED),
        ("ValueError: loss is nan", None),
        ("torch.OutOfMemoryError: CUDA out of memory", None),
        ("KeyError: 'connection'", None),
    ],
)
def test_symptoms_are_classified_by_pattern(text: str, symptom: Symptom | None) -> None:
    assert classify(text) == symptom


def test_classification_reads_a_bounded_text() -> None:
    assert classify("x" * 10_000_000 + "Connection reset by peer") is None
    assert classify("Connection reset by peer" + "x" * 10_000_000) is Symptom.CONNECTION_LOST


def test_a_record_without_an_error_file_is_classified_by_its_last_line() -> None:
    tail = "step 7\nTraceback (most recent call last):\nRuntimeError: " + GLOO_RESET
    printed = WorkerFailure(local_rank=0, time=1.0, exit_code=1, output_tail=tail)
    assert printed.symptom() is Symptom.CONNECTION_LOST and printed.is_consequence()
    aborted = replace(
        printed,
        exit_code=None,
        signal="SIGABRT",
        output_tail="[rank0]:[E] Watchdog caught collective operation timeout\n"
        "Fatal Python error: Aborted",
    )
    assert aborted.symptom() is Symptom.COLLECTIVE_TIMEOUT
    killed = replace(aborted, signal="SIGKILL")
    assert killed.symptom() is None
    timer = WorkerFailure(local_rank=0, time=1.0, signal="SIGKILL", message="timer expired")
    assert timer.symptom() is None


def test_bad_evidence_is_refused_with_a_reason_never_trusted() -> None:
    pods = {W0, W1}
    reported = [
        (W0, record(W0, T0)),
        (W1, record("job-worker-7-0", T0, **VALUE_ERROR)),  # not a pod of the job
        (W1, record(W0, T0, **VALUE_ERROR)),  # another pod's cause
        (W1, record(W1, T0 + 3600, **VALUE_ERROR)),  # in the future
    ]
    kept, refused = root_cause.vet(reported, pods, now=T0 + 5)
    assert [e.pod for e in kept] == [W0]
    assert refused == ["unknown-pod", "foreign-pod", "future-time"]
    flood = [(W0, record(W0, T0 + i / 1000)) for i in range(root_cause.MAX_EVIDENCE + 5)]
    kept, refused = root_cause.vet(flood, pods, now=T0 + 5)
    assert len(kept) == root_cause.MAX_EVIDENCE and refused == ["too-much"] * 5


def test_a_stored_cause_is_read_never_trusted() -> None:
    assert Cause.from_json({"kind": "NodeLost", "time": "yesterday"}) is None
    assert Cause.from_json({"kind": "Rumour", "time": 1.0}) is None
    assert Cause.from_json({"localRank": "x", "time": 1.0}) is None
    cause = Cause.from_json(
        {"kind": "NodeLost", "time": 1.0, "node": "n", "pod": "p", "secondary": ["junk", {}] * 50}
    )
    assert cause is not None and cause.summary() == "node n lost (pod p)" and not cause.secondary


# -- the planning step: the cause learned late corrects the stored one --------------------------


SURVIVOR = WorkerFailure(
    local_rank=0,
    time=T0 + 4,
    rank=0,
    exit_code=1,
    exception_type="RuntimeError",
    message=GLOO_RESET,
    round=1,
)


def _restart_after_a_survivor_reset(cluster: Cluster) -> tuple[JobStatus, list[str]]:
    status = _started(cluster)
    assert all(p.joined is False for p in cluster.workers())
    for pod in cluster.workers():
        cluster.set(pod.name, joined=True)
    reports = {
        "demo-worker-0-0": replace(
            report("demo-worker-0-0", restarts={"failure": 1}), last_failure=SURVIVOR
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    return result.status, [e.message for e in result.events if e.reason == "Restarted"]


def test_the_node_lost_seconds_after_a_survivors_reset_corrects_the_root_cause() -> None:
    """The demo's case: the survivor's reset is polled first, the node controller marks the
    node lost later. The Restarted Event says the survivor's error is only a symptom; the
    cause, once seen, replaces it in lastFailure and a RootCause Event says so."""
    cluster = Cluster()
    status, restarted = _restart_after_a_survivor_reset(cluster)
    assert len(restarted) == 1 and "root cause not known yet" in restarted[0], restarted
    assert status.last_failure is not None and status.last_failure["kind"] == "ConnectionLost"
    cluster.set("demo-worker-1-0", node="real-1")
    lost = step(
        cluster,
        status,
        job_spec(),
        T0 + 30,
        etcd_reachable=True,
        lost_nodes=frozenset({"real-1"}),
    )
    stored = lost.status.last_failure
    assert stored is not None
    assert (stored["kind"], stored["node"], stored["pod"]) == (
        "NodeLost",
        "real-1",
        "demo-worker-1-0",
    )
    assert [e["kind"] for e in stored["secondary"]] == ["ConnectionLost"]
    corrected = [e for e in lost.events if e.reason == "RootCause"]
    assert len(corrected) == 1 and corrected[0].type == "Warning"
    assert corrected[0].message.startswith(
        "root cause: node real-1 lost (pod demo-worker-1-0) (round 1); first reported: rank 0"
    ), corrected[0].message
    # The next step, the lost pod replaced: the cause stands, no second correction.
    after = step(cluster, lost.status, job_spec(), T0 + 32, etcd_reachable=True)
    assert after.status.last_failure == stored
    assert not [e for e in after.events if e.reason == "RootCause"]


def test_a_deleted_pod_seen_first_is_the_cause_of_the_resets_that_follow() -> None:
    cluster = Cluster()
    status = _started(cluster)
    for pod in cluster.workers():
        cluster.set(pod.name, joined=True)
    cluster.set("demo-worker-1-0", deleting=True, deleted_at=T0 + 3)
    reports = {
        "demo-worker-0-0": replace(
            report("demo-worker-0-0", restarts={"failure": 1}), last_failure=SURVIVOR
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    restarted = [e.message for e in result.events if e.reason == "Restarted"]
    assert restarted and restarted[0].endswith(
        "root cause: pod demo-worker-1-0 deleted (node node-a)"
    ), restarted


def test_an_oom_killed_member_is_a_cause_by_itself() -> None:
    cluster = Cluster()
    status = _started(cluster)
    for pod in cluster.workers():
        cluster.set(pod.name, joined=True)
    cluster.set(
        "demo-worker-1-0", phase=PodPhase.FAILED, exit_code=137, oom_killed=True, finished_at=T0 + 3
    )
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True)
    stored = result.status.last_failure
    assert stored is not None and (stored["kind"], stored["pod"]) == (
        "OOMKilled",
        "demo-worker-1-0",
    )
    assert JobStatus.from_json(result.status.to_json()).last_failure == stored


def test_an_oom_kill_the_agent_saw_is_stored_as_oom_killed_and_reads_back() -> None:
    killed = record(
        W1, T0 + 1, exc=None, msg=None, exit_code=None, signal="SIGKILL", oom_killed=True
    )
    decided = root_cause.update(None, [record(W0, T0 + 3), killed], []).cause
    assert decided is not None and decided.headline.kind == CauseKind.OOM_KILLED
    stored = decided.to_json()
    assert (stored["kind"], stored["oomKilled"], stored["signal"]) == ("OOMKilled", True, "SIGKILL")
    again = Cause.from_json(stored)
    assert again is not None and again.headline.kind == CauseKind.OOM_KILLED
    # Another kill is not one: the key is written null, clearing an earlier cause's.
    other = record(W1, T0 + 1, exc=None, msg=None, exit_code=None, signal="SIGKILL")
    plain = root_cause.update(None, [other], []).cause
    assert plain is not None and plain.headline.kind == CauseKind.WORKER_FAILED
    assert "oomKilled" in plain.to_json() and plain.to_json()["oomKilled"] is None


def test_etcd_lost_outranks_the_store_errors_it_caused() -> None:
    cluster = Cluster()
    status = _started(cluster)
    status = status.evolve(
        stall=StallState("EtcdUnavailable", "etcd unreachable for 4 s", T0 + 2),
    )
    store_error = replace(SURVIVOR, message="TCPStore: Broken pipe", time=T0 + 3)
    reports = {
        "demo-worker-0-0": replace(
            report("demo-worker-0-0", etcd_reachable=False), last_failure=store_error
        )
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=False, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and stored["kind"] == "EtcdLost", stored
    assert [e["kind"] for e in stored["secondary"]] == ["StoreError"]
    # An etcd that never came up was never lost: the ranks' own errors stand.
    never_up = status.evolve(etcd=replace(status.etcd, ready_generation=-1))
    result = step(cluster, never_up, job_spec(), T0 + 5, etcd_reachable=False, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and stored["kind"] == "StoreError", stored


def test_a_record_for_a_pod_not_in_the_job_is_refused_and_counted() -> None:
    cluster = Cluster()
    status = _started(cluster)
    stranger = replace(SURVIVOR, pod="someone-else", exception_type="ValueError", message="x")
    future = replace(SURVIVOR, time=T0 + 10_000, exception_type="ValueError", message="y")
    reports = {
        "demo-worker-0-0": replace(report("demo-worker-0-0"), last_failure=stranger),
        "demo-worker-1-0": replace(report("demo-worker-1-0"), last_failure=future),
    }
    result = step(cluster, status, job_spec(), T0 + 5, etcd_reachable=True, reports=reports)
    assert result.status.last_failure is None
    assert sorted(result.refused_evidence) == ["future-time", "unknown-pod"]


def _strict(node: Any) -> Any:
    """The CRD's schema as JSON Schema that also refuses what the API server would prune."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k not in ("nullable", "description")}
    if node.get("type") == "object" and "properties" in node:
        out.setdefault("additionalProperties", False)
    return out


def _last_failure_schema() -> Any:
    crd = yaml.safe_load((Path(__file__).parents[3] / "crds" / "elasticjob.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return _strict(status["properties"]["lastFailure"])


@pytest.mark.parametrize(
    ("reported", "observed"),
    [case[1:3] for case in ROUNDS],
    ids=[case[0] for case in ROUNDS],
)
def test_every_cause_fits_the_crd_schema(
    reported: list[Evidence], observed: list[Evidence]
) -> None:
    """The status is merge-patched: absent keys are written as null (they clear the previous
    cause's), and what remains must fit the schema, or the API server refuses the write."""
    decided = root_cause.update(None, reported, observed).cause
    assert decided is not None
    written = decided.to_json()
    assert set(written) == set(STORED_KEYS)
    kept = {k: v for k, v in written.items() if v is not None}
    errors = [
        e.message for e in jsonschema.Draft7Validator(_last_failure_schema()).iter_errors(kept)
    ]
    assert not errors, errors


def test_the_rank_that_died_polled_after_the_survivor_corrects_the_cause() -> None:
    """The survivor's report is polled first, the report of the agent whose rank raised one
    step later: lastFailure takes the cause and a RootCause Event says so; another symptom
    polled later changes the secondary evidence only, with no Event."""
    cluster = Cluster()
    status, _ = _restart_after_a_survivor_reset(cluster)
    raised = replace(SURVIVOR, local_rank=1, rank=1, exception_type="ValueError", message="nan")
    reports = {
        "demo-worker-0-0": replace(report("demo-worker-0-0"), last_failure=SURVIVOR),
        "demo-worker-1-0": replace(
            report("demo-worker-1-0"), last_failure=replace(raised, time=T0 + 3)
        ),
    }
    result = step(cluster, status, job_spec(), T0 + 7, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and (stored["kind"], stored["pod"]) == ("WorkerFailed", W1_DEMO)
    (event,) = [e for e in result.events if e.reason == "RootCause"]
    assert event.message.startswith(
        "root cause: rank 1 on pod demo-worker-1-0 (node node-a) exited with code 1"
    )

    cluster2 = Cluster()
    status, _ = _restart_after_a_survivor_reset(cluster2)
    earlier = replace(SURVIVOR, time=T0 + 1, local_rank=0, rank=1, message="Broken pipe")
    reports = {"demo-worker-1-0": replace(report("demo-worker-1-0"), last_failure=earlier)}
    result = step(cluster2, status, job_spec(), T0 + 7, etcd_reachable=True, reports=reports)
    stored = result.status.last_failure
    assert stored is not None and stored["pod"] == W1_DEMO and stored["kind"] == "ConnectionLost"
    assert not [e for e in result.events if e.reason == "RootCause"]


W1_DEMO = "demo-worker-1-0"
