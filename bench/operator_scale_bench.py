"""The operator at scale: N ElasticJobs of M nodes on stand-in nodes, measured at 10, 100, ... N.

Each job's pods run on nodes played by ``scale_standins.py`` (one process: the kubelet of every
stand-in node, every worker pod's agent health server, every job's managed etcd over TLS). The
operator is the real one, a host process with admin credentials, against the local cluster's
real API server. For each size (10, 100, ..., N jobs, added in steps) it measures over a window:

- the operator's CPU (cores, from ``/proc``) and RSS (peak of samples every 2 s);
- reconcile step latency p50/p95 (its ``elasticjob_reconcile_duration_seconds``, interpolated);
- API requests per second by verb: the API server's ``apiserver_request_total`` minus the
  requests of the stand-ins and of this script (both counted exactly), so the rest is the
  operator's plus the control plane's own (small and steady: its controllers and leases); and
  the ElasticJob status writes per second, which only the operator makes;
- a cut etcd (a sample of jobs, cut at instants spread over the window) -> ``Stalled`` with
  reason ``EtcdUnavailable`` (its Event, which outlives a stall of a second), p50/p95;
- a failed worker pod (exit 137, a sample of other jobs) -> its ``WorkerReplaced`` Event, p50/p95;
- false alarms: jobs with no fault injected, no hostile pod, that got a stall Event or had their
  etcd recreated (``EtcdRecreated``) at any time in the run.

Then, at N jobs: the same window with 5% of worker pods hostile (``--hostile-fraction``), and a
leader failover (``--failover``: a standby replica runs from the start; the leader is killed
with SIGKILL): time until the standby holds the Lease and until it replaces a pod failed just
after the kill; no job's restart count decreases; no worker index gets more than the one new
attempt its failure asked for. Then the peer (``--no-peer`` skips it): our operators stopped,
Kubeflow's training operator (``localcluster/kubeflow``, built on first use) with as many
PyTorchJobs of the same size (one master, ``M - 1`` workers) on the same stand-in nodes: the time
until all are Running, then its CPU, RSS and API requests over one window, a column of the same
table. Clean-up deletes the namespaces (with a deadline; finalizers
are removed by hand after it) instead of deleting thousands of objects one by one.

``--as-installed`` measures the operator as the chart installs it: each replica runs in a cgroup
of its own with the chart's default resources (``values.yaml``: the memory limit enforced by the
kernel's OOM killer, the CPU limit as a CFS quota), with the chart's arguments
(``--all-namespaces`` when ``watchNamespaces`` is empty, ``--liveness``) and settings, and the
chart's liveness probe played by the bench (``installed_shape.py``). It adds the peak working set
of the cgroup (what the kubelet counts), the headroom under the limit, the OOM kills, the
restarts the liveness probe would have caused, the share of CPU periods throttled, and a sizing
table from each window's peak and CPU. A host process in a cgroup rather than a pod: the stand-in
nodes have no container runtime, and the figures stay comparable with the runs without it.

Usage (root: the stand-ins' addresses need a local route; starts its own cluster)::

    .venv/bin/python bench/operator_scale_bench.py --jobs 1000 --nodes-per-job 4 --json FILE
    .venv/bin/python bench/operator_scale_bench.py --jobs 1000 --nodes-per-job 4 --as-installed \
        --no-peer --no-failover --json FILE

The machine's load (1-minute load average and busy CPU share during the window) is printed
with every figure: on a shared machine the figures are only comparable within one run.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import http.client
import json
import math
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))
sys.path.insert(0, str(REPO / "bench"))

import installed_shape as shape  # noqa: E402
import scale_measures as sm  # noqa: E402
import yaml  # noqa: E402
from cgroup_confinement import Confinement  # noqa: E402
from elasticjob_localcluster import ClusterConfig, LocalCluster, start_cluster  # noqa: E402
from elasticjob_localcluster.kubeflow import TrainingOperator  # noqa: E402

TAINT = "elasticjob.dev/scale-bench"
JOBS_PER_NAMESPACE = 100
STALL_EVENTS = ("EtcdUnavailable", "WaitingForNodes", "PodsUnschedulable", "PodsNotStarting")
LEASE = ("default", "elasticjob-operator")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait(what: str, predicate: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


class Api:
    """Synchronous JSON client of the API server (admin token), one kept-alive connection per
    thread; counts its requests by verb (the bench subtracts them from the server's counts)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.server = urllib.parse.urlsplit(cluster["server"])
        self._ssl = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        self._token = config["users"][0]["user"]["token"]
        self.counts: Counter[str] = Counter()
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection: http.client.HTTPSConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self.server.hostname or "", self.server.port, context=self._ssl, timeout=60
            )
            self._local.connection = connection
        return connection

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        verb: str | None = None,
    ) -> Any:
        """The decoded answer; raises ``ApiError`` on an error status."""
        self.counts[verb or method] += 1
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": content_type}
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                text = response.read()
                break
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        if response.status >= 400:
            raise ApiError(response.status, f"{method} {path}: {text[:300]!r}")
        return json.loads(text) if text and path != "/metrics" else text.decode()

    def metrics(self) -> str:
        text: str = self.call("GET", "/metrics", verb="nonresource")
        return text


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


CHART_VALUES = REPO / "charts" / "elasticjob-operator" / "values.yaml"


@dataclass
class Installed:
    """``--as-installed``: the chart's defaults, the replica's cgroup and its liveness count."""

    limits: shape.InstalledShape
    confinement: Confinement
    liveness: shape.LivenessCount


