"""Every ``default:`` in the CRD's schema is the value the code uses when the field is absent.

The CRD fills defaults before the operator sees an object, and the operator's ``parse_spec``
fills them again for objects stored before a default existed; the agent's own flags fall back
to the same facts. Each agent-side fact has one home in the agent's ``protocol`` package
(``protocol/defaults.py`` and its neighbours): this module ties the CRD, the parsed spec and
the agent's flags to it. A new ``default:`` in the CRD fails here until it is listed below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_agent.args import parse_args
from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.checkpoint import DEFAULT_KEEP, DEFAULT_REPLICAS
from elasticjob_agent.protocol.hang_timeout import AutoSettings
from elasticjob_agent.protocol.restarts import JOB_MAX_RESTARTS_DEFAULT
from elasticjob_agent.rendezvous.config import RendezvousConfig
from elasticjob_agent.supervision.worker_env import AgentKnobs
from elasticjob_operator.core import stragglers_spec
from elasticjob_operator.core.spec import EtcdSpec, JobSpec, NcclSpec, RendezvousSpec, parse_spec

CRD = Path(__file__).parents[3] / "crds" / "elasticjob.yaml"

_AUTO = AutoSettings()

AGENT_FACTS: dict[str, object] = {
    "spec.maxRestarts": JOB_MAX_RESTARTS_DEFAULT,
    "spec.rendezvous.joinTimeoutSeconds": defaults.RDZV_JOIN_TIMEOUT_SECONDS,
    "spec.rendezvous.lastCallTimeoutSeconds": defaults.RDZV_LAST_CALL_TIMEOUT_SECONDS,
    "spec.rendezvous.closeTimeoutSeconds": defaults.RDZV_CLOSE_TIMEOUT_SECONDS,
    "spec.rendezvous.heartbeatSeconds": defaults.RDZV_HEARTBEAT_SECONDS,
    "spec.etcd.keyPrefix": defaults.KEY_PREFIX,
    "spec.nccl.collectiveTimeoutSeconds": defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS,
    "spec.nccl.heartbeatTimeoutSeconds": defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS,
    "spec.nccl.asyncErrorHandling": defaults.NCCL_ASYNC_ERROR_HANDLING,
    "spec.nccl.monitoring": defaults.NCCL_MONITORING,
    "spec.checkpoint.stepsKept": DEFAULT_KEEP,
    "spec.checkpoint.replicas": DEFAULT_REPLICAS,
    "spec.progress.factor": _AUTO.factor,
    "spec.progress.percentile": _AUTO.percentile,
    "spec.progress.windowSteps": _AUTO.window,
    "spec.progress.floorSeconds": _AUTO.floor,
    "spec.progress.ceilingSeconds": _AUTO.ceiling,
    "spec.progress.exemptSteps": _AUTO.exempt,
}
"""CRD fields whose default is an agent-side fact, and that fact's one home."""

PARSED: dict[str, Callable[[JobSpec], object]] = {
    "spec.spares": lambda s: s.spares,
    "spec.nprocPerNode": lambda s: s.nproc_per_node,
    "spec.device": lambda s: s.device,
    "spec.maxRestarts": lambda s: s.max_restarts,
    "spec.monitorIntervalSeconds": lambda s: s.monitor_interval_seconds,
    "spec.stallTimeoutSeconds": lambda s: s.stall_timeout_seconds,
    "spec.checkpoint.stepsKept": lambda s: s.checkpoint and s.checkpoint.steps_kept,
    "spec.checkpoint.replicas": lambda s: s.checkpoint and s.checkpoint.replicas,
    "spec.progress.factor": lambda s: s.progress_auto and s.progress_auto.factor,
    "spec.progress.percentile": lambda s: s.progress_auto and s.progress_auto.percentile,
    "spec.progress.windowSteps": lambda s: s.progress_auto and s.progress_auto.window,
    "spec.progress.floorSeconds": lambda s: s.progress_auto and s.progress_auto.floor,
    "spec.progress.ceilingSeconds": lambda s: s.progress_auto and s.progress_auto.ceiling,
    "spec.progress.exemptSteps": lambda s: s.progress_auto and s.progress_auto.exempt,
    "spec.rendezvous.joinTimeoutSeconds": lambda s: s.rendezvous.join_timeout_seconds,
    "spec.rendezvous.lastCallTimeoutSeconds": lambda s: s.rendezvous.last_call_timeout_seconds,
    "spec.rendezvous.closeTimeoutSeconds": lambda s: s.rendezvous.close_timeout_seconds,
    "spec.rendezvous.heartbeatSeconds": lambda s: s.rendezvous.heartbeat_seconds,
    "spec.etcd.mode": lambda s: s.etcd.mode,
    "spec.etcd.keyPrefix": lambda s: s.etcd.key_prefix,
    "spec.etcd.insecure": lambda s: s.etcd.insecure,
    "spec.nccl.collectiveTimeoutSeconds": lambda s: s.nccl.collective_timeout_seconds,
    "spec.nccl.heartbeatTimeoutSeconds": lambda s: s.nccl.heartbeat_timeout_seconds,
    "spec.nccl.asyncErrorHandling": lambda s: s.nccl.async_error_handling,
    "spec.nccl.monitoring": lambda s: s.nccl.monitoring,
    "spec.runPolicy.suspend": lambda s: s.run_policy.suspend,
    "spec.runPolicy.cleanPodPolicy": lambda s: s.run_policy.clean_pod_policy,
    "spec.health.stragglers.factor": lambda s: s.health.stragglers.factor,
    "spec.health.stragglers.windowSeconds": lambda s: s.health.stragglers.window_seconds,
    "spec.health.stragglers.action": lambda s: s.health.stragglers.action,
    "spec.health.preflight": lambda s: s.health.preflight,
}
"""Every CRD field with a scalar default, and where ``parse_spec`` puts it."""


