"""Every query of the Grafana dashboard against Prometheus as a platform team runs it.

On the local cluster's real nodes (NetworkPolicies enforced by kube-router):

1. Prometheus as a pod (``bench/prometheus_pod.py``: the image built from Debian's
   ``prometheus`` package; Kubernetes service discovery by a sidecar, since Debian builds
   Prometheus without it; the labels and namespace that the chart's values.yaml documents for
   ``networkPolicy.prometheus``);
2. the chart installed with its defaults but the watched namespace and that documented
   ``networkPolicy.prometheus`` value;
3. ``examples/elasticjob.yaml`` as ``make demo`` runs it (``scripts/demo_cluster.py``), with a
   failure-policy rule that counts a SIGKILLed worker (so the policy panel has a decision to
   show): one training process SIGKILLed (a ``failure`` restart), the managed etcd cut off the
   network (a ``Stalled``/``EtcdUnavailable`` stall and its remediation), then ``Succeeded``;
4. every target of every panel of ``dashboards/elasticjob.json`` as a range query over the run,
   with the dashboard's Namespace and Job variables set to that job (the run_id variable: All),
   and again with Namespace set to one that holds no job, which every query that names
   ``$namespace`` must then answer with nothing (the variables filter).

Prometheus scrapes through the jobs' NetworkPolicies: the operator (its metrics Service), every
agent (the worker pods' ``health`` port) and each managed etcd (its ``metrics`` port).

Usage (starts its own cluster of 2 real nodes unless ``ELASTICJOB_BENCH_CLUSTER`` names a running
one with real nodes; cleans up what it created)::

    .venv/bin/python bench/dashboard_check.py --json FILE

``FILE`` gets ``{"queries": N, "with_data": M, "empty": [titles], ...}``: ``queries`` counts the
dashboard's targets, ``with_data`` those that returned at least one finite sample for the job,
``empty`` the panel titles of the others (``[refId]`` added when a panel has several). Also:
``not_filtered`` (titles whose query names ``$namespace`` yet answers for a namespace without
jobs), ``targets`` (per scrape job: targets seen, and seen up), ``phase`` and ``restarts`` of
the job. Exit status 0 only when no query is empty, none is unfiltered and every target was up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "localcluster"))
sys.path.insert(0, str(REPO))

import dashboard_queries as dq  # noqa: E402
import prometheus_pod  # noqa: E402
from elasticjob_localcluster import (  # noqa: E402
    ClusterConfig,
    LocalCluster,
    connect,
    start_cluster,
)
from elasticjob_localcluster.versions import PROMETHEUS_IMAGE  # noqa: E402

from scripts.demo_cluster import ClusterAdapter, Scenario  # noqa: E402

RELEASE = "ejdash"
OPERATOR_NAMESPACE = "ej-dash-ops"
JOB_NAMESPACE = "ej-dash"
NO_JOBS_NAMESPACE = "ej-dash-nothing"
SCRAPE_INTERVAL_S = 2
#: Grafana's $__rate_interval is at least four scrape intervals; a little more for load.
RATE_INTERVAL = "30s"
#: A worker SIGKILLed by the scenario exits 137: counted (spends maxRestarts) as without a
#: policy, but decided by a rule, which the failure-policy panel shows.
FAILURE_POLICY = {
    "rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [137]}}]
}

IN_POD_API = r"""
import json, sys, urllib.error, urllib.parse, urllib.request
out = []
for call in json.load(sys.stdin):
    url = "http://127.0.0.1:%d/api/v1/%s?%s" % (
        call["port"], call["endpoint"], urllib.parse.urlencode(call["params"]))
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            out.append(json.load(response))
    except urllib.error.HTTPError as exc:
        out.append({"status": "error", "error": exc.read().decode(errors="replace")})
    except OSError as exc:
        out.append({"status": "error", "error": repr(exc)})
print(json.dumps(out))
"""
"""Run inside the Prometheus pod (``kubectl exec``): answers a batch of API calls at once."""


class CheckError(RuntimeError):
    """The check could not run (a build, the cluster, Prometheus); not a query without data."""


def helm_set_flags(values: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested chart values as ``--set`` keys (dots inside a key escaped, as helm reads them)."""
    flags: dict[str, str] = {}
    for key, value in values.items():
        path = prefix + key.replace(".", "\\.")
        if isinstance(value, dict):
            flags.update(helm_set_flags(value, path + "."))
        else:
            flags[path] = str(value)
    return flags