class Operator:
    """One operator replica, a host process (leader election on, as deployed); with
    ``installed``, confined to the chart's default resources, with the chart's arguments and
    settings, and its liveness probe played by the bench."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespaces: list[str],
        log: Path,
        source: Path | None,
        name: str,
        *,
        installed: Installed | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.installed = installed
        self.stopping = False
        """Set before the bench stops or kills it: any other exit is a crash to report."""
        self.metrics_port = free_port()
        self.health_port = free_port()
        env = {
            **cluster.env,
            "POD_NAME": name,  # the Lease's holder identity starts with it
            "PYTHONFAULTHANDLER": "1",  # a crash in C code leaves its traceback in the log
            "ELASTICJOB_METRICS_PORT": str(self.metrics_port),
            "ELASTICJOB_HEALTH_PORT": str(self.health_port),
            "ELASTICJOB_LEASE_NAMESPACE": LEASE[0],
        }
        if source is not None:  # another revision's operator (and the agent it imports)
            env["PYTHONPATH"] = f"{source / 'operator'}:{source / 'agent'}"
        scope = [f"--namespace={ns}" for ns in namespaces]
        argv = [str(REPO / ".venv" / "bin" / "python"), "-m", "elasticjob_operator"]
        if installed is not None:
            env.update(installed.limits.env)
            if installed.limits.all_namespaces:
                scope = ["--all-namespaces"]
            scope.append(f"--liveness=http://127.0.0.1:{self.health_port}/healthz")
            installed.confinement.start_sampling()
        argv += scope
        if installed is not None:
            argv = installed.confinement.command(argv)
        self.proc = subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        if installed is not None:
            threading.Thread(
                target=self._probe_liveness, name=f"liveness-{name}", daemon=True
            ).start()

    def _probe_liveness(self) -> None:
        """The kubelet's liveness probe of the chart, counted (a restart is not carried out:
        the figures would mix two processes; the run reports it)."""
        assert self.installed is not None
        probe = self.installed.limits.liveness
        time.sleep(probe.initial_delay)
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        while self.proc.poll() is None and not self.stopping:
            began = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=probe.timeout) as response:
                    ok = 200 <= response.status < 400
            except OSError:
                ok = False
            if self.proc.poll() is None and not self.stopping:
                self.installed.liveness.answer(ok)
            time.sleep(max(0.0, probe.period - (time.monotonic() - began)))

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())

    def serving(self) -> bool:
        try:
            self.metrics()
        except OSError:
            return False
        return True

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def working_set_mib(self) -> float:
        """The peak working set of its cgroup since the last call (``--as-installed``)."""
        return math.nan if self.installed is None else self.installed.confinement.take_peak()

    def crashed(self) -> str | None:
        """Why the replica exited when nobody asked it to, with its log's end; else ``None``."""
        code = self.proc.poll()
        if code is None or self.stopping:
            return None
        tail = self.log.read_text(errors="replace")[-2000:]
        return f"operator {self.name} exited with code {code} unasked; its log ends:\n{tail}"

    def stop(self) -> None:
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class StandIns:
    def __init__(
        self, cluster: LocalCluster, nodes: int, subnet: str, work: Path, net: PodNetwork
    ) -> None:
        self.port = 8099
        self.host = net.inside
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                net.netns,
                str(REPO / ".venv" / "bin" / "python"),
                str(REPO / "bench" / "scale_standins.py"),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--nodes={nodes}",
                f"--subnet={subnet}",
                f"--control={self.host}:{self.port}",
                f"--workdir={work}",
            ],
            stdout=subprocess.PIPE,
            stderr=(work / "standins.log").open("ab"),
            env={**os.environ, "PYTHONPATH": str(REPO / "agent")},
        )
        if self.proc.stdout is None or self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"stand-ins did not start; see {work / 'standins.log'}")

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        request = urllib.request.Request(
            f"http://{self.host}:{self.port}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.host}:{self.port}/stats", timeout=30) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def job_manifest(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "elasticjob.dev/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "device": "cpu",
            "nprocPerNode": 1,
            "stallTimeoutSeconds": 3600,
            "template": {
                "spec": {
                    "nodeSelector": {TAINT: "true"},
                    "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {"name": "trainer", "image": "x", "command": ["python", "train.py"]}
                    ],
                }
            },
        },
    }


def settle_seconds(jobs: int) -> float:
    """Seconds between "all jobs Running" and a window: 20 s, and 0.1 s per job beyond 200."""
    return 20.0 + max(0, jobs - 200) * 0.1


