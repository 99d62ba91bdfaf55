"""Start, find, use and stop a local cluster from another process (CLI, tests)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import network
from .config import INFO_FILE, ClusterConfig, cache_dir, etcd_data_dir, tool_path
from .realnodes.node import remove_leftovers as remove_real_node_leftovers


class ClusterError(RuntimeError):
    """The cluster did not start, is not running, or refused a request."""


class LocalCluster:
    """A running local cluster: the API of the end-to-end tests.

    Every method acts on the cluster described by ``<state_dir>/cluster.json``.
    """

    def __init__(self, config: ClusterConfig, info: Mapping[str, Any]) -> None:
        self.config = config
        self.info = dict(info)
        #: Admin kubeconfig (a cluster admin in ``system:masters``).
        self.kubeconfig = Path(str(info["kubeconfig"]))
        #: API server URL, e.g. ``https://10.200.0.1:38211``.
        self.server = str(info["server"])
        #: Every node: the virtual ones (``node-<i>``), then the real ones (``real-<i>``).
        self.nodes: list[str] = list(info["nodes"])
        #: The node emulator's nodes.
        self.virtual_nodes: list[str] = list(info.get("virtual_nodes", info["nodes"]))
        #: Real nodes (kubelet, containerd): name -> netns, host_veth, node_ip, pod_cidr,
        #: containerd_socket, logs.
        self.real_nodes: dict[str, dict[str, str]] = dict(info.get("real_nodes", {}))
        #: Whether the real nodes enforce NetworkPolicies (kube-router's firewall on each).
        self.network_policies = bool(info.get("network_policies", False))
        helm_home = config.state_dir / "helm"
        #: Environment for kubectl/helm/clients: KUBECONFIG set, cached kubectl and helm first.
        self.env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{tool_path('kubectl').parent}:{os.environ.get('PATH', '')}",
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    # ---------------------------------------------------------------- tools

    def _run(
        self,
        tool: str,
        args: tuple[str, ...],
        *,
        check: bool,
        input: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(tool_path(tool)), *args],
            env=self.env,
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise ClusterError(
                f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}"
            )
        return done

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as the admin; raises :class:`ClusterError` on failure when ``check``."""
        return self._run("kubectl", args, check=check, input=input, timeout=timeout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run helm against this cluster (its own helm config/cache under the state dir)."""
        return self._run("helm", args, check=check, input=None, timeout=timeout)

    def get_json(self, *args: str) -> Any:
        """``kubectl get <args> -o json``, decoded."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str | Mapping[str, Any], namespace: str | None = None) -> None:
        """``kubectl apply -f -`` of a YAML/JSON text or a manifest dict."""
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        self.kubectl(*args, input=text)

    def wait_for(
        self, what: str, predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.3
    ) -> Any:
        """Poll ``predicate`` until it returns something truthy; raises with ``what`` on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(interval)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod object, or None if it does not exist."""
        done = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise ClusterError(done.stderr)
        pod: dict[str, Any] = json.loads(done.stdout)
        return pod

    def wait_pod_phase(
        self, namespace: str, name: str, *phases: str, timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until the pod is in one of ``phases``; returns the pod."""

        def check() -> dict[str, Any] | None:
            pod = self.pod(namespace, name)
            return pod if pod and pod.get("status", {}).get("phase") in phases else None

        result: dict[str, Any] = self.wait_for(
            f"pod {namespace}/{name} phase in {phases}", check, timeout
        )
        return result

    # ---------------------------------------------------------------- pods and nodes

    def _real(self, namespace: str, pod: str) -> tuple[dict[str, Any], dict[str, str]] | None:
        """(pod, its real node's info) if the pod is bound to a real node, else None."""
        if not self.real_nodes:
            return None
        obj = self.pod(namespace, pod)
        node = (obj or {}).get("spec", {}).get("nodeName", "")
        if obj is None or node not in self.real_nodes:
            return None
        return obj, self.real_nodes[node]

    def _container_id(self, obj: dict[str, Any], container: str | None) -> tuple[str, str]:
        """(name, containerd id) of the pod's running container ``container`` (default: the
        first)."""
        meta = obj["metadata"]
        statuses = obj.get("status", {}).get("containerStatuses", [])
        name = container or obj["spec"]["containers"][0]["name"]
        for status in statuses:
            if status["name"] == name and "running" in status.get("state", {}):
                return name, str(status["containerID"]).split("://", 1)[-1]
        raise ClusterError(f"container {name} of {meta['namespace']}/{meta['name']} is not running")

    def _real_veth(self, namespace: str, pod: str) -> tuple[str, str]:
        """(node netns, the pod's host-side veth in it) of a pod on a real node."""
        found = self._real(namespace, pod)
        if found is None:
            raise ClusterError(f"pod {namespace}/{pod} is not on a real node")
        obj, node = found
        # The sandbox's network namespace is the one of any of its running containers.
        _name, cid = self._container_id(obj, None)
        tasks = subprocess.run(
            ["ctr", "--address", node["containerd_socket"], "-n", "k8s.io", "tasks", "ls"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        pid = next(
            (line.split()[1] for line in tasks.stdout.splitlines() if line.startswith(cid)), ""
        )
        if not pid:
            raise ClusterError(f"no task for container {cid} of {namespace}/{pod}")
        link = subprocess.run(
            ["nsenter", "-t", pid, "-n", "ip", "-o", "link", "show", "eth0"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
        # "3: eth0@if12: ...": the peer's index in the node's namespace.
        peer = link.split(":")[1].split("@if")[-1] if "@if" in link else ""
        for line in network.run_ip("-n", node["netns"], "-o", "link", "show").splitlines():
            index, rest = line.split(":", 1)
            if index.strip() == peer:
                return node["netns"], rest.strip().split("@")[0]
        raise ClusterError(f"no veth of {namespace}/{pod} in {node['netns']}")

    def _set_real_pod_link(self, namespace: str, pod: str, up: bool) -> None:
        netns, veth = self._real_veth(namespace, pod)
        network.run_ip("-n", netns, "link", "set", veth, "up" if up else "down")

    def _record(self, namespace: str, pod: str) -> dict[str, Any]:
        path = self.config.state_dir / "records" / namespace / f"{pod}.json"
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ClusterError(f"pod {namespace}/{pod} is not running on a virtual node") from err
        return record

    def pod_ip(self, namespace: str, pod: str) -> str:
        """The pod's IP address on the pod network."""
        real = self._real(namespace, pod)
        ip = (
            str(real[0].get("status", {}).get("podIP", ""))
            if real
            else str(self._record(namespace, pod)["ip"])
        )
        if not ip:
            raise ClusterError(f"pod {namespace}/{pod} has no address yet")
        return ip

    def cut_pod(self, namespace: str, pod: str) -> None:
        """Cut the pod off the network (both ways) until :meth:`restore_pod`: its veth on the
        bridge goes down (on a real node: the CNI bridge's veth inside the node)."""
        if self._real(namespace, pod):
            self._set_real_pod_link(namespace, pod, up=False)
            return
        network.set_link(str(self._record(namespace, pod)["veth"]), up=False)

    def restore_pod(self, namespace: str, pod: str) -> None:
        """Reconnect a pod cut off by :meth:`cut_pod`."""
        if self._real(namespace, pod):
            self._set_real_pod_link(namespace, pod, up=True)
            return
        network.set_link(str(self._record(namespace, pod)["veth"]), up=True)

    def _all_records(self) -> Iterator[dict[str, Any]]:
        for path in sorted((self.config.state_dir / "records").glob("*/*.json")):
            with contextlib.suppress(OSError, ValueError):
                yield json.loads(path.read_text())

    def _set_real_pod_links(self, up: bool) -> None:
        for node in self.real_nodes.values():
            with contextlib.suppress(network.NetworkError):
                out = network.run_ip("-n", node["netns"], "-o", "link", "show", "master", "cni0")
                for line in out.splitlines():
                    veth = line.split(":", 2)[1].strip().split("@")[0]
                    network.run_ip("-n", node["netns"], "link", "set", veth, "up" if up else "down")

    def cut_all_pods(self) -> None:
        """Cut every currently running pod off the network."""
        self._set_real_pod_links(up=False)
        for record in self._all_records():
            if record.get("veth"):
                with contextlib.suppress(network.NetworkError):
                    network.set_link(str(record["veth"]), up=False)

    def restore_all_pods(self) -> None:
        """Reconnect every pod."""
        self._set_real_pod_links(up=True)
        for record in self._all_records():
            if record.get("veth"):
                with contextlib.suppress(network.NetworkError):
                    network.set_link(str(record["veth"]), up=True)

    def kill_container(
        self, namespace: str, pod: str, sig: int = signal.SIGKILL, container: str | None = None
    ) -> None:
        """Send ``sig`` to the container's command as if it crashed; the emulator reports the
        exit (code 128 + ``sig`` unless the command handles it) and applies ``restartPolicy``.
        On a real node the signal goes to the container's init process through containerd."""
        real = self._real(namespace, pod)
        if real:
            obj, node = real
            _name, cid = self._container_id(obj, container)
            done = subprocess.run(
                ["ctr", "--address", node["containerd_socket"], "-n", "k8s.io", "tasks", "kill",
                 "-s", signal.Signals(sig).name, cid],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise ClusterError(f"kill {cid} of {namespace}/{pod}: {done.stderr.strip()}")
            return
        record = self._record(namespace, pod)
        containers = record["containers"]
        name = container or next((n for n, c in containers.items() if not c.get("init")), None)
        if name not in containers:
            raise ClusterError(f"pod {namespace}/{pod} has no container {container!r}")
        try:
            pid = int(Path(containers[name]["pid_file"]).read_text())
            os.kill(pid, sig)
        except (OSError, ValueError) as err:
            raise ClusterError(
                f"container {name} of {namespace}/{pod} is not running: {err}"
            ) from err

    def exec_in_pod(
        self,
        namespace: str,
        pod: str,
        argv: list[str],
        *,
        container: str | None = None,
        timeout: float = 60,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside a running container's network, mount and UTS namespaces, with
        the container's environment: this cluster's ``kubectl exec`` (on a real node, ``kubectl
        exec`` itself)."""
        if self._real(namespace, pod):
            args = ["exec", "-n", namespace, pod] + (["-c", container] if container else [])
            done = self.kubectl(*args, "--", *argv, check=False, timeout=timeout)
            if check and done.returncode != 0:
                raise ClusterError(
                    f"{argv} in {namespace}/{pod} exited {done.returncode}: {done.stderr}"
                )
            return done
        record = self._record(namespace, pod)
        containers = record["containers"]
        name = container or next((n for n, c in containers.items() if not c.get("init")), None)
        if name not in containers:
            raise ClusterError(f"pod {namespace}/{pod} has no container {container!r}")
        try:
            pid = int(Path(containers[name]["pid_file"]).read_text())
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except (OSError, ValueError) as err:
            raise ClusterError(
                f"container {name} of {namespace}/{pod} is not running: {err}"
            ) from err
        env = dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)
        done = subprocess.run(
            ["nsenter", "-t", str(pid), "-n", "-m", "-u", "--", *argv],
            env=env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise ClusterError(
                f"{argv} in {namespace}/{pod} exited {done.returncode}: {done.stderr}"
            )
        return done

    def pod_logs(
        self, namespace: str, pod: str, container: str | None = None, previous: bool = False
    ) -> str:
        """The container's log (``previous``: the run before the last restart), read from the
        file the emulator writes; ``kubectl logs`` serves the same file. ``""`` while the pod is
        not running on a virtual node (not yet started, or already gone). On a real node:
        ``kubectl logs`` (``""`` while the kubelet has no log for it)."""
        if self._real(namespace, pod):
            args = ["logs", "-n", namespace, pod] + (["-c", container] if container else [])
            done = self.kubectl(*args, *(["--previous"] if previous else []), check=False)
            return done.stdout if done.returncode == 0 else ""
        try:
            record = self._record(namespace, pod)
        except ClusterError:
            return ""
        containers = record["containers"]
        name = container or next((n for n, c in containers.items() if not c.get("init")), None)
        if name not in containers:
            raise ClusterError(f"pod {namespace}/{pod} has no container {container!r}")
        path = containers[name]["previous_log" if previous else "log"]
        if not path:
            raise ClusterError(f"container {name} of {namespace}/{pod} has not restarted")
        try:
            return Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _control(self, request: Mapping[str, Any]) -> Any:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(60)
            sock.connect(str(self.config.state_dir / "control.sock"))
            sock.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data)
        if not answer.get("ok"):
            raise ClusterError(str(answer.get("error")))
        return answer.get("result")

    def lose_node(self, node: str) -> list[str]:
        """The node dies. Virtual node: it stops heartbeating, its pods' processes are killed
        and the pods fail with reason ``NodeLost``. Real node: every process of the node
        (kubelet, containerd, shims, containers, kube-proxy) is SIGKILLed at once; its pods stay
        as the API last saw them. Either way its Ready condition becomes Unknown and the node
        lifecycle controller taints it. Returns ``namespace/name`` of the pods bound to it."""
        return list(self._control({"op": "lose_node", "node": node}))

    def cut_node(self, node: str) -> None:
        """Take a real node's link down: the node, its pods and its kubelet reach nothing and
        nothing reaches them, until :meth:`restore_node`."""
        self._control({"op": "cut_node", "node": node})

    def restore_node(self, node: str) -> None:
        """Undo :meth:`lose_node` (a real node boots again: new kubelet and containerd, its
        containers restarted as the kubelet decides) and :meth:`cut_node`."""
        self._control({"op": "restore_node", "node": node})

    def start_kueue(self) -> dict[str, Any]:
        """Ask the cluster process to start Kueue (idempotent); returns its info (``kueue.py``)."""
        result: dict[str, Any] = self._control({"op": "kueue_start"})
        return result

    def stop_kueue(self) -> None:
        """Ask the cluster process to stop Kueue (its webhooks stay registered)."""
        self._control({"op": "kueue_stop"})

    def kueue_running(self) -> bool:
        return bool(self._control({"op": "kueue_running"}))

    # ---------------------------------------------------------------- lifecycle

    def stop(self, timeout: float = 60) -> None:
        """Stop the cluster process and remove everything it made."""
        stop_cluster(self.config, timeout)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _info(config: ClusterConfig) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = json.loads((config.state_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if _alive(int(info.get("pid", 0))) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def connect(config: ClusterConfig) -> LocalCluster | None:
    """The running cluster of this name, or None."""
    info = _info(config)
    return LocalCluster(config, info) if info else None


def start_cluster(
    config: ClusterConfig, timeout: float | None = None, owned: bool = False
) -> LocalCluster:
    """Start the cluster process in the background and wait until every node is Ready.

    ``owned``: the cluster stops by itself when this process ends (even if it is killed), as
    the pytest fixture wants; otherwise it runs until :func:`stop_cluster` (``up``/``down``).
    Raises :class:`ClusterError` with the tail of its log when it fails or times out; whatever
    it started is stopped then.
    """
    if connect(config) is not None:
        raise ClusterError(f"cluster {config.name!r} is already running: use connect() or stop it")
    state = config.state_dir
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / "cluster.log"
    package_root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{package_root}:{os.environ.get('PYTHONPATH', '')}"}
    args = [
        sys.executable, "-m", "elasticjob_localcluster", "serve", "--name", config.name,
        "--nodes", str(config.nodes), "--real-nodes", str(config.real_nodes),
        "--gpus-per-node", str(config.gpus_per_node),
        "--cpu-per-node", config.cpu_per_node, "--memory-per-node", config.memory_per_node,
    ]  # fmt: skip
    if owned:
        args += ["--owner-pid", str(os.getpid())]
    if config.kueue:
        args.append("--kueue")
    if not config.network_policies:
        args.append("--no-network-policies")
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )  # fmt: skip
    (state / "pid").write_text(str(proc.pid))
    if timeout is None:
        # Real nodes import every image on their first start.
        timeout = 600 if config.real_nodes else 180
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _info(config)
        if info is not None:
            return LocalCluster(config, info)
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-4000:]
            raise ClusterError(f"cluster {config.name!r} failed to start (log {log_path}):\n{tail}")
        time.sleep(0.2)
    stop_cluster(config)
    tail = log_path.read_text(errors="replace")[-4000:]
    raise ClusterError(
        f"cluster {config.name!r} not ready after {timeout:.0f} s (log {log_path}):\n{tail}"
    )


def stop_cluster(config: ClusterConfig, timeout: float = 60) -> bool:
    """Stop the cluster process started for ``config`` and clean up after it; True if one ran."""
    state = config.state_dir
    try:
        pid = int((state / "pid").read_text())
    except (OSError, ValueError):
        pid = 0
    was_running = _alive(pid)
    if was_running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
    # If the process died hard, its children died with it (PR_SET_PDEATHSIG) but its network
    # and files remain: remove them unless another cluster holds the slot again.
    try:
        slot = int((state / "slot").read_text())
    except (OSError, ValueError):
        slot = -1
    if slot >= 0 and not was_running:
        _cleanup_slot_if_free(slot)
    (state / "pid").unlink(missing_ok=True)
    (state / INFO_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        shutil.rmtree(etcd_data_dir(config), ignore_errors=True)
    return was_running


def _cleanup_slot_if_free(slot: int) -> None:
    lock = cache_dir() / "cluster" / "slots" / f"slot-{slot}.lock"
    if not lock.exists():
        return
    with lock.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        remove_real_node_leftovers(network.Subnet(slot))
        network.remove_slot_leftovers(network.Subnet(slot))
