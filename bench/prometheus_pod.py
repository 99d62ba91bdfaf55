"""Prometheus as a pod, as a platform team runs it beside the chart (pure builders).

The objects ``bench/dashboard_check.py`` applies: a ServiceAccount, a Role and RoleBinding in
each namespace it discovers in (pods, and the operator's Service endpoints: list and watch, no
more), the configuration in a ConfigMap, and a Deployment of the image built from Debian's
``prometheus`` package (``localcluster/images/prometheus``) under the ``restricted`` PodSecurity
profile. Its labels and namespace are the ones the chart documents for
``networkPolicy.prometheus`` (:data:`CHART_VALUES`), which is what lets it through the jobs'
NetworkPolicies to the agents' and the managed etcd's metrics ports.

Debian's package is built without Kubernetes service discovery, so a sidecar
(``bench/k8s_discovery.py``, from the same ConfigMap) lists pods and Endpoints through the API and
writes file_sd target files with the labels Prometheus' ``role: pod`` and ``role: endpoints``
discovery would give; the relabelings are those of a ``kubernetes_sd_configs`` job.

The scrape jobs are the chart's monitors written out that way:

- ``elasticjob-operator``: the ServiceMonitor, the release's metrics Service endpoints on port
  ``metrics``, ``honor_labels: true`` (the operator's series carry the job's own ``namespace``
  and ``job``);
- ``elasticjob-agents``: the PodMonitor, every worker pod's port ``health``, ``namespace`` set to
  the pod's namespace and ``job`` to its ElasticJob (label ``elasticjob.dev/job-name``);
- ``elasticjob-etcd``: each managed etcd pod's port ``metrics`` (plain HTTP; the client port is
  mutual TLS), labelled the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NAME = "prometheus"
PORT = 9090
#: The discovery sidecar's source, shipped in the ConfigMap.
DISCOVERY = Path(__file__).resolve().with_name("k8s_discovery.py")
#: Where the sidecar writes the target files and Prometheus reads them (a shared emptyDir).
SD_DIR = "/sd"
#: What the chart's values.yaml documents for ``networkPolicy.prometheus`` (the labels of a
#: kube-prometheus-stack install in namespace ``monitoring``); this pod carries exactly these.
NAMESPACE = "monitoring"
POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
CHART_VALUES: dict[str, Any] = {
    "networkPolicy": {
        "prometheus": {
            "namespaceLabels": {"kubernetes.io/metadata.name": NAMESPACE},
            "podLabels": POD_LABELS,
        }
    }
}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
#: Objects a scrape may land on: drop pods that ended (the PodMonitor's generated rule).
_RUNNING_ONLY = {
    "source_labels": ["__meta_kubernetes_pod_phase"],
    "regex": "Failed|Succeeded",
    "action": "drop",
}


def _keep(label: str, regex: str) -> dict[str, Any]:
    return {"source_labels": [label], "regex": regex, "action": "keep"}


def _job_labels() -> list[dict[str, Any]]:
    return [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {
            "source_labels": ["__meta_kubernetes_pod_label_elasticjob_dev_job_name"],
            "target_label": "job",
        },
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]


def _discovered(role: str, interval: str) -> list[dict[str, Any]]:
    """The sidecar's targets of ``role`` (what ``kubernetes_sd_configs`` would discover)."""
    return [{"files": [f"{SD_DIR}/{role}s.json"], "refresh_interval": interval}]


def _pod_job(name: str, role: str, port: str, interval: str) -> dict[str, Any]:
    return {
        "job_name": name,
        "file_sd_configs": _discovered("pod", interval),
        "relabel_configs": [
            _keep("__meta_kubernetes_pod_label_elasticjob_dev_role", role),
            _keep("__meta_kubernetes_pod_container_port_name", port),
            _RUNNING_ONLY,
            *_job_labels(),
        ],
    }


