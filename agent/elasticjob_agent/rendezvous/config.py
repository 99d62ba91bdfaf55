"""``RendezvousConfig``: the knobs of one rendezvous, validated once, from torchrun's flags."""

from __future__ import annotations

import itertools
import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from elasticjob_agent.args import AgentArgs
from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.endpoints import TLS_KEYS, Endpoint, parse_endpoints, tls_from_conf
from elasticjob_agent.protocol.keys import DEFAULT_PREFIX, JobKeys

BACKEND_NAME = defaults.BACKEND_NAME
MAX_REQUEST_TIMEOUT = 5.0
"""The longest deadline of one etcd request: a longer silence counts as an outage (retried)."""


def request_timeout_for(etcd_timeout: float) -> float:
    """The deadline of one etcd request when etcd may stay away ``etcd_timeout`` s in all."""
    return min(MAX_REQUEST_TIMEOUT, etcd_timeout)


# Keys torchrun (or torch's own handlers) put into the parameters that mean nothing here.
_IGNORED_KEYS = frozenset(
    {
        "timeout",
        "rank",
        "is_host",
        "use_libuv",
        "read_timeout",
        "keep_alive_interval",
        "keep_alive_max_attempt",
        "store_type",
    }
)
_FLOAT_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat", "etcd_timeout")
_OTHER_KEYS = ("key_prefix", "node_id", *TLS_KEYS, "protocol")


_local_ids = itertools.count()


def default_node_id() -> str:
    """``<hostname>-<pid>`` for the process's first config, ``<hostname>-<pid>-<n>`` after.

    Unique per config, like torch's node descriptors (``addr_pid_localid``): several handlers in
    one process are several nodes of the rendezvous, and with one shared id they would count as
    one and never complete.
    """
    n = next(_local_ids)
    base = f"{socket.gethostname()}-{os.getpid()}"
    return base if n == 0 else f"{base}-{n}"


