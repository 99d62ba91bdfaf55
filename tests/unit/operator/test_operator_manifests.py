"""Builders: the user's command under elasticjob-agent, owner references, names, GPU requests."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_agent.protocol.failure import FinalCounts, WorkerFailure, termination_message
from elasticjob_operator.core import names
from elasticjob_operator.core.agent_command import POD_IP_ENV, training_argv
from elasticjob_operator.core.manifests import (
    GPU_RESOURCE,
    build_etcd_pod,
    build_etcd_service,
    build_worker_pod,
    build_workers_service,
)
from elasticjob_operator.core.observed import pod_view
from elasticjob_operator.core.spec import SpecError, parse_spec

from tests.support.operator_model import JOB, RUN_ID, job_spec, raw_spec

ARGV = [
    (["python", "train.py", "--steps", "5"], [], ["train.py", "--steps", "5"]),
    (["python3"], ["train.py"], ["train.py"]),
    (["/usr/bin/python3.11", "train.py"], [], ["train.py"]),
    (["python", "-m", "pkg.main"], ["--x"], ["-m", "pkg.main", "--x"]),
    (["python", "-u", "train.py"], [], ["--no-python", "python", "-u", "train.py"]),
    (["bash", "-c", "run.sh"], [], ["--no-python", "bash", "-c", "run.sh"]),
    (["./train"], ["--fast"], ["--no-python", "./train", "--fast"]),
]


@pytest.mark.parametrize(("command", "args", "expected"), ARGV)
def test_training_argv(command: list[str], args: list[str], expected: list[str]) -> None:
    assert training_argv(command, args) == expected


@pytest.mark.parametrize("command", [["torchrun", "t.py"], ["elasticjob-agent", "t.py"]])
def test_a_launcher_in_the_command_is_refused(command: list[str]) -> None:
    with pytest.raises(SpecError, match="write only the training command"):
        training_argv(command, [])


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    return dict(trainer)


def test_worker_pod_runs_the_command_under_the_agent_with_every_flag() -> None:
    spec = job_spec(
        rendezvous={"joinTimeoutSeconds": 90, "lastCallTimeoutSeconds": 3},
        nccl={"collectiveTimeoutSeconds": 100, "monitoring": False},
    )
    pod = build_worker_pod(JOB, spec, index=1, attempt=2)
    assert pod["metadata"]["name"] == "demo-worker-1-2"
    trainer = _trainer(pod)
    assert trainer["command"] == ["elasticjob-agent"]
    assert trainer["args"][-3:] == ["examples/train.py", "--steps", "10"]
    flags = _flags(trainer["args"])
    assert flags["nnodes"] == "1:4"
    assert flags["nproc-per-node"] == "2"
    assert flags["rdzv-backend"] == "etcd-v3"
    assert flags["rdzv-endpoint"] == "https://demo-etcd.ns.svc:2379"
    assert flags["rdzv-id"] == RUN_ID
    assert RUN_ID.startswith("ns-demo-0123abcd")
    assert flags["node-id"] == "demo-worker-1-2"
    assert flags["local-addr"] == f"$({POD_IP_ENV})"
    assert flags["max-restarts"] == "3"
    assert flags["health-port"] == "29401"
    assert flags["nccl-collective-timeout"] == "100"
    assert flags["nccl-monitoring"] == "0"
    conf = dict(kv.split("=") for kv in flags["rdzv-conf"].split(","))
    assert conf == {
        "join_timeout": "90",
        "last_call_timeout": "3",
        "close_timeout": "30",
        "heartbeat": "5",
        "key_prefix": "/elasticjob",
        "cacert": "/etc/elasticjob/etcd-tls/ca.crt",
        "cert": "/etc/elasticjob/etcd-tls/tls.crt",
        "key": "/etc/elasticjob/etcd-tls/tls.key",
    }
    env = {e["name"]: e for e in trainer["env"]}
    assert env[POD_IP_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert "resources" not in trainer  # cpu: no GPU request
    labels = pod["metadata"]["labels"]
    assert labels[names.LABEL_JOB] == "demo"
    assert labels[names.LABEL_ROLE] == names.ROLE_WORKER
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner["uid"] == JOB.uid and owner["controller"] is True


def test_builders_do_not_change_the_spec_they_read() -> None:
    spec = job_spec()
    before = repr(spec.template)
    build_worker_pod(JOB, spec, 0, 0)
    assert repr(spec.template) == before


def test_gpu_jobs_request_one_gpu_per_process_unless_the_template_says() -> None:
    pod = build_worker_pod(JOB, job_spec(device="gpu", nprocPerNode=4), 0, 0)
    assert _trainer(pod)["resources"]["limits"][GPU_RESOURCE] == 4

    template = raw_spec()["template"]
    template["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: 8}}
    pod = build_worker_pod(JOB, job_spec(device="gpu", nprocPerNode="gpu", template=template), 0, 0)
    assert _trainer(pod)["resources"]["limits"][GPU_RESOURCE] == 8
    assert _flags(_trainer(pod)["args"])["nproc-per-node"] == "8"


def test_nproc_gpu_without_a_gpu_limit_is_an_error() -> None:
    with pytest.raises(SpecError, match="needs the trainer container to set"):
        build_worker_pod(JOB, job_spec(device="gpu", nprocPerNode="gpu"), 0, 0)


def test_external_etcd_endpoints_go_to_the_agent() -> None:
    spec = job_spec(etcd={"mode": "External", "endpoints": ["a:2379", "b:2379"]})
    flags = _flags(_trainer(build_worker_pod(JOB, spec, 0, 0))["args"])
    assert flags["rdzv-endpoint"] == "a:2379,b:2379"


def test_etcd_pod_and_services() -> None:
    pod = build_etcd_pod(JOB, job_spec(), generation=3)
    assert pod["metadata"]["name"] == "demo-etcd-3"
    assert pod["metadata"]["labels"][names.LABEL_ETCD_GENERATION] == "3"
    assert pod["spec"]["containers"][0]["command"][0] == "etcd"
    service = build_etcd_service(JOB)
    assert service["metadata"]["name"] == "demo-etcd"
    assert service["spec"]["selector"] == names.etcd_selector("demo")
    assert service["spec"]["ports"][0]["port"] == service["spec"]["ports"][0]["targetPort"]
    headless = build_workers_service(JOB)
    assert headless["spec"]["clusterIP"] == "None"


def test_built_pods_read_back_as_views() -> None:
    worker = pod_view(build_worker_pod(JOB, job_spec(), 1, 2))
    etcd = pod_view(build_etcd_pod(JOB, job_spec(), 4))
    assert worker is not None and (worker.index, worker.attempt) == (1, 2)
    assert etcd is not None and etcd.index == 4 and etcd.role == names.ROLE_ETCD


def test_pod_view_reads_exit_code_of_the_agent_container() -> None:
    pod = build_worker_pod(JOB, job_spec(), 0, 0)
    pod["status"] = {
        "phase": "Failed",
        "podIP": "10.1.1.1",
        "containerStatuses": [
            {
                "name": "trainer",
                "state": {"terminated": {"exitCode": 10, "finishedAt": "2026-01-01T00:00:00Z"}},
            }
        ],
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}
        ],
    }
    view = pod_view(pod)
    assert view is not None
    assert view.exit_code == 10 and view.terminal and view.unschedulable == "x"
    assert view.last_failure is None


def test_pod_view_reads_the_root_cause_in_the_termination_message() -> None:
    failure = WorkerFailure(local_rank=0, time=1.0, rank=1, exit_code=1, exception_type="E")
    pod = build_worker_pod(JOB, job_spec(), 0, 0)
    terminated = {"exitCode": 10, "message": termination_message(failure).decode()}
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
    }
    view = pod_view(pod)
    assert view is not None and view.last_failure == failure
    terminated["message"] = 'rank 1 failed\n{"lastFailure": {"localRank": -1, "time": 1}}\n'
    view = pod_view(pod)
    assert view is not None and view.last_failure is None  # untrusted: refused, not a crash


def test_run_id_is_short_and_valid_for_long_names() -> None:
    run = names.run_id("n" * 63, "j" * 200, "ffffffff-1111")
    assert len(run) <= 253 and run.endswith("-ffffffff")


@pytest.mark.parametrize(
    ("template_grace", "pod_grace", "worker_shutdown"),
    [(None, 60, "50"), (120, 120, "110"), (5, 5, "1"), (0, 0, "1")],
)
def test_the_pod_grace_period_covers_the_workers_shutdown_and_the_leave(
    template_grace: int | None, pod_grace: int, worker_shutdown: str
) -> None:
    raw = raw_spec()
    if template_grace is not None:
        raw["template"]["spec"]["terminationGracePeriodSeconds"] = template_grace
    pod = build_worker_pod(JOB, parse_spec(raw), index=0, attempt=0)
    assert pod["spec"]["terminationGracePeriodSeconds"] == pod_grace
    assert _flags(_trainer(pod)["args"])["shutdown-timeout"] == worker_shutdown


def test_workers_get_a_memory_backed_dev_shm_unless_the_template_mounts_one() -> None:
    pod = build_worker_pod(JOB, job_spec(), index=0, attempt=0)
    (mount,) = [m for m in _trainer(pod)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"] == {"medium": "Memory"}

    raw = raw_spec()
    trainer = raw["template"]["spec"]["containers"][0]
    trainer["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    raw["template"]["spec"]["volumes"] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
    ]
    pod = build_worker_pod(JOB, parse_spec(raw), index=0, attempt=0)
    mounts = [m for m in _trainer(pod)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert mounts == [{"name": "shm", "mountPath": "/dev/shm"}]
    assert [v["name"] for v in pod["spec"]["volumes"] if "emptyDir" in v] == ["shm"]


@pytest.mark.parametrize("tls", [True, False])
def test_the_managed_etcd_pod_fits_the_restricted_pod_security_profile(tls: bool) -> None:
    spec = job_spec(etcd={"insecure": not tls})
    pod = build_etcd_pod(JOB, spec, generation=0)
    pod_sc = pod["spec"]["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["spec"]["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    volume_kinds = {k for v in pod["spec"]["volumes"] for k in v if k != "name"}
    assert volume_kinds <= {"emptyDir", "secret", "configMap", "projected", "downwardAPI"}
    assert "hostNetwork" not in pod["spec"] and "hostPID" not in pod["spec"]


def test_the_managed_etcd_runs_where_the_workers_may_run() -> None:
    raw = raw_spec()
    toleration = {"key": "gpu-pool", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    raw["template"]["spec"].update(
        nodeSelector={"pool": "train"}, tolerations=[toleration], affinity=affinity
    )
    pod = build_etcd_pod(JOB, parse_spec(raw), generation=0)
    assert pod["spec"]["nodeSelector"] == {"pool": "train"}
    assert pod["spec"]["tolerations"] == [toleration]
    # Node affinity only: the workers' pod (anti-)affinity rules are about workers.
    assert pod["spec"]["affinity"] == {"nodeAffinity": affinity["nodeAffinity"]}

    plain = build_etcd_pod(JOB, job_spec(), generation=0)
    assert not {"nodeSelector", "tolerations", "affinity"} & set(plain["spec"])


def test_the_managed_etcd_has_requests_unless_the_spec_sets_its_resources() -> None:
    (container,) = build_etcd_pod(JOB, job_spec(), generation=0)["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    mine = {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}
    (container,) = build_etcd_pod(JOB, job_spec(etcd={"resources": mine}), generation=0)["spec"][
        "containers"
    ]
    assert container["resources"] == mine


def test_pod_view_reads_the_final_counts_in_the_termination_message() -> None:
    failure = WorkerFailure(local_rank=0, time=1.0, rank=0, exit_code=3)
    pod = build_worker_pod(JOB, job_spec(), 0, 0)
    message = termination_message(failure, FinalCounts("run", {"failure": 2})).decode()
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 10, "message": message}}}
        ],
    }
    view = pod_view(pod)
    assert view is not None and view.last_failure == failure
    assert view.final_counts == FinalCounts("run", {"failure": 2})
