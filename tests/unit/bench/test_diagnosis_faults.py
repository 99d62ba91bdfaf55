"""The diagnosis benchmark's pure part: the fault matrix, what each fault should be diagnosed
as, how a status is judged, the jobs the faults run in, the rows and the table."""

from __future__ import annotations

import json
from typing import Any

import pytest
from diagnosis_bench import parse_args
from diagnosis_faults import (
    BY_NAME,
    FAULTS,
    ROW_KEYS,
    TRIGGER_WRAPPER,
    Expected,
    Injection,
    JobShape,
    Placement,
    Target,
    expected,
    job_manifest,
    judge,
    reported,
    row,
    select,
    table,
)
from elasticjob_operator.core.agent_command import training_argv
from elasticjob_operator.core.spec import parse_spec

W0, W1 = "dx-worker-0-0", "dx-worker-1-0"
PLACED = Placement({W0: "real-0", W1: "real-1"}, victim=W1, etcd=("dx-etcd-0", "real-0"))


def test_the_matrix_has_every_fault_the_contract_names() -> None:
    assert len(FAULTS) >= 10 and len(BY_NAME) == len(FAULTS)
    assert {
        "sigkill-rank", "exception-rank", "exit-rank", "exception-every-rank", "oom-killed",
        "node-lost", "pod-deleted", "pod-evicted", "etcd-lost", "hang", "missing-script",
        "image-not-pulled",
    } <= set(BY_NAME)  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "kind", "pods"),
    [
        ("sigkill-rank", "WorkerFailed", {W1: "real-1"}),
        ("oom-killed", "OOMKilled", {W1: "real-1"}),
        ("node-lost", "NodeLost", {W1: "real-1"}),
        ("pod-evicted", "PodEvicted", {W1: "real-1"}),
        ("etcd-lost", "EtcdLost", {"dx-etcd-0": "real-0"}),
        ("exception-every-rank", "WorkerFailed", {W0: "real-0", W1: "real-1"}),
        ("image-not-pulled", "ImageNotPulled", {W0: "real-0", W1: "real-1"}),
    ],
)
def test_what_each_fault_should_be_diagnosed_as(
    fault: str, kind: str, pods: dict[str, str]
) -> None:
    want = expected(BY_NAME[fault], PLACED)
    assert (want.kind, dict(want.pods)) == (kind, pods)


def test_the_failing_rank_of_fail_at_step_is_the_pod_its_log_names() -> None:
    want = expected(BY_NAME["exception-rank"], PLACED, culprit=W0)
    assert dict(want.pods) == {W0: "real-0"} and want.detail == {"exceptionType": "RuntimeError"}
    assert want.describe() == "WorkerFailed exceptionType=RuntimeError on pod dx-worker-0-0 " \
        "(node real-0)"  # fmt: skip


def test_a_placement_without_what_the_fault_needs_is_an_error() -> None:
    with pytest.raises(ValueError, match="no managed etcd"):
        expected(BY_NAME["etcd-lost"], Placement({W0: "a"}, victim=W0))
    with pytest.raises(ValueError, match="not a worker pod"):
        expected(BY_NAME["sigkill-rank"], Placement({W0: "a"}, victim=None))
    with pytest.raises(ValueError, match="no worker pods"):
        expected(BY_NAME["hang"], Placement({}, victim=None))


KILLED = {"kind": "WorkerFailed", "pod": W1, "node": "real-1", "signal": "SIGKILL", "rank": 1}


@pytest.mark.parametrize(
    ("last_failure", "correct"),
    [
        (KILLED, True),
        ({**KILLED, "node": "real-0"}, False),  # the wrong node
        ({**KILLED, "pod": W0, "node": "real-0"}, False),  # the survivor
        ({**KILLED, "signal": None, "exitCode": 1}, False),  # not how it ended
        ({**KILLED, "kind": "ConnectionLost"}, False),  # the survivor's symptom
        ({**KILLED, "node": None}, False),  # no node named
        (None, False),
        ({}, False),
    ],
)
def test_a_status_is_correct_only_when_it_names_the_kind_the_pod_and_its_node(
    last_failure: dict[str, Any] | None, correct: bool
) -> None:
    want = expected(BY_NAME["sigkill-rank"], PLACED)
    assert judge(want, last_failure) is correct


