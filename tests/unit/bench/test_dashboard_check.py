"""The pure parts of bench/dashboard_check.py: the dashboard's queries with its variables
filled in, and the Prometheus pod's objects and scrape configuration (the chart's monitors
written as Kubernetes service discovery, the labels the chart documents)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import dashboard_queries as dq
import k8s_discovery as kd
import prometheus_pod as pp

from tests.support.paths import CHART

DASHBOARD = dq.load()


def test_every_panel_target_is_a_query_and_row_panels_hold_none() -> None:
    targets = dq.targets(DASHBOARD)
    panels = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    assert len(targets) == sum(len(p["targets"]) for p in panels)
    assert all(t.expr and t.ref_id for t in targets)


def test_choosing_a_job_fills_every_variable_and_leaves_nothing_unexpanded() -> None:
    chosen = dq.selection(DASHBOARD, {"namespace": "ej-dash", "job": "train-demo"})
    assert chosen == {"namespace": "ej\\\\-dash", "job": "train\\\\-demo", "run_id": ".*"}
    for target in dq.targets(DASHBOARD):
        expr = target.expanded(chosen, "30s")
        assert "$" not in expr, expr
        if "$namespace" in target.expr:
            assert 'namespace=~"ej\\\\-dash"' in expr, expr


def test_an_exact_value_is_a_regex_promql_accepts() -> None:
    # promtool (Debian's, the release of the Prometheus the bench runs) parses the query.
    expr = f'up{{namespace=~"{dq.promql_regex("ej-dash.v1")}"}}'
    assert expr == 'up{namespace=~"ej\\\\-dash\\\\.v1"}'
    done = subprocess.run(
        ["promtool", "check", "rules", "/dev/stdin"],
        input=yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": expr}]}]}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout


def test_unknown_variables_are_refused() -> None:
    with pytest.raises(ValueError, match="no variable cluster"):
        dq.selection(DASHBOARD, {"cluster": "x"})
    target = dq.Target(panel="p", ref_id="A", expr="up{x=~'$nope'}")
    with pytest.raises(ValueError, match=r"p \[A\]: no value for \$nope"):
        target.expanded({}, "30s")


def test_only_finite_samples_count_as_data() -> None:
    result = [{"values": [[1, "NaN"], [2, "+Inf"], [3, "0"]]}, {"values": [[1, "2.5"]]}]
    assert dq.finite_points(result) == 2
    assert dq.finite_points([{"values": [[1, "NaN"]]}]) == 0


def _chart_prometheus_example() -> dict[str, Any]:
    """The ``networkPolicy.prometheus`` example that values.yaml documents in its comment."""
    text = (CHART / "values.yaml").read_text()
    (line,) = [
        ln for ln in text.splitlines() if "namespaceLabels" in ln and ln.lstrip().startswith("#")
    ]
    example: dict[str, Any] = yaml.safe_load(line.lstrip("# ").removeprefix("e.g. ").rstrip("."))
    return example


def test_the_pod_carries_the_labels_the_chart_documents() -> None:
    assert pp.CHART_VALUES["networkPolicy"]["prometheus"] == _chart_prometheus_example()
    objects = _objects(pods_in=["a"], endpoints_in=["b"])
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == pp.POD_LABELS
    assert deployment["metadata"]["namespace"] == pp.NAMESPACE
    spec = template["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in spec["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["data"]["k8s_discovery.py"] == pp.DISCOVERY.read_text()
    (sidecar,) = [c for c in spec["containers"] if c["name"] == "discovery"]
    assert "--pods-in=a" in sidecar["command"] and "--endpoints-in=b" in sidecar["command"]


def _objects(pods_in: list[str], endpoints_in: list[str]) -> list[dict[str, Any]]:
    config = pp.scrape_config(release="rel", interval_s=2)
    return pp.manifests(
        image="img", config=config, pods_in=pods_in, endpoints_in=endpoints_in, placement={}
    )


def test_discovery_is_granted_per_namespace_with_list_and_watch_only() -> None:
    objects = _objects(pods_in=["a", "b"], endpoints_in=["a"])
    roles = [o for o in objects if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    for role in roles:
        (rule,) = role["rules"]
        assert rule["verbs"] == ["list", "watch"]
    assert not [o for o in objects if o["kind"].startswith("Cluster")]


def _job(config: dict[str, Any], name: str) -> dict[str, Any]:
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == name]
    return dict(job)


def test_the_scrape_jobs_mirror_the_service_and_pod_monitors() -> None:
    config = pp.scrape_config(release="rel", interval_s=2)
    assert config["global"]["scrape_interval"] == "2s"
    operator = _job(config, "elasticjob-operator")
    # The operator's series carry the ElasticJob's own `namespace` and `job`: they must win.
    assert operator["honor_labels"] is True
    assert operator["file_sd_configs"][0]["files"] == ["/sd/endpoints.json"]
    for name, role, port in (
        ("elasticjob-agents", "worker", "health"),
        ("elasticjob-etcd", "etcd", "metrics"),
    ):
        job = _job(config, name)
        assert "honor_labels" not in job
        assert job["file_sd_configs"][0]["files"] == ["/sd/pods.json"]
        keeps = {
            r["source_labels"][0]: r["regex"]
            for r in job["relabel_configs"]
            if r.get("action") == "keep"
        }
        assert keeps == {
            "__meta_kubernetes_pod_label_elasticjob_dev_role": role,
            "__meta_kubernetes_pod_container_port_name": port,
        }
        targets = {r.get("target_label"): r["source_labels"] for r in job["relabel_configs"]}
        # The PodMonitor's relabellings: the dashboard's Namespace and Job filter these too.
        assert targets["namespace"] == ["__meta_kubernetes_namespace"]
        assert targets["job"] == ["__meta_kubernetes_pod_label_elasticjob_dev_job_name"]
    with pytest.raises(ValueError, match="at least 1 s"):
        pp.scrape_config(release="r", interval_s=0)


POD = {
    "metadata": {
        "namespace": "jobs",
        "name": "train-worker-0-0",
        "labels": {"elasticjob.dev/role": "worker", "elasticjob.dev/job-name": "train"},
    },
    "status": {"podIP": "10.1.0.5", "phase": "Running"},
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "ports": [
                    {"name": "health", "containerPort": 29401},
                    {"name": "checkpoint", "containerPort": 29402},
                ],
            },
            {"name": "no-ports"},
        ]
    },
}


def test_pods_are_discovered_with_prometheus_pod_role_labels() -> None:
    groups = kd.pod_groups([POD, {"metadata": {"name": "pending"}, "status": {}}])
    assert [g["targets"] for g in groups] == [["10.1.0.5:29401"], ["10.1.0.5:29402"]]
    labels = groups[0]["labels"]
    assert labels["__meta_kubernetes_namespace"] == "jobs"
    assert labels["__meta_kubernetes_pod_name"] == "train-worker-0-0"
    assert labels["__meta_kubernetes_pod_phase"] == "Running"
    assert labels["__meta_kubernetes_pod_label_elasticjob_dev_role"] == "worker"
    assert labels["__meta_kubernetes_pod_labelpresent_elasticjob_dev_job_name"] == "true"
    assert labels["__meta_kubernetes_pod_container_port_name"] == "health"
    assert labels["__meta_kubernetes_pod_container_port_number"] == "29401"


def test_endpoints_are_discovered_with_the_services_labels() -> None:
    service = {
        "metadata": {
            "namespace": "ops",
            "name": "rel-metrics",
            "labels": {"app.kubernetes.io/instance": "rel"},
        }
    }
    endpoints = {
        "metadata": {"namespace": "ops", "name": "rel-metrics"},
        "subsets": [
            {
                "addresses": [{"ip": "10.1.0.7", "targetRef": {"name": "op-1"}}],
                "notReadyAddresses": [{"ip": "10.1.0.8"}],
                "ports": [{"name": "metrics", "port": 8080}],
            }
        ],
    }
    orphan = {"metadata": {"namespace": "ops", "name": "gone"}, "subsets": []}
    groups = kd.endpoint_groups([endpoints, orphan], [service])
    assert [(g["targets"], g["labels"]["__meta_kubernetes_endpoint_ready"]) for g in groups] == [
        (["10.1.0.7:8080"], "true"),
        (["10.1.0.8:8080"], "false"),
    ]
    labels = groups[0]["labels"]
    assert labels["__meta_kubernetes_service_label_app_kubernetes_io_instance"] == "rel"
    assert labels["__meta_kubernetes_endpoint_port_name"] == "metrics"
    assert labels["__meta_kubernetes_pod_name"] == "op-1"


def test_target_files_are_replaced_whole_and_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    kd.write(path, kd.pod_groups([POD]))
    first = path.stat().st_ino
    kd.write(path, kd.pod_groups([POD]))
    assert path.stat().st_ino == first, "an unchanged file is left alone"
    kd.write(path, [])
    assert path.read_text() == "[]"
    assert not list(tmp_path.glob("*.tmp"))