class InPodPrometheus:
    """Prometheus' HTTP API, asked from inside its own pod (the host is no pod the cluster's
    network knows)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def pod(self) -> str:
        items = self.cluster.get_json(
            "pods", "-n", prometheus_pod.NAMESPACE, "-l", "app.kubernetes.io/name=prometheus"
        )["items"]
        running = [p for p in items if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) != 1:
            raise CheckError(f"expected one running Prometheus pod, found {len(running)}")
        return str(running[0]["metadata"]["name"])

    def api(self, calls: list[tuple[str, dict[str, str]]]) -> list[Any]:
        """``data`` of each ``(endpoint, params)`` call, in order; raises on any error."""
        batch = [{"port": prometheus_pod.PORT, "endpoint": e, "params": p} for e, p in calls]
        done = self.cluster.kubectl(
            "exec", "-i", "-n", prometheus_pod.NAMESPACE, self.pod(), "--",
            "python3", "-c", IN_POD_API, input=json.dumps(batch), timeout=600,
        )  # fmt: skip
        answers = json.loads(done.stdout)
        data = []
        for (endpoint, params), answer in zip(calls, answers, strict=True):
            if answer.get("status") != "success":
                raise CheckError(f"{endpoint} {params}: {answer.get('error') or answer}")
            data.append(answer["data"])
        return data

    def ranges(self, exprs: list[str], start: float, end: float, step: float) -> list[Any]:
        window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return [
            d["result"] for d in self.api([("query_range", {"query": e, **window}) for e in exprs])
        ]


def _step(out: Callable[[str], None], what: str, argv: list[str]) -> None:
    out(f"==> {what}")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CheckError(f"{what} failed:\n{done.stderr[-4000:]}")


def install_prometheus(cluster: LocalCluster, out: Callable[[str], None]) -> None:
    ns = prometheus_pod.NAMESPACE
    for namespace in (ns, OPERATOR_NAMESPACE, JOB_NAMESPACE, NO_JOBS_NAMESPACE):
        if cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "label", "--overwrite", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted"
    )
    config = prometheus_pod.scrape_config(release=RELEASE, interval_s=SCRAPE_INTERVAL_S)
    objects = prometheus_pod.manifests(
        image=PROMETHEUS_IMAGE,
        config=config,
        pods_in=[JOB_NAMESPACE, NO_JOBS_NAMESPACE],
        endpoints_in=[OPERATOR_NAMESPACE],
        placement={},
    )
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": objects})
    cluster.kubectl(
        "rollout", "status", "-n", ns, f"deployment/{prometheus_pod.NAME}", "--timeout=300s",
        timeout=330,
    )  # fmt: skip
    out(f"    Prometheus ({PROMETHEUS_IMAGE}) ready in namespace {ns}")


def job_manifest(workdir: Path) -> Path:
    """examples/elasticjob.yaml with :data:`FAILURE_POLICY` added, as a file in ``workdir``."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "elasticjob.yaml").read_text()) if d]
    for doc in docs:
        if doc.get("kind") == "ElasticJob":
            doc["spec"]["failurePolicy"] = FAILURE_POLICY
    path = workdir / "elasticjob-dashboard-check.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def targets_seen(prom: InPodPrometheus, start: float, end: float) -> dict[str, dict[str, int]]:
    """Per scrape job: targets that existed during the run, and how many were ever up."""
    span = f"{max(1, round(end - start))}s"
    exprs = {
        "operator": f'max_over_time(up{{job="elasticjob-operator"}}[{span}])',
        "agents": f'max_over_time(up{{namespace="{JOB_NAMESPACE}", pod=~".+-worker-.+"}}[{span}])',
        "etcd": f'max_over_time(up{{namespace="{JOB_NAMESPACE}", pod=~".+-etcd-.+"}}[{span}])',
    }
    answers = prom.api([("query", {"query": e, "time": f"{end:.3f}"}) for e in exprs.values()])
    seen = {}
    for name, data in zip(exprs, answers, strict=True):
        values = [float(s["value"][1]) for s in data["result"]]
        seen[name] = {"targets": len(values), "up": sum(1 for v in values if v == 1)}
    return seen


def label(target: dq.Target, shared: set[str]) -> str:
    return f"{target.panel} [{target.ref_id}]" if target.panel in shared else target.panel


