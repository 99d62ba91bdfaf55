"""Operator settings: a dataclass read once at start (environment variables, then flags)."""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import leadership, netpol, progress
from .cadence import CadenceSettings
from .loop_settings import LoopSettings
from .stall import StallSettings

_INSTANCE = uuid.uuid4().hex[:8]
"""Tells this process from an earlier one of the same pod or host in the Lease."""


class SettingsError(ValueError):
    """An environment variable or flag has a value the operator cannot use."""


@dataclass(frozen=True)
class OperatorSettings:
    metrics_port: int = 8080
    """Port of ``/metrics`` (``ELASTICJOB_METRICS_PORT``; 0 disables)."""
    health_port: int = 8081
    """Port of kopf's liveness endpoint ``/healthz`` (``ELASTICJOB_HEALTH_PORT``)."""
    watch_namespaces: tuple[str, ...] = ()
    """Namespaces to watch (``ELASTICJOB_WATCH_NAMESPACES``, comma-separated); empty: all."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error`` (``ELASTICJOB_LOG_LEVEL``)."""
    loop: LoopSettings = field(default_factory=LoopSettings)
    """Reconcile interval (``ELASTICJOB_INTERVAL_SECONDS``), stall thresholds
    (``ELASTICJOB_ETCD_UNAVAILABLE_AFTER_SECONDS``, ``ELASTICJOB_WAITING_AFTER_SECONDS``) and a
    steady job's probe periods (``ELASTICJOB_STEADY_ETCD_SECONDS``,
    ``ELASTICJOB_STEADY_REPORT_SECONDS``)."""
    probe_concurrency: int = 128
    """Probes of agents and etcds in flight at once, across all jobs
    (``ELASTICJOB_PROBE_CONCURRENCY``; 0: unbounded)."""
    leader_election: bool = True
    """Act only while holding the Lease (``ELASTICJOB_LEADER_ELECTION``, ``false`` turns it off:
    then nothing stops a second operator from acting too)."""
    lease_namespace: str = "default"
    """Namespace of the Lease (``ELASTICJOB_LEASE_NAMESPACE``, else ``POD_NAMESPACE``)."""
    lease_name: str = "elasticjob-operator"
    """Name of the Lease (``ELASTICJOB_LEASE_NAME``); operators sharing it elect one leader."""
    identity: str = ""
    """This process in the Lease (``POD_NAME``, else host name; a random suffix is added)."""
    lease: leadership.LeaseTimings = field(default_factory=leadership.LeaseTimings)
    """``ELASTICJOB_LEASE_DURATION_SECONDS``, ``ELASTICJOB_LEASE_RENEW_DEADLINE_SECONDS``,
    ``ELASTICJOB_LEASE_RETRY_PERIOD_SECONDS``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env
        level = env.get("ELASTICJOB_LOG_LEVEL", "info").lower()
        if level not in ("debug", "info", "warning", "error"):
            raise SettingsError(
                f"ELASTICJOB_LOG_LEVEL must be debug, info, warning or error, got {level!r}"
            )
        stall = StallSettings(
            etcd_unavailable_after=_number(env, "ELASTICJOB_ETCD_UNAVAILABLE_AFTER_SECONDS", 4.0),
            waiting_after=_number(env, "ELASTICJOB_WAITING_AFTER_SECONDS", 15.0),
            progress_sample=_number(
                env, "ELASTICJOB_PROGRESS_SAMPLE_SECONDS", progress.SAMPLE_SECONDS
            ),
            progress_writes_per_second=_number(
                env, "ELASTICJOB_PROGRESS_WRITES_PER_SECOND", progress.WRITES_PER_SECOND
            ),
        )
        return cls(
            metrics_port=int(_number(env, "ELASTICJOB_METRICS_PORT", 8080)),
            health_port=int(_number(env, "ELASTICJOB_HEALTH_PORT", 8081)),
            watch_namespaces=tuple(
                n.strip()
                for n in env.get("ELASTICJOB_WATCH_NAMESPACES", "").split(",")
                if n.strip()
            ),
            log_level=level,
            loop=LoopSettings(
                interval=_number(env, "ELASTICJOB_INTERVAL_SECONDS", 2.0),
                stall=stall,
                policies=_policies(env),
                cadence=CadenceSettings(
                    etcd_interval=_number(env, "ELASTICJOB_STEADY_ETCD_SECONDS", 3.0),
                    report_interval=_number(env, "ELASTICJOB_STEADY_REPORT_SECONDS", 10.0),
                    probes_per_second=_number(env, "ELASTICJOB_STEADY_PROBES_PER_SECOND", 400.0),
                ),
            ),
            probe_concurrency=int(_number(env, "ELASTICJOB_PROBE_CONCURRENCY", 128)),
            leader_election=_flag(env, "ELASTICJOB_LEADER_ELECTION", True),
            lease_namespace=env.get("ELASTICJOB_LEASE_NAMESPACE")
            or env.get("POD_NAMESPACE")
            or "default",
            lease_name=env.get("ELASTICJOB_LEASE_NAME") or "elasticjob-operator",
            identity=f"{env.get('POD_NAME') or socket.gethostname()}_{_INSTANCE}",
            lease=_timings(env),
        )


def _policies(env: Mapping[str, str]) -> netpol.PolicySettings | None:
    """``ELASTICJOB_NETWORK_POLICY`` (default true), the operator's own pods
    (``POD_NAMESPACE`` and ``ELASTICJOB_OPERATOR_POD_LABELS``), and Prometheus
    (``ELASTICJOB_PROMETHEUS_NAMESPACE_LABELS``, ``ELASTICJOB_PROMETHEUS_POD_LABELS``)."""
    if not _flag(env, "ELASTICJOB_NETWORK_POLICY", True):
        return None
    namespace = env.get("POD_NAMESPACE") or env.get("ELASTICJOB_LEASE_NAMESPACE") or "default"
    own = _labels(
        env, "ELASTICJOB_OPERATOR_POD_LABELS", {"app.kubernetes.io/name": "elasticjob-operator"}
    )
    operator = netpol.Peer.in_namespace(namespace, own or {})
    prom_ns = _labels(env, "ELASTICJOB_PROMETHEUS_NAMESPACE_LABELS", None)
    prom_pods = _labels(env, "ELASTICJOB_PROMETHEUS_POD_LABELS", None)
    prometheus = (
        netpol.Peer(prom_ns or {}, prom_pods or {})
        if prom_ns is not None or prom_pods is not None
        else None
    )
    return netpol.PolicySettings(operator, prometheus)


def _labels(
    env: Mapping[str, str], key: str, default: dict[str, str] | None
) -> dict[str, str] | None:
    """``k=v,k=v`` labels; an empty value means "any" (``{}``), an unset one the default."""
    if key not in env:
        return default
    labels: dict[str, str] = {}
    for item in env[key].split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"{key} must be k=v,k=v labels, got {env[key]!r}")
        labels[name.strip()] = value.strip()
    return labels


def _timings(env: Mapping[str, str]) -> leadership.LeaseTimings:
    try:
        return leadership.LeaseTimings(
            duration=_number(env, "ELASTICJOB_LEASE_DURATION_SECONDS", 15.0),
            renew_deadline=_number(env, "ELASTICJOB_LEASE_RENEW_DEADLINE_SECONDS", 10.0),
            retry_period=_number(env, "ELASTICJOB_LEASE_RETRY_PERIOD_SECONDS", 2.0),
        )
    except leadership.SettingsError as exc:
        raise SettingsError(str(exc)) from None


def _flag(env: Mapping[str, str], key: str, default: bool) -> bool:
    raw = env.get(key, "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise SettingsError(f"{key} must be true or false, got {raw!r}")


def _number(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{key} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise SettingsError(f"{key} must be a finite number, got {raw!r}")
    if value < 0:
        raise SettingsError(f"{key} must not be negative, got {raw!r}")
    return value