def test_any_pod_is_right_for_a_fault_of_every_rank_but_with_its_own_node() -> None:
    want = expected(BY_NAME["exception-every-rank"], PLACED)
    raised = {"kind": "WorkerFailed", "exceptionType": "RuntimeError"}
    assert judge(want, {**raised, "pod": W0, "node": "real-0"})
    assert judge(want, {**raised, "pod": W1, "node": "real-1"})
    assert not judge(want, {**raised, "pod": W1, "node": "real-0"})
    assert not judge(want, {**raised, "pod": "someone-else", "node": "real-0"})


def test_rows_have_the_contracts_keys_and_the_table_counts_the_correct_ones() -> None:
    fault = BY_NAME["sigkill-rank"]
    want = expected(fault, PLACED)
    good = row(fault, want, {"lastFailure": KILLED}, 4.26)
    assert tuple(good) == ROW_KEYS
    assert good == {
        "fault": "sigkill-rank",
        "expected": "WorkerFailed signal=SIGKILL on pod dx-worker-1-0 (node real-1)",
        "reported": "WorkerFailed signal=SIGKILL on pod dx-worker-1-0 (node real-1)",
        "correct": True,
        "recovery_s": 4.3,
    }
    missed = row(BY_NAME["node-lost"], None, None, None)
    assert missed["correct"] is False and missed["expected"] == "not set up"
    assert missed["reported"] == reported(None) == "nothing (no lastFailure)"
    json.dumps({"rows": [good, missed]})
    text = table([good, missed])
    assert "| sigkill-rank |" in text and "| yes | 4.3 |" in text and "| NO | - |" in text
    assert text.endswith("1 of 2 faults diagnosed correctly")


def test_faults_are_selected_by_name() -> None:
    assert select("all") == list(FAULTS)
    assert [f.name for f in select("hang,node-lost")] == ["hang", "node-lost"]
    with pytest.raises(ValueError, match="unknown faults"):
        select("hang,meteor")
    args = parse_args(["--json", "out.json", "--faults", "etcd-lost"])
    assert [f.name for f in args.faults] == ["etcd-lost"] and str(args.json) == "out.json"
    with pytest.raises(SystemExit):
        parse_args(["--faults", "meteor"])


SHAPE = JobShape(image="trainer:1")


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_every_faults_job_is_a_valid_spec_on_the_two_nodes(fault: Any) -> None:
    manifest = job_manifest("dx", fault, SHAPE, host_dir="/var/tmp/x", keep="real-0")
    spec = parse_spec(manifest["spec"])
    assert (spec.min_nodes, spec.max_nodes, spec.max_restarts) == (
        2,
        2,
        3 if fault.recovers else 1,
    )
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["memory"]  # the OOM fault fills it
    spread = pod["topologySpreadConstraints"][0]
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["nodeTaintsPolicy"] == "Honor"
    argv = training_argv(container["command"], container["args"])
    if fault.injection is Injection.TRIGGER:
        # The wrapper runs train.py with its arguments, as the agent's --no-python command.
        assert argv[:4] == ["--no-python", "python", "-c", TRIGGER_WRAPPER]
        assert argv[4:6] == ["train.py", "--steps"]
        assert "$(" not in TRIGGER_WRAPPER  # Kubernetes would expand it
    elif fault.name == "missing-script":
        assert argv[0] == "no-such-script.py"
    else:
        assert argv[0] == "train.py"
    if fault.injection is Injection.FAIL_AT_STEP:
        assert container["args"][-6:] == ["--fail-at-step", "12", "--fail-rank", "1",
                                          "--fail-times", "1"]  # fmt: skip
    assert (container["image"] == "trainer:1") is (fault.name != "image-not-pulled")


def test_faults_of_one_pod_and_of_every_rank_are_told_apart() -> None:
    every = {f.name for f in FAULTS if f.target is Target.EVERY_RANK}
    assert every == {"exception-every-rank", "hang", "missing-script", "image-not-pulled"}
    assert all(f.trigger for f in FAULTS if f.injection is Injection.TRIGGER)


def test_expected_describes_every_pod_it_accepts() -> None:
    want = Expected("WorkerFailed", {W1: "real-1", W0: "real-0"})
    assert want.describe() == (
        "WorkerFailed on pod dx-worker-0-0 (node real-0) or pod dx-worker-1-0 (node real-1)"
    )
