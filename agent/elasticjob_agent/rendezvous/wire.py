"""Key names and versioned JSON payloads of the rendezvous in etcd. Pure: no I/O.

Layout under ``<prefix>/<run_id>/rdzv`` (``R`` below):

- ``R/ctl/closed``           ``{"v": 1}``: the rendezvous is closed (final).
- ``R/ctl/round``            ``{"v": 1, "round": p}``: the current round; absent means round 0.
- ``R/ctl/complete/<p>``     ``{"v": 1, "round": p, "world": W, "buckets": B, "last": node,
  "master": [addr, port]}``: round ``p`` completed (create-only). The members are the first
  ``max_nodes`` joined keys of round ``p`` in key order, as the completer read them; ``last`` is
  the last of them, ``master`` what the first one advertised. Written in one transaction with:
- ``R/rounds/<p>/ranks/<b>``     ``{"v": 1, "ranks": {node: [rank, create_revision]}}``: the
  rank table, in ``B`` buckets by ``crc32(node) % B`` (``rank_table.py``): each node reads its
  own bucket, never the whole round.
- ``R/rounds/<p>/joined/<node>``  ``{"v": 1, "node": ..., "addr": ..., "port": ...}``, on the
  node's lease.
- ``R/rounds/<p>/joins``          ``{"v": 1}``: rewritten by every join; a completion compares
  its mod revision with the one its roster was read with, so no join slips in between.
- ``R/rounds/<p>/last-call``      ``{"v": 1, "deadline": unix_time, "by": node}``: written by
  each joiner once ``min_nodes`` are in, so the last call runs from the last join; its writer
  completes the round when it ends.
- ``R/rounds/<p>/store/<key>``    the round's ``torch.distributed.Store``.
- ``R/waiting/<node>``       ``{"v": 1, "node": ...}``, on the node's lease: the wait list.
- ``R/torch-state``          the opaque state of torch's ``DynamicRendezvousHandler`` when it
  runs on ``EtcdV3RendezvousBackend``.

Everything under ``R/ctl/`` changes at most a few times per round: every waiting node watches
that prefix, so one event reaches each node once, and nothing else is watched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from elasticjob_agent.errors import RendezvousStateError
from elasticjob_agent.protocol.keys import JobKeys

WIRE_VERSION = 1


@dataclass(frozen=True)
class RendezvousKeys:
    """Byte keys of one run's rendezvous."""

    root: str

    @classmethod
    def of(cls, keys: JobKeys) -> RendezvousKeys:
        return cls(keys.rendezvous)

    def _b(self, suffix: str) -> bytes:
        return f"{self.root}/{suffix}".encode()

    @property
    def everything(self) -> bytes:
        return self._b("")

    @property
    def ctl(self) -> bytes:
        return self._b("ctl/")

    @property
    def closed(self) -> bytes:
        return self._b("ctl/closed")

    @property
    def round(self) -> bytes:
        return self._b("ctl/round")

    def complete(self, p: int) -> bytes:
        return self._b(f"ctl/complete/{p}")

    def round_prefix(self, p: int) -> bytes:
        return self._b(f"rounds/{p}/")

    def joined_prefix(self, p: int) -> bytes:
        return self._b(f"rounds/{p}/joined/")

    def joined(self, p: int, node: str) -> bytes:
        return self._b(f"rounds/{p}/joined/{node}")

    def joins(self, p: int) -> bytes:
        return self._b(f"rounds/{p}/joins")

    def ranks(self, p: int, bucket: int) -> bytes:
        return self._b(f"rounds/{p}/ranks/{bucket}")

    def last_call(self, p: int) -> bytes:
        return self._b(f"rounds/{p}/last-call")

    def store_prefix(self, p: int) -> bytes:
        return self._b(f"rounds/{p}/store/")

    @property
    def waiting_prefix(self) -> bytes:
        return self._b("waiting/")

    def waiting(self, node: str) -> bytes:
        return self._b(f"waiting/{node}")

    @property
    def torch_state(self) -> bytes:
        return self._b("torch-state")


def encode(**fields: Any) -> bytes:
    return json.dumps({"v": WIRE_VERSION, **fields}, sort_keys=True).encode()


def decode(key: bytes, value: bytes) -> dict[str, Any]:
    """Parse a payload; ``RendezvousStateError`` naming the key if it is not ours."""
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RendezvousStateError(f"corrupt rendezvous state at {key.decode()!r}: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != WIRE_VERSION:
        raise RendezvousStateError(
            f"corrupt rendezvous state at {key.decode()!r}: expected a JSON object with "
            f'"v": {WIRE_VERSION}, got {value[:200]!r}'
        )
    return data


def decode_int(key: bytes, value: bytes, field: str) -> int:
    raw = decode(key, value).get(field)
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise RendezvousStateError(
            f"corrupt rendezvous state at {key.decode()!r}: {field!r} must be an integer >= 0"
        )
    return raw


def decode_float(key: bytes, value: bytes, field: str) -> float:
    raw = decode(key, value).get(field)
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        raise RendezvousStateError(
            f"corrupt rendezvous state at {key.decode()!r}: {field!r} must be a number"
        )
    return float(raw)
