"""etcd's protobuf request messages, built from plain arguments or from the pure transaction
values of ``etcd.txn`` (``compare_message``, ``write_message``): the one translation of a
``Compare``/``Put``/``Delete`` into what etcd is sent. No I/O."""

from __future__ import annotations

from typing import Any

from aetcd import rpc

from elasticjob_agent.etcd.txn import Compare, Put, Range, Target, Write, prefix_end

__all__ = [
    "cmp_create",
    "cmp_mod",
    "cmp_value",
    "cmp_version",
    "compare_message",
    "is_put",
    "op_delete",
    "op_put",
    "op_range",
    "prefix_end",
    "range_message",
    "range_request",
    "write_message",
]


def cmp_version(key: bytes, op: str, version: int) -> Any:
    """Compare a key's version (0 = absent) with ``op`` in ``== != < >``."""
    return rpc.Compare(key=key, target=rpc.Compare.VERSION, result=_OPS[op], version=version)


def cmp_mod(key: bytes, op: str, revision: int) -> Any:
    """Compare a key's mod revision (0 = absent)."""
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=_OPS[op], mod_revision=revision)


def cmp_create(key: bytes, op: str, revision: int) -> Any:
    """Compare a key's create revision (0 = absent)."""
    return rpc.Compare(
        key=key, target=rpc.Compare.CREATE, result=_OPS[op], create_revision=revision
    )


def cmp_value(key: bytes, op: str, value: bytes) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=_OPS[op], value=value)


_OPS = {
    "==": rpc.Compare.EQUAL,
    "!=": rpc.Compare.NOT_EQUAL,
    "<": rpc.Compare.LESS,
    ">": rpc.Compare.GREATER,
}


def is_put(event: Any) -> bool:
    """Whether a watch event is a put (else a delete)."""
    return bool(event.type == rpc.Event.PUT)


def op_put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def op_delete(key: bytes, range_end: bytes = b"") -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def range_request(
    key: bytes,
    range_end: bytes = b"",
    *,
    count_only: bool = False,
    keys_only: bool = False,
    limit: int = 0,
    revision: int = 0,
    sort_create: str | None = None,
    max_create_revision: int = 0,
) -> Any:
    """A RangeRequest; ``sort_create`` is ``"ascend"``/``"descend"`` by create revision."""
    req = rpc.RangeRequest(
        key=key,
        range_end=range_end,
        count_only=count_only,
        keys_only=keys_only,
        limit=limit,
        revision=revision,
        max_create_revision=max_create_revision,
    )
    if sort_create is not None:
        req.sort_target = rpc.RangeRequest.CREATE
        req.sort_order = (
            rpc.RangeRequest.ASCEND if sort_create == "ascend" else rpc.RangeRequest.DESCEND
        )
    return req


def op_range(key: bytes, range_end: bytes = b"", **kwargs: Any) -> Any:
    return rpc.RequestOp(request_range=range_request(key, range_end, **kwargs))


def compare_message(c: Compare) -> Any:
    """The etcd ``Compare`` of ``c`` (an equality on a version, mod revision or value)."""
    if c.target is Target.VALUE:
        if not isinstance(c.expected, bytes):
            raise TypeError(f"a value compare needs bytes: {c}")
        return cmp_value(c.key, "==", c.expected)
    if not isinstance(c.expected, int):
        raise TypeError(f"a {c.target.value} compare needs an integer: {c}")
    if c.target is Target.MOD:
        return cmp_mod(c.key, "==", c.expected)
    if c.target is Target.CREATE:
        return cmp_create(c.key, "==", c.expected)
    return cmp_version(c.key, "==", c.expected)


def write_message(w: Write, lease: int = 0) -> Any:
    """The etcd ``RequestOp`` of ``w``; ``lease`` is attached to puts ``on_lease``."""
    if isinstance(w, Put):
        return op_put(w.key, w.value, lease if w.on_lease else 0)
    return op_delete(w.key)


def range_message(r: Range) -> Any:
    """The etcd ``RequestOp`` of the read ``r``."""
    return op_range(r.key, r.end, count_only=r.count_only, keys_only=r.keys_only, limit=r.limit)
