"""A small asyncio etcd v3 client: the only module of the agent that talks gRPC to etcd.

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
from elasticjob_agent.etcd.messages import compare_message, op_range, range_request, write_message
from elasticjob_agent.etcd.txn import Cas
from elasticjob_agent.protocol.endpoints import Endpoint, parse_endpoints


def _from_server(exc: BaseException) -> bool:
    """An answer of etcd itself (``etcdserver: ...``), not of the transport or grpc."""
    return isinstance(exc, grpc.aio.AioRpcError) and (exc.details() or "").startswith("etcdserver")


def _overloaded(exc: grpc.aio.AioRpcError) -> bool:
    """etcd answered that it could not serve the request in time: it timed out waiting for its
    own apply loop (the transaction may still be applied later), or refused it because the apply
    loop is too far behind (``too many requests``: not applied). Either way: etcd is slow."""
    details = exc.details() or ""
    return _from_server(exc) and ("timed out" in details or "too many requests" in details)


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


_UNREACHABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
}
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


class EtcdRequestError(Exception):
    """etcd rejected a request for a reason other than being unreachable."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"etcd request failed: {code}: {details}")
        self.code = code
        self.details = details


class LeaseNotFoundError(EtcdRequestError):
    """The lease does not exist (any more)."""


@dataclass(frozen=True)
class Reachability:
    """What the health report says about etcd."""

    reachable: bool
    last_contact: float | None
    """Unix time of the last successful request."""
    unreachable_since: float | None
    """Unix time of the first failure of the current outage; ``None`` while reachable."""


