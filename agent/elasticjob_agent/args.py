"""The command line: torchrun's flags (with their ``PET_*`` environment equivalents) plus ours.

Pure: ``parse_args(argv, environ)`` returns a validated, frozen ``AgentArgs`` or raises
``UsageError`` with a message that says what to fix (argparse itself exits 2 on unknown flags).
The flags are declared in ``flags.py``; this module checks and converts their values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticjob_agent.flags import RDZV_CONF_KEYS, RDZV_SECONDS_KEYS, build_parser
from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.endpoints import TLS_KEYS, Endpoint, parse_endpoints, tls_from_conf
from elasticjob_agent.protocol.hang_timeout import AutoSettings, HangTimeoutError
from elasticjob_agent.protocol.keys import validate_run_id
from elasticjob_agent.protocol.restarts import TORCHRUN_MAX_RESTARTS_DEFAULT

BACKEND = defaults.BACKEND_NAME
C10D = "c10d"
"""torchrun's default: torch's own rendezvous on a TCPStore, under our supervisor."""
_BACKEND_ALIASES = {BACKEND: BACKEND, "etcd": BACKEND, C10D: C10D}
C10D_DEFAULT_PORT = 29400
DEFAULT_ETCD_TIMEOUT = float(defaults.ETCD_TIMEOUT_SECONDS)
DEFAULT_SHUTDOWN_TIMEOUT = float(defaults.SHUTDOWN_TIMEOUT_SECONDS)
_NCCL_MONITORING = str(int(defaults.NCCL_MONITORING))

# --rdzv-conf keys of torch's c10d rendezvous (DynamicRendezvousHandler + C10dRendezvousBackend),
# each read by torch as an integer, except these two.
_C10D_INTEGERS = (
    "join_timeout",
    "last_call_timeout",
    "close_timeout",
    "heartbeat",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "read_timeout",
    "timeout",  # torchrun always sets it; torch's c10d handler does not read it
)
C10D_CONF_KEYS = (*_C10D_INTEGERS, "is_host", "cas_backoff_max_seconds")
_BOOLEANS = ("1", "true", "t", "yes", "y", "0", "false", "f", "no", "n")


class UsageError(ValueError):
    """A bad flag, ``PET_*`` variable or ``--rdzv-conf`` value: exit code 2, nothing started."""


@dataclass(frozen=True)
class AgentArgs:
    """The validated command line. Times are seconds."""

    training_script: str
    training_script_args: tuple[str, ...] = ()
    min_nodes: int = 1
    max_nodes: int = 1
    nproc_per_node: str = "1"
    """As given: an integer, or ``cpu``/``gpu``/``auto`` (resolved at start)."""
    rdzv_endpoints: tuple[Endpoint, ...] = ()
    rdzv_id: str = "none"
    rdzv_conf: Mapping[str, str] = field(default_factory=dict)
    rdzv_backend: str = BACKEND
    """``etcd-v3``, or ``c10d`` (then ``c10d_endpoint`` is set and ``rdzv_endpoints`` empty)."""
    c10d_endpoint: str = ""
    """``host:port`` of the c10d rendezvous' TCPStore (port 29400 when not given)."""
    standalone: bool = False
    max_restarts: int = TORCHRUN_MAX_RESTARTS_DEFAULT
    monitor_interval: float = 0.1
    role: str = "default"
    module: bool = False
    no_python: bool = False
    run_path: bool = False
    log_dir: str | None = None
    redirects: str = "0"
    tee: str = "0"
    log_line_prefix_template: str | None = None
    local_ranks_filter: frozenset[int] | None = None
    local_addr: str | None = None
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    health_addr: str = "0.0.0.0"
    health_port: int = defaults.HEALTH_PORT
    etcd_timeout: float = DEFAULT_ETCD_TIMEOUT
    nccl_collective_timeout: float = float(defaults.NCCL_COLLECTIVE_TIMEOUT_SECONDS)
    nccl_heartbeat_timeout: float = float(defaults.NCCL_HEARTBEAT_TIMEOUT_SECONDS)
    nccl_async_error_handling: str = str(defaults.NCCL_ASYNC_ERROR_HANDLING)
    nccl_monitoring: str = _NCCL_MONITORING
    node_id: str | None = None
    progress_timeout: float | None = None
    """Restart the group (reason ``hang``) when no local worker reported a step for this long
    after its first one; ``None``: off."""
    progress_auto: AutoSettings | None = None
    """``--progress-timeout auto``: the timeout is learned from the step intervals."""
    failure_policy: str | None = None
    """``--failure-policy``: a path to the policy's JSON, or the JSON text (read by the CLI)."""
    preflight: bool = False
    """``--preflight``: time a fixed computation before the first round (``timers.preflight``)."""
    warm_workers: bool = True
    """Keep spare interpreters with torch imported, so restarts skip the import."""
    log_format: str = defaults.LOG_FORMAT
    """The agent's own log lines: one of ``defaults.LOG_FORMATS``."""

    @property
    def key_prefix(self) -> str:
        return self.rdzv_conf.get("key_prefix", defaults.KEY_PREFIX)

    @property
    def worst_case_time_to_fail(self) -> float:
        """``(max_restarts + 1) * (collective + heartbeat)``: a hang that NCCL must detect."""
        return (self.max_restarts + 1) * (
            self.nccl_collective_timeout + self.nccl_heartbeat_timeout
        )


