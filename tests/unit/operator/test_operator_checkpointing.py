"""``spec.checkpoint`` (pure): parsing, the agent's environment, the memory accounting."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_agent.protocol.endpoints import TlsFiles
from elasticjob_operator.core.agent_command import POD_IP_ENV
from elasticjob_operator.core.checkpointing import (
    CheckpointSpec,
    CheckpointSpecError,
    checkpoint_env,
    parse_checkpoint,
    quantity_bytes,
    with_checkpoint_memory,
)
from elasticjob_operator.core.manifests import build_worker_pod
from elasticjob_operator.core.spec import SpecError

from tests.support.operator_model import JOB, job_spec


def test_absent_means_off_and_defaults_fill_in() -> None:
    assert parse_checkpoint(None) is None
    assert parse_checkpoint({"memoryLimit": "8Gi"}) == CheckpointSpec(8 << 30, 2, None)
    assert parse_checkpoint(
        {"memoryLimit": 1000, "stepsKept": 3, "persistPath": "/ckpt"}
    ) == CheckpointSpec(1000, 3, "/ckpt")
    assert parse_checkpoint({"memoryLimit": 1000, "replicas": 2}) == CheckpointSpec(
        1000, 2, None, 2
    )


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({}, "memoryLimit"),
        ({"memoryLimit": "lots"}, "memoryLimit"),
        ({"memoryLimit": "0"}, "memoryLimit"),
        ({"memoryLimit": "1Gi", "stepsKept": 0}, "stepsKept"),
        ({"memoryLimit": "1Gi", "stepsKept": True}, "stepsKept"),
        ({"memoryLimit": "1Gi", "persistPath": "relative"}, "persistPath"),
        ({"memoryLimit": "1Gi", "replicas": 0}, "replicas"),
        ({"memoryLimit": "1Gi", "replicas": 8}, "replicas"),
        ({"memoryLimit": "1Gi", "replicas": True}, "replicas"),
        ([], "spec.checkpoint"),
    ],
)
def test_bad_input_names_the_field(raw: Any, field: str) -> None:
    with pytest.raises(CheckpointSpecError, match=field):
        parse_checkpoint(raw)


def test_env_names_the_pod_ip_and_the_jobs_certificates() -> None:
    env = {
        e["name"]: e["value"]
        for e in checkpoint_env(
            CheckpointSpec(1 << 30, 2, "/ckpt"),
            pod_ip_env="POD_IP",
            tls=TlsFiles("/etc/tls/ca.crt", "/etc/tls/tls.crt", "/etc/tls/tls.key"),
        )
    }
    assert env == {
        "ELASTICJOB_CHECKPOINT_MEMORY_LIMIT": str(1 << 30),
        "ELASTICJOB_CHECKPOINT_KEEP": "2",
        "ELASTICJOB_CHECKPOINT_REPLICAS": "1",
        "ELASTICJOB_CHECKPOINT_ADDR": "$(POD_IP)",
        "ELASTICJOB_CHECKPOINT_PORT": "29402",
        "ELASTICJOB_CHECKPOINT_PERSIST_DIR": "/ckpt",
        "ELASTICJOB_CHECKPOINT_CACERT": "/etc/tls/ca.crt",
        "ELASTICJOB_CHECKPOINT_CERT": "/etc/tls/tls.crt",
        "ELASTICJOB_CHECKPOINT_KEY": "/etc/tls/tls.key",
    }
    without_tls = checkpoint_env(CheckpointSpec(1, 2, None), pod_ip_env="POD_IP", tls=None)
    assert not any("CERT" in e["name"] or "PERSIST" in e["name"] for e in without_tls)


@pytest.mark.parametrize(
    ("text", "want"),
    [("1Gi", 1 << 30), ("1.5Gi", 3 << 29), ("500M", 500 * 10**6), ("1e3", 1000), ("100m", 1)],
)
def test_quantity_bytes(text: str, want: int) -> None:
    assert quantity_bytes(text, "x") == want


@pytest.mark.parametrize(
    ("resources", "want"),
    [
        (None, {"requests": {"memory": "100"}}),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1", "memory": "100"}}),
        ({"requests": {"memory": "1k"}}, {"requests": {"memory": "1100"}}),
        (
            {"requests": {"memory": "1k"}, "limits": {"memory": "2k", "nvidia.com/gpu": 1}},
            {"requests": {"memory": "1100"}, "limits": {"memory": "2100", "nvidia.com/gpu": 1}},
        ),
        # a limit without a request: Kubernetes would default the request to the limit
        (
            {"limits": {"memory": "2k"}},
            {"requests": {"memory": "2100"}, "limits": {"memory": "2100"}},
        ),
    ],
)
def test_memory_accounting(resources: dict[str, Any] | None, want: dict[str, Any]) -> None:
    assert with_checkpoint_memory(resources, 100) == want


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    return dict(trainer)


def test_a_worker_pod_carries_the_checkpoint_settings_port_and_memory() -> None:
    spec = job_spec(checkpoint={"memoryLimit": "1Gi", "stepsKept": 3, "replicas": 2})
    trainer = _trainer(build_worker_pod(JOB, spec, index=0, attempt=0))
    env = [e["name"] for e in trainer["env"]]
    assert env.index(POD_IP_ENV) < env.index("ELASTICJOB_CHECKPOINT_ADDR")
    values = {e["name"]: e.get("value") for e in trainer["env"]}
    assert values["ELASTICJOB_CHECKPOINT_MEMORY_LIMIT"] == str(1 << 30)
    assert values["ELASTICJOB_CHECKPOINT_KEEP"] == "3"
    assert values["ELASTICJOB_CHECKPOINT_REPLICAS"] == "2"
    # the managed etcd's client certificate, mounted for the agent, also serves the peer channel
    assert values["ELASTICJOB_CHECKPOINT_CERT"].endswith("/tls.crt")
    assert {"name": "checkpoint", "containerPort": 29402, "protocol": "TCP"} in trainer["ports"]
    assert trainer["resources"]["requests"]["memory"] == str(1 << 30)
    without = _trainer(build_worker_pod(JOB, job_spec(), index=0, attempt=0))
    assert not any(e["name"].startswith("ELASTICJOB_CHECKPOINT_") for e in without["env"])


def test_a_bad_checkpoint_spec_is_a_spec_error_naming_the_field() -> None:
    with pytest.raises(SpecError, match="memoryLimit"):
        job_spec(checkpoint={"memoryLimit": "lots"})