def _dropped_under(exc: asyncio.CancelledError) -> RendezvousConnectionError:
    """Tell a call cancelled because its channel was closed from a cancelled caller.

    grpc cancels every call of a closed channel with ``CancelledError``, exactly what a cancelled
    task sees; the task knows which it is (``cancelling()``). Re-raises the caller's own cancel.
    """
    task = asyncio.current_task()
    if task is None or task.cancelling():
        raise exc
    return RendezvousConnectionError("the etcd connection was dropped during the request")


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
        self._stream: _WatchStream | None = None
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

    def _watch_stream(self) -> _WatchStream:
        """The shared watch stream, opened on first use and after a failure."""
        if self._stream is None or not self._stream.alive:
            self._stream = _WatchStream(self)
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
        overloaded = _overloaded(exc)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED or overloaded:
            self._silent()
        if code in _UNREACHABLE or overloaded:
            # "etcdserver: ..." comes from a live server (e.g. "request timed out" under load);
            # a client-side deadline says nothing about the connection either.
            transport = code == grpc.StatusCode.UNAVAILABLE and not _from_server(exc)
            self._failed(drop=transport, answered=overloaded)
            hint = ""
            if self.endpoint.tls is not None and not _from_server(exc):
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
            raise _dropped_under(exc) from exc
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
                    if retries == 0 or _from_server(exc):
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
            raise _dropped_under(exc) from exc
        if response is grpc.aio.EOF:
            self._forget_stream(lease, call)
            self._failed(drop=False)
            raise RendezvousConnectionError("etcd closed the lease keep-alive stream")
        return response

    def _stream_error(self, exc: BaseException) -> Exception:
        if isinstance(exc, grpc.aio.AioRpcError) and (
            _from_server(exc) or exc.code() in _UNREACHABLE
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


class _WatchStream:
    """One bidirectional gRPC watch stream carrying many watchers (routed by watch id), as
    etcd's own clients do: creating a watcher is then one message, not a new stream."""

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        client._ensure_channel()
        self._call: Any = client._watch.Watch()
        self._queues: dict[int, asyncio.Queue[Any]] = {}
        self._created: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 1
        # grpc allows one write at a time on a stream ("Internal error from Core" otherwise).
        self._write_lock = asyncio.Lock()
        self.error: Exception | None = None
        self._closed = False
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def alive(self) -> bool:
        return self.error is None and not self._closed and not self._reader.done()

    async def _read(self) -> None:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    raise RendezvousConnectionError("etcd closed the watch stream")
                wid = int(response.watch_id)
                if response.created:
                    future = self._created.pop(wid, None)
                    if future is not None and not future.done():
                        future.set_result(response)
                    if not response.events:
                        continue
                queue = self._queues.get(wid)
                if queue is not None:
                    queue.put_nowait(response)
        except asyncio.CancelledError:
            # Closed by us or with its channel: either way the watchers must hear of it.
            self._fail(RendezvousConnectionError("the etcd watch stream was closed"))
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        except grpc.aio.AioRpcError as exc:
            self._fail(self._client._map_error(exc))
        except Exception as exc:
            self._client._failed(drop=False)
            self._fail(exc)

    def _fail(self, error: Exception) -> None:
        self.error = error
        for future in self._created.values():
            if not future.done():
                future.set_exception(error)
        self._created.clear()
        for queue in self._queues.values():
            queue.put_nowait(error)

    async def _write(self, request: Any) -> None:
        """One write on the stream, serialized and bounded by the request deadline: grpc never
        completes a write on a call cancelled before its initial metadata was sent (a channel
        dropped under a fresh stream), and refuses one on a finished call."""
        if self._closed:
            raise RendezvousConnectionError("the etcd watch stream was closed")
        try:
            async with asyncio.timeout(self._client._deadline_now()):
                async with self._write_lock:
                    await self._call.write(request)
        except TimeoutError as exc:
            self._client.note_silence()
            self.close()  # the client opens a new stream on the next watch
            raise RendezvousConnectionError("etcd did not take a watch request in time") from exc
        except (asyncio.InvalidStateError, grpc.aio.UsageError) as exc:
            self.close()
            raise RendezvousConnectionError(f"the etcd watch stream broke: {exc}") from exc

    async def add(self, create: Any) -> tuple[int, asyncio.Queue[Any]]:
        wid = self._next_id
        self._next_id += 1
        create.watch_id = wid
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._created[wid] = future
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queues[wid] = queue
        try:
            await self._write(rpc.WatchRequest(create_request=create))
            created = await asyncio.wait_for(future, self._client._deadline_now())
        except TimeoutError as exc:
            self._queues.pop(wid, None)
            self._client.note_silence()
            self.close()  # the client opens a new stream on the next watch
            raise RendezvousConnectionError("etcd did not create the watch in time") from exc
        except grpc.aio.AioRpcError as exc:
            self._queues.pop(wid, None)
            raise self._client._map_error(exc) from exc
        except asyncio.CancelledError as exc:
            self._queues.pop(wid, None)
            raise _dropped_under(exc) from exc
        except BaseException:
            self._queues.pop(wid, None)
            raise
        finally:
            # Answered, or given up on (a write that failed or was cancelled): nobody awaits
            # this future any more, and a stream failure must not set an error on it that
            # nobody retrieves ("Future exception was never retrieved").
            self._created.pop(wid, None)
        if created.compact_revision:
            self._queues.pop(wid, None)
            raise EtcdRequestError("Watch", f"revision compacted at {created.compact_revision}")
        return wid, queue

    async def cancel(self, wid: int) -> None:
        if self._queues.pop(wid, None) is None or not self.alive:
            return
        # A stream that broke has nothing left to cancel (``_write`` closed it).
        with contextlib.suppress(grpc.aio.AioRpcError, RendezvousConnectionError):
            request = rpc.WatchRequest(cancel_request=rpc.WatchCancelRequest(watch_id=wid))
            await self._write(request)

    def close(self) -> None:
        self._closed = True
        self._reader.cancel()
        self._call.cancel()


class Watch:
    """One watcher on the client's shared watch stream. ``next(within)`` returns the events of
    the next response (a list) or raises ``TimeoutError``."""

    def __init__(
        self,
        client: EtcdClient,
        key: bytes,
        range_end: bytes,
        *,
        start_revision: int,
        prev_kv: bool,
        no_put: bool,
    ) -> None:
        self._client = client
        self._create = rpc.WatchCreateRequest(
            key=key,
            range_end=range_end,
            start_revision=start_revision,
            prev_kv=prev_kv,
            filters=[rpc.WatchCreateRequest.NOPUT] if no_put else [],
        )
        self._stream: _WatchStream | None = None
        self._id = 0
        self._queue: asyncio.Queue[Any] | None = None

    async def __aenter__(self) -> Watch:
        client = self._client
        client.requests += 1
        self._stream = client._watch_stream()
        self._id, self._queue = await self._stream.add(self._create)
        client._contact()
        return self

    async def next(self, within: float | None) -> list[Any]:
        """The events of the next response; ``TimeoutError`` if none arrives ``within`` s."""
        assert self._queue is not None
        response = await asyncio.wait_for(self._queue.get(), within)
        if isinstance(response, Exception):
            raise response
        if response.canceled:
            raise RendezvousConnectionError(f"etcd canceled the watch: {response.cancel_reason}")
        if response.compact_revision:
            raise EtcdRequestError("Watch", f"revision compacted at {response.compact_revision}")
        self._client._contact()
        return list(response.events)

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stream is not None and self._id:
            await self._stream.cancel(self._id)
