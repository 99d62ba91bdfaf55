"""The checkpoint settings of an agent and its workers, read from the environment (pure).

The operator sets these on the worker pod from ``spec.checkpoint``; under plain ``torchrun``
a user may set them by hand. The agent serves checkpoints only when
``ELASTICJOB_CHECKPOINT_MEMORY_LIMIT`` is set: that bound is not optional.

Each variable is described in docs/checkpoints.md ("The agent's settings").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from elasticjob_agent.checkpoint.manifest import parse_size
from elasticjob_agent.protocol import checkpoint as p
from elasticjob_agent.protocol.checkpoint import (
    DEFAULT_DIR,
    DEFAULT_KEEP,
    DEFAULT_PORT,
    DEFAULT_REPLICAS,
    MAX_REPLICAS,
    SOCKET_ENV,
)
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

__all__ = ["DEFAULT_DIR", "DEFAULT_KEEP", "SOCKET_ENV", "CheckpointSettings", "settings_from_env"]


@dataclass(frozen=True)
class TlsPaths:
    """The job's CA (``cacert``) and this node's certificate and key: mutual TLS between the
    agents, each side accepting only a certificate signed by the job's CA."""

    cacert: str
    cert: str
    key: str


@dataclass(frozen=True)
class CheckpointSettings:
    """One node's checkpoint settings (see the module docstring for each variable)."""

    memory_limit: int
    """Bytes of checkpoint data (own shards and replicas, all steps kept) one node may hold."""
    keep: int = DEFAULT_KEEP
    """Steps kept in memory (and on the persistence path)."""
    replicas: int = DEFAULT_REPLICAS
    """Peer nodes each of this node's shards is copied to (the next ones in node order)."""
    directory: str = DEFAULT_DIR
    """Where shards live in memory: a tmpfs shared by the agent and its workers."""
    persist_dir: str | None = None
    """Where complete shards are copied asynchronously; ``None``: nowhere."""
    port: int = DEFAULT_PORT
    """TCP port of the agents' replication server."""
    addr: str | None = None
    """Address peers use for this agent; ``None``: the agent's ``--local-addr``."""
    tls: TlsPaths | None = None
    """The job's certificates; ``None``: no peer channel (memory plus disk only)."""
    transfer_timeout: float = 60.0
    """Deadline of one shard transfer to or from a peer, in seconds."""

    def __post_init__(self) -> None:
        if self.memory_limit <= 0:
            raise ValueError(f"{p.MEMORY_LIMIT_ENV} must be positive")
        if not 1 <= self.keep <= 100:
            raise ValueError(f"{p.KEEP_ENV} must be in 1..100, got {self.keep}")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"{p.REPLICAS_ENV} must be in 1..{MAX_REPLICAS}, got {self.replicas}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"{p.PORT_ENV} must be 0..65535, got {self.port}")
        if not math.isfinite(self.transfer_timeout) or self.transfer_timeout <= 0:
            raise ValueError(f"{p.TIMEOUT_ENV} must be a positive number of seconds")


def settings_from_env(env: Mapping[str, str]) -> CheckpointSettings | None:
    """The settings the environment names, ``None`` when checkpoints are off (no memory
    limit); ``ValueError`` naming the variable to fix."""
    limit_text = env.get(p.MEMORY_LIMIT_ENV, "").strip()
    if not limit_text:
        return None
    limit = parse_size(limit_text, p.MEMORY_LIMIT_ENV)
    keep = _int(env, p.KEEP_ENV, DEFAULT_KEEP)
    replicas = _int(env, p.REPLICAS_ENV, DEFAULT_REPLICAS)
    port = _int(env, p.PORT_ENV, DEFAULT_PORT)
    timeout_text = env.get(p.TIMEOUT_ENV, "60")
    try:
        timeout = float(timeout_text)
    except ValueError:
        raise ValueError(f"{p.TIMEOUT_ENV} {timeout_text!r} is not a number") from None
    tls_values = [env.get(n) or None for n in (p.CACERT_ENV, p.CERT_ENV, p.KEY_ENV)]
    tls: TlsPaths | None = None
    if any(tls_values):
        if not all(tls_values):
            raise ValueError(
                f"{p.CACERT_ENV}, {p.CERT_ENV} and {p.KEY_ENV} go together: "
                "give all three (the job's CA, this node's certificate and key) or none"
            )
        cacert, cert, key = (str(v) for v in tls_values)
        tls = TlsPaths(cacert, cert, key)
    return CheckpointSettings(
        memory_limit=limit,
        keep=keep,
        replicas=replicas,
        directory=env.get(p.MEMORY_DIR_ENV) or DEFAULT_DIR,
        persist_dir=env.get(p.PERSIST_DIR_ENV) or None,
        port=port,
        addr=env.get(p.ADDR_ENV) or None,
        tls=tls,
        transfer_timeout=timeout,
    )


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return bounded_int(text, 0, text=True)
    except IntegerError:
        raise ValueError(f"{name} {text!r} is not a non-negative integer") from None
