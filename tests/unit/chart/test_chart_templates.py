"""``helm template`` across the values that change the shape of the release."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.chart import (
    NAMESPACE,
    RELEASE,
    helm_test_pod,
    lint,
    of_kind,
    one,
    operator_container,
    render,
)
from tests.support.paths import REPO

CLUSTER_WIDE: dict[str, str] = {}
NAMESPACED = {"watchNamespaces": "{team-a,team-b}"}
MONITORED = {"serviceMonitor.enabled": "true", "podMonitor.enabled": "true"}

VALUE_SETS = {
    "cluster-wide": CLUSTER_WIDE,
    "namespaced": NAMESPACED,
    "monitoring": MONITORED,
    "namespaced+monitoring": {**NAMESPACED, **MONITORED},
    "no-rbac-no-sa": {"rbac.create": "false", "serviceAccount.create": "false"},
    "no-dashboard": {"dashboard.enabled": "false"},
    "digest": {"image.digest": "sha256:" + "a" * 64},
}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_is_clean(values: dict[str, str]) -> None:
    out = lint(values)
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_object_is_labelled_and_named_within_limits(values: dict[str, str]) -> None:
    for doc in render(values):
        meta = doc["metadata"]
        assert len(meta["name"]) <= 63, meta["name"]
        labels = meta.get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE, (doc["kind"], meta["name"])
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"


def test_cluster_wide_mode_watches_all_namespaces() -> None:
    docs = render(CLUSTER_WIDE)
    container = operator_container(docs)
    assert "--all-namespaces" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--namespace")]
    assert _env(container)["ELASTICJOB_WATCH_NAMESPACES"] == ""
    bindings = of_kind(docs, "ClusterRoleBinding")
    assert any(
        s["kind"] == "ServiceAccount" and s["namespace"] == NAMESPACE
        for b in bindings
        for s in b["subjects"]
    ), "cluster-wide mode needs a ClusterRoleBinding for the operator's ServiceAccount"


def test_namespaced_mode_watches_only_the_listed_namespaces() -> None:
    docs = render(NAMESPACED)
    container = operator_container(docs)
    assert "--all-namespaces" not in container["args"]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert _env(container)["ELASTICJOB_WATCH_NAMESPACES"] == "team-a,team-b"
    bound = {b["metadata"]["namespace"] for b in of_kind(docs, "RoleBinding")}
    assert {"team-a", "team-b"} <= bound, f"RoleBindings only in {bound}"


def test_deployment_is_hardened() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = operator_container(docs)
    assert container["command"] == ["elasticjob-operator"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp must be a writable emptyDir"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["livenessProbe"]["httpGet"]["port"] == "health"
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in container["args"]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


def test_image_reference() -> None:
    default = operator_container(render())["image"]
    assert default == "ghcr.io/elasticjob/elasticjob-operator:0.1.0"
    tagged = operator_container(render({"image.tag:string": "1.2.3"}))["image"]
    assert tagged.endswith(":1.2.3")
    digest = "sha256:" + "b" * 64
    assert operator_container(render({"image.digest": digest}))["image"].endswith("@" + digest)


def test_metrics_service_selects_only_the_operator_pod() -> None:
    docs = render()
    selector = one(docs, "Service")["spec"]["selector"]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    test_labels = helm_test_pod(docs)["metadata"]["labels"]
    assert not selector.items() <= test_labels.items(), "the helm test pod must not be an endpoint"
    assert one(docs, "Service")["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_service_monitor_is_optional() -> None:
    assert not of_kind(render(), "ServiceMonitor")
    docs = render({**MONITORED, "serviceMonitor.labels.release": "kube-prometheus"})
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    match = monitor["spec"]["selector"]["matchLabels"]
    assert match.items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True, "the metrics' own job/namespace labels must win"


def test_pod_monitor_selects_worker_pods_by_port_name() -> None:
    assert not of_kind(render(), "PodMonitor")
    monitor = one(render(MONITORED), "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "health" and endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    # The agents export only run_id: namespace and job (the dashboard's filters) come from the pod.
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel["namespace"] == ["__meta_kubernetes_namespace"]
    assert relabel["job"] == ["__meta_kubernetes_pod_label_elasticjob_dev_job_name"]
    namespaced = one(render({**NAMESPACED, **MONITORED}), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_dashboard_configmap_carries_the_dashboard_for_the_sidecar() -> None:
    docs = render()
    (cm,) = [c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = json.loads((REPO / "dashboards" / "elasticjob.json").read_text())
    assert json.loads(cm["data"]["elasticjob.json"]) == source
    elsewhere = render({"dashboard.namespace": "monitoring"})
    (moved,) = [
        c for c in of_kind(elsewhere, "ConfigMap") if c["metadata"]["name"].endswith("dashboard")
    ]
    assert moved["metadata"]["namespace"] == "monitoring"
    assert not [c for c in of_kind(render({"dashboard.enabled": "false"}), "ConfigMap")]


def test_helm_test_pod_runs_python_as_the_operator_account() -> None:
    docs = render()
    pod = helm_test_pod(docs)
    (container,) = pod["spec"]["containers"]
    assert container["command"][0] == "python3"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert (
        pod["spec"]["serviceAccountName"]
        == (one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"])
    )
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["METRICS_SERVICE"] == one(docs, "Service")["metadata"]["name"]
    # The inline script must at least compile: a syntax error would only show in `helm test`.
    compile(container["args"][0], "helm-test", "exec")


def test_existing_service_account_is_used_when_not_created() -> None:
    docs = render({"serviceAccount.create": "false", "serviceAccount.name": "mine"})
    assert not of_kind(docs, "ServiceAccount")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mine"


def test_no_rbac_objects_when_rbac_is_off() -> None:
    docs = render({"rbac.create": "false"})
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_leader_election_may_touch_only_its_own_lease() -> None:
    for values in (CLUSTER_WIDE, NAMESPACED):
        docs = render(values)
        roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"].endswith("-election")]
        assert len(roles) == 1 and roles[0]["metadata"]["namespace"] == NAMESPACE
        named, create = roles[0]["rules"]
        lease = _env(operator_container(docs))["ELASTICJOB_LEASE_NAME"]
        assert named == {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        }
        assert create["verbs"] == ["create"] and "resourceNames" not in create


def test_secrets_and_network_policies_get_only_the_verbs_the_operator_uses() -> None:
    rules = {
        tuple(r["resources"]): r["verbs"]
        for r in of_kind(render(CLUSTER_WIDE), "ClusterRole")[0]["rules"]
    }
    assert rules[("secrets",)] == ["get", "create"]  # never list or watch
    assert rules[("networkpolicies",)] == ["create"]
    off = {
        tuple(r["resources"])
        for r in of_kind(render({**CLUSTER_WIDE, "networkPolicy.enabled": "false"}), "ClusterRole")[
            0
        ]["rules"]
    }
    assert ("networkpolicies",) not in off


def test_network_policy_peers_reach_the_operator_as_labels() -> None:
    docs = render(
        {
            "networkPolicy.prometheus.namespaceLabels.team": "monitoring",
            "networkPolicy.prometheus.podLabels.app": "prometheus",
        }
    )
    env = _env(operator_container(docs))
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert (
        dict(kv.split("=") for kv in env["ELASTICJOB_OPERATOR_POD_LABELS"].split(",")) == selector
    )
    assert env["ELASTICJOB_PROMETHEUS_NAMESPACE_LABELS"] == "team=monitoring"
    assert env["ELASTICJOB_PROMETHEUS_POD_LABELS"] == "app=prometheus"
    assert "ELASTICJOB_PROMETHEUS_POD_LABELS" not in _env(operator_container(render()))


def test_log_format_and_etcd_image_reach_the_operator() -> None:
    default = _env(operator_container(render()))
    assert default["ELASTICJOB_LOG_FORMAT"] == "text"
    assert "ELASTICJOB_ETCD_IMAGE" not in default  # the operator's own default
    env = _env(
        operator_container(render({"operator.logFormat": "json", "etcd.image": "reg.local/etcd:3"}))
    )
    assert env["ELASTICJOB_LOG_FORMAT"] == "json"
    assert env["ELASTICJOB_ETCD_IMAGE"] == "reg.local/etcd:3"