def pytorchjob_manifest(namespace: str, name: str, nodes: int) -> dict[str, Any]:
    """The peer's job of the same shape: Kubeflow's PyTorchJob, one master and ``nodes - 1``
    workers, on the same stand-in nodes. The ``elasticjob.dev/job-name`` label is only there
    for the stand-ins, which serve the pods carrying it."""

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": {"elasticjob.dev/job-name": name}},
                "spec": {
                    "nodeSelector": {TAINT: "true"},
                    "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {"name": "pytorch", "image": "x", "command": ["python", "train.py"]}
                    ],
                },
            },
        }

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class PodNetwork:
    """A network namespace of ours holding every stand-in pod address: ``subnet`` is local to
    it (any address binds), the host routes ``subnet`` to it over a veth pair. The stand-ins
    listen there, never on the host, so no other process's port can collide with a pod's."""

    netns: str
    host_veth: str
    subnet: str
    outside: str = "10.253.0.1"
    inside: str = "10.253.0.2"

    @classmethod
    def create(cls, subnet: str) -> PodNetwork:
        tag = os.getpid() % 100000
        net = cls(f"ejscale-{tag}", f"ejsh{tag}", subnet)
        peer = f"ejsn{tag}"
        for argv in (
            ["netns", "add", net.netns],
            ["link", "add", net.host_veth, "type", "veth", "peer", "name", peer],
            ["link", "set", peer, "netns", net.netns],
            ["addr", "add", f"{net.outside}/30", "dev", net.host_veth],
            ["link", "set", net.host_veth, "up"],
            ["-n", net.netns, "addr", "add", f"{net.inside}/30", "dev", peer],
            ["-n", net.netns, "link", "set", peer, "up"],
            ["-n", net.netns, "link", "set", "lo", "up"],
            ["-n", net.netns, "route", "add", "default", "via", net.outside],
            ["-n", net.netns, "route", "add", "local", subnet, "dev", "lo"],
            ["route", "add", subnet, "via", net.inside],
        ):
            subprocess.run(["ip", *argv], check=True, capture_output=True)
        return net

    def delete(self) -> None:
        subprocess.run(["ip", "route", "del", self.subnet], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "delete", self.netns], check=False, capture_output=True)
        subprocess.run(["ip", "link", "delete", self.host_veth], check=False, capture_output=True)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Window:
    """The figures of one measurement window."""

    label: str
    jobs: int
    pods: int
    seconds: float = 0.0
    cpu_cores: float = math.nan
    rss_mib: float = math.nan
    working_set_mib: float = math.nan
    """Peak working set of the operator's cgroup (``--as-installed``)."""
    reconcile_p50_s: float = math.nan
    reconcile_p95_s: float = math.nan
    reconciles_per_s: float = math.nan
    api_per_s: dict[str, float] = field(default_factory=dict)
    status_writes_per_s: float = math.nan
    stall_s: list[float] = field(default_factory=list)
    stall_missed: int = 0
    event_s: list[float] = field(default_factory=list)
    event_missed: int = 0
    machine_busy: float = math.nan
    load1: float = math.nan
    standins_cpu_cores: float = math.nan


@dataclass(frozen=True)
class Reading:
    """What a window compares between its start and its end."""

    at: float
    apiserver: str
    """The API server's metrics text."""
    standins_api: Counter[str]
    mine: Counter[str]
    """API requests of the stand-ins and of this script, by verb (not the operator's)."""
    cpu: float
    """CPU seconds of the measured process."""
    busy: tuple[float, float]
    standins_cpu: float


def _status_writes(first: Reading, last: Reading, resource: str, verbs: tuple[str, ...]) -> float:
    """Writes per second of ``resource``'s status subresource between two readings."""
    writes = sum(
        sm.requests_of(last.apiserver, resource, "status", verb)
        - sm.requests_of(first.apiserver, resource, "status", verb)
        for verb in verbs
    )
    return writes / (last.at - first.at)