def scrape_config(*, release: str, interval_s: int) -> dict[str, Any]:
    """``prometheus.yml``: the operator of ``release``, and the agents and managed etcd of every
    job, among the targets the sidecar discovers, every ``interval_s`` seconds."""
    if interval_s < 1:
        raise ValueError(f"scrape interval must be at least 1 s, got {interval_s}")
    every = f"{interval_s}s"
    return {
        "global": {
            "scrape_interval": every,
            "scrape_timeout": every,
            "evaluation_interval": every,
        },
        "scrape_configs": [
            {
                "job_name": "elasticjob-operator",
                "honor_labels": True,
                "file_sd_configs": _discovered("endpoint", every),
                "relabel_configs": [
                    _keep("__meta_kubernetes_service_label_app_kubernetes_io_instance", release),
                    _keep(
                        "__meta_kubernetes_service_label_app_kubernetes_io_component", "operator"
                    ),
                    _keep("__meta_kubernetes_endpoint_port_name", "metrics"),
                ],
            },
            _pod_job("elasticjob-agents", "worker", "health", every),
            _pod_job("elasticjob-etcd", "etcd", "metrics", every),
        ],
    }


def _discovery_rbac(namespace: str) -> list[dict[str, Any]]:
    meta = {"name": f"{NAME}-discovery", "namespace": namespace, "labels": POD_LABELS}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            # Service discovery: list and watch what it scrapes, nothing else.
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services", "endpoints"],
                    "verbs": ["list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{NAME}-discovery",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
    ]


def manifests(
    *,
    image: str,
    config: dict[str, Any],
    pods_in: list[str],
    endpoints_in: list[str],
    placement: dict[str, Any],
) -> list[dict[str, Any]]:
    """Every object of the Prometheus install in :data:`NAMESPACE` (which must exist): the
    sidecar discovers pods in ``pods_in`` and Endpoints in ``endpoints_in``, with a Role in each
    of those namespaces; ``placement`` (``nodeSelector`` and the like) goes into the pod's
    spec."""
    labels = dict(POD_LABELS)
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": labels}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": NAME,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "fsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": NAME,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": [
                    "--config.file=/etc/prometheus/prometheus.yml",
                    "--storage.tsdb.path=/prometheus",
                    "--storage.tsdb.retention.time=1d",
                    f"--web.listen-address=0.0.0.0:{PORT}",
                ],
                "ports": [{"name": "web", "containerPort": PORT, "protocol": "TCP"}],
                "readinessProbe": {
                    "httpGet": {"path": "/-/ready", "port": "web"},
                    "periodSeconds": 2,
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "512Mi"},
                },
                "securityContext": RESTRICTED_CONTAINER,
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                    {"name": "data", "mountPath": "/prometheus"},
                    {"name": "sd", "mountPath": SD_DIR, "readOnly": True},
                ],
            },
            {
                "name": "discovery",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "python3",
                    "/etc/prometheus/k8s_discovery.py",
                    f"--pods-in={','.join(pods_in)}",
                    f"--endpoints-in={','.join(endpoints_in)}",
                    f"--out={SD_DIR}",
                    f"--interval={config['global']['scrape_interval'].rstrip('s')}",
                ],
                "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                "resources": {
                    "requests": {"cpu": "20m", "memory": "32Mi"},
                    "limits": {"memory": "128Mi"},
                },
                "securityContext": RESTRICTED_CONTAINER,
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                    {"name": "sd", "mountPath": SD_DIR},
                ],
            },
        ],
        "volumes": [
            {"name": "config", "configMap": {"name": NAME}},
            {"name": "data", "emptyDir": {}},
            {"name": "sd", "emptyDir": {}},
        ],
        **placement,
    }
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {
                "prometheus.yml": yaml.safe_dump(config, sort_keys=False),
                "k8s_discovery.py": DISCOVERY.read_text(),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        },
    ]
    for namespace in dict.fromkeys([*pods_in, *endpoints_in]):
        objects += _discovery_rbac(namespace)
    return objects
