"""One pod on one virtual node: its network, volumes, containers, probes and status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from . import network
from .container import DEFAULT_TERMINATION_MESSAGE_PATH, Container, termination_message
from .kubeapi import STRATEGIC, ApiError, KubeApi
from .network import Subnet, created_mount_points_file
from .podenv import PodConfigError, PodContext, container_argv, container_env
from .podstatus import (
    RunState,
    Termination,
    container_status,
    pod_conditions,
    pod_phase,
    restarts_after,
)
from .probes import probe_once
from .volumes import container_mounts, prepare_volumes, read_config_map, read_secret

log = logging.getLogger(__name__)

SHIM = Path(__file__).with_name("shim.py")
#: Restart back-off: 1 s doubling up to 10 s (the kubelet's is 10 s up to 5 min; tests need speed).
BACKOFF_START = 1.0
BACKOFF_MAX = 10.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodHost(Protocol):
    """What a pod worker needs of the node it runs on (``emulator.NodeEmulator``): addresses,
    the API, the hosts file, Events, and to be forgotten when its pod is gone."""

    api: KubeApi
    subnet: Subnet
    host_ip: str
    api_port: int
    ca_pem: str
    pod_path: str
    """``PATH`` in every container."""
    default_workdir: str
    state_dir: Path
    records_dir: Path

    def allocate_index(self) -> int: ...

    def release_index(self, index: int) -> None: ...

    def render_hosts(self, worker: PodWorker) -> str: ...

    def hosts_changed(self) -> None: ...

    def forget(self, worker: PodWorker) -> None: ...

    def event(self, pod: dict[str, Any], kind: str, reason: str, message: str) -> None: ...


class PodWorker:
    """Runs one pod bound to one of the emulator's nodes, like a kubelet's pod worker."""

    def __init__(self, emulator: PodHost, pod: dict[str, Any]) -> None:
        self.em = emulator
        self.pod = pod
        meta = pod["metadata"]
        self.uid = str(meta["uid"])
        self.namespace = str(meta["namespace"])
        self.name = str(meta["name"])
        self.node = str(pod["spec"]["nodeName"])
        self.policy = str(pod["spec"].get("restartPolicy", "Always"))
        self.inits = [Container(c, init=True) for c in pod["spec"].get("initContainers") or []]
        self.containers = [Container(c) for c in pod["spec"]["containers"]]
        self.dir = emulator.state_dir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.index = -1
        self.netns = ""
        self.veth = ""
        self.ip = ""
        self.start_time = now_rfc3339()
        self.initialized = not self.inits
        self.volumes: dict[str, Path] = {}
        self.stopping = asyncio.Event()
        self.dirty = asyncio.Event()
        self.lost = False
        self.deleting = False
        self.torn_down = False
        self.task: asyncio.Task[None] | None = None
        self._status_task: asyncio.Task[None] | None = None
        self._conditions: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")
        self._status_task = asyncio.create_task(self._status_loop())

    async def _run(self) -> None:
        try:
            await self._setup()
            for init in self.inits:
                if not await self._supervise(init):
                    self.mark_dirty()
                    return
            self.initialized = True
            self.mark_dirty()
            await asyncio.gather(*(self._supervise(c) for c in self.containers))
        except asyncio.CancelledError:
            raise
        except PodConfigError as err:
            for c in self.inits + self.containers:
                if c.state == RunState.CREATING:
                    c.state, c.message = RunState.CONFIG_ERROR, str(err)
            self.em.event(self.pod, "Warning", "Failed", f"Error: {err}")
        except Exception as err:
            # A bug or an unexpected API answer: make it visible in the pod, not only in our log.
            log.exception("pod %s/%s failed in the emulator", self.namespace, self.name)
            for c in self.inits + self.containers:
                if c.state == RunState.CREATING:
                    c.state, c.message = RunState.CONFIG_ERROR, f"node emulator error: {err}"
        finally:
            self.mark_dirty()

    async def _setup(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index = self.em.allocate_index()
        self.netns, self.veth, self.ip = await asyncio.to_thread(
            network.create_pod_network, self.em.subnet, self.index
        )
        etc = Path("/etc/netns") / self.netns
        etc.mkdir(parents=True, exist_ok=True)
        # No cluster DNS: names resolve through /etc/hosts; other lookups fail at once.
        (etc / "resolv.conf").write_text(
            f"search {self.namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
            "nameserver 127.0.0.1\noptions ndots:1 timeout:1 attempts:1\n"
        )
        (etc / "hosts").write_text(self.em.render_hosts(self))
        self.write_record()
        self.mark_dirty()
        # Like the kubelet, keep trying to mount until what the volumes need exists.
        while not self.stopping.is_set():
            try:
                self.volumes = await prepare_volumes(
                    self.em.api, self.pod, self.dir, self._context({}, {}), self.em.ca_pem
                )
                for c in self.inits + self.containers:
                    c.state, c.message = RunState.CREATING, ""
                return
            except PodConfigError as err:
                for c in self.inits + self.containers:
                    c.state, c.message = RunState.CONFIG_ERROR, str(err)
                self.mark_dirty()
                await self._sleep(2.0)

    def _context(
        self,
        config_maps: Mapping[tuple[str, str], Mapping[str, str]],
        secrets: Mapping[tuple[str, str], Mapping[str, str]],
    ) -> PodContext:
        return PodContext(
            pod_ip=self.ip,
            host_ip=self.em.host_ip,
            node_name=self.node,
            api_host=self.em.host_ip,
            api_port=self.em.api_port,
            path=self.em.pod_path,
            home=os.environ.get("HOME", "/root"),
            config_maps=config_maps,
            secrets=secrets,
        )

    async def _env_context(self, spec: Mapping[str, Any]) -> PodContext:
        config_maps: dict[tuple[str, str], Mapping[str, str]] = {}
        secrets: dict[tuple[str, str], Mapping[str, str]] = {}
        refs: list[tuple[str, str]] = []
        for source in spec.get("envFrom") or []:
            if "configMapRef" in source:
                refs.append(("configmap", str(source["configMapRef"]["name"])))
            if "secretRef" in source:
                refs.append(("secret", str(source["secretRef"]["name"])))
        for var in spec.get("env") or []:
            value_from = var.get("valueFrom") or {}
            if "configMapKeyRef" in value_from:
                refs.append(("configmap", str(value_from["configMapKeyRef"]["name"])))
            if "secretKeyRef" in value_from:
                refs.append(("secret", str(value_from["secretKeyRef"]["name"])))
        for kind, name in refs:
            if kind == "configmap":
                data = await read_config_map(self.em.api, self.namespace, name)
                if data is not None:
                    config_maps[(self.namespace, name)] = data
            else:
                data = await read_secret(self.em.api, self.namespace, name)
                if data is not None:
                    secrets[(self.namespace, name)] = data
        return self._context(config_maps, secrets)

    # ---------------------------------------------------------------- containers

    def _log_path(self, c: Container, attempt: int) -> Path:
        return self.dir / "logs" / c.name / f"{attempt}.log"

    def _pid_file(self, c: Container) -> Path:
        return self.dir / "run" / f"{c.name}.pid"

    async def _supervise(self, c: Container) -> bool:
        """Run ``c`` until it ends for good; True if it (last) exited 0."""
        backoff = BACKOFF_START
        while not self.stopping.is_set():
            try:
                ctx = await self._env_context(c.spec)
                c.env = container_env(self.pod, c.spec, ctx)
                argv = container_argv(c.spec, c.env)
                mounts = container_mounts(c.spec, self.volumes)
            except PodConfigError as err:
                c.state, c.message = RunState.CONFIG_ERROR, str(err)
                self.mark_dirty()
                await self._sleep(2.0)
                continue
            c.message = ""
            began = time.monotonic()
            code = await self._run_once(c, argv, mounts)
            ran = time.monotonic() - began
            if self.stopping.is_set() or not restarts_after(self._policy_for(c), code):
                c.state = RunState.TERMINATED
                self.mark_dirty()
                return code == 0
            if c.init and code == 0:
                c.state = RunState.TERMINATED
                self.mark_dirty()
                return True
            if ran > 2 * BACKOFF_MAX:
                backoff = BACKOFF_START
            c.state = RunState.BACKOFF
            self.mark_dirty()
            await self._sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            if self.stopping.is_set():
                c.state = RunState.TERMINATED
                self.mark_dirty()
                return False
            c.restart_count += 1
        c.state = RunState.TERMINATED if c.last is not None else c.state
        return False

    def _policy_for(self, c: Container) -> str:
        # Init containers are retried until they succeed unless the pod never restarts.
        if c.init:
            return "Never" if self.policy == "Never" else "OnFailure"
        return self.policy

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _run_once(self, c: Container, argv: list[str], mounts: list[dict[str, Any]]) -> int:
        spec_file = self.dir / "run" / f"{c.name}.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file = self._pid_file(c)
        pid_file.unlink(missing_ok=True)
        hostname = str(self.pod["spec"].get("hostname") or self.name)[:63]
        cwd = str(c.spec.get("workingDir") or self.em.default_workdir)
        # As the kubelet does: a fresh file per run, bound at terminationMessagePath; what the
        # command wrote there becomes the terminated state's message.
        termination_log = self.dir / "run" / f"{c.name}.termination-log"
        termination_log.write_bytes(b"")
        message_path = str(c.spec.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH)
        mounts = [*mounts, {"source": str(termination_log), "target": message_path}]
        spec_file.write_text(
            json.dumps(
                {
                    "hostname": hostname,
                    "argv": argv,
                    "env": c.env,
                    "cwd": cwd,
                    "mounts": mounts,
                    "pid_file": str(pid_file),
                    "parent_pid": os.getpid(),
                    "created_file": str(created_mount_points_file()),
                }
            )
        )
        log_path = self._log_path(c, c.restart_count)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:
            c.proc = await asyncio.create_subprocess_exec(
                "ip", "netns", "exec", self.netns, "unshare", "--uts", "--",
                sys.executable, "-I", "-S", str(SHIM), str(spec_file),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,
            )  # fmt: skip
        c.state, c.started_at, c.ready = RunState.RUNNING, now_rfc3339(), False
        probes = asyncio.create_task(self._probe(c))
        self.write_record()
        self.mark_dirty()
        code = await c.proc.wait()
        probes.cancel()
        c.ready = False
        c.last = Termination(
            exit_code=code,
            started_at=c.started_at,
            finished_at=now_rfc3339(),
            message=termination_message(
                termination_log, log_path, code, str(c.spec.get("terminationMessagePolicy") or "")
            ),
        )
        if code == 128 and c.restart_count == 0:
            c.message = log_path.read_text(errors="replace")[-300:]
        return code

    async def _probe(self, c: Container) -> None:
        """Readiness sets ``c.ready``; a failing liveness probe kills the container."""
        readiness = c.spec.get("readinessProbe")
        liveness = c.spec.get("livenessProbe")
        if not readiness:
            c.ready = True
            self.mark_dirty()
        if not readiness and not liveness:
            return
        shim_pid = c.proc.pid if c.proc else 0
        tasks = []
        if readiness:
            tasks.append(self._probe_loop(c, readiness, shim_pid, readiness=True))
        if liveness:
            tasks.append(self._probe_loop(c, liveness, shim_pid, readiness=False))
        await asyncio.gather(*tasks)

    async def _probe_loop(
        self, c: Container, probe: Mapping[str, Any], shim_pid: int, readiness: bool
    ) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = float(probe.get("periodSeconds", 10))
        need_ok = int(probe.get("successThreshold", 1))
        need_fail = int(probe.get("failureThreshold", 3))
        oks = fails = 0
        while True:
            ok = await probe_once(probe, c.spec, self.ip, shim_pid, c.env)
            oks, fails = (oks + 1, 0) if ok else (0, fails + 1)
            if readiness:
                if ok and oks >= need_ok and not c.ready:
                    c.ready = True
                    self.mark_dirty()
                elif not ok and fails >= need_fail and c.ready:
                    c.ready = False
                    self.mark_dirty()
            elif fails >= need_fail:
                self.em.event(
                    self.pod, "Normal", "Killing",
                    f"Container {c.name} failed liveness probe, will be restarted",
                )  # fmt: skip
                self.kill_main(c, signal.SIGKILL)
                return
            await asyncio.sleep(period)

    def main_pid(self, c: Container) -> int | None:
        try:
            return int(self._pid_file(c).read_text())
        except (OSError, ValueError):
            return None

    def kill_main(self, c: Container, signum: int) -> None:
        """Signal the container's command (not its init), as a crash or OOM kill would."""
        pid = self.main_pid(c)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    async def stop_containers(self, grace: float, *, graceful: bool = True) -> None:
        """SIGTERM every running container, SIGKILL what still runs after ``grace`` seconds.
        ``graceful=False``: SIGKILL at once, as when the machine dies (nothing gets a SIGTERM)."""
        self.stopping.set()
        running = [c for c in self.inits + self.containers if c.proc and c.proc.returncode is None]
        for c in running:
            assert c.proc is not None
            if not graceful:
                self.kill_main(c, signal.SIGKILL)
                continue
            with contextlib.suppress(ProcessLookupError):
                c.proc.send_signal(signal.SIGTERM)
        waits = [c.proc.wait() for c in running if c.proc]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), max(grace, 0.1))
            except TimeoutError:
                for c in running:
                    if c.proc and c.proc.returncode is None:
                        self.kill_main(c, signal.SIGKILL)
                try:
                    await asyncio.wait_for(
                        asyncio.gather(*(c.proc.wait() for c in running if c.proc)), 3
                    )
                except TimeoutError:
                    for c in running:
                        if c.proc and c.proc.returncode is None:
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(c.proc.pid, signal.SIGKILL)
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self.task), 5)

    async def delete(self, grace: float) -> None:
        """Graceful deletion: stop the containers, report the terminal status, remove the pod
        object (grace 0, as the kubelet does) and tear the sandbox down."""
        if self.deleting:
            return
        self.deleting = True
        await self.stop_containers(grace)
        await self.flush_status()
        try:
            await self.em.api.request(
                "DELETE",
                f"/api/v1/namespaces/{self.namespace}/pods/{self.name}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": self.uid}},
            )  # fmt: skip
        except ApiError as err:
            if err.status not in (404, 409):
                log.warning("final delete of %s/%s: %s", self.namespace, self.name, err)
        await self.teardown()

    async def lose(self) -> None:
        """The node is gone: processes die at once and the pod fails with reason NodeLost."""
        self.lost = True
        await self.stop_containers(0, graceful=False)
        await self.teardown()
        message = f"Node {self.node} which was running pod {self.name} is unresponsive"
        status = self.build_status()
        status.update({"phase": "Failed", "reason": "NodeLost", "message": message})
        for entry in status.get("conditions", []):
            if entry["type"] in ("Ready", "ContainersReady"):
                entry.update({"status": "False", "reason": "NodeLost"})
        await self._patch_status(status)

    async def teardown(self) -> None:
        self.torn_down = True
        if self._status_task is not None:
            self._status_task.cancel()
        if self.netns:
            await asyncio.to_thread(network.delete_pod_network, self.netns, self.veth)
            self.em.release_index(self.index)
            self.netns = ""
        self.em.forget(self)
        shutil.rmtree(self.dir / "volumes", ignore_errors=True)

    # ---------------------------------------------------------------- status

    def mark_dirty(self) -> None:
        self.dirty.set()
        self.em.hosts_changed()

    def container_id(self, c: Container) -> str:
        return f"elasticjob://{self.uid[:8]}-{c.name}-{c.restart_count}"

    def build_status(self) -> dict[str, Any]:
        views = [c.view(self.container_id(c)) for c in self.containers]
        init_views = [c.view(self.container_id(c)) for c in self.inits]
        if not self.initialized:
            failed_init = any(
                v.state == RunState.TERMINATED and v.last is not None and v.last.exit_code != 0
                for v in init_views
            )
            phase = "Failed" if failed_init else "Pending"
        else:
            phase = pod_phase(views)
        now = now_rfc3339()
        self._conditions = pod_conditions(views, phase, self.initialized, self._conditions, now)
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": self._conditions,
            "hostIP": self.em.host_ip,
            "hostIPs": [{"ip": self.em.host_ip}],
            "startTime": self.start_time,
            "containerStatuses": [container_status(v) for v in views],
        }
        if init_views:
            status["initContainerStatuses"] = [container_status(v) for v in init_views]
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        return status

    async def _status_loop(self) -> None:
        while True:
            await self.dirty.wait()
            await asyncio.sleep(0.05)  # coalesce bursts of changes into one write
            self.dirty.clear()
            if not await self._patch_status(self.build_status()):
                # The API server was busy or unreachable: try again shortly.
                await asyncio.sleep(1.0)
                self.dirty.set()

    async def flush_status(self) -> None:
        self.dirty.clear()
        await self._patch_status(self.build_status())

    async def _patch_status(self, status: dict[str, Any]) -> bool:
        """Write ``status``; False if it should be retried (True also when the pod is gone)."""
        written = True
        try:
            await self.em.api.request(
                "PATCH",
                f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
                {"metadata": {"uid": self.uid}, "status": status},
                content_type=STRATEGIC,
            )
        except ApiError as err:
            if err.status != 404:
                log.warning("status of %s/%s: %s", self.namespace, self.name, err)
                written = err.status < 500 and err.status != 429
        except Exception as err:
            log.warning("status of %s/%s: %s", self.namespace, self.name, err)
            written = False
        self.write_record()
        return written

    def write_record(self) -> None:
        """The pod's record for test helpers: ``<state>/records/<ns>/<name>.json``."""
        if self.torn_down:
            return
        record = {
            "uid": self.uid,
            "node": self.node,
            "netns": self.netns,
            "veth": self.veth,
            "ip": self.ip,
            "dir": str(self.dir),
            "containers": {
                c.name: {
                    "log": str(self._log_path(c, c.restart_count)),
                    "previous_log": str(self._log_path(c, c.restart_count - 1))
                    if c.restart_count
                    else "",
                    "pid_file": str(self._pid_file(c)),
                    "restart_count": c.restart_count,
                    "init": c.init,
                }
                for c in self.inits + self.containers
            },
        }
        path = self.em.records_dir / self.namespace / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)

    def remove_record(self) -> None:
        path = self.em.records_dir / self.namespace / f"{self.name}.json"
        with contextlib.suppress(OSError):
            if json.loads(path.read_text()).get("uid") == self.uid:
                path.unlink()