def parse_nnodes(text: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        if len(parts) == 1:
            low = high = int(parts[0])
        elif len(parts) == 2:
            low, high = int(parts[0]), int(parts[1])
        else:
            raise ValueError(text)
    except ValueError:
        raise UsageError(f"--nnodes {text!r} must be N or MIN:MAX with integers") from None
    if not 0 < low <= high:
        raise UsageError(f"--nnodes {text!r}: need 0 < MIN <= MAX")
    return low, high


def _conf_items(text: str) -> Iterator[tuple[str, str]]:
    """The ``key=value`` pairs of ``--rdzv-conf``, stripped; a malformed item: ``UsageError``."""
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise UsageError(f"--rdzv-conf item {item!r} must be key=value")
        yield key, value


def parse_rdzv_conf(text: str) -> dict[str, str]:
    """Parse ``key=value,...``; unknown keys and bad values raise ``UsageError`` naming them."""
    conf: dict[str, str] = {}
    for key, value in _conf_items(text):
        if key not in RDZV_CONF_KEYS:
            raise UsageError(
                f"--rdzv-conf: unknown key {key!r}; known keys: {', '.join(RDZV_CONF_KEYS)}"
            )
        if key in RDZV_SECONDS_KEYS:
            _positive(f"--rdzv-conf {key}", value)
        elif key == "key_prefix" and (
            not value.startswith("/") or value.endswith("/") or not re.fullmatch(r"[\w./-]+", value)
        ):
            raise UsageError(
                f"--rdzv-conf key_prefix {value!r} must start with '/', not end with '/', and use "
                "letters, digits, '.', '_', '-' or '/'"
            )
        conf[key] = value
    return conf


def parse_c10d_conf(text: str) -> dict[str, str]:
    """``--rdzv-conf`` for ``--rdzv-backend c10d``: torch's keys, checked as torch reads them
    (whole numbers of seconds), so a bad value exits 2 before anything starts."""
    conf: dict[str, str] = {}
    for key, value in _conf_items(text):
        if key not in C10D_CONF_KEYS:
            raise UsageError(
                f"--rdzv-conf: key {key!r} is not one of the c10d backend's: "
                f"{', '.join(C10D_CONF_KEYS)}"
            )
        if key in _C10D_INTEGERS and not (value.isdigit() and int(value) > 0):
            raise UsageError(f"--rdzv-conf {key} {value!r} must be a positive whole number")
        if key == "is_host" and value.lower() not in _BOOLEANS:
            raise UsageError(f"--rdzv-conf is_host {value!r} must be true or false (1 or 0)")
        if key == "cas_backoff_max_seconds":
            _non_negative("--rdzv-conf cas_backoff_max_seconds", value)
        conf[key] = value
    return conf


def parse_c10d_endpoint(text: str) -> str:
    """The c10d store's ``host[:port]`` (torch's default port 29400), as ``host:port``."""
    text = text.strip()
    if not text:
        raise UsageError("--rdzv-endpoint host[:port] is required with --rdzv-backend c10d")
    if "://" in text or "," in text:
        raise UsageError(
            f"--rdzv-endpoint {text!r}: the c10d backend takes one host[:port], without a scheme"
        )
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise UsageError(f"--rdzv-endpoint {text!r} is not [host]:port")
        host_part = f"[{host}]"
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
        host_part = host
    if not host or not re.fullmatch(r"[\w.:-]+", host):
        raise UsageError(f"--rdzv-endpoint {text!r}: {host!r} is not a host name or address")
    port = C10D_DEFAULT_PORT
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"--rdzv-endpoint {text!r}: port {port_text!r} is not a port")
        port = int(port_text)
    return f"{host_part}:{port}"


