"""Operator settings: a dataclass read once at start (environment variables, then flags).

``VARIABLES`` is the one table of the settings read from the environment: each row names the
field, its variable, its default and what it means. ``OperatorSettings`` takes its defaults from
the table, and ``from_env`` reads the table; a default of a nested setting (``LoopSettings``,
``StallSettings``, ``CadenceSettings``, ``LeaseTimings``) is read from that dataclass, which
keeps it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .core import leadership, netpol
from .core.cadence import CadenceSettings
from .core.loop_settings import LoopSettings
from .core.quarantine import QuarantineSettings
from .core.stall import StallSettings
from .logs import LOG_FORMATS

_INSTANCE = uuid.uuid4().hex[:8]
"""Tells this process from an earlier one of the same pod or host in the Lease."""

LOG_LEVELS = ("debug", "info", "warning", "error")


class SettingsError(ValueError):
    """An environment variable or flag has a value the operator cannot use."""


Reader = Callable[[Mapping[str, str], "Variable"], Any]
"""Reads a row's variable from the environment (its default when unset); raises
``SettingsError``."""


@dataclass(frozen=True)
class Variable:
    """One row of the settings table."""

    field: str
    """The field of ``OperatorSettings``, dotted into nested settings (``loop.stall.x``)."""
    env: str
    """The environment variable."""
    default: Any
    doc: str
    read: Reader


def _number(env: Mapping[str, str], row: Variable) -> float:
    raw = env.get(row.env, "")
    if not raw:
        return float(row.default)
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{row.env} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise SettingsError(f"{row.env} must be a finite number, got {raw!r}")
    if value < 0:
        raise SettingsError(f"{row.env} must not be negative, got {raw!r}")
    return value


def _count(env: Mapping[str, str], row: Variable) -> int:
    return int(_number(env, row))


def _flag_of(env: Mapping[str, str], key: str, default: bool) -> bool:
    raw = env.get(key, "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise SettingsError(f"{key} must be true or false, got {raw!r}")


def _flag(env: Mapping[str, str], row: Variable) -> bool:
    return _flag_of(env, row.env, bool(row.default))


def _text(env: Mapping[str, str], row: Variable) -> str:
    return env.get(row.env) or str(row.default)


def _names(env: Mapping[str, str], row: Variable) -> tuple[str, ...]:
    return tuple(n.strip() for n in env.get(row.env, "").split(",") if n.strip()) or tuple(
        row.default
    )


def _level(env: Mapping[str, str], row: Variable) -> str:
    level = env.get(row.env, row.default).lower()
    if level not in LOG_LEVELS:
        raise SettingsError(f"{row.env} must be debug, info, warning or error, got {level!r}")
    return str(level)


def _log_format(env: Mapping[str, str], row: Variable) -> str:
    value = (env.get(row.env) or row.default).lower()
    if value not in LOG_FORMATS:
        raise SettingsError(f"{row.env} must be text or json, got {value!r}")
    return str(value)


def _own_namespace(env: Mapping[str, str], row: Variable) -> str:
    return env.get(row.env) or env.get("POD_NAMESPACE") or str(row.default)


def _default_of(cls: type[Any], name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (its one home)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(name)


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "metrics_port", "ELASTICJOB_METRICS_PORT", 8080, "Port of ``/metrics``; 0 disables.", _count
    ),
    Variable(
        "health_port",
        "ELASTICJOB_HEALTH_PORT",
        8081,
        "Port of kopf's liveness endpoint ``/healthz``.",
        _count,
    ),
    Variable(
        "watch_namespaces",
        "ELASTICJOB_WATCH_NAMESPACES",
        (),
        "Namespaces to watch, comma-separated; empty: all.",
        _names,
    ),
    Variable(
        "log_level",
        "ELASTICJOB_LOG_LEVEL",
        "info",
        "``debug``, ``info``, ``warning`` or ``error``.",
        _level,
    ),
    Variable(
        "log_format",
        "ELASTICJOB_LOG_FORMAT",
        "text",
        "``text`` or ``json`` (one object a line: time, level, logger, message, and the job's "
        "namespace and name where known).",
        _log_format,
    ),
    Variable(
        "loop.interval",
        "ELASTICJOB_INTERVAL_SECONDS",
        _default_of(LoopSettings, "interval"),
        "Seconds between reconcile steps of an active job (stall detection resolution).",
        _number,
    ),
    Variable(
        "loop.etcd_image",
        "ELASTICJOB_ETCD_IMAGE",
        _default_of(LoopSettings, "etcd_image"),
        "Image of the managed etcd of jobs that set no ``spec.etcd.image`` (an air-gapped "
        "registry's copy); empty: the operator's built-in default.",
        _text,
    ),
    Variable(
        "loop.stall.etcd_unavailable_after",
        "ELASTICJOB_ETCD_UNAVAILABLE_AFTER_SECONDS",
        _default_of(StallSettings, "etcd_unavailable_after"),
        "Seconds of failed etcd probes before a job's etcd counts as unavailable.",
        _number,
    ),
    Variable(
        "loop.stall.waiting_after",
        "ELASTICJOB_WAITING_AFTER_SECONDS",
        _default_of(StallSettings, "waiting_after"),
        "Seconds agents wait for nodes before the job is stalled waiting.",
        _number,
    ),
    Variable(
        "loop.stall.progress_sample",
        "ELASTICJOB_PROGRESS_SAMPLE_SECONDS",
        _default_of(StallSettings, "progress_sample"),
        "Least time between two samples of ``status.progress``.",
        _number,
    ),
    Variable(
        "loop.stall.progress_writes_per_second",
        "ELASTICJOB_PROGRESS_WRITES_PER_SECOND",
        _default_of(StallSettings, "progress_writes_per_second"),
        "Progress samples written a second across all jobs at most.",
        _number,
    ),
    Variable(
        "loop.stall.root_cause_window",
        "ELASTICJOB_ROOT_CAUSE_WINDOW_SECONDS",
        _default_of(StallSettings, "root_cause_window"),
        "How long after a failure what the operator sees may still correct its root cause.",
        _number,
    ),
    Variable(
        "loop.cadence.etcd_interval",
        "ELASTICJOB_STEADY_ETCD_SECONDS",
        _default_of(CadenceSettings, "etcd_interval"),
        "Period of a steady job's etcd probe.",
        _number,
    ),
    Variable(
        "loop.cadence.report_interval",
        "ELASTICJOB_STEADY_REPORT_SECONDS",
        _default_of(CadenceSettings, "report_interval"),
        "Period of a steady job's poll of its agents.",
        _number,
    ),
    Variable(
        "loop.cadence.probes_per_second",
        "ELASTICJOB_STEADY_PROBES_PER_SECOND",
        _default_of(CadenceSettings, "probes_per_second"),
        "Probes of steady jobs a second across all jobs; past it their periods stretch.",
        _number,
    ),
    Variable(
        "loop.quarantine.failures",
        "ELASTICJOB_QUARANTINE_FAILURES",
        _default_of(QuarantineSettings, "failures"),
        "Hardware-like failures of a job's workers on one node (node lost, a signal from "
        "outside, a device error) within the window that make the job's new pods avoid the "
        "node; 0 turns the quarantine off.",
        _count,
    ),
    Variable(
        "loop.quarantine.window",
        "ELASTICJOB_QUARANTINE_WINDOW_SECONDS",
        _default_of(QuarantineSettings, "window"),
        "Seconds within which those failures count.",
        _number,
    ),
    Variable(
        "loop.quarantine.taint",
        "ELASTICJOB_TAINT_BAD_NODES",
        _default_of(QuarantineSettings, "taint"),
        "Also taint a node a job starts avoiding for its failures (``elasticjob.dev/bad-node``, "
        "``NoSchedule``): every job's new pods keep off it until an admin removes the taint. "
        "Needs ``patch`` on nodes (the chart grants it with ``badNodes.taint``).",
        _flag,
    ),
    Variable(
        "node_conditions",
        "ELASTICJOB_BAD_NODE_CONDITIONS",
        (),
        "Node condition types (comma-separated, e.g. ``GpuUnhealthy,KernelDeadlock``) that make "
        "a node bad while their status is True: jobs move their pods off it; empty: none.",
        _names,
    ),
    Variable(
        "probe_concurrency",
        "ELASTICJOB_PROBE_CONCURRENCY",
        128,
        "Probes of agents and etcds in flight at once, across all jobs; 0: unbounded.",
        _count,
    ),
    Variable(
        "leader_election",
        "ELASTICJOB_LEADER_ELECTION",
        True,
        "Act only while holding the Lease; ``false`` turns it off (then nothing stops a "
        "second operator from acting too).",
        _flag,
    ),
    Variable(
        "lease_namespace",
        "ELASTICJOB_LEASE_NAMESPACE",
        "default",
        "The operator's own namespace, else ``POD_NAMESPACE``: where its Lease lives and "
        "whose pods the jobs' NetworkPolicies let in as the operator.",
        _own_namespace,
    ),
    Variable(
        "lease_name",
        "ELASTICJOB_LEASE_NAME",
        "elasticjob-operator",
        "Name of the Lease; operators sharing it elect one leader.",
        _text,
    ),
    Variable(
        "lease.duration",
        "ELASTICJOB_LEASE_DURATION_SECONDS",
        _default_of(leadership.LeaseTimings, "duration"),
        "Seconds a Lease not renewed stays its holder's.",
        _number,
    ),
    Variable(
        "lease.renew_deadline",
        "ELASTICJOB_LEASE_RENEW_DEADLINE_SECONDS",
        _default_of(leadership.LeaseTimings, "renew_deadline"),
        "Seconds a holder tries to renew before it exits.",
        _number,
    ),
    Variable(
        "lease.retry_period",
        "ELASTICJOB_LEASE_RETRY_PERIOD_SECONDS",
        _default_of(leadership.LeaseTimings, "retry_period"),
        "Seconds between two tries to take or renew the Lease.",
        _number,
    ),
)


def _default(name: str) -> Any:
    return next(row.default for row in VARIABLES if row.field == name)


@dataclass(frozen=True)
class OperatorSettings:
    """The operator's settings. Each field read from the environment is a row of
    ``VARIABLES`` (its variable, default and meaning)."""

    metrics_port: int = _default("metrics_port")
    health_port: int = _default("health_port")
    watch_namespaces: tuple[str, ...] = _default("watch_namespaces")
    log_level: str = _default("log_level")
    log_format: str = _default("log_format")
    loop: LoopSettings = field(default_factory=LoopSettings)
    """Reconcile interval, stall thresholds and a steady job's probe periods (``loop.*`` rows),
    and the jobs' NetworkPolicies (``_policies``)."""
    node_conditions: tuple[str, ...] = _default("node_conditions")
    """Node condition types that make a node bad (``core/node_conditions.py``)."""
    probe_concurrency: int = _default("probe_concurrency")
    leader_election: bool = _default("leader_election")
    lease_namespace: str = _default("lease_namespace")
    lease_name: str = _default("lease_name")
    identity: str = ""
    """This process in the Lease (``POD_NAME``, else host name; a random suffix is added)."""
    lease: leadership.LeaseTimings = field(default_factory=leadership.LeaseTimings)
    """The Lease's timings (``lease.*`` rows)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        """Read every row of ``VARIABLES`` (and the NetworkPolicies' variables) from ``env``
        (default: the process environment). Raises ``SettingsError`` naming the variable."""
        env = os.environ if env is None else env
        values = {row.field: row.read(env, row) for row in VARIABLES}

        def section(prefix: str) -> dict[str, Any]:
            return {
                name.removeprefix(prefix): value
                for name, value in values.items()
                if name.startswith(prefix) and "." not in name.removeprefix(prefix)
            }

        try:
            lease = leadership.LeaseTimings(**section("lease."))
        except leadership.SettingsError as exc:
            raise SettingsError(str(exc)) from None
        loop = LoopSettings(
            **section("loop."),
            stall=StallSettings(**section("loop.stall.")),
            cadence=CadenceSettings(**section("loop.cadence.")),
            quarantine=QuarantineSettings(**section("loop.quarantine.")),
            policies=_policies(env, values["lease_namespace"]),
        )
        return cls(
            **section(""),
            loop=loop,
            lease=lease,
            identity=f"{env.get('POD_NAME') or socket.gethostname()}_{_INSTANCE}",
        )


def _policies(env: Mapping[str, str], namespace: str) -> netpol.PolicySettings | None:
    """``ELASTICJOB_NETWORK_POLICY`` (default true), the operator's own pods (in
    ``namespace``, labelled ``ELASTICJOB_OPERATOR_POD_LABELS``), and Prometheus
    (``ELASTICJOB_PROMETHEUS_NAMESPACE_LABELS``, ``ELASTICJOB_PROMETHEUS_POD_LABELS``)."""
    if not _flag_of(env, "ELASTICJOB_NETWORK_POLICY", True):
        return None
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
