"""``spec.checkpoint``: parsed, turned into the agent's environment, and accounted for in the
trainer's memory (pure; docs/checkpoints.md).

The agents keep checkpoints in the pod's memory-backed ``/dev/shm`` (which counts against the
pod's memory), so the trainer container's memory request grows by ``memoryLimit`` (and its
memory limit too, when the template sets one: otherwise a full checkpoint memory would get the
pod OOM-killed). The peer channel uses the job's etcd client certificate; without one (an etcd
without TLS) the agents keep memory and disk only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from elasticjob_agent.protocol import checkpoint as proto
from elasticjob_agent.protocol.endpoints import TlsFiles


class CheckpointSpecError(ValueError):
    """A bad ``spec.checkpoint``; the message names the field."""


@dataclass(frozen=True)
class CheckpointSpec:
    """The checkpoints the agents keep for a job."""

    memory_limit: int
    """Bytes of checkpoints one node holds (its ranks' shards and up to ``replicas`` peers'
    replicas)."""
    steps_kept: int = proto.DEFAULT_KEEP
    persist_path: str | None = None
    """Where the agents persist complete shards; the pod template mounts it."""
    replicas: int = proto.DEFAULT_REPLICAS
    """Peer nodes each node's shards are copied to."""


def parse_checkpoint(raw: Any) -> CheckpointSpec | None:
    """``spec.checkpoint`` (``None`` when absent); ``CheckpointSpecError`` naming the field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise CheckpointSpecError("spec.checkpoint must be an object")
    limit = raw.get("memoryLimit")
    if limit is None:
        raise CheckpointSpecError("spec.checkpoint.memoryLimit is required (e.g. 8Gi)")
    try:
        memory = proto.parse_size(str(limit), "spec.checkpoint.memoryLimit")
    except ValueError as exc:
        raise CheckpointSpecError(str(exc)) from None
    if memory <= 0:
        raise CheckpointSpecError("spec.checkpoint.memoryLimit must be positive")
    keep = raw.get("stepsKept", proto.DEFAULT_KEEP)
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= 100:
        raise CheckpointSpecError(f"spec.checkpoint.stepsKept must be 1-100, got {keep!r}")
    path = raw.get("persistPath")
    if path is not None and (not isinstance(path, str) or not path.startswith("/")):
        raise CheckpointSpecError(
            f"spec.checkpoint.persistPath must be an absolute path, got {path!r}"
        )
    replicas = raw.get("replicas", proto.DEFAULT_REPLICAS)
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int)
        or not 1 <= replicas <= proto.MAX_REPLICAS
    ):
        raise CheckpointSpecError(
            f"spec.checkpoint.replicas must be 1-{proto.MAX_REPLICAS}, got {replicas!r}"
        )
    return CheckpointSpec(memory, keep, path, replicas)


def checkpoint_env(
    spec: CheckpointSpec, *, pod_ip_env: str, tls: TlsFiles | None
) -> list[dict[str, Any]]:
    """The agent's ``ELASTICJOB_CHECKPOINT_*`` variables (after ``pod_ip_env`` in the list,
    which ``$(...)`` refers to)."""
    env: list[dict[str, Any]] = [
        {"name": proto.MEMORY_LIMIT_ENV, "value": str(spec.memory_limit)},
        {"name": proto.KEEP_ENV, "value": str(spec.steps_kept)},
        {"name": proto.REPLICAS_ENV, "value": str(spec.replicas)},
        {"name": proto.ADDR_ENV, "value": f"$({pod_ip_env})"},
        {"name": proto.PORT_ENV, "value": str(proto.DEFAULT_PORT)},
    ]
    if spec.persist_path is not None:
        env.append({"name": proto.PERSIST_DIR_ENV, "value": spec.persist_path})
    if tls is not None and tls.cacert and tls.cert and tls.key:
        env += [
            {"name": proto.CACERT_ENV, "value": tls.cacert},
            {"name": proto.CERT_ENV, "value": tls.cert},
            {"name": proto.KEY_ENV, "value": tls.key},
        ]
    return env


_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTORS = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``512Mi``, ``100m``, ``1``) as a number; ``None`` when it is not
    one."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        return Decimal(match.group(1)) * _FACTORS[match.group(2)]
    except InvalidOperation:
        return None


def quantity_bytes(value: Any, what: str) -> int:
    """A Kubernetes memory quantity in bytes (rounded up); ``CheckpointSpecError`` naming
    ``what``."""
    number = parse_quantity(value)
    if number is None:
        raise CheckpointSpecError(f"{what} {value!r} is not a Kubernetes quantity")
    return math.ceil(number)


def with_checkpoint_memory(resources: Mapping[str, Any] | None, extra: int) -> dict[str, Any]:
    """The trainer's ``resources`` with ``extra`` bytes added to its memory request and to its
    memory limit when it has one (a missing request becomes the grown limit, as Kubernetes
    would default it, or ``extra``)."""
    out: dict[str, Any] = {
        k: dict(v) for k, v in (resources or {}).items() if isinstance(v, Mapping)
    }
    out.update({k: v for k, v in (resources or {}).items() if not isinstance(v, Mapping)})
    requests, limits = dict(out.get("requests") or {}), dict(out.get("limits") or {})
    if "memory" in limits:
        path = "spec.template trainer resources.limits.memory"
        limits["memory"] = str(quantity_bytes(limits["memory"], path) + extra)
        out["limits"] = limits
    if "memory" in requests:
        path = "spec.template trainer resources.requests.memory"
        requests["memory"] = str(quantity_bytes(requests["memory"], path) + extra)
    else:
        # Kubernetes would default the request to the limit: keep that, grown.
        requests["memory"] = limits.get("memory", str(extra))
    out["requests"] = requests
    return out
