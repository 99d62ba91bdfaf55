"""Small manifest builders and checks for end-to-end tests on the local cluster (pure, except
:func:`log_contains`)."""

from __future__ import annotations

from typing import Any

from .handle import ClusterError, LocalCluster
from .realnodes.layout import REAL_NODE_LABEL, REAL_NODE_TAINT_KEY

#: The training example's image (Python, torch, the agent), as localcluster/images builds it.
TRAINING_IMAGE = "ghcr.io/elasticjob/training-example:0.1.0"


def python_pod(
    name: str,
    code: str,
    *,
    restart_policy: str = "Never",
    labels: dict[str, str] | None = None,
    grace: int = 30,
    gpus: int = 0,
    extra_spec: dict[str, Any] | None = None,
    extra_container: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod whose single container runs ``python -u -c code``."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "unused",
        "command": ["python", "-u", "-c", code],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    container.update(extra_container or {})
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
    }
    spec.update(extra_spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def real_pod(
    name: str,
    code: str,
    *,
    image: str = TRAINING_IMAGE,
    node: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`python_pod` for a real node: runs ``image`` (default: the training image, which
    has ``python``), selects real nodes (``node``: that one) and tolerates their taint."""
    pod = python_pod(name, code, **kwargs)
    spec = pod["spec"]
    container = spec["containers"][0]
    container["image"] = image
    container.setdefault("imagePullPolicy", "Never")
    spec.setdefault("nodeSelector", {})[REAL_NODE_LABEL] = "true"
    if node:
        spec["nodeSelector"]["kubernetes.io/hostname"] = node
    spec.setdefault("tolerations", []).append({"key": REAL_NODE_TAINT_KEY, "operator": "Exists"})
    return pod


def service(
    name: str, selector: dict[str, str], port: int, headless: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector, "ports": [{"port": port, "targetPort": port}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


HTTP_SERVER = (
    "import http.server, socketserver\n"
    "socketserver.TCPServer.allow_reuse_address = True\n"
    "http.server.test(\n"
    "    HandlerClass=http.server.SimpleHTTPRequestHandler, port=8080, bind='0.0.0.0'\n"
    ")\n"
)


def fetch_code(url: str) -> list[str]:
    """argv that fetches ``url`` (2 s timeout) and exits 0 on success."""
    return [
        "python",
        "-c",
        f"import urllib.request; urllib.request.urlopen({url!r}, timeout=2); print('ok')",
    ]


def log_contains(
    cluster: LocalCluster, namespace: str, pod: str, text: str, previous: bool = False
) -> bool:
    """Whether the pod's container log holds ``text`` (False while the pod does not run yet)."""
    try:
        return text in cluster.pod_logs(namespace, pod, previous=previous)
    except ClusterError:
        return False
