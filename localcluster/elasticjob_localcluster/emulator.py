"""The node emulator: registers virtual nodes and runs the pods bound to them as local processes.

It plays the kubelet's part towards the API server: Node objects with capacity (CPU, memory,
``nvidia.com/gpu``), node Leases as heartbeats, pod status (phase, conditions, container states,
restart counts), graceful deletion, and the kubelet's ``/containerLogs`` endpoint so that
``kubectl logs`` works. Images are not run: each container's ``command`` runs on the host inside
the pod's network namespace (see :mod:`.podworker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from elasticjob_agent.ports import free_port

from .config import ClusterConfig, repo_root, venv_bin_dir
from .hostsfile import PodEntry, ServiceEntry, render_hosts
from .kubeapi import MERGE, STRATEGIC, ApiError, KubeApi
from .network import Subnet
from .podworker import PodWorker, now_rfc3339
from .virtualnode import node_lease, node_object, node_status

log = logging.getLogger(__name__)

LEASE_RENEW = 5.0  # well inside the controller-manager's 20 s grace, even on a loaded machine
NODE_STATUS_EVERY = 30.0


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeEmulator:
    """All virtual nodes of one cluster; :meth:`run` until cancelled, then :meth:`shutdown`."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        api: KubeApi,
        subnet: Subnet,
        api_port: int,
        ca_pem: str,
        tls: tuple[Path, Path],
    ) -> None:
        self.config = config
        self.api = api
        self.subnet = subnet
        self.host_ip = subnet.gateway
        self.api_port = api_port
        self.ca_pem = ca_pem
        self.tls = tls
        self.state_dir = config.state_dir
        self.records_dir = config.state_dir / "records"
        self.pod_path = (
            f"{venv_bin_dir()}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        )
        self.default_workdir = str(repo_root())
        self.kubelet_port = 0
        self.nodes = config.node_names()
        self.lost_nodes: set[str] = set()
        self.workers: dict[str, PodWorker] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self._free: list[int] = []
        self._next_index = 0
        self._hosts_dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._runner: web.AppRunner | None = None
        self._background: set[asyncio.Task[Any]] = set()

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as a task that is kept referenced until it ends."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---------------------------------------------------------------- addresses

    def allocate_index(self) -> int:
        if self._free:
            return self._free.pop(0)
        self._next_index += 1
        return self._next_index - 1

    def release_index(self, index: int) -> None:
        if index >= 0 and index not in self._free:
            self._free.append(index)
            self._free.sort()

    def forget(self, worker: PodWorker) -> None:
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]
        worker.remove_record()
        self.hosts_changed()

    # ---------------------------------------------------------------- start / stop

    async def start(self) -> None:
        """Serve the kubelet endpoint, register the nodes, start informers and heartbeats."""
        await self._serve_kubelet()
        for node in self.nodes:
            await self._register(node)
        self._tasks = [
            asyncio.create_task(self._heartbeats()),
            asyncio.create_task(self._inform("/api/v1/pods", self._on_pods)),
            asyncio.create_task(self._inform("/api/v1/services", self._on_services)),
            asyncio.create_task(self._hosts_loop()),
        ]

    async def shutdown(self, grace: float = 3.0) -> None:
        """Stop every pod (SIGTERM, SIGKILL after ``grace``) and remove its sandbox."""
        for task in self._tasks:
            task.cancel()
        workers = list(self.workers.values())
        await asyncio.gather(*(w.stop_containers(grace) for w in workers), return_exceptions=True)
        await asyncio.gather(*(w.teardown() for w in workers), return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    # ---------------------------------------------------------------- nodes

    async def _register(self, node: str) -> None:
        try:
            await self.api.request("POST", "/api/v1/nodes", node_object(node))
        except ApiError as err:
            if err.status != 409:
                raise
        await self._post_node_status(node, ready=True)
        node_obj = await self.api.get(f"/api/v1/nodes/{node}")
        lease = node_lease(node, str(node_obj["metadata"]["uid"]), _micro_now())
        try:
            await self.api.request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
            )
        except ApiError as err:
            if err.status != 409:
                raise

    async def _post_node_status(self, node: str, ready: bool) -> None:
        await self.api.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {
                "status": node_status(
                    self.config,
                    node,
                    ready=ready,
                    host_ip=self.host_ip,
                    kubelet_port=self.kubelet_port,
                    now=now_rfc3339(),
                )
            },
            content_type=STRATEGIC,
        )

    async def _heartbeats(self) -> None:
        last_status = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(LEASE_RENEW)
            post_status = asyncio.get_running_loop().time() - last_status > NODE_STATUS_EVERY
            for node in self.nodes:
                if node in self.lost_nodes:
                    continue
                try:
                    await self.api.request(
                        "PATCH",
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}",
                        {"spec": {"renewTime": _micro_now()}},
                        content_type=MERGE,
                    )
                    if post_status:
                        await self._post_node_status(node, ready=True)
                except Exception as err:
                    log.warning("heartbeat of %s: %s", node, err)
            if post_status:
                last_status = asyncio.get_running_loop().time()

    async def lose_node(self, node: str) -> list[str]:
        """Simulate the loss of ``node``: heartbeats stop, its pods' processes die and the pods
        fail (reason ``NodeLost``), and its Ready condition turns Unknown, so the node
        lifecycle controller taints it. Returns the pods that were lost."""
        if node not in self.nodes:
            raise ValueError(f"no virtual node {node!r}; nodes are {', '.join(self.nodes)}")
        self.lost_nodes.add(node)
        victims = [w for w in self.workers.values() if w.node == node]
        await asyncio.gather(*(w.lose() for w in victims))
        await self._post_node_status(node, ready=False)
        return [f"{w.namespace}/{w.name}" for w in victims]

    async def restore_node(self, node: str) -> None:
        """Bring a lost node back: heartbeats resume and pods bound to it start."""
        if node not in self.nodes:
            raise ValueError(f"no virtual node {node!r}; nodes are {', '.join(self.nodes)}")
        self.lost_nodes.discard(node)
        await self.api.request(
            "PATCH",
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}",
            {"spec": {"renewTime": _micro_now()}},
            content_type=MERGE,
        )
        await self._post_node_status(node, ready=True)
        for pod in list(self.pods.values()):
            self._sync_pod(pod)

    # ---------------------------------------------------------------- informers

    async def _inform(self, path: str, handler: Callable[[str, dict[str, Any]], None]) -> None:
        """List then watch ``path`` forever, feeding ``(event type, object)`` to ``handler``
        (``SYNC`` with a ``{"items": [...]}`` object after every list)."""
        while True:
            try:
                listing = await self.api.get(path)
                handler("SYNC", listing)
                version = str(listing["metadata"]["resourceVersion"])
                while True:
                    async for event in self.api.watch(path, version):
                        kind, obj = str(event["type"]), event["object"]
                        if kind == "ERROR":
                            raise ApiError(int(obj.get("code", 500)), "WATCH", path, str(obj))
                        version = str(obj["metadata"]["resourceVersion"])
                        if kind != "BOOKMARK":
                            handler(kind, obj)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.info("re-listing %s after %s", path, err)
                await asyncio.sleep(0.5)

    def _on_pods(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "SYNC":
            fresh = {str(p["metadata"]["uid"]): p for p in obj.get("items", [])}
            for uid in list(self.workers):
                if uid not in fresh:
                    self._gone(uid)
            self.pods = fresh
            for pod in fresh.values():
                self._sync_pod(pod)
        elif kind == "DELETED":
            uid = str(obj["metadata"]["uid"])
            self.pods.pop(uid, None)
            self._gone(uid)
        else:
            self.pods[str(obj["metadata"]["uid"])] = obj
            self._sync_pod(obj)
        self.hosts_changed()

    def _gone(self, uid: str) -> None:
        worker = self.workers.get(uid)
        if worker is not None and not worker.deleting:
            # Force-deleted: stop at once, nobody waits for the status any more.
            worker.deleting = True
            self.background(self._stop_and_teardown(worker))

    async def _stop_and_teardown(self, worker: PodWorker) -> None:
        await worker.stop_containers(0)
        await worker.teardown()

    def _sync_pod(self, pod: dict[str, Any]) -> None:
        node = pod.get("spec", {}).get("nodeName")
        if node not in self.nodes or node in self.lost_nodes:
            return
        uid = str(pod["metadata"]["uid"])
        worker = self.workers.get(uid)
        deleting = pod["metadata"].get("deletionTimestamp") is not None
        if worker is None:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return
            if deleting:
                self.background(self._delete_unstarted(pod))
                return
            worker = PodWorker(self, pod)
            self.workers[uid] = worker
            worker.start()
            return
        worker.pod["metadata"] = pod["metadata"]
        if deleting and not worker.deleting and not worker.lost:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            self.background(worker.delete(float(grace if grace is not None else 30)))

    async def _delete_unstarted(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            await self.api.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": meta["uid"]}},
            )  # fmt: skip

    def _on_services(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "SYNC":
            self.services = {
                (str(s["metadata"]["namespace"]), str(s["metadata"]["name"])): s
                for s in obj.get("items", [])
            }
        else:
            key = (str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
            if kind == "DELETED":
                self.services.pop(key, None)
            else:
                self.services[key] = obj
        self.hosts_changed()

    # ---------------------------------------------------------------- /etc/hosts

    def hosts_changed(self) -> None:
        self._hosts_dirty.set()

    def _entries(self) -> tuple[list[PodEntry], list[ServiceEntry]]:
        pods = []
        for pod in self.pods.values():
            status = pod.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            spec = pod.get("spec") or {}
            meta = pod["metadata"]
            pods.append(
                PodEntry(
                    namespace=str(meta["namespace"]),
                    name=str(meta["name"]),
                    ip=str(status.get("podIP", "")),
                    labels=tuple(sorted((meta.get("labels") or {}).items())),
                    ready=ready and status.get("phase") == "Running",
                    hostname=str(spec.get("hostname") or ""),
                    subdomain=str(spec.get("subdomain") or ""),
                    terminating=meta.get("deletionTimestamp") is not None
                    or status.get("phase") in ("Succeeded", "Failed"),
                )
            )
        services = []
        for (namespace, name), svc in self.services.items():
            spec = svc.get("spec") or {}
            selector = spec.get("selector")
            services.append(
                ServiceEntry(
                    namespace=namespace,
                    name=name,
                    selector=tuple(sorted(selector.items())) if selector else None,
                    headless=spec.get("clusterIP") == "None",
                    publish_not_ready=bool(spec.get("publishNotReadyAddresses", False)),
                )
            )
        return pods, services

    def render_hosts(self, worker: PodWorker) -> str:
        pods, services = self._entries()
        spec = worker.pod["spec"]
        me = PodEntry(
            namespace=worker.namespace,
            name=worker.name,
            ip=worker.ip,
            labels=(),
            ready=False,
            hostname=str(spec.get("hostname") or worker.name)[:63],
            subdomain=str(spec.get("subdomain") or ""),
            terminating=False,
        )
        return render_hosts(me, services, pods, self.host_ip)

    async def _hosts_loop(self) -> None:
        while True:
            await self._hosts_dirty.wait()
            await asyncio.sleep(0.1)
            self._hosts_dirty.clear()
            for worker in list(self.workers.values()):
                if not worker.netns:
                    continue
                path = Path("/etc/netns") / worker.netns / "hosts"
                text = self.render_hosts(worker)
                try:
                    # In place: `ip netns exec` bind-mounted this very inode over /etc/hosts.
                    with path.open("r+") as handle:
                        if handle.read() != text:
                            handle.seek(0)
                            handle.write(text)
                            handle.truncate()
                except OSError:
                    continue

    # ---------------------------------------------------------------- events

    def event(self, pod: dict[str, Any], kind: str, reason: str, message: str) -> None:
        """Post an Event about ``pod`` (best effort, in the background)."""
        meta = pod["metadata"]
        now = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

        async def post() -> None:
            with contextlib.suppress(Exception):
                await self.api.request(
                    "POST", f"/api/v1/namespaces/{meta['namespace']}/events", body
                )

        self.background(post())

    # ---------------------------------------------------------------- kubelet endpoint

    def find_worker(self, namespace: str, name: str) -> PodWorker | None:
        for worker in self.workers.values():
            if worker.namespace == namespace and worker.name == name:
                return worker
        return None

    async def _serve_kubelet(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        app.router.add_get("/healthz", self._healthz)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.kubelet_port = free_port(self.host_ip)
        site = web.TCPSite(self._runner, self.host_ip, self.kubelet_port, ssl_context=context)
        await site.start()

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["pod"]
        container = request.match_info["container"]
        worker = self.find_worker(namespace, name)
        if worker is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{name} not found on this node")
        match = [c for c in worker.inits + worker.containers if c.name == container]
        if not match:
            raise web.HTTPNotFound(text=f"container {container!r} not found in pod {name}")
        c = match[0]
        attempt = c.restart_count
        if request.query.get("previous") == "true":
            if attempt == 0 and c.last is None:
                raise web.HTTPBadRequest(
                    text=f"previous terminated container {container!r} not found"
                )
            attempt = attempt - 1 if c.state.value != "terminated" or attempt > 0 else attempt
        path = worker.dir / "logs" / container / f"{max(attempt, 0)}.log"
        text = path.read_bytes() if path.exists() else b""
        tail = request.query.get("tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = b"".join(lines[-int(tail) :]) if int(tail) > 0 else b""
        limit = request.query.get("limitBytes")
        if limit is not None:
            text = text[: int(limit)]
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(text)
        if request.query.get("follow") == "true":
            offset = path.stat().st_size if path.exists() else 0
            while c.state.value == "running" and c.restart_count == attempt:
                await asyncio.sleep(0.5)
                if path.exists() and path.stat().st_size > offset:
                    with path.open("rb") as handle:
                        handle.seek(offset)
                        chunk = handle.read()
                    offset += len(chunk)
                    await response.write(chunk)
        await response.write_eof()
        return response


async def control_server(
    path: Path, handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]
) -> asyncio.AbstractServer:
    """A Unix-socket server of one-line JSON requests ``{"op": ..., ...}``; each answer is one
    line ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            request = json.loads(line)
            handler = handlers.get(str(request.get("op")))
            if handler is None:
                answer: dict[str, Any] = {"ok": False, "error": f"unknown op {request.get('op')!r}"}
            else:
                answer = {"ok": True, "result": await handler(request)}
        except Exception as err:
            answer = {"ok": False, "error": str(err)}
        writer.write((json.dumps(answer) + "\n").encode())
        await writer.drain()
        writer.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return await asyncio.start_unix_server(serve, path=str(path))
