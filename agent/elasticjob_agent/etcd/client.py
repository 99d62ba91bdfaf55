"""A small asyncio etcd v3 client: with ``watch`` and ``errors``, the agent's only gRPC to etcd.

It uses the generated stubs and messages that ``aetcd`` ships (``aetcd.rpc``) and adds what the
rendezvous and the restart counter need and ``aetcd.Client`` lacks: transactions with count-only
and historical ranges, one watch stream per watch with a known start revision, failover across
endpoints, and reachability bookkeeping for the health report.

Contract:

- Every request carries a deadline: ``request_timeout`` seconds while etcd answers in time,
  longer after requests went unanswered (``elasticjob_agent.etcd.pacing``: doubled per
  unanswered request up to 8x, back to ``request_timeout`` once etcd answers fast again), and
  never longer than the caller can wait (``caller_budget``) unless that is under
  ``request_timeout``. ``unanswered`` counts the requests that got no answer in time.
- A request that fails because etcd is unreachable (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, a
  broken stream) raises ``RendezvousConnectionError`` at once, marks the client unreachable and
  drops the channel; the next request opens a new channel to the next endpoint, resolving its
  host name again (a Kubernetes Service may now point to a new pod). Retrying is the caller's
  business (``elasticjob_agent.etcd.retry.retry_until``).
- A request in flight on a connection that another request dropped is cancelled by grpc; it
  raises ``RendezvousConnectionError`` too. Only a cancellation of the caller's own task
  propagates as ``CancelledError``.
- ``LeaseNotFoundError``: the lease is gone (expired, revoked, or etcd was wiped).
- Any other error from etcd raises ``EtcdRequestError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from aetcd import rpc

from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd import pacing
from elasticjob_agent.etcd.errors import (
    UNREACHABLE,
    EtcdRequestError,
    LeaseNotFoundError,
    dropped_under,
    from_server,
    overloaded,
)
from elasticjob_agent.etcd.messages import compare_message, op_range, range_request, write_message
from elasticjob_agent.etcd.txn import Cas
from elasticjob_agent.etcd.watch import Watch, WatchStream
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints

__all__ = [
    "EtcdClient",
    "EtcdRequestError",
    "LeaseNotFoundError",
    "Reachability",
    "Watch",
    "caller_budget",
]

_caller_limit: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "elasticjob_etcd_caller_limit", default=None
)


@contextlib.contextmanager
def caller_budget(seconds: float | None) -> Iterator[None]:
    """Within this block (this task and the tasks it starts), no request of any ``EtcdClient``
    waits longer than ``seconds`` from now, unless that is under the client's
    ``request_timeout`` (``pacing.for_request``). ``None``: no bound. ``retry_until`` sets it
    to what is left of its outage budget and deadline."""
    limit = None if seconds is None else time.monotonic() + seconds
    token = _caller_limit.set(limit)
    try:
        yield
    finally:
        _caller_limit.reset(token)


# How many request deadlines with no answer at all make a connection count as broken.
_SILENT_LINK_DEADLINES = 3

_CHANNEL_OPTIONS = (
    # Notice a silently dead connection (no RST, e.g. a cut network) within ~15 s while a call
    # (the watch or keep-alive stream) is open; etcd refuses pings without calls ("too_many_pings").
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # Reconnect quickly after an outage instead of grpc's default exponential backoff to 120 s.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    # One TCP connection per client, even for many clients in one process (benchmarks, tests).
    ("grpc.use_local_subchannel_pool", 1),
)


def _open_channel(endpoint: Endpoint) -> grpc.aio.Channel:
    """A channel to ``endpoint``: TLS when it says so (never downgraded), else plaintext."""
    if endpoint.tls is None:
        return grpc.aio.insecure_channel(str(endpoint), options=list(_CHANNEL_OPTIONS))
    try:
        cacert, key, cert = endpoint.tls.read()
    except ValueError as exc:
        raise RendezvousConnectionError(f"etcd at {endpoint.url}: {exc}") from exc
    credentials = grpc.ssl_channel_credentials(
        root_certificates=cacert, private_key=key, certificate_chain=cert
    )
    return grpc.aio.secure_channel(str(endpoint), credentials, options=list(_CHANNEL_OPTIONS))


@dataclass(frozen=True)
class Reachability:
    """What the health report says about etcd."""

    reachable: bool
    last_contact: float | None
    """Unix time of the last successful request."""
    unreachable_since: float | None
    """Unix time of the first failure of the current outage; ``None`` while reachable."""


class EtcdClient:
    """One logical connection to an etcd cluster (see the module docstring for the contract)."""

    def __init__(
        self,
        endpoints: str | Sequence[Endpoint],
        *,
        request_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoints: tuple[Endpoint, ...] = (
            parse_endpoints(endpoints) if isinstance(endpoints, str) else tuple(endpoints)
        )
        if not self.endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.request_timeout = request_timeout
        """The base deadline of one request (``pacing``: the deadline in use may be longer)."""
        self._deadline = request_timeout
        self._clock = clock
        self._index = 0
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._lease: Any = None
        self._watch: Any = None
        self._stream: WatchStream | None = None
        # One keep-alive stream per lease: a refresh of one lease never waits behind a
        # refresh of another stuck on a silent stream.
        self._keepalive_calls: dict[int, Any] = {}
        self._keepalive_locks: dict[int, asyncio.Lock] = {}
        self._last_contact: float | None = None
        self._unreachable_since: float | None = None
        self.requests = 0
        """Number of requests sent (unary calls and watch creations), for benchmarks."""
        self.failed_txns = 0
        """Transactions whose compares failed (lost races), for benchmarks."""
        self.unanswered = 0
        """Requests that got no answer within their deadline, or that etcd said it could not
        serve in time (timed out, too many requests): each one lengthened the deadline."""

    # --- connection and bookkeeping ---------------------------------------------------------

    @property
    def endpoint(self) -> Endpoint:
        return self.endpoints[self._index]

    def reachability(self) -> Reachability:
        return Reachability(
            reachable=self._unreachable_since is None,
            last_contact=self._last_contact,
            unreachable_since=self._unreachable_since,
        )

    @property
    def request_deadline(self) -> float:
        """The deadline the next request gets (before the caller's budget cuts it)."""
        return self._deadline

    def _deadline_now(self) -> float:
        limit = _caller_limit.get()
        remaining = None if limit is None else limit - time.monotonic()
        return pacing.for_request(self._deadline, self.request_timeout, remaining)

    def _silent(self) -> None:
        """A request went unanswered in time: lengthen the next ones' deadline."""
        self.unanswered += 1
        self._deadline = pacing.after_silence(self._deadline, self.request_timeout)

    def _ensure_channel(self) -> None:
        if self._channel is None:
            self._channel = _open_channel(self.endpoint)
            self._kv = rpc.KVStub(self._channel)
            self._lease = rpc.LeaseStub(self._channel)
            self._watch = rpc.WatchStub(self._channel)

    def _contact(self) -> None:
        self._last_contact = self._clock()
        self._unreachable_since = None

    def _watch_stream(self) -> WatchStream:
        """The shared watch stream, opened on first use and after a failure."""
        if self._stream is None or not self._stream.alive:
            self._stream = WatchStream(self)
        return self._stream

    async def prepare(self) -> None:
        """Connect and open the watch stream now rather than on first use (agents and
        benchmarks call this before they need to be fast)."""
        await self.range(b"\0")
        self._watch_stream()

    def _failed(self, *, drop: bool = True, answered: bool = False) -> None:
        """Record a failed request. ``drop``: the connection itself is broken (not merely a
        slow or overloaded etcd), so close it and move to the next endpoint. Dropping a healthy
        connection under load would only add a reconnect storm to the overload. ``answered``:
        etcd said it is overloaded (the connection works): not a silent link."""
        now = self._clock()
        if self._unreachable_since is None:
            self._unreachable_since = now
        if answered and not drop:
            return
        # A link cut under an established connection shows only as client-side deadlines (the
        # packets vanish): past a few deadlines without any answer, treat the connection as
        # broken, so the next call re-resolves the name (a recreated etcd has a new address).
        if (
            not drop
            and now - self._unreachable_since < _SILENT_LINK_DEADLINES * self.request_timeout
        ):
            return
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._end_keepalives()
        # Drop the channel: the next call resolves the (next) endpoint's name again.
        channel, self._channel = self._channel, None
        self._index = (self._index + 1) % len(self.endpoints)
        if channel is not None:
            asyncio.get_running_loop().create_task(channel.close())

    def note_silence(self) -> None:
        """Record a request that got no answer in time (the caller gave up on it, or a stream
        write or read passed its deadline): lengthen the deadline, keep the connection."""
        self._silent()
        self._failed(drop=False)

    def _map_error(self, exc: grpc.aio.AioRpcError) -> Exception:
        code = exc.code()
        details = exc.details() or ""
        slow = overloaded(exc)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED or slow:
            self._silent()
        if code in UNREACHABLE or slow:
            # "etcdserver: ..." comes from a live server (e.g. "request timed out" under load);
            # a client-side deadline says nothing about the connection either.
            transport = code == grpc.StatusCode.UNAVAILABLE and not from_server(exc)
            self._failed(drop=transport, answered=slow)
            hint = ""
            if self.endpoint.tls is not None and not from_server(exc):
                # A refused handshake looks like any unreachable server to grpc.
                hint = (
                    " (TLS: check that cacert signs etcd's certificate and that etcd accepts "
                    "the client certificate cert/key)"
                )
            return RendezvousConnectionError(
                f"etcd at {','.join(e.url for e in self.endpoints)} unreachable: "
                f"{code.name}: {details}{hint}"
            )
        self._contact()
        if code == grpc.StatusCode.NOT_FOUND and "lease" in details:
            return LeaseNotFoundError(code.name, details)
        return EtcdRequestError(code.name, details)

    async def _unary(self, method: str, stub_name: str, request: Any) -> Any:
        self._ensure_channel()
        stub = getattr(self, stub_name)
        self.requests += 1
        started = time.monotonic()
        try:
            response = await getattr(stub, method)(request, timeout=self._deadline_now())
        except grpc.aio.AioRpcError as exc:
            raise self._map_error(exc) from exc
        except asyncio.CancelledError as exc:
            raise dropped_under(exc) from exc
        self._contact()
        latency = time.monotonic() - started
        self._deadline = pacing.after_answer(self._deadline, self.request_timeout, latency)
        return response

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._end_keepalives()
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- KV ---------------------------------------------------------------------------------

    async def range(self, key: bytes, range_end: bytes = b"", **kwargs: Any) -> Any:
        """A ``RangeResponse`` (``kvs``, ``count``, ``header.revision``)."""
        return await self._unary("Range", "_kv", range_request(key, range_end, **kwargs))

    async def get(self, key: bytes) -> Any | None:
        """The ``KeyValue`` of ``key`` or ``None``."""
        response = await self.range(key)
        return response.kvs[0] if response.kvs else None

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> Any:
        return await self._unary("Put", "_kv", rpc.PutRequest(key=key, value=value, lease=lease))

    async def delete(self, key: bytes, range_end: bytes = b"") -> int:
        """Delete ``key`` (or ``[key, range_end)``); return how many keys were deleted."""
        response = await self._unary(
            "DeleteRange", "_kv", rpc.DeleteRangeRequest(key=key, range_end=range_end)
        )
        return int(response.deleted)

    async def txn(
        self, compare: Sequence[Any], success: Sequence[Any] = (), failure: Sequence[Any] = ()
    ) -> Any:
        """A ``TxnResponse``: ``succeeded``, ``responses[i].response_range`` etc."""
        request = rpc.TxnRequest(
            compare=list(compare), success=list(success), failure=list(failure)
        )
        response = await self._unary("Txn", "_kv", request)
        if not response.succeeded:
            self.failed_txns += 1
        return response

    async def cas(self, cas: Cas, lease: int = 0) -> Any:
        """Send the compare-and-swap ``cas`` (``etcd.txn``); ``lease`` goes to its puts
        ``on_lease``. The ``TxnResponse``: on failure, ``responses[i]`` reads back
        ``cas.read_on_failure[i]``."""
        return await self.txn(
            [compare_message(c) for c in cas.compare],
            [write_message(w, lease) for w in cas.success],
            [op_range(key) for key in cas.read_on_failure],
        )

    # --- leases -----------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        response = await self._unary("LeaseGrant", "_lease", rpc.LeaseGrantRequest(TTL=ttl))
        if response.error:
            raise EtcdRequestError("LeaseGrant", response.error)
        return int(response.ID)

    async def keepalive(self, lease: int) -> int:
        """Refresh ``lease`` once; return its new TTL. ``LeaseNotFoundError`` if it is gone.

        Uses one long-lived keep-alive stream per lease (one message per refresh); a caller
        done with a lease ends its stream with ``end_keepalive``."""
        self._ensure_channel()
        self.requests += 1
        lock = self._keepalive_locks.setdefault(lease, asyncio.Lock())
        async with lock:
            # A reused stream may have died while idle (etcd restarted, the channel was
            # dropped): that refreshed nothing, so say it once more on a new stream.
            retries = 1 if lease in self._keepalive_calls else 0
            while True:
                try:
                    response = await self._keepalive_on_stream(lease)
                    break
                except (asyncio.InvalidStateError, grpc.aio.AioRpcError) as exc:
                    if retries == 0 or from_server(exc):
                        raise self._stream_error(exc) from exc
                    retries -= 1
        self._contact()
        if response.TTL <= 0:
            self.end_keepalive(lease)
            raise LeaseNotFoundError("NOT_FOUND", f"lease {lease:x} expired or revoked")
        return int(response.TTL)

    def end_keepalive(self, lease: int) -> None:
        """Close the keep-alive stream of ``lease`` (gone, revoked or replaced), if any."""
        call = self._keepalive_calls.pop(lease, None)
        self._keepalive_locks.pop(lease, None)
        if call is not None:
            call.cancel()

    def _end_keepalives(self) -> None:
        calls, self._keepalive_calls = self._keepalive_calls, {}
        for call in calls.values():
            call.cancel()

    def _forget_stream(self, lease: int, call: Any) -> None:
        if self._keepalive_calls.get(lease) is call:
            del self._keepalive_calls[lease]
        call.cancel()

    async def _keepalive_on_stream(self, lease: int) -> Any:
        """One refresh on ``lease``'s keep-alive stream (opened if there is none). Errors of
        the stream itself (finished, failed) propagate with the stream forgotten."""
        call = self._keepalive_calls.get(lease)
        if call is None:
            # The channel may have been dropped meanwhile (by a watch or another call).
            self._ensure_channel()
            call = self._keepalive_calls[lease] = self._lease.LeaseKeepAlive()
        try:
            within = self._deadline_now()
            await asyncio.wait_for(call.write(rpc.LeaseKeepAliveRequest(ID=lease)), within)
            response = await asyncio.wait_for(call.read(), within)
        except TimeoutError as exc:
            self._forget_stream(lease, call)
            self.note_silence()
            raise RendezvousConnectionError("etcd did not answer a lease keep-alive") from exc
        except (asyncio.InvalidStateError, grpc.aio.AioRpcError):
            self._forget_stream(lease, call)
            raise
        except asyncio.CancelledError as exc:
            # An answer still on its way must not be read as the answer to a later refresh.
            self._forget_stream(lease, call)
            raise dropped_under(exc) from exc
        if response is grpc.aio.EOF:
            self._forget_stream(lease, call)
            self._failed(drop=False)
            raise RendezvousConnectionError("etcd closed the lease keep-alive stream")
        return response

    def _stream_error(self, exc: BaseException) -> Exception:
        if isinstance(exc, grpc.aio.AioRpcError) and (
            from_server(exc) or exc.code() in UNREACHABLE
        ):
            return self._map_error(exc)
        # grpc's own "RPC already finished" / "Internal error from Core": the stream broke.
        self._failed(drop=False)
        return RendezvousConnectionError(f"the lease keep-alive stream broke: {exc!r}")

    async def revoke(self, lease: int) -> None:
        with contextlib.suppress(LeaseNotFoundError):
            await self._unary("LeaseRevoke", "_lease", rpc.LeaseRevokeRequest(ID=lease))

    # --- watches ----------------------------------------------------------------------------

    def watch(
        self,
        key: bytes,
        range_end: bytes = b"",
        *,
        start_revision: int = 0,
        prev_kv: bool = False,
        no_put: bool = False,
    ) -> Watch:
        """A watch on ``[key, range_end)`` from ``start_revision``; use as an async context."""
        return Watch(
            self, key, range_end, start_revision=start_revision, prev_kv=prev_kv, no_put=no_put
        )
