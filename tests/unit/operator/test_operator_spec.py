"""parse_spec: defaults, and errors that name the field to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_agent.protocol.restarts import JOB_MAX_RESTARTS_DEFAULT
from elasticjob_operator.core.spec import CleanPodPolicy, EtcdMode, SpecError, parse_spec

from tests.support.operator_model import raw_spec


def test_defaults_fill_what_the_user_left_out() -> None:
    spec = parse_spec(
        {
            "replicas": 3,
            "template": {"spec": {"containers": [{"name": "x", "command": ["python", "t.py"]}]}},
        }
    )
    assert (spec.min_nodes, spec.replicas, spec.max_nodes) == (3, 3, 3)
    assert spec.nproc_per_node == 1
    assert spec.device == "gpu"
    assert spec.max_restarts == JOB_MAX_RESTARTS_DEFAULT == 3
    assert spec.etcd.mode is EtcdMode.MANAGED
    assert spec.etcd.key_prefix == "/elasticjob"
    assert spec.rendezvous.join_timeout_seconds == 600
    assert spec.run_policy.clean_pod_policy is CleanPodPolicy.RUNNING
    assert spec.trainer_index == 0


def test_crd_default_of_max_restarts_is_the_protocol_constant() -> None:
    """One default: the CRD's schema fills ``maxRestarts`` before the operator reads it."""
    crd = yaml.safe_load((Path(__file__).parents[3] / "crds" / "elasticjob.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    field = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["maxRestarts"]
    assert field["default"] == JOB_MAX_RESTARTS_DEFAULT


def test_trainer_container_is_found_by_name() -> None:
    spec = parse_spec(
        raw_spec(
            template={
                "spec": {
                    "containers": [
                        {"name": "sidecar", "command": ["sleep", "inf"]},
                        {"name": "trainer", "command": ["python", "t.py"]},
                    ]
                }
            }
        )
    )
    assert spec.trainer_index == 1


BAD: list[tuple[dict[str, Any], str]] = [
    ({"replicas": 0}, "spec.replicas must be >= 1"),
    ({"replicas": "2"}, "spec.replicas must be an integer"),
    ({"minNodes": 3}, "spec.replicas (2) must lie within [spec.minNodes, spec.maxNodes]"),
    ({"maxNodes": 1}, "spec.replicas (2) must lie within"),
    ({"nprocPerNode": 0}, "spec.nprocPerNode"),
    ({"nprocPerNode": "gpu"}, "spec.nprocPerNode: 'gpu' needs spec.device 'gpu'"),
    ({"device": "tpu"}, "spec.device"),
    ({"maxRestarts": -1}, "spec.maxRestarts must be >= 0"),
    ({"monitorIntervalSeconds": 0}, "spec.monitorIntervalSeconds"),
    ({"stallTimeoutSeconds": 0}, "spec.stallTimeoutSeconds must be >= 1"),
    ({"rendezvous": {"joinTimeoutSeconds": 0}}, "spec.rendezvous.joinTimeoutSeconds"),
    (
        {"rendezvous": {"joinTimeoutSeconds": 10, "lastCallTimeoutSeconds": 10}},
        "spec.rendezvous.lastCallTimeoutSeconds must be <",
    ),
    ({"etcd": {"mode": "External"}}, "spec.etcd.endpoints must list at least one"),
    ({"etcd": {"mode": "Managed", "endpoints": ["e:2379"]}}, "spec.etcd.endpoints must be empty"),
    ({"etcd": {"mode": "External", "endpoints": ["no-port"]}}, "spec.etcd.endpoints"),
    ({"etcd": {"mode": "External", "endpoints": ["::1:2379"]}}, "as [addr]:port"),
    ({"etcd": {"mode": "External", "endpoints": ["e:99999"]}}, "port must be 1-65535"),
    ({"etcd": {"mode": "External", "endpoints": ["https://e:1"]}}, "no scheme"),
    ({"etcd": {"mode": "Sideways"}}, "spec.etcd.mode"),
    ({"etcd": {"keyPrefix": "x/"}}, "spec.etcd.keyPrefix"),
    ({"nccl": {"asyncErrorHandling": 7}}, "spec.nccl.asyncErrorHandling"),
    ({"nccl": {"monitoring": "yes"}}, "spec.nccl.monitoring"),
    ({"runPolicy": {"cleanPodPolicy": "Some"}}, "spec.runPolicy.cleanPodPolicy"),
    ({"runPolicy": {"activeDeadlineSeconds": 0}}, "spec.runPolicy.activeDeadlineSeconds"),
    ({"runPolicy": {"suspend": "no"}}, "spec.runPolicy.suspend"),
    ({"template": {}}, "spec.template.spec is required"),
    ({"template": {"spec": {"containers": []}}}, "spec.template.spec.containers must list"),
    (
        {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}},
        "name the training one 'trainer'",
    ),
    (
        {"template": {"spec": {"containers": [{"name": "trainer", "args": ["x"]}]}}},
        "containers[trainer].command must hold the training command",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_spec_is_rejected_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(raw_spec(**change))
    assert message in str(info.value)


def test_spec_must_be_an_object() -> None:
    with pytest.raises(SpecError, match="spec must be an object"):
        parse_spec([])  # type: ignore[arg-type]
