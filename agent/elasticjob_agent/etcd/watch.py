"""Watches: one shared gRPC watch stream per client, many watchers routed over it.

The client opens the stream (``EtcdClient.watch``) and keeps its bookkeeping (deadlines,
reachability, dropping a broken connection); this module only speaks the watch protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Protocol

import grpc
from aetcd import rpc

from elasticjob_agent.errors import RendezvousConnectionError
from elasticjob_agent.etcd.errors import EtcdRequestError, dropped_under


class WatchedClient(Protocol):
    """What a watch stream needs of its ``EtcdClient`` (its connection and bookkeeping)."""

    requests: int
    _watch: Any

    def _ensure_channel(self) -> None: ...
    def _deadline_now(self) -> float: ...
    def _contact(self) -> None: ...
    def _failed(self, *, drop: bool = True, answered: bool = False) -> None: ...
    def _map_error(self, exc: grpc.aio.AioRpcError) -> Exception: ...
    def _watch_stream(self) -> WatchStream: ...
    def note_silence(self) -> None: ...


class WatchStream:
    """One bidirectional gRPC watch stream carrying many watchers (routed by watch id), as
    etcd's own clients do: creating a watcher is then one message, not a new stream."""

    def __init__(self, client: WatchedClient) -> None:
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
            raise dropped_under(exc) from exc
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
        client: WatchedClient,
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
        self._stream: WatchStream | None = None
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
