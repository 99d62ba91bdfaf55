"""Stand-ins for ``operator_scale_bench.py``: one process plays the kubelet of many virtual nodes
and serves every pod bound to them, so 1000 jobs of 4 workers fit on a 2-core machine.

The local cluster's node emulator runs each pod's command as a host process in its own network
namespace (a Python shim per pod): right for tests of real behaviour, but 5000 such pods would not
fit in 24 GiB. Here no process is started per pod. Instead this process

- registers the nodes ``scale-1`` ... ``scale-N`` (tainted ``elasticjob.dev/scale-bench``, so only
  the bench's jobs land there) and renews their Leases;
- watches the pods bound to them and, for each, takes an address from a subnet local to the
  network namespace it runs in (the bench creates it and routes the subnet there), marks the pod
  Running and Ready with that IP, and finalizes its deletion (as a kubelet does);
- serves on each worker pod's address the agent's health endpoints (``/status`` with a real
  ``HealthReport``, ``/healthz``), and on each managed etcd pod's address what the operator asks
  of an etcd: ``/health`` and the JSON gateway's ``/v3/kv/range`` and ``/v3/kv/txn``, over TLS with
  the job's own server certificate, requiring a client certificate of the job's CA.

Faults, on the control server (``--control HOST:PORT``, JSON bodies):

- ``POST /cut {"namespace", "job"}``: the job's etcd stops answering (connections and TLS
  handshakes hang, as behind a dropped link); its agents report etcd unreachable after
  ``AGENT_NOTICES`` s and its pod turns not-Ready after the readiness probe's 3 x 2 s.
- ``POST /fail {"namespace", "pod"}``: the pod's container exits 137 (phase ``Failed``).
- ``POST /hostile {"fraction"}``: that fraction of worker pods (every ``1/fraction``-th, by
  address) answers ``/status`` with one of ``HOSTILE_KINDS`` (the hostile bodies of
  ``operator_bench.py``); 0 turns it off.
- ``GET /stats``: pods served, requests answered, and this process's own API requests by verb (the
  bench subtracts them from the API server's counts).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import resource
import ssl
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from elasticjob_agent.protocol.health import (
    DEFAULT_HEALTH_PORT,
    AgentState,
    EtcdStatus,
    HealthReport,
)

log = logging.getLogger("scale_standins")

TAINT = "elasticjob.dev/scale-bench"
ETCD_PORT = 2379
AGENT_NOTICES = 2.0
"""Seconds a real agent takes to see its etcd gone (a failed keep-alive)."""
NOT_READY_AFTER = 6.0
"""The managed etcd's readiness probe: 3 failures, 2 s apart."""
LEASE_SECONDS = 40
LEASE_RENEW = 5.0
"""Well inside the controller-manager's 20 s grace, even on a loaded machine: a node that
misses it turns NotReady and the operator replaces every pod on it."""
HOSTILE_KINDS = ("endless", "huge", "slow", "bomb", "headers", "nan", "infinity", "nested")
GOOD = (
    b'{"schemaVersion": 1, "runId": "r", "node": "n", "state": "Running", "round": 1, '
    b'"restarts": {"total": 0, "byReason": {}}, "maxRestarts": 3, '
    b'"etcd": {"reachable": true}, "updatedAt": 1.0}'
)
BODIES = {
    "nan": GOOD.replace(b'"round": 1', b'"round": NaN'),
    "infinity": GOOD.replace(b'"updatedAt": 1.0', b'"updatedAt": Infinity'),
    "nested": b'{"a":' * 5000 + b"1" + b"}" * 5000,
}
BOMB = zlib.compress(b" " * (50 << 20), 9)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Api:
    """The API server, with the admin token; counts its own requests by verb."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
        self._ssl = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
        self._token = config["users"][0]["user"]["token"]
        self.counts: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"},
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=64),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/merge-patch+json",
        params: dict[str, str] | None = None,
        verb: str | None = None,
    ) -> Any:
        if self._session is None:
            raise RuntimeError("Api.open() first")
        self.counts[verb or method] += 1
        async with self._session.request(
            method,
            self.server + path,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type} if body is not None else {},
            params=params,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise ApiError(response.status, f"{method} {path}: {text[:300]}")
            return json.loads(text) if text else None

    async def watch(self, path: str, version: str, params: dict[str, str]) -> Any:
        if self._session is None:
            raise RuntimeError("Api.open() first")
        self.counts["WATCH"] += 1
        query = {**params, "watch": "true", "resourceVersion": version, "timeoutSeconds": "240"}
        query["allowWatchBookmarks"] = "true"
        async with self._session.get(
            self.server + path,
            params=query,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, await response.text())
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class JobState:
    """What the stand-ins of one job share: its run id, TLS, and whether its etcd is cut."""

    run_id: str = ""
    cut_at: float | None = None
    tls: ssl.SSLContext | None = None


@dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    job: str
    role: str
    ip: str
    index: int
    servers: list[asyncio.AbstractServer] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    cut: bool = False
    """The pod's link is down (its etcd answers nothing)."""
    writers: set[asyncio.StreamWriter] = field(default_factory=set)


