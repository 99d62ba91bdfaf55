"""etcd transactions as plain data: compares, writes, and a compare-and-swap. Pure: no I/O, no
client, no protobuf.

The rendezvous (``rendezvous.transactions``), the round store and the state backend
(``rendezvous.store_transactions``) and the job's restart counter
(``supervision.restart_transactions``) build these values with pure functions; ``EtcdClient.cas``
sends a ``Cas`` (``etcd.messages`` translates each value once), and the tests' model of etcd
interprets the same values. Every compare is an equality (etcd's ``==``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Target(StrEnum):
    VERSION = "version"
    """How many times the key was written since it was created; 0: absent."""
    MOD = "mod"
    """The revision of the key's last write; 0: absent."""
    CREATE = "create"
    """The revision that created the key; 0: absent."""
    VALUE = "value"


@dataclass(frozen=True)
class Compare:
    """``key``'s ``target`` equals ``expected``."""

    key: bytes
    target: Target
    expected: int | bytes


@dataclass(frozen=True)
class Put:
    key: bytes
    value: bytes
    on_lease: bool = False
    """Attach the key to the node's lease (it vanishes when the node does)."""


@dataclass(frozen=True)
class Delete:
    key: bytes


Write = Put | Delete


def version_is(key: bytes, expected: int) -> Compare:
    return Compare(key, Target.VERSION, expected)


def mod_is(key: bytes, expected: int) -> Compare:
    return Compare(key, Target.MOD, expected)


def created_at(key: bytes, expected: int) -> Compare:
    return Compare(key, Target.CREATE, expected)


def value_is(key: bytes, expected: bytes) -> Compare:
    return Compare(key, Target.VALUE, expected)


@dataclass(frozen=True)
class Cas:
    """A compare-and-swap: if every compare holds, apply ``success`` atomically (at one new
    revision); if not, read back ``read_on_failure`` (each key's current value, in order)."""

    compare: tuple[Compare, ...]
    success: tuple[Write, ...]
    read_on_failure: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Range:
    """A read: ``key``, or every key from ``key`` up to ``end`` (a prefix's ``prefix_end``)."""

    key: bytes
    end: bytes = b""
    count_only: bool = False
    keys_only: bool = False
    limit: int = 0


def prefix_end(prefix: bytes) -> bytes:
    """The ``end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"