def _defaults(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, object]]:
    """``(field path, default)`` of every property below ``node`` with a scalar default (an
    object's ``default: {}`` only makes its own fields' defaults apply)."""
    for name, sub in (node.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        if "default" in sub and not isinstance(sub["default"], Mapping):
            yield where, sub["default"]
        yield from _defaults(sub, where)


def schema_defaults() -> dict[str, object]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return dict(_defaults(version["schema"]["openAPIV3Schema"], ""))


def _same(crd_value: object, value: object) -> bool:
    """Equal, and a boolean only where the other is one (``True == 1`` in Python)."""
    return crd_value == value and isinstance(crd_value, bool) == isinstance(value, bool)


def empty_spec() -> JobSpec:
    """The operator's view of a job that sets nothing it may leave out (``checkpoint`` and
    ``progress`` present with only their required fields, so their defaults apply)."""
    return parse_spec(
        {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "x", "command": ["python", "t.py"]}]}},
            "checkpoint": {"memoryLimit": "1Gi"},
            "progress": {"mode": "Auto"},
        }
    )


def test_every_crd_default_is_listed() -> None:
    assert set(schema_defaults()) == set(PARSED)
    assert set(AGENT_FACTS) <= set(PARSED)


@pytest.mark.parametrize("path,value", AGENT_FACTS.items(), ids=AGENT_FACTS.keys())
def test_crd_default_is_the_agent_fact(path: str, value: object) -> None:
    crd_value = schema_defaults()[path]
    assert _same(crd_value, value), f"{CRD.name}: {path} defaults to {crd_value!r}, not {value!r}"


@pytest.mark.parametrize("path,read", PARSED.items(), ids=PARSED.keys())
def test_parse_spec_fills_the_crd_default(path: str, read: Callable[[JobSpec], object]) -> None:
    crd_value = schema_defaults()[path]
    assert _same(crd_value, read(empty_spec())), path


def test_the_spec_dataclasses_default_to_the_same_facts() -> None:
    spec = empty_spec()
    assert spec.rendezvous == RendezvousSpec()
    assert spec.nccl == NcclSpec()
    assert spec.etcd.key_prefix == EtcdSpec().key_prefix


def test_the_health_defaults_have_one_home() -> None:
    """``spec.health``'s defaults live in ``stragglers_spec`` (operator-side facts)."""
    crd = schema_defaults()
    assert _same(crd["spec.health.stragglers.factor"], stragglers_spec.DEFAULT_FACTOR)
    windows = crd["spec.health.stragglers.windowSeconds"]
    assert _same(windows, stragglers_spec.DEFAULT_WINDOW_SECONDS)
    assert crd["spec.health.stragglers.action"] == stragglers_spec.StragglerAction.REPORT.value
    assert stragglers_spec.StragglerSpec() == empty_spec().health.stragglers


def test_the_agent_without_flags_uses_the_same_facts() -> None:
    args = parse_args(["--standalone", "train.py"], {})
    assert args.nccl_collective_timeout == defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS
    assert args.nccl_heartbeat_timeout == defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS
    assert args.nccl_async_error_handling == str(defaults.NCCL_ASYNC_ERROR_HANDLING)
    assert args.nccl_monitoring == str(int(defaults.NCCL_MONITORING))
    assert args.etcd_timeout == defaults.ETCD_TIMEOUT_SECONDS
    assert args.shutdown_timeout == defaults.SHUTDOWN_TIMEOUT_SECONDS
    assert args.health_port == defaults.HEALTH_PORT
    assert args.key_prefix == defaults.KEY_PREFIX
    assert args.rdzv_backend == defaults.BACKEND_NAME
    knobs = AgentKnobs()
    assert (knobs.nccl_collective_timeout, knobs.nccl_heartbeat_timeout) == (
        args.nccl_collective_timeout,
        args.nccl_heartbeat_timeout,
    )
    assert (knobs.nccl_async_error_handling, knobs.nccl_monitoring) == (
        args.nccl_async_error_handling,
        args.nccl_monitoring,
    )


def test_the_rendezvous_config_defaults_to_the_same_facts() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(RendezvousConfig)}
    assert fields["join_timeout"] == defaults.RDZV_JOIN_TIMEOUT_SECONDS
    assert fields["last_call_timeout"] == defaults.RDZV_LAST_CALL_TIMEOUT_SECONDS
    assert fields["close_timeout"] == defaults.RDZV_CLOSE_TIMEOUT_SECONDS
    assert fields["heartbeat"] == defaults.RDZV_HEARTBEAT_SECONDS
    assert fields["etcd_timeout"] == defaults.ETCD_TIMEOUT_SECONDS
    assert fields["key_prefix"] == defaults.KEY_PREFIX