def server_context(data: dict[str, str], workdir: Path) -> ssl.SSLContext:
    """An etcd server's TLS: the job's server certificate, clients of the job's CA only."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=data["ca.crt"])
    context.verify_mode = ssl.CERT_REQUIRED
    # ssl loads a key pair from files only: a private directory for this call.
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        cert, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
        cert.write_text(data["tls.crt"])
        key.touch(mode=0o600)
        key.write_text(data["tls.key"])
        context.load_cert_chain(cert, key)
    return context


class StandIns:
    def __init__(self, api: Api, nodes: list[str], subnet: str, workdir: Path) -> None:
        self.api = api
        self.nodes = nodes
        self.node_set = set(nodes)
        self.addresses = ipaddress.ip_network(subnet).hosts()
        self.workdir = workdir
        self.pods: dict[str, Pod] = {}  # by uid
        self.jobs: dict[tuple[str, str], JobState] = {}
        self.hostile_every = 0
        self.served: Counter[str] = Counter()
        self._next_index = 0
        self._background: set[asyncio.Task[Any]] = set()

    # -- nodes ------------------------------------------------------------------------------

    def _node_status(self, node: str) -> dict[str, Any]:
        capacity = {"cpu": "4000", "memory": "16Ti", "pods": "1000", "ephemeral-storage": "10Ti"}
        now = now_rfc3339()
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "scale-bench stand-in kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": node}],
            "nodeInfo": {
                "machineID": node,
                "systemUUID": node,
                "bootID": node,
                "kernelVersion": "",
                "osImage": "scale-bench stand-in",
                "containerRuntimeVersion": "standin://0",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    async def register_nodes(self) -> None:
        for node in self.nodes:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {TAINT: "true", "kubernetes.io/os": "linux"}},
                "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]},
            }
            with contextlib.suppress(ApiError):
                await self.api.call("POST", "/api/v1/nodes", body, content_type="application/json")
            await self.api.call(
                "PATCH",
                f"/api/v1/nodes/{node}/status",
                {"status": self._node_status(node)},
                content_type="application/strategic-merge-patch+json",
            )
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": micro_now(),
                },
            }
            with contextlib.suppress(ApiError):
                await self.api.call(
                    "POST",
                    "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                    lease,
                    content_type="application/json",
                )

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(LEASE_RENEW)
            for node in self.nodes:
                try:
                    await self.api.call(
                        "PATCH",
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}",
                        {"spec": {"renewTime": micro_now()}},
                    )
                except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                    log.warning("lease of %s: %s", node, exc)

    async def delete_nodes(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(ApiError, aiohttp.ClientError):
                await self.api.call("DELETE", f"/api/v1/nodes/{node}")

    # -- pods ---------------------------------------------------------------------------------

    async def watch_pods(self) -> None:
        params = {"labelSelector": "elasticjob.dev/job-name"}
        while True:
            try:
                listed = await self.api.call("GET", "/api/v1/pods", params=params, verb="LIST")
                for item in listed["items"]:
                    await self._on_pod("ADDED", item)
                version = listed["metadata"]["resourceVersion"]
                async for event in self.api.watch("/api/v1/pods", version, params):
                    kind, obj = event["type"], event["object"]
                    if kind == "BOOKMARK":
                        version = obj["metadata"]["resourceVersion"]
                        continue
                    if kind == "ERROR":
                        break
                    version = obj["metadata"]["resourceVersion"]
                    await self._on_pod(kind, obj)
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("pod watch: %s", exc)
                await asyncio.sleep(1)

    async def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if spec.get("nodeName") not in self.node_set:
            return
        uid = meta["uid"]
        pod = self.pods.get(uid)
        if kind == "DELETED":
            if pod is not None:
                self._stop(pod)
            return
        if meta.get("deletionTimestamp"):
            if pod is not None:
                self._stop(pod)
            self._spawn(self._finalize(meta["namespace"], meta["name"], uid))
            return
        if pod is None and (obj.get("status") or {}).get("phase") in (None, "Pending"):
            self._spawn(self._start(obj))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _start(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        namespace, job = meta["namespace"], labels.get("elasticjob.dev/job-name", "")
        state = self.jobs.setdefault((namespace, job), JobState())
        role = labels.get("elasticjob.dev/role", "worker")
        pod = Pod(namespace, meta["name"], meta["uid"], job, role, str(next(self.addresses)), 0)
        pod.index = self._next_index
        self._next_index += 1
        self.pods[pod.uid] = pod
        try:
            if role == "etcd":
                state.cut_at = None  # a new etcd pod, on a working link: the agents reach it
                state.tls = await self._etcd_tls(obj, state)
                server = await asyncio.start_server(
                    lambda r, w: self._serve(pod, r, w), pod.ip, ETCD_PORT, ssl=state.tls
                )
            else:
                for container in obj["spec"]["containers"]:
                    for arg in [*container.get("command", []), *container.get("args", [])]:
                        if arg.startswith("--rdzv-id="):
                            state.run_id = arg.split("=", 1)[1]
                server = await asyncio.start_server(
                    lambda r, w: self._serve(pod, r, w), pod.ip, DEFAULT_HEALTH_PORT
                )
            pod.servers.append(server)
        except (ApiError, aiohttp.ClientError, OSError, ValueError, KeyError) as exc:
            log.warning("start of %s/%s: %s", pod.namespace, pod.name, exc)
            return
        started = await self._retrying(
            f"status of {pod.namespace}/{pod.name}",
            lambda: self._patch_status(pod, running=True, ready=True),
        )
        if not started:
            self._stop(pod)  # the next list of pods (the watch's renewal) starts it again

    async def _etcd_tls(self, obj: dict[str, Any], state: JobState) -> ssl.SSLContext | None:
        """The job's server certificate, from the Secret the etcd pod mounts (``None``: the job's
        etcd is plain HTTP)."""
        if state.tls is not None:
            return state.tls
        secret = next(
            (
                v["secret"]["secretName"]
                for v in obj["spec"].get("volumes") or []
                if "secret" in v and "etcd" in v["name"]
            ),
            None,
        )
        if secret is None:
            return None
        namespace = obj["metadata"]["namespace"]
        found = await self.api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{secret}")
        data = {k: base64.b64decode(v).decode() for k, v in found["data"].items()}
        return server_context(data, self.workdir)

    async def _patch_status(
        self, pod: Pod, *, running: bool, ready: bool, exit_code: int | None = None
    ) -> None:
        now = now_rfc3339()
        state: dict[str, Any] = (
            {"running": {"startedAt": now}}
            if running
            else {"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": now}}
        )
        name = "etcd" if pod.role == "etcd" else "trainer"
        status = {
            "phase": "Running" if running else "Failed",
            "podIP": pod.ip,
            "podIPs": [{"ip": pod.ip}],
            "hostIP": pod.ip,
            "startTime": now,
            "conditions": [
                {"type": kind, "status": "True" if ready else "False", "lastTransitionTime": now}
                for kind in ("Ready", "ContainersReady")
            ]
            + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [
                {
                    "name": name,
                    "ready": ready,
                    "restartCount": 0,
                    "image": "standin",
                    "imageID": "standin",
                    "containerID": f"standin://{pod.uid}",
                    "started": running,
                    "state": state,
                }
            ],
        }
        await self.api.call(
            "PATCH",
            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
            {"status": status},
        )

    def _stop(self, pod: Pod) -> None:
        for server in pod.servers:
            server.close()
        pod.servers.clear()
        for writer in list(pod.writers):
            writer.close()
        self.pods.pop(pod.uid, None)

    async def _finalize(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's part of a graceful deletion: the pod's processes are gone (at once,
        here), so the object can go."""
        await self._retrying(
            f"deletion of {namespace}/{name}",
            lambda: self.api.call(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                content_type="application/json",
            ),
        )

    async def _retrying(self, what: str, call: Callable[[], Awaitable[Any]]) -> bool:
        """``call`` until it succeeds, the object is gone or changed (404, 409) or about two
        minutes passed. A kubelet's write that fails under load is retried, as the kubelet's
        are: one lost write once left a job's pods Pending, then Terminating, for good."""
        pause = 0.5
        for attempt in range(9):
            try:
                await call()
                return True
            except ApiError as exc:
                if exc.status in (404, 409):
                    return False
                error: Exception = exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = exc
            log.warning("%s, attempt %d: %s", what, attempt + 1, error)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        return False

    # -- serving ------------------------------------------------------------------------------

    async def _serve(
        self, pod: Pod, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pod.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                method, path = ([*line.split(b" "), b"", b""])[:2]
                length = 0
                for header in rest.split(b"\r\n"):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                state = self.jobs.get((pod.namespace, pod.job)) or JobState()
                if pod.cut:
                    await asyncio.Event().wait()  # a dropped link: no answer, ever
                if pod.role != "etcd" and self._hostile(pod):
                    await self._hostile_answer(pod, writer)
                    return
                body = self._answer(pod, state, method.decode(), path.decode())
                self.served[f"{pod.role} {path.decode()}"] += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ValueError,
        ):
            pass
        finally:
            pod.writers.discard(writer)
            writer.close()

    def _answer(self, pod: Pod, state: JobState, method: str, path: str) -> bytes:
        if pod.role == "etcd":
            if path == "/health":
                return b'{"health": "true", "reason": ""}'
            if path == "/v3/kv/range":
                return b'{"header": {"revision": "1"}, "kvs": [], "count": "0"}'
            if path == "/v3/kv/txn":
                return b'{"header": {"revision": "2"}, "succeeded": true}'
            return b"{}"
        if path != "/status":
            return b"ok"
        now = time.time()
        cut = state.cut_at is not None and now - state.cut_at >= AGENT_NOTICES
        report = HealthReport(
            run_id=state.run_id,
            node=pod.name,
            state=AgentState.RENDEZVOUS if cut else AgentState.RUNNING,
            etcd=EtcdStatus(
                reachable=not cut,
                last_contact=state.cut_at if cut else now,
                unreachable_since=state.cut_at if cut else None,
            ),
            round=1,
            group_world_size=4,
            world_size=4,
            waiting_since=state.cut_at if cut else None,
            last_progress=now,
            # Training advances two steps a second (the operator samples it into the status).
            last_step=None if cut else int((now - pod.started) * 2),
            last_step_at=None if cut else now,
            updated_at=now,
            health_port=DEFAULT_HEALTH_PORT,
        )
        return report.dumps().encode()

    def _hostile(self, pod: Pod) -> bool:
        return self.hostile_every > 0 and pod.index % self.hostile_every == 0

    async def _hostile_answer(self, pod: Pod, writer: asyncio.StreamWriter) -> None:
        kind = HOSTILE_KINDS[(pod.index // max(self.hostile_every, 1)) % len(HOSTILE_KINDS)]
        self.served[f"hostile {kind}"] += 1
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if kind == "endless":
            writer.write(head + b"\r\n")
            while True:
                writer.write(b"[" * 65536)
                await writer.drain()
        elif kind == "huge":
            writer.write(head + b"Content-Length: 314572800\r\n\r\n")
            while True:
                writer.write(b" " * 65536)
                await writer.drain()
        elif kind == "slow":
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(GOOD))
            for byte in GOOD:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)
        elif kind == "bomb":
            writer.write(
                head + b"Content-Encoding: deflate\r\nContent-Length: %d\r\n\r\n" % len(BOMB) + BOMB
            )
            await writer.drain()
        elif kind == "headers":
            writer.write(b"HTTP/1.1 200 OK\r\n")
            for i in range(100000):
                writer.write(b"X-Junk-%d: %s\r\n" % (i, b"j" * 4000))
                await writer.drain()
        else:
            body = BODIES[kind]
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    # -- faults -------------------------------------------------------------------------------

    async def cut(self, namespace: str, job: str) -> None:
        state = self.jobs.setdefault((namespace, job), JobState())
        state.cut_at = time.time()
        etcd = [
            p
            for p in self.pods.values()
            if p.role == "etcd" and (p.namespace, p.job) == (namespace, job)
        ]
        for pod in etcd:
            pod.cut = True
        await asyncio.sleep(NOT_READY_AFTER)
        for pod in etcd:
            if pod.uid in self.pods:
                with contextlib.suppress(ApiError, aiohttp.ClientError):
                    await self._patch_status(pod, running=True, ready=False)

    async def fail(self, namespace: str, name: str) -> None:
        pod = next(
            (p for p in self.pods.values() if (p.namespace, p.name) == (namespace, name)), None
        )
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name} on the stand-in nodes")
        for server in pod.servers:
            server.close()
        for writer in list(pod.writers):
            writer.close()
        await self._patch_status(pod, running=False, ready=False, exit_code=137)