def evaluate(
    prom: InPodPrometheus, job: str, start: float, end: float, out: Callable[[str], None]
) -> dict[str, Any]:
    dashboard = dq.load()
    targets = dq.targets(dashboard)
    titles = [t.panel for t in targets]
    shared = {t for t in titles if titles.count(t) > 1}
    chosen = dq.selection(dashboard, {"namespace": JOB_NAMESPACE, "job": job})
    elsewhere = dq.selection(dashboard, {"namespace": NO_JOBS_NAMESPACE})
    step = float(SCRAPE_INTERVAL_S)
    for_job = prom.ranges([t.expanded(chosen, RATE_INTERVAL) for t in targets], start, end, step)
    for_none = prom.ranges(
        [t.expanded(elsewhere, RATE_INTERVAL) for t in targets], start, end, step
    )
    out(f"\n{'panel':44} {'ref':3} {'series':>6} {'points':>6} {'other ns':>8}")
    empty, not_filtered = [], []
    for target, result, other in zip(targets, for_job, for_none, strict=True):
        points, leaked = dq.finite_points(result), dq.finite_points(other)
        out(f"{target.panel[:44]:44} {target.ref_id:3} {len(result):6} {points:6} {leaked:8}")
        if not points:
            empty.append(label(target, shared))
        if leaked and "$namespace" in target.expr:
            not_filtered.append(label(target, shared))
    with_data = len(targets) - len(empty)
    out(f"\nqueries with data for {JOB_NAMESPACE}/{job}: {with_data}/{len(targets)} "
        f"(ratio {with_data / len(targets):.2f}); filtered by namespace: "
        f"{len(targets) - len(not_filtered)}/{len(targets)}")  # fmt: skip
    return {
        "queries": len(targets),
        "with_data": with_data,
        "empty": empty,
        "not_filtered": not_filtered,
    }


def run(
    cluster: LocalCluster, workdir: Path, steps: int, out: Callable[[str], None]
) -> dict[str, Any]:
    if not cluster.real_nodes:
        raise CheckError(f"cluster {cluster.config.name!r} has no real nodes")
    install_prometheus(cluster, out)
    started = time.time()
    values = {
        **helm_set_flags(prometheus_pod.CHART_VALUES),
        "watchNamespaces": f"{{{JOB_NAMESPACE}}}",
    }
    scenario = Scenario(
        ops=ClusterAdapter(cluster),
        manifest=job_manifest(workdir),
        namespace=JOB_NAMESPACE,
        release=RELEASE,
        operator_namespace=OPERATOR_NAMESPACE,
        helm_values=values,
        steps=steps,
        workdir=workdir,
        out=out,
    )
    final = scenario.run(inject=True)
    # A few more scrapes so the final state is stored, then ask every panel.
    time.sleep(4 * SCRAPE_INTERVAL_S)
    ended = time.time()
    prom = InPodPrometheus(cluster)
    result = evaluate(prom, scenario.job, started, ended, out)
    result["targets"] = targets_seen(prom, started, ended)
    result["phase"] = final.phase
    result["restarts"] = final.restarts
    result["window_s"] = round(ended - started, 1)
    out(f"targets (seen/up): {json.dumps(result['targets'])}; job {final.phase}, "
        f"restarts {final.restarts}")  # fmt: skip
    return result


def cleanup(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "ej", "--all", "-n", JOB_NAMESPACE, "--wait=false", check=False)
    cluster.helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", check=False)
    for ns in (JOB_NAMESPACE, NO_JOBS_NAMESPACE, OPERATOR_NAMESPACE, prometheus_pod.NAMESPACE):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument(
        "--steps",
        type=int,
        default=1500,
        help="training steps (default 1500: room for both faults)",
    )
    args = parser.parse_args(argv)

    def out(line: str) -> None:
        print(line, flush=True)

    reuse = os.environ.get("ELASTICJOB_BENCH_CLUSTER")
    owned: LocalCluster | None = None
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"dashboard-check-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if reuse:
            found = connect(ClusterConfig(name=reuse))
            if found is None:
                raise CheckError(f"ELASTICJOB_BENCH_CLUSTER={reuse}: no such cluster is running")
            cluster = found
        else:
            _step(out, "localcluster/build.sh", [str(REPO / "localcluster" / "build.sh")])
            _step(
                out,
                "localcluster/images/build.sh",
                [str(REPO / "localcluster" / "images" / "build.sh")],
            )
            config = ClusterConfig(name=f"dashcheck-{os.getpid()}", nodes=0, real_nodes=2)
            out(f"==> cluster {config.name}: 2 real nodes, NetworkPolicies enforced")
            owned = cluster = start_cluster(config, owned=True)
        try:
            result = run(cluster, workdir, args.steps, out)
        finally:
            cleanup(cluster)
    except CheckError as exc:
        print(f"dashboard_check: {exc}", file=sys.stderr)
        return 1
    finally:
        if owned is not None:
            owned.stop()
            shutil.rmtree(owned.config.state_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = not result["empty"] and not result["not_filtered"]
    ok = ok and all(t["targets"] and t["up"] == t["targets"] for t in result["targets"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
