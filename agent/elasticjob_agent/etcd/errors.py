"""How the etcd client tells etcd's answers apart: its error types and the grpc errors it reads.

``EtcdRequestError``/``LeaseNotFoundError`` are what callers catch (``etcd.client`` re-exports
them); the helpers classify a grpc error or a cancellation for the client and its watch stream.
"""

from __future__ import annotations

import asyncio

import grpc

from elasticjob_agent.errors import RendezvousConnectionError

UNREACHABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
    }
)
"""grpc status codes that mean etcd could not be reached (or did not answer in time)."""


class EtcdRequestError(Exception):
    """etcd rejected a request for a reason other than being unreachable."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"etcd request failed: {code}: {details}")
        self.code = code
        self.details = details


class LeaseNotFoundError(EtcdRequestError):
    """The lease does not exist (any more)."""


def from_server(exc: BaseException) -> bool:
    """An answer of etcd itself (``etcdserver: ...``), not of the transport or grpc."""
    return isinstance(exc, grpc.aio.AioRpcError) and (exc.details() or "").startswith("etcdserver")


def overloaded(exc: grpc.aio.AioRpcError) -> bool:
    """etcd answered that it could not serve the request in time: it timed out waiting for its
    own apply loop (the transaction may still be applied later), or refused it because the apply
    loop is too far behind (``too many requests``: not applied). Either way: etcd is slow."""
    details = exc.details() or ""
    return from_server(exc) and ("timed out" in details or "too many requests" in details)


def dropped_under(exc: asyncio.CancelledError) -> RendezvousConnectionError:
    """Tell a call cancelled because its channel was closed from a cancelled caller.

    grpc cancels every call of a closed channel with ``CancelledError``, exactly what a cancelled
    task sees; the task knows which it is (``cancelling()``). Re-raises the caller's own cancel.
    """
    task = asyncio.current_task()
    if task is None or task.cancelling():
        raise exc
    return RendezvousConnectionError("the etcd connection was dropped during the request")