@dataclass(frozen=True)
class RendezvousConfig:
    """Settings of one rendezvous. Construct directly, with ``from_args`` (the agent) or with
    ``from_parameters`` (torchrun's ``etcd-v3`` plugin)."""

    run_id: str
    """The job run; all keys live under ``<key_prefix>/<run_id>/rdzv``."""
    endpoints: tuple[Endpoint, ...]
    """etcd client addresses, tried in order with failover; each says whether it uses TLS."""
    min_nodes: int
    max_nodes: int
    join_timeout: float = float(defaults.RDZV_JOIN_TIMEOUT_SECONDS)
    """Seconds a ``next_rendezvous()`` may wait for its round to complete (not retryable)."""
    last_call_timeout: float = float(defaults.RDZV_LAST_CALL_TIMEOUT_SECONDS)
    """Extra wait after the last join once ``min_nodes`` are in, for more nodes to come."""
    close_timeout: float = float(defaults.RDZV_CLOSE_TIMEOUT_SECONDS)
    """Seconds ``shutdown()`` may spend leaving and closing."""
    heartbeat: float = float(defaults.RDZV_HEARTBEAT_SECONDS)
    """Lease TTL: a node that stops refreshing for this long is dropped."""
    key_prefix: str = DEFAULT_PREFIX
    etcd_timeout: float = float(defaults.ETCD_TIMEOUT_SECONDS)
    """How long etcd may stay unreachable before ``RendezvousConnectionError``."""
    node_id: str = field(default_factory=default_node_id)
    local_addr: str | None = None
    """The address rank 0 publishes as ``MASTER_ADDR``; default: the host's FQDN."""

    def __post_init__(self) -> None:
        JobKeys(self.key_prefix, self.run_id)  # validates both, with a clear message
        if not self.endpoints:
            raise ValueError("rendezvous endpoint is empty: pass --rdzv-endpoint host:port")
        if self.min_nodes < 1:
            raise ValueError(f"min_nodes must be >= 1, got {self.min_nodes}")
        if self.max_nodes < self.min_nodes:
            raise ValueError(
                f"max_nodes ({self.max_nodes}) must be >= min_nodes ({self.min_nodes})"
            )
        for name in _FLOAT_KEYS:
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(
                    f"rendezvous option {name} must be a finite number > 0, got {value!r}"
                )
        if self.heartbeat < 1:
            raise ValueError(f"rendezvous option heartbeat must be >= 1 s, got {self.heartbeat}")
        if not self.node_id or "/" in self.node_id:
            raise ValueError(f"invalid node id {self.node_id!r}: non-empty, without '/'")

    @property
    def keys(self) -> JobKeys:
        return JobKeys(self.key_prefix, self.run_id)

    @property
    def request_timeout(self) -> float:
        """The deadline of one etcd request of this rendezvous's session."""
        return request_timeout_for(self.etcd_timeout)

    @property
    def lease_ttl(self) -> int:
        """The TTL (whole seconds) of the node's lease: ``heartbeat`` rounded up."""
        return max(1, math.ceil(self.heartbeat))

    @classmethod
    def from_args(
        cls,
        args: AgentArgs,
        *,
        endpoints: tuple[Endpoint, ...],
        run_id: str,
        node_id: str,
    ) -> RendezvousConfig:
        """The agent's own path: from its parsed arguments, with the endpoints (TLS included),
        run id and node id it resolved (``--standalone`` brings its own etcd and run id).
        ``args.etcd_timeout`` is the one etcd timeout (flag or ``--rdzv-conf``); the other
        ``--rdzv-conf`` durations were validated by ``parse_args``. Raises ``ValueError`` on a
        bad value (a node id with ``/``, say)."""
        overrides: dict[str, Any] = {
            name: float(args.rdzv_conf[name])
            for name in _FLOAT_KEYS
            if name != "etcd_timeout" and name in args.rdzv_conf
        }
        config = cls(
            run_id=run_id,
            endpoints=endpoints,
            min_nodes=args.min_nodes,
            max_nodes=args.max_nodes,
            local_addr=args.local_addr,
            node_id=node_id,
        )
        return replace(
            config, key_prefix=args.key_prefix, etcd_timeout=args.etcd_timeout, **overrides
        )

    @classmethod
    def from_parameters(cls, params: Any) -> RendezvousConfig:
        """Build from torch's ``RendezvousParameters`` (``--rdzv-*`` flags and ``--rdzv-conf``),
        as torchrun hands them to the ``etcd-v3`` plugin: the endpoint text is parsed here, with
        the TLS keys of the conf; the rest is ``from_conf``.

        ``--rdzv-conf`` keys: join_timeout, last_call_timeout, close_timeout, heartbeat,
        key_prefix, etcd_timeout, node_id, and TLS: cacert, cert, key, protocol (see
        docs/contracts.md and ``elasticjob_agent.protocol.endpoints``). Raises ``ValueError``
        naming the bad key or value.
        """
        conf: Mapping[str, Any] = dict(params.config)
        _check_keys(conf)
        tls, protocol = tls_from_conf(
            {k: None if conf.get(k) is None else str(conf[k]) for k in (*TLS_KEYS, "protocol")}
        )
        endpoint = params.endpoint or ""
        if not endpoint.strip():
            raise ValueError("rendezvous endpoint is empty: pass --rdzv-endpoint host:port")
        return cls.from_conf(
            run_id=params.run_id,
            endpoints=parse_endpoints(endpoint, tls, protocol),
            min_nodes=int(params.min_nodes),
            max_nodes=int(params.max_nodes),
            conf=conf,
            local_addr=params.local_addr,
        )

    @classmethod
    def from_conf(
        cls,
        *,
        run_id: str,
        endpoints: tuple[Endpoint, ...],
        min_nodes: int,
        max_nodes: int,
        conf: Mapping[str, Any],
        local_addr: str | None = None,
    ) -> RendezvousConfig:
        """Build from parsed endpoints (TLS included) and the ``--rdzv-conf`` knobs as text (what
        torchrun hands ``from_parameters``). TLS keys in ``conf`` are not read again
        (``endpoints`` carry them). Raises ``ValueError`` naming the bad key or value."""
        _check_keys(conf)
        numbers: dict[str, float] = {}
        for name in _FLOAT_KEYS:
            if name in conf and conf[name] is not None:
                raw = conf[name]
                try:
                    numbers[name] = float(raw)
                except (TypeError, ValueError):
                    raise ValueError(
                        f"--rdzv-conf {name}={raw!r} is not a number of seconds"
                    ) from None
        extra: dict[str, Any] = {}
        if conf.get("key_prefix"):
            extra["key_prefix"] = str(conf["key_prefix"])
        if conf.get("node_id"):
            extra["node_id"] = str(conf["node_id"])
        config = cls(
            run_id=run_id,
            endpoints=endpoints,
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            local_addr=local_addr,
        )
        overrides: dict[str, Any] = {**numbers, **extra}
        return replace(config, **overrides)


def _check_keys(conf: Mapping[str, Any]) -> None:
    unknown = sorted(set(conf) - set(_FLOAT_KEYS) - set(_OTHER_KEYS) - _IGNORED_KEYS)
    if unknown:
        raise ValueError(
            f"unknown --rdzv-conf key(s) {', '.join(unknown)} for backend {BACKEND_NAME}; "
            f"known: {', '.join((*_FLOAT_KEYS, *_OTHER_KEYS))}"
        )