def parse_std_spec(name: str, text: str) -> str:
    """Validate torchrun's ``-r``/``-t`` spec: ``0``-``3`` or ``local_rank:0-3,...``."""
    if re.fullmatch(r"[0-3]", text) or re.fullmatch(r"\d+:[0-3](,\d+:[0-3])*", text):
        return text
    raise UsageError(f"{name} {text!r} must be 0-3 or local_rank:0-3[,local_rank:0-3...]")


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> AgentArgs:
    """Parse and validate. argparse exits 2 itself on unknown flags; we raise ``UsageError``."""
    ns = build_parser(environ).parse_args(list(argv))
    backend = _BACKEND_ALIASES.get(ns.rdzv_backend)
    if backend is None:
        raise UsageError(
            f"--rdzv-backend {ns.rdzv_backend!r} is not supported: use etcd-v3 or c10d "
            "(or --standalone for a one-node run)"
        )
    min_nodes, max_nodes = parse_nnodes(ns.nnodes)
    standalone = bool(ns.standalone)
    if standalone:
        backend = BACKEND  # as torchrun's --standalone overrides the backend (ours: etcd)
    conf = parse_c10d_conf(ns.rdzv_conf) if backend == C10D else parse_rdzv_conf(ns.rdzv_conf)
    endpoints: tuple[Endpoint, ...] = ()
    c10d_endpoint = ""
    rdzv_id = ns.rdzv_id
    if backend == C10D:
        c10d_endpoint = parse_c10d_endpoint(ns.rdzv_endpoint)
        try:
            validate_run_id(rdzv_id)
        except ValueError as exc:
            raise UsageError(f"--rdzv-id: {exc}") from None
    elif standalone:
        min_nodes = max_nodes = 1
        if any(k in conf for k in (*TLS_KEYS, "protocol")):
            raise UsageError(
                "--standalone starts its own plain-HTTP etcd: drop cacert/cert/key/protocol "
                "from --rdzv-conf"
            )
    else:
        if not ns.rdzv_endpoint:
            raise UsageError("--rdzv-endpoint host:port is required (or use --standalone)")
        try:
            tls, protocol = tls_from_conf(conf)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            endpoints = parse_endpoints(ns.rdzv_endpoint, tls, protocol)
        except ValueError as exc:
            raise UsageError(f"--rdzv-endpoint: {exc}") from None
        try:
            validate_run_id(rdzv_id)
        except ValueError as exc:
            raise UsageError(f"--rdzv-id: {exc}") from None
    nproc = ns.nproc_per_node
    if nproc not in ("cpu", "gpu", "auto") and not (nproc.isdigit() and int(nproc) > 0):
        raise UsageError(f"--nproc-per-node {nproc!r} must be a positive integer, cpu, gpu or auto")
    if ns.module and ns.no_python:
        raise UsageError("--module and --no-python cannot be used together")
    max_restarts = _non_negative_int("--max-restarts", ns.max_restarts)
    etcd_timeout_text = (
        ns.etcd_timeout
        or (conf.get("etcd_timeout") if backend == BACKEND else None)
        or str(DEFAULT_ETCD_TIMEOUT)
    )
    health_port = _non_negative_int("--health-port", ns.health_port)
    if health_port > 65535:
        raise UsageError(f"--health-port {health_port} is not a port number")
    ranks_filter: frozenset[int] | None = None
    if ns.local_ranks_filter:
        try:
            ranks_filter = frozenset(int(r) for r in ns.local_ranks_filter.split(","))
        except ValueError:
            raise UsageError(
                f"--local-ranks-filter {ns.local_ranks_filter!r} must be integers like 0,1,2"
            ) from None
    async_handling = ns.nccl_async_error_handling or environ.get(
        defaults.NCCL_ASYNC_ERROR_HANDLING_ENV, str(defaults.NCCL_ASYNC_ERROR_HANDLING)
    )
    if async_handling not in ("0", "1", "2", "3"):
        raise UsageError(f"--nccl-async-error-handling {async_handling!r} must be 0, 1, 2 or 3")
    if ns.warm_workers not in ("0", "1"):
        raise UsageError(f"--warm-workers {ns.warm_workers!r} must be 0 or 1")
    if ns.log_format not in defaults.LOG_FORMATS:
        raise UsageError(
            f"--log-format {ns.log_format!r} must be one of {', '.join(defaults.LOG_FORMATS)} "
            f"(also read from {defaults.LOG_FORMAT_ENV})"
        )
    if ns.nccl_monitoring not in ("0", "1"):
        raise UsageError(f"--nccl-monitoring {ns.nccl_monitoring!r} must be 0 or 1")
    return AgentArgs(
        training_script=ns.training_script,
        training_script_args=tuple(ns.training_script_args),
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        rdzv_endpoints=endpoints,
        rdzv_id=rdzv_id,
        rdzv_conf=conf,
        rdzv_backend=backend,
        c10d_endpoint=c10d_endpoint,
        standalone=standalone,
        max_restarts=max_restarts,
        monitor_interval=_positive("--monitor-interval", ns.monitor_interval),
        role=ns.role,
        module=bool(ns.module),
        no_python=bool(ns.no_python),
        run_path=bool(ns.run_path),
        log_dir=ns.log_dir,
        redirects=parse_std_spec("--redirects", ns.redirects),
        tee=parse_std_spec("--tee", ns.tee),
        log_line_prefix_template=ns.log_line_prefix_template
        or environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"),
        local_ranks_filter=ranks_filter,
        local_addr=ns.local_addr,
        shutdown_timeout=_non_negative("--shutdown-timeout", ns.shutdown_timeout),
        health_addr=ns.health_addr,
        health_port=health_port,
        etcd_timeout=_positive("--etcd-timeout", etcd_timeout_text),
        nccl_collective_timeout=_positive("--nccl-collective-timeout", ns.nccl_collective_timeout),
        nccl_heartbeat_timeout=_positive("--nccl-heartbeat-timeout", ns.nccl_heartbeat_timeout),
        nccl_async_error_handling=async_handling,
        nccl_monitoring=ns.nccl_monitoring,
        node_id=ns.node_id,
        progress_timeout=None
        if ns.progress_timeout == "auto"
        else _non_negative("--progress-timeout", ns.progress_timeout) or None,
        progress_auto=_progress_auto(ns.progress_timeout, ns.progress_auto_conf),
        failure_policy=ns.failure_policy or None,
        preflight=bool(ns.preflight),
        warm_workers=ns.warm_workers == "1" and not ns.no_python,
        log_format=ns.log_format,
    )