class Bench:
    def __init__(
        self, args: argparse.Namespace, cluster: LocalCluster, work: Path, net: PodNetwork
    ) -> None:
        self.args = args
        self.net = net
        self.cluster = cluster
        self.api = Api(cluster.kubeconfig)
        self.work = work
        count = math.ceil(args.jobs / JOBS_PER_NAMESPACE)
        self.namespaces = [f"scale-{i}" for i in range(count)]
        self.created = 0
        self.faulted: set[tuple[str, str]] = set()
        self.operators: list[Operator] = []
        self.standins: StandIns | None = None
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=64)
        self.peer_operator: TrainingOperator | None = None

    def job_at(self, i: int) -> tuple[str, str]:
        return self.namespaces[i // JOBS_PER_NAMESPACE], f"job-{i}"

    # -- set-up -----------------------------------------------------------------------------

    def setup(self) -> None:
        self.cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
        self.cluster.kubectl(
            "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev"
        )
        for ns in self.namespaces:
            self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, verb="POST")
        pods = self.args.jobs * (self.args.nodes_per_job + 1)
        nodes = max(2, math.ceil(pods * 1.5 / 900))
        self.standins = StandIns(self.cluster, nodes, self.args.subnet, self.work, self.net)
        source = self.args.operator_source
        self.operators.append(
            Operator(
                self.cluster,
                self.namespaces,
                self.work / "operator-a.log",
                source,
                "op-a",
                installed=self.installed("op-a"),
            )
        )
        wait("operator serving metrics", self.operators[0].serving, 120)
        if self.args.failover:
            # The standby: waits for the Lease, serving nothing else.
            self.operators.append(
                Operator(
                    self.cluster,
                    self.namespaces,
                    self.work / "operator-b.log",
                    source,
                    "op-b",
                    installed=self.installed("op-b"),
                )
            )

    def installed(self, name: str) -> Installed | None:
        """``--as-installed``: a replica's cgroup with the chart's default limits."""
        if self.args.shape is None:
            return None
        limits: shape.InstalledShape = self.args.shape
        return Installed(
            limits,
            Confinement(
                f"elasticjob-scale-{os.getpid()}-{name}", limits.memory_limit, limits.cpu_limit
            ),
            shape.LivenessCount(limits.liveness),
        )

    @property
    def leader(self) -> Operator:
        """The replica holding the Lease (whichever started first, until a failover)."""
        self.check_operators()
        holder = self.lease().get("holderIdentity") or ""
        for operator in self.operators:
            if holder.startswith(f"{operator.name}_") and operator.proc.poll() is None:
                return operator
        return next(o for o in self.operators if o.proc.poll() is None)

    def check_operators(self) -> None:
        """Fail loudly, with its log, if a replica exited when nobody asked it to."""
        for operator in self.operators:
            crash = operator.crashed()
            if crash is not None:
                raise RuntimeError(crash)

    def lease(self) -> dict[str, Any]:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE[0]}/leases/{LEASE[1]}"
        try:
            spec: dict[str, Any] = self.api.call("GET", path)["spec"]
        except ApiError:
            return {}
        return spec

    def grow(self, jobs: int) -> float:
        """Create jobs up to ``jobs``; wait until all have every pod served and phase Running."""
        began = time.monotonic()
        while self.created < jobs:
            batch = range(self.created, min(jobs, self.created + JOBS_PER_NAMESPACE))
            by_ns: dict[str, list[dict[str, Any]]] = {}
            for i in batch:
                ns, name = self.job_at(i)
                by_ns.setdefault(ns, []).append(job_manifest(ns, name, self.args.nodes_per_job))
            for items in by_ns.values():
                self.cluster.kubectl(
                    "apply",
                    "-f",
                    "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                )
            self.created = batch[-1] + 1
        assert self.standins is not None
        standins = self.standins
        pods = jobs * self.args.nodes_per_job

        def ready() -> bool:
            self.check_operators()
            stats = standins.stats()
            return bool(stats["workers"] >= pods and stats["etcds"] >= jobs and self._running(jobs))

        wait(f"{jobs} jobs Running on the stand-ins", ready, 180 + jobs * 1.5, 5)
        return time.monotonic() - began

    def _running(self, jobs: int) -> bool:
        running = 0
        for ns in self.namespaces:
            listed = self.api.call(
                "GET", f"/apis/elasticjob.dev/v1alpha1/namespaces/{ns}/elasticjobs", verb="LIST"
            )
            running += sum(
                1 for j in listed["items"] if (j.get("status") or {}).get("phase") == "Running"
            )
        return running >= jobs - len(self.faulted)  # a faulted job may still be recovering

    # -- faults -----------------------------------------------------------------------------

    def cut_and_time(self, ns: str, name: str, limit: float = 120) -> float | None:
        """Seconds from the cut to the job's ``EtcdUnavailable`` Event (posted when the stall
        starts). Not the ``Stalled`` condition: the operator recreates a stand-in etcd and
        clears the condition within about a second, between two polls of it."""
        return self._fault_and_time(
            ns,
            name,
            "EtcdUnavailable",
            path="/cut",
            body={"namespace": ns, "job": name},
            limit=limit,
        )

    def fail_and_time(self, ns: str, name: str, limit: float = 120) -> float | None:
        """Seconds from a worker's failure to the job's ``WorkerReplaced`` Event."""
        return self._fault_and_time(
            ns,
            name,
            "WorkerReplaced",
            path="/fail",
            body={"namespace": ns, "pod": f"{name}-worker-0-0"},
            limit=limit,
        )

    def _fault_and_time(
        self,
        ns: str,
        name: str,
        reason: str,
        *,
        path: str,
        body: Mapping[str, Any],
        limit: float,
    ) -> float | None:
        """Inject a fault through the stand-ins (``path``) and time it to the job's next Event
        of ``reason``; ``None`` when none came within ``limit`` seconds."""
        assert self.standins is not None
        self.faulted.add((ns, name))
        selector = f"involvedObject.name={name},reason={reason}"
        before = len(self._events(ns, selector))
        began = time.monotonic()
        self.standins.post(path, body)
        while time.monotonic() - began < limit:
            if len(self._events(ns, selector)) > before:
                return time.monotonic() - began
            time.sleep(0.5)
        return None

    def _events(self, ns: str, selector: str) -> list[dict[str, Any]]:
        listed = self.api.call(
            "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}", verb="LIST"
        )
        items: list[dict[str, Any]] = listed["items"]
        return items

    def fresh_jobs(self, count: int, among: int) -> list[tuple[str, str]]:
        """``count`` jobs among the first ``among`` with no fault yet, newest first."""
        hostile = self.hostile_jobs()
        chosen = []
        for i in reversed(range(among)):
            job = self.job_at(i)
            if job not in self.faulted and job not in hostile:
                chosen.append(job)
            if len(chosen) == count:
                break
        return chosen

    def hostile_jobs(self) -> set[tuple[str, str]]:
        assert self.standins is not None
        out = set()
        for pod in self.standins.stats()["hostile_pods"]:
            ns, name = pod.split("/")
            out.add((ns, name.rsplit("-worker-", 1)[0]))
        return out

    # -- a window ---------------------------------------------------------------------------

    def window(self, label: str, jobs: int, *, faults: bool = True) -> Window:
        assert self.standins is not None
        out = Window(label, jobs, jobs * self.args.nodes_per_job)
        seconds = self.args.window
        cuts = min(self.args.stall_sample, max(1, jobs // 5)) if faults else 0
        fails = min(self.args.stall_sample // 2, max(1, jobs // 10)) if faults else 0
        sample = self.fresh_jobs(cuts + fails, jobs)
        leader = self.leader
        transitions0 = self.lease().get("leaseTransitions") or 0
        operator0 = leader.metrics()
        leader.working_set_mib()  # a new peak from here
        first = self._read(leader.proc.pid)
        began = first.at
        futures = []
        rss = 0.0
        for i, when in enumerate(sm.spread(len(sample), 2.0, max(2.0, seconds - 30))):
            while time.monotonic() - began < when:
                rss = max(rss, leader.rss_mib())
                time.sleep(max(0.0, min(2.0, when - (time.monotonic() - began))))
            ns, name = sample[i]
            timed = self.cut_and_time if i < cuts else self.fail_and_time
            futures.append((i < cuts, self.pool.submit(timed, ns, name)))
        while time.monotonic() - began < seconds:
            rss = max(rss, leader.rss_mib())
            time.sleep(2.0)
        self.check_operators()
        if (self.lease().get("leaseTransitions") or 0) != transitions0:
            # The figures would mix two processes: say so rather than print them.
            raise RuntimeError(f"{label}: the Lease changed hands during the window")
        last = self._read(leader.proc.pid)
        operator1 = leader.metrics()
        self._fill(out, first, last, max(rss, leader.rss_mib()))
        out.working_set_mib = leader.working_set_mib()
        name = "elasticjob_reconcile_duration_seconds"
        buckets = sm.bucket_delta(sm.histogram(operator1, name), sm.histogram(operator0, name))
        out.reconcile_p50_s = sm.histogram_quantile(0.5, buckets)
        out.reconcile_p95_s = sm.histogram_quantile(0.95, buckets)
        out.reconciles_per_s = max(buckets.values(), default=0.0) / out.seconds
        out.status_writes_per_s = _status_writes(first, last, "elasticjobs", ("PATCH",))
        for is_cut, future in futures:
            took = future.result()
            if is_cut:
                out.stall_s += [took] if took is not None else []
                out.stall_missed += took is None
            else:
                out.event_s += [took] if took is not None else []
                out.event_missed += took is None
        return out

    def false_alarms(self) -> tuple[int, int]:
        """(healthy jobs that got a stall Event, healthy jobs whose etcd was recreated)."""
        spared = self.faulted | self.hostile_jobs()
        stalled: set[tuple[str, str]] = set()
        recreated: set[tuple[str, str]] = set()
        for ns in self.namespaces:
            for reason in (*STALL_EVENTS, "EtcdRecreated"):
                for event in self._events(ns, f"reason={reason}"):
                    job = (ns, event["involvedObject"]["name"])
                    if job in spared:
                        continue
                    (recreated if reason == "EtcdRecreated" else stalled).add(job)
        return len(stalled), len(recreated)

    # -- failover ---------------------------------------------------------------------------

    def failover(self, jobs: int) -> dict[str, Any]:
        """Kill the leader; time the standby's Lease and its first replacement of a failed pod;
        check counts and pod attempts."""
        before = self._all_jobs()
        holder = self.lease().get("holderIdentity")
        victim = self.leader
        sample = self.fresh_jobs(3, jobs)
        killed = time.monotonic()
        victim.stopping = True
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        futures = [self.pool.submit(self.fail_and_time, ns, name, 240) for ns, name in sample]

        def new_holder() -> bool:
            return bool(self.lease().get("holderIdentity") not in (None, "", holder))

        wait("the standby to hold the Lease", new_holder, 120, 0.25)
        lease_s = time.monotonic() - killed
        acted = [f.result() for f in futures]
        self.operators.remove(victim)
        time.sleep(20)  # let the new leader step every job a few times
        after = self._all_jobs()
        lowered = sum(
            1
            for key, total in before.items()
            if after.get(key, {}).get("restarts", 0) < total.get("restarts", 0)
        )
        extra = self._extra_attempts(jobs)
        return {
            "lease_s": lease_s,
            "acts_s": [a for a in acted if a is not None],
            "missed": sum(1 for a in acted if a is None),
            "lowered": lowered,
            "extra_attempts": extra,
        }

    def _all_jobs(self) -> dict[tuple[str, str], dict[str, int]]:
        out = {}
        for ns in self.namespaces:
            listed = self.api.call(
                "GET", f"/apis/elasticjob.dev/v1alpha1/namespaces/{ns}/elasticjobs", verb="LIST"
            )
            for j in listed["items"]:
                restarts = (j.get("status") or {}).get("restarts") or {}
                out[(ns, j["metadata"]["name"])] = {"restarts": int(restarts.get("total") or 0)}
        return out

    def _extra_attempts(self, jobs: int) -> int:
        """Worker indexes whose newest attempt is beyond what the injected failures explain
        (one per failed pod): a pod created twice for one failure would show here."""
        extra = 0
        for ns in self.namespaces:
            listed = self.api.call(
                "GET",
                f"/api/v1/namespaces/{ns}/pods?labelSelector=elasticjob.dev/role=worker",
                verb="LIST",
            )
            top: dict[tuple[str, int], int] = {}
            for pod in listed["items"]:
                labels = pod["metadata"]["labels"]
                key = (
                    labels["elasticjob.dev/job-name"],
                    int(labels["elasticjob.dev/replica-index"]),
                )
                top[key] = max(top.get(key, 0), int(labels["elasticjob.dev/attempt"]))
            for (job, index), attempt in top.items():
                allowed = 1 if (ns, job) in self.faulted and index == 0 else 0
                extra += attempt > allowed
        return extra

    # -- the peer ---------------------------------------------------------------------------

    def peer(self, jobs: int) -> tuple[Window, float]:
        """Kubeflow's training operator alone (ours stopped) with ``jobs`` PyTorchJobs of the
        same size on the same stand-in nodes: the time until all are Running, then its CPU,
        RSS and API requests over one window."""
        for operator in self.operators:
            operator.stop()
        self.operators = []
        count = math.ceil(jobs / JOBS_PER_NAMESPACE)
        peer_namespaces = [f"peer-{i}" for i in range(count)]
        for ns in peer_namespaces:
            self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, verb="POST")
        self.namespaces += peer_namespaces  # deleted by the clean-up
        self.peer_operator = TrainingOperator.for_cluster(self.cluster).start(timeout=300)
        pid = self.peer_operator.proc.pid if self.peer_operator.proc is not None else 0
        began = time.monotonic()
        for n, ns in enumerate(peer_namespaces):
            items = [
                pytorchjob_manifest(ns, f"ptj-{i}", self.args.nodes_per_job)
                for i in range(n * JOBS_PER_NAMESPACE, min(jobs, (n + 1) * JOBS_PER_NAMESPACE))
            ]
            self.cluster.kubectl(
                "apply", "-f", "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            )  # fmt: skip

        def running() -> bool:
            total = 0
            for ns in peer_namespaces:
                listed = self.api.call(
                    "GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", verb="LIST"
                )
                for job in listed["items"]:
                    conditions = (job.get("status") or {}).get("conditions") or []
                    total += any(
                        c.get("type") == "Running" and c.get("status") == "True" for c in conditions
                    )
            return total >= jobs

        wait(f"{jobs} PyTorchJobs Running on the stand-ins", running, 180 + jobs * 1.5, 5)
        took = time.monotonic() - began
        time.sleep(settle_seconds(jobs))  # as for ours
        return self._measure_peer(pid, jobs), took

    def _measure_peer(self, pid: int, jobs: int) -> Window:
        assert self.standins is not None
        out = Window(f"Kubeflow, {jobs} PyTorchJobs", jobs, jobs * self.args.nodes_per_job)
        first = self._read(pid)
        rss = 0.0
        while time.monotonic() - first.at < self.args.window:
            rss = max(rss, rss_mib(pid))
            time.sleep(2.0)
        last = self._read(pid)
        self._fill(out, first, last, max(rss, rss_mib(pid)))
        out.status_writes_per_s = _status_writes(first, last, "pytorchjobs", ("PUT", "PATCH"))
        return out

    def _read(self, pid: int) -> Reading:
        assert self.standins is not None
        return Reading(
            at=time.monotonic(),
            apiserver=self.api.metrics(),
            standins_api=Counter(self.standins.stats()["api_requests"]),
            mine=Counter(self.api.counts),
            cpu=cpu_seconds(pid),
            busy=machine_busy(),
            standins_cpu=cpu_seconds(self.standins.proc.pid),
        )

    @staticmethod
    def _fill(out: Window, first: Reading, last: Reading, rss: float) -> None:
        """The figures every window has, from its first and last readings (``rss``: the
        measured process's peak RSS in between)."""
        out.seconds = last.at - first.at
        out.load1 = load1()
        out.machine_busy = (last.busy[0] - first.busy[0]) / max(1, last.busy[1] - first.busy[1])
        out.cpu_cores = (last.cpu - first.cpu) / out.seconds
        out.standins_cpu_cores = (last.standins_cpu - first.standins_cpu) / out.seconds
        out.rss_mib = rss
        others = Counter(sm.minus(last.standins_api, first.standins_api)) + Counter(
            sm.minus(last.mine, first.mine)
        )
        total = sm.minus(sm.requests_by_verb(last.apiserver), sm.requests_by_verb(first.apiserver))
        out.api_per_s = {
            verb: max(0.0, count - others.get(verb, 0)) / out.seconds
            for verb, count in total.items()
        }

    # -- clean-up ---------------------------------------------------------------------------

    def cleanup(self, deadline: float) -> float:
        """Delete the namespaces; past ``deadline`` s, remove the jobs' finalizers and
        force-delete what is left. Returns the seconds it took."""
        began = time.monotonic()
        for ns in self.namespaces:
            with contextlib.suppress(ApiError):
                self.api.call("DELETE", f"/api/v1/namespaces/{ns}")

        def gone() -> bool:
            listed = self.api.call("GET", "/api/v1/namespaces", verb="LIST")
            return not any(n["metadata"]["name"] in self.namespaces for n in listed["items"])

        try:
            # With no operator of ours left (the peer's run stops them) nobody removes the
            # jobs' finalizers: no point waiting for it.
            wait("namespaces deleted", gone, deadline if self.operators else 0, 2)
        except TimeoutError:
            for ns in self.namespaces:
                with contextlib.suppress(ApiError):
                    listed = self.api.call(
                        "GET", f"/apis/elasticjob.dev/v1alpha1/namespaces/{ns}/elasticjobs"
                    )
                    for j in listed["items"]:
                        self.api.call(
                            "PATCH",
                            f"/apis/elasticjob.dev/v1alpha1/namespaces/{ns}/elasticjobs/"
                            f"{j['metadata']['name']}",
                            {"metadata": {"finalizers": None}},
                            "application/merge-patch+json",
                        )
            wait("namespaces deleted after removing finalizers", gone, 120, 2)
        return time.monotonic() - began

    def stop(self) -> None:
        for operator in self.operators:
            operator.stop()
            if operator.installed is not None:
                operator.installed.confinement.remove()
        if self.peer_operator is not None:
            self.peer_operator.stop()
        if self.standins is not None:
            self.standins.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


# -- report ---------------------------------------------------------------------------------------


def _fmt(value: float, unit: str = "", digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}{unit}"


def _api_total(w: Window) -> float:
    return sum(w.api_per_s.values())


def table(windows: list[Window], extra: list[tuple[str, str]]) -> str:
    rows: list[tuple[str, ...]] = [("measure", *(w.label for w in windows))]

    def row(name: str, cell: Callable[[Window], str]) -> None:
        rows.append((name, *(cell(w) for w in windows)))

    row("jobs / worker pods", lambda w: f"{w.jobs} / {w.pods}")
    row("machine: load1, busy CPU share", lambda w: f"{w.load1:.1f}, {w.machine_busy:.0%}")
    row("stand-ins CPU (cores)", lambda w: _fmt(w.standins_cpu_cores, "", 2))
    row("operator CPU (cores)", lambda w: _fmt(w.cpu_cores, "", 3))
    row("operator CPU per job (millicores)", lambda w: _fmt(1000 * w.cpu_cores / w.jobs, "", 2))
    row("operator RSS (MiB, peak)", lambda w: _fmt(w.rss_mib, "", 0))
    if any(not math.isnan(w.working_set_mib) for w in windows):
        row("operator cgroup working set (MiB, peak)", lambda w: _fmt(w.working_set_mib, "", 0))
    row(
        "reconcile step p50 / p95 (s)",
        lambda w: f"{_fmt(w.reconcile_p50_s, '', 3)} / {_fmt(w.reconcile_p95_s, '', 3)}",
    )
    row("reconcile steps/s", lambda w: _fmt(w.reconciles_per_s, "", 1))
    row("API requests/s (operator + control plane)", lambda w: _fmt(_api_total(w), "", 1))
    row(
        "  by verb",
        lambda w: (
            " ".join(f"{v}={r:.1f}" for v, r in sorted(w.api_per_s.items()) if r >= 0.05) or "-"
        ),
    )
    row("API requests/s per job", lambda w: _fmt(_api_total(w) / w.jobs, "", 3))
    row("ElasticJob status writes/s", lambda w: _fmt(w.status_writes_per_s, "", 2))
    row(
        "etcd cut -> Stalled p50 / p95 (s)",
        lambda w: (
            f"{_fmt(sm.percentile(w.stall_s, 0.5), '', 1)}"
            f" / {_fmt(sm.percentile(w.stall_s, 0.95), '', 1)} (n={len(w.stall_s)}, "
            f"missed {w.stall_missed})"
        ),
    )
    row(
        "pod failed -> Event p50 / p95 (s)",
        lambda w: (
            f"{_fmt(sm.percentile(w.event_s, 0.5), '', 1)}"
            f" / {_fmt(sm.percentile(w.event_s, 0.95), '', 1)} (n={len(w.event_s)}, "
            f"missed {w.event_missed})"
        ),
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    lines.insert(1, " | ".join("-" * w for w in widths))
    lines += ["", *(f"{k}: {v}" for k, v in extra)]
    return "\n".join(lines)


def installed_report(
    bench: Bench, windows: list[Window], limits: shape.InstalledShape
) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """``--as-installed``: the chart's limits against the peaks, what a kubelet would have done
    (OOM kills, liveness restarts), the CPU quota's throttling and the sizing table."""
    leader = bench.leader
    assert leader.installed is not None
    confinement, liveness = leader.installed.confinement, leader.installed.liveness
    # The whole run's peak: the windows' and the creation of the jobs between them.
    peak = max(confinement.overall_peak(), *(w.working_set_mib for w in windows))
    limit_mib = limits.memory_limit / shape.MIB
    periods, throttled = confinement.throttling()
    exits = sum(o.proc.poll() is not None for o in bench.operators if not o.stopping)
    by_size: dict[int, Window] = {}
    for w in windows:  # the clean window of each size (not the hostile one)
        by_size.setdefault(w.jobs, w)
    rows = shape.sizing([(w.jobs, w.working_set_mib, w.cpu_cores) for w in by_size.values()])
    table_md = shape.sizing_table(rows)
    print("\nSizing (from the cgroup's peak working set and the mean CPU of each window):")
    print(table_md, flush=True)
    report = {
        "memory_limit_mib": limit_mib,
        "memory_request_mib": limits.memory_request / shape.MIB,
        "cpu_limit_cores": limits.cpu_limit,
        "cpu_request_cores": limits.cpu_request,
        "memory_peak_mib": peak,
        "headroom": shape.headroom(peak, limit_mib),
        "oom_kills": confinement.oom_kills(),
        "liveness_failures": liveness.failures,
        "liveness_most_in_a_row": liveness.most_in_a_row,
        "liveness_restarts": liveness.restarts,
        "operator_exits": exits,
        "cpu_throttled_share": throttled / periods if periods else 0.0,
        "sizing": [r.__dict__ for r in rows],
    }
    out = [
        (
            "as installed: chart limits (cpu, memory)",
            f"{limits.cpu_limit:g} core(s), {limit_mib:.0f} MiB",
        ),
        (
            "as installed: peak working set (whole run), headroom under the limit",
            f"{peak:.0f} MiB, {report['headroom']:.0%}",
        ),
        (
            "as installed: OOM kills, liveness restarts (failures, most in a row), exits",
            f"{report['oom_kills']}, {liveness.restarts} ({liveness.failures}, "
            f"{liveness.most_in_a_row}), {exits}",
        ),
        ("as installed: CFS periods throttled", f"{report['cpu_throttled_share']:.1%}"),
    ]
    return out, report


def versions() -> str:
    found = [f"python {sys.version.split()[0]}"]
    for package in ("kopf", "aiohttp", "kubernetes_asyncio"):
        with contextlib.suppress(Exception):
            found.append(f"{package} {metadata.version(package)}")
    return ", ".join(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes-per-job", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--window", type=float, default=90.0, help="seconds per measurement")
    parser.add_argument("--stall-sample", type=int, default=20, help="cut etcds per window")
    parser.add_argument("--hostile-fraction", type=float, default=0.05)
    parser.add_argument("--no-failover", dest="failover", action="store_false")
    parser.add_argument(
        "--no-peer",
        dest="peer",
        action="store_false",
        help="skip Kubeflow's training operator with as many PyTorchJobs (built on first use)",
    )
    parser.add_argument(
        "--as-installed",
        action="store_true",
        help="run each replica as the chart installs it: in a cgroup with the chart's default "
        "resources (values.yaml), with its arguments and settings, its liveness probe counted",
    )
    parser.add_argument("--subnet", default="10.254.0.0/16", help="stand-in pod addresses")
    parser.add_argument(
        "--operator-ref",
        default=None,
        help="measure the operator of this git revision instead of the work tree's",
    )
    args = parser.parse_args()
    if args.nodes_per_job < 1:
        parser.error("--nodes-per-job must be at least 1")
    args.shape = None
    if args.as_installed:
        if os.geteuid() != 0:
            parser.error("--as-installed creates cgroups: run it as root")
        args.shape = shape.shape_of(yaml.safe_load(CHART_VALUES.read_text()))
    steps = sm.sizes(args.jobs)
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True, check=True)
    if args.subnet in routes.stdout or "10.253.0." in routes.stdout:
        parser.error(f"{args.subnet} or 10.253.0.0/30 is routed already (another run?)")
    work = Path(tempfile.mkdtemp(prefix="operator-scale-bench-"))
    args.operator_source = None
    if args.operator_ref is not None:
        args.operator_source = work / "operator-source"
        args.operator_source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.operator_ref, "operator", "agent"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(args.operator_source)], input=archive, check=True)
    config = ClusterConfig(name=f"scale-{os.getpid()}", nodes=1, gpus_per_node=0)
    cluster = start_cluster(config, owned=True)
    net = PodNetwork.create(args.subnet)
    bench = Bench(args, cluster, work, net)
    windows: list[Window] = []
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.operator_ref or "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    extra: list[tuple[str, str]] = [
        ("work directory (logs)", str(work)),
        ("operator revision", revision + ("" if args.operator_ref else " (work tree)")),
        ("versions", versions()),
    ]
    result: dict[str, Any] = {}
    try:
        bench.setup()
        for jobs in steps:
            took = bench.grow(jobs)
            extra.append((f"{jobs} jobs created and Running", f"{took:.0f} s"))
            # Let the creation burst settle: every new job's loop is watchful for its first
            # 20 s of calm, and 900 new jobs take the operator longer than that to work through.
            time.sleep(settle_seconds(jobs))
            windows.append(bench.window(f"{jobs} jobs", jobs))
            print(table(windows, []), flush=True)
        false_stalls, recreated = bench.false_alarms()
        final = windows[-1]
        if args.hostile_fraction > 0:
            assert bench.standins is not None
            bench.standins.post("/hostile", {"fraction": args.hostile_fraction})
            time.sleep(20)
            hostile = bench.window(
                f"{args.jobs} jobs, {args.hostile_fraction:.0%} hostile", args.jobs
            )
            windows.append(hostile)
            for what, a, b in (
                ("operator CPU", hostile.cpu_cores, final.cpu_cores),
                ("operator RSS", hostile.rss_mib, final.rss_mib),
                ("reconcile p95", hostile.reconcile_p95_s, final.reconcile_p95_s),
                (
                    "stall p95",
                    sm.percentile(hostile.stall_s, 0.95),
                    sm.percentile(final.stall_s, 0.95),
                ),
                ("API requests/s", _api_total(hostile), _api_total(final)),
            ):
                extra.append((f"hostile / clean, {what}", _fmt(sm.ratio(a, b), "x")))
        hostile_alarms = bench.false_alarms()
        extra.append(
            (
                "false alarms (stalled, etcd recreated), jobs with no fault or hostile pod",
                f"{hostile_alarms[0]}, {hostile_alarms[1]}",
            )
        )
        if args.shape is not None:
            rows, result["as_installed"] = installed_report(bench, windows, args.shape)
            extra += rows
        first = windows[0]
        extra.append(
            (
                f"cost per job, CPU, {final.jobs} vs {first.jobs} jobs",
                _fmt(sm.ratio(final.cpu_cores / final.jobs, first.cpu_cores / first.jobs), "x"),
            )
        )
        extra.append(
            (
                f"cost per job, API requests, {final.jobs} vs {first.jobs} jobs",
                _fmt(sm.ratio(_api_total(final) / final.jobs, _api_total(first) / first.jobs), "x"),
            )
        )
        extra.append(
            (
                "Lease changes of hands before the failover (leader lost under load)",
                str(bench.lease().get("leaseTransitions") or 0),
            )
        )
        if args.failover:
            fo = bench.failover(args.jobs)
            extra.append(("failover: kill -> standby holds the Lease", f"{fo['lease_s']:.1f} s"))
            extra.append(
                (
                    "failover: kill -> standby replaced a pod failed after the kill",
                    f"p50 {_fmt(sm.percentile(fo['acts_s'], 0.5), ' s', 1)}, max "
                    f"{_fmt(max(fo['acts_s'], default=math.nan), ' s', 1)}, "
                    f"missed {fo['missed']}",
                )
            )
            extra.append(("failover: jobs whose restart count decreased", str(fo["lowered"])))
            extra.append(
                ("failover: worker indexes with an extra attempt", str(fo["extra_attempts"]))
            )
            result["failover"] = fo
        if args.peer:
            peer, took = bench.peer(args.jobs)
            windows.append(peer)
            extra.append(
                (f"Kubeflow: {args.jobs} PyTorchJobs created and Running", f"{took:.0f} s")
            )
            extra.append(
                (
                    "ElasticJob / Kubeflow operator, CPU and RSS",
                    f"{_fmt(sm.ratio(final.cpu_cores, peer.cpu_cores), 'x')}, "
                    f"{_fmt(sm.ratio(final.rss_mib, peer.rss_mib), 'x')}",
                )
            )
            result["peer"] = {
                "operator_cpu_cores": peer.cpu_cores,
                "operator_rss_mib": peer.rss_mib,
                "api_requests_per_s": _api_total(peer),
                "running_after_s": took,
            }
        result.update(
            {
                "jobs": final.jobs,
                "pods": final.pods,
                "stall_detect_p50_s": sm.percentile(final.stall_s, 0.5),
                "stall_detect_p95_s": sm.percentile(final.stall_s, 0.95),
                "false_stalls": false_stalls,
                "etcd_recreated_healthy": recreated,
                "operator_cpu_cores": final.cpu_cores,
                "operator_rss_mib": final.rss_mib,
                "reconcile_p95_s": final.reconcile_p95_s,
                "api_requests_per_s": _api_total(final),
            }
        )
        result["details"] = {
            "windows": [w.__dict__ for w in windows],
            "api_requests_per_s_by_verb": final.api_per_s,
            "false_alarms_after_hostile": hostile_alarms,
        }
    finally:
        with contextlib.suppress(Exception):
            extra.append(
                (
                    "clean-up (namespaces deleted)",
                    f"{bench.cleanup(max(120.0, args.jobs * 0.3)):.0f} s",
                )
            )
        bench.stop()
        with contextlib.suppress(Exception):
            cluster.kubectl("delete", "nodes", "-l", f"{TAINT}=true", "--wait=false")
        net.delete()
        cluster.stop()
    print()
    print(table(windows, extra))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