async def control(standins: StandIns, host: str, port: int) -> web.AppRunner:
    async def cut(request: web.Request) -> web.Response:
        body = await request.json()
        standins._spawn(standins.cut(body["namespace"], body["job"]))
        return web.json_response({"cut_at": time.time()})

    async def fail(request: web.Request) -> web.Response:
        body = await request.json()
        await standins.fail(body["namespace"], body["pod"])
        return web.json_response({"failed_at": time.time()})

    async def hostile(request: web.Request) -> web.Response:
        fraction = float((await request.json())["fraction"])
        standins.hostile_every = round(1 / fraction) if fraction > 0 else 0
        return web.json_response({"every": standins.hostile_every})

    async def stats(_: web.Request) -> web.Response:
        pods = list(standins.pods.values())
        return web.json_response(
            {
                "pods": len(pods),
                "workers": sum(1 for p in pods if p.role == "worker"),
                "etcds": sum(1 for p in pods if p.role == "etcd"),
                "served": dict(standins.served),
                "api_requests": dict(standins.api.counts),
                "hostile_pods": [
                    f"{p.namespace}/{p.name}"
                    for p in pods
                    if p.role == "worker" and standins._hostile(p)
                ],
            }
        )

    app = web.Application()
    app.router.add_post("/cut", cut)
    app.router.add_post("/fail", fail)
    app.router.add_post("/hostile", hostile)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def main_async(args: argparse.Namespace) -> None:
    api = Api(Path(args.kubeconfig))
    await api.open()
    nodes = [f"scale-{i}" for i in range(1, args.nodes + 1)]
    standins = StandIns(api, nodes, args.subnet, Path(args.workdir))
    await standins.register_nodes()
    host, _, port = args.control.rpartition(":")
    runner = await control(standins, host, int(port))
    tasks = [
        asyncio.ensure_future(standins.heartbeats()),
        asyncio.ensure_future(standins.watch_pods()),
    ]
    print("ready", flush=True)
    try:
        await asyncio.gather(*tasks)
    finally:
        await runner.cleanup()
        await api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--subnet", required=True)
    parser.add_argument("--control", required=True, help="HOST:PORT of the control server")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