def _progress_auto(timeout: str, conf: str) -> AutoSettings | None:
    if timeout != "auto":
        if conf:
            raise UsageError("--progress-auto-conf needs --progress-timeout auto")
        return None
    try:
        return AutoSettings.from_conf(conf)
    except HangTimeoutError as exc:
        raise UsageError(str(exc)) from None


def resolve_nproc(spec: str, cpu_count: int, accelerator_count: int) -> int:
    """torchrun's ``--nproc-per-node``: ``gpu`` needs accelerators, ``auto`` falls back to CPUs."""
    if spec.isdigit():
        return int(spec)
    if spec == "cpu":
        return max(cpu_count, 1)
    if spec == "gpu":
        if accelerator_count < 1:
            raise UsageError("--nproc-per-node gpu: no GPU is visible on this node")
        return accelerator_count
    if spec == "auto":
        return accelerator_count if accelerator_count > 0 else max(cpu_count, 1)
    raise UsageError(f"--nproc-per-node {spec!r} must be a positive integer, cpu, gpu or auto")


def _number(name: str, text: Any) -> float:
    """A finite number of seconds: ``inf`` and ``nan`` parse as floats but are no deadline."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{name} {text!r} must be a finite number of seconds")
    return value


def _positive(name: str, text: Any) -> float:
    value = _number(name, text)
    if not value > 0:
        raise UsageError(f"{name} must be > 0, got {text!r}")
    return value


def _non_negative(name: str, text: Any) -> float:
    value = _number(name, text)
    if value < 0:
        raise UsageError(f"{name} must be >= 0, got {text!r}")
    return value


def _non_negative_int(name: str, text: Any) -> int:
    try:
        value = int(str(text))
    except ValueError:
        raise UsageError(f"{name} {text!r} is not an integer") from None
    if value < 0:
        raise UsageError(f"{name} must be >= 0, got {value}")
    return value
