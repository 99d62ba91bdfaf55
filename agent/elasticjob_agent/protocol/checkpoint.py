"""How the operator configures the agents' checkpoints: the environment variables it sets on a
worker pod from ``spec.checkpoint`` and the agents' replication port (shared facts; pure).

The agent reads them in ``checkpoint.config``; docs/checkpoints.md describes each.
"""

from __future__ import annotations

import re

from elasticjob_agent.protocol import defaults

ENV_PREFIX = "ELASTICJOB_CHECKPOINT_"
MEMORY_LIMIT_ENV = f"{ENV_PREFIX}MEMORY_LIMIT"
"""Bytes (or ``8Gi``) of checkpoints one node holds; checkpoints are off without it."""
KEEP_ENV = f"{ENV_PREFIX}KEEP"
MEMORY_DIR_ENV = f"{ENV_PREFIX}MEMORY_DIR"
"""The shared-memory directory (not ``ELASTICJOB_CHECKPOINT_DIR``, which examples/train.py
reads for its own files)."""
PERSIST_DIR_ENV = f"{ENV_PREFIX}PERSIST_DIR"
PORT_ENV = f"{ENV_PREFIX}PORT"
ADDR_ENV = f"{ENV_PREFIX}ADDR"
CACERT_ENV = f"{ENV_PREFIX}CACERT"
CERT_ENV = f"{ENV_PREFIX}CERT"
KEY_ENV = f"{ENV_PREFIX}KEY"
TIMEOUT_ENV = f"{ENV_PREFIX}TIMEOUT"
SOCKET_ENV = f"{ENV_PREFIX}SOCKET"
"""Set by the agent for its workers: the Unix socket of its checkpoint service."""

DEFAULT_PORT = defaults.CHECKPOINT_PORT
DEFAULT_KEEP = 2
DEFAULT_DIR = "/dev/shm/elasticjob-checkpoints"

_SIZE = re.compile(r"^([0-9]+)\s*(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
SIZE_PATTERN = r"^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$"
"""The sizes ``parse_size`` accepts (``spec.checkpoint.memoryLimit``'s pattern in the CRD)."""


def parse_size(text: str, what: str) -> int:
    """``"8Gi"``, ``"512Mi"``, ``"1000000"`` (Kubernetes quantity suffixes, whole numbers) in
    bytes; ``ValueError`` naming ``what``."""
    match = _SIZE.match(str(text).strip())
    if not match:
        raise ValueError(
            f"{what} {text!r} is not a size: write bytes or a whole number with Ki, Mi, Gi, Ti "
            "(or k, M, G, T)"
        )
    return int(match.group(1)) * _UNITS[match.group(2)]
