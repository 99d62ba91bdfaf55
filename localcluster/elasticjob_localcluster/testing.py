"""Small manifest builders and checks for end-to-end tests on the local cluster (pure, except
:func:`log_contains`)."""

from __future__ import annotations

import copy
from typing import Any

from . import versions
from .handle import ClusterError, LocalCluster
from .placement import REAL_NODE_PLACEMENT, VIRTUAL_NODE_PLACEMENT, place

#: The training example's image (Python, torch, the agent), as localcluster/images builds it.
TRAINING_IMAGE = versions.TRAINING_IMAGE


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
    placement: dict[str, Any] = VIRTUAL_NODE_PLACEMENT,
) -> dict[str, Any]:
    """A pod whose single container runs ``python -u -c code``, by default on a virtual node
    (the emulator runs the command on the host and ignores the image; :func:`real_pod` for a
    real node)."""
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
    place(spec, placement)
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
    has ``python``) on the real nodes (``node``: that one)."""
    placement = copy.deepcopy(REAL_NODE_PLACEMENT)
    if node:
        placement["nodeSelector"]["kubernetes.io/hostname"] = node
    pod = python_pod(name, code, placement=placement, **kwargs)
    container = pod["spec"]["containers"][0]
    container["image"] = image
    container.setdefault("imagePullPolicy", "Never")
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
