"""How the operator configures the agents' checkpoints: the environment variables it sets on a
worker pod from ``spec.checkpoint`` and the agents' replication port (shared facts; pure).

The agent reads them in ``checkpoint.config``; docs/checkpoints.md describes each.
"""

from __future__ import annotations

ENV_PREFIX = "ELASTICJOB_CHECKPOINT_"
MEMORY_LIMIT_ENV = f"{ENV_PREFIX}MEMORY_LIMIT"
"""Bytes (or ``8Gi``) of checkpoints one node holds; checkpoints are off without it."""
KEEP_ENV = f"{ENV_PREFIX}KEEP"
DIR_ENV = f"{ENV_PREFIX}DIR"
PERSIST_DIR_ENV = f"{ENV_PREFIX}PERSIST_DIR"
PORT_ENV = f"{ENV_PREFIX}PORT"
ADDR_ENV = f"{ENV_PREFIX}ADDR"
CACERT_ENV = f"{ENV_PREFIX}CACERT"
CERT_ENV = f"{ENV_PREFIX}CERT"
KEY_ENV = f"{ENV_PREFIX}KEY"
TIMEOUT_ENV = f"{ENV_PREFIX}TIMEOUT"
SOCKET_ENV = f"{ENV_PREFIX}SOCKET"
"""Set by the agent for its workers: the Unix socket of its checkpoint service."""

DEFAULT_PORT = 29402
"""The agents' replication port (mutual TLS)."""
DEFAULT_KEEP = 2
DEFAULT_DIR = "/dev/shm/elasticjob-checkpoints"
