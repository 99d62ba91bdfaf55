"""How the operator configures the agents' checkpoints: the environment variables it sets on a
worker pod from ``spec.checkpoint`` and the agents' replication port (shared facts; pure); and
what a restore kept (``RestoreReport``), as the agents report it and ``status.checkpoint`` shows it.

The agent reads them in ``checkpoint.config``; docs/checkpoints.md describes each.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.protocol import defaults
from elasticjob_agent.protocol.integers import IntegerError, bounded_int

ENV_PREFIX = "ELASTICJOB_CHECKPOINT_"
MEMORY_LIMIT_ENV = f"{ENV_PREFIX}MEMORY_LIMIT"
"""Bytes (or ``8Gi``) of checkpoints one node holds; checkpoints are off without it."""
KEEP_ENV = f"{ENV_PREFIX}KEEP"
REPLICAS_ENV = f"{ENV_PREFIX}REPLICAS"
"""How many peer nodes each node's shards are copied to (the next ones in node order)."""
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
DEFAULT_REPLICAS = 1
MAX_REPLICAS = 7
"""Most peers a shard is copied to (``spec.checkpoint.replicas``' maximum in the CRD)."""
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


MAX_COUNT = 2**53
"""Largest step, world size or round a restore report carries (exact in every JSON reader)."""
MAX_SOURCE = 300
"""Longest ``source`` of a restore report (``peer <node>``: a node name is at most 253)."""


@dataclass(frozen=True)
class RestoreReport:
    """What a restore kept: the step, the world size that saved it and the one that restored
    it, where this rank's shard came from (``memory``, ``peer <node>``, ``disk``) and how long
    the restore took. ``round``: the rendezvous round it happened in, stamped by the agent's
    health report (``None`` inside the checkpoint service, which knows no rounds)."""

    step: int
    saved_world_size: int
    world_size: int
    source: str
    seconds: float
    round: int | None = None

    def as_status(self) -> dict[str, Any]:
        """``status.checkpoint.lastRestore``'s shape: ``source`` is ``memory``, ``peer`` or
        ``disk``, the peer's node in ``sourceNode``; ``round`` only when known."""
        kind, _, node = self.source.partition(" ")
        shape: dict[str, Any] = {
            "step": self.step,
            "savedWorldSize": self.saved_world_size,
            "worldSize": self.world_size,
            "source": kind,
            "seconds": round(self.seconds, 3),
        }
        if node:
            shape["sourceNode"] = node
        if self.round is not None:
            shape["round"] = self.round
        return shape

    @classmethod
    def from_status(cls, value: Any) -> RestoreReport:
        """The inverse of ``as_status``, strict: integers within ``[0, 2**53]``, a source of
        1..``MAX_SOURCE`` characters, finite seconds within ``[0, 1e9)``; ``ValueError`` naming
        what is wrong."""
        if not isinstance(value, dict):
            raise ValueError(f"a restore report is an object, got {str(value)[:80]!r}")
        ints: dict[str, int] = {}
        for key in ("step", "savedWorldSize", "worldSize"):
            ints[key] = _count(value.get(key), key)
        rnd = value.get("round")
        source, seconds = value.get("source"), value.get("seconds")
        if not isinstance(source, str) or not 0 < len(source) <= MAX_SOURCE:
            raise ValueError(f"restore report: bad source {str(source)[:80]!r}")
        node = value.get("sourceNode")
        if node is not None:
            if not isinstance(node, str) or not 0 < len(source) + 1 + len(node) <= MAX_SOURCE:
                raise ValueError(f"restore report: bad sourceNode {str(node)[:80]!r}")
            source = f"{source} {node}"
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or not (0 <= seconds < 1e9)
        ):
            raise ValueError(f"restore report: bad seconds {seconds!r}")
        return cls(
            ints["step"],
            ints["savedWorldSize"],
            ints["worldSize"],
            source,
            float(seconds),
            None if rnd is None else _count(rnd, "round"),
        )


CheckpointFacts = tuple[int | None, RestoreReport | None, str | None]
"""What an agent's checkpoint node holds and kept, as its health report reads it: the newest
step held in memory, the last restore, why the last restore kept nothing (each ``None``: none)."""
NO_CHECKPOINTS: CheckpointFacts = (None, None, None)
"""The facts of an agent without checkpoints."""


def _count(value: object, key: str) -> int:
    try:
        return bounded_int(value, 0, MAX_COUNT)
    except IntegerError:
        raise ValueError(
            f"restore report: {key} must be an integer in [0, {MAX_COUNT}], got {str(value)[:40]!r}"
        ) from None
