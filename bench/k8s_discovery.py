"""Kubernetes service discovery for a Prometheus built without it, as file_sd target files.

Debian's ``prometheus`` package (2.42) leaves the Kubernetes discovery out of its build: a
``kubernetes_sd_configs`` block fails with "field kubernetes_sd_configs not found". This script
runs beside it in the Prometheus pod (stdlib only: the image's ``python3``), lists pods, Services
and Endpoints through the API with the pod's ServiceAccount every ``--interval`` seconds, and
writes what Prometheus' own ``role: pod`` and ``role: endpoints`` discovery would produce, with
the same ``__meta_kubernetes_*`` labels, as ``pods.json`` and ``endpoints.json`` in ``--out``
(replaced by rename, so Prometheus never reads half a file). The scrape jobs' relabelings are
the ones a ``kubernetes_sd_configs`` job would use.

Only the labels the relabelings here read are produced (pod: namespace, name, IP, phase, labels,
container name, port name and number; endpoints: namespace, Service name and labels, port name,
readiness, the backing pod's name). Polling, not watching: a target appears within one interval.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")

Group = dict[str, Any]
"""One file_sd entry: ``{"targets": ["ip:port"], "labels": {...}}``."""


def label_name(key: str) -> str:
    """A Kubernetes label key as Prometheus' discovery spells it in a label name."""
    return _UNSAFE.sub("_", key)


def _labels(prefix: str, labels: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for key, value in (labels or {}).items():
        out[f"{prefix}_{label_name(key)}"] = str(value)
        out[f"{prefix}present_{label_name(key)}"] = "true"
    return out


def pod_groups(pods: Sequence[Mapping[str, Any]]) -> list[Group]:
    """``role: pod``: one target per declared container port of each pod with an IP."""
    groups: list[Group] = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ip = status.get("podIP")
        if not ip:
            continue
        common = {
            "__meta_kubernetes_namespace": str(meta.get("namespace", "")),
            "__meta_kubernetes_pod_name": str(meta.get("name", "")),
            "__meta_kubernetes_pod_ip": str(ip),
            "__meta_kubernetes_pod_phase": str(status.get("phase", "")),
            **_labels("__meta_kubernetes_pod_label", meta.get("labels")),
        }
        for container in (pod.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                number = port.get("containerPort")
                if not isinstance(number, int):
                    continue
                groups.append(
                    {
                        "targets": [f"{ip}:{number}"],
                        "labels": {
                            **common,
                            "__meta_kubernetes_pod_container_name": str(container.get("name")),
                            "__meta_kubernetes_pod_container_port_name": str(port.get("name", "")),
                            "__meta_kubernetes_pod_container_port_number": str(number),
                        },
                    }
                )
    return groups


def endpoint_groups(
    endpoints: Sequence[Mapping[str, Any]], services: Sequence[Mapping[str, Any]]
) -> list[Group]:
    """``role: endpoints``: one target per address and port of each Service's Endpoints."""
    by_name = {
        ((s.get("metadata") or {}).get("namespace"), (s.get("metadata") or {}).get("name")): s
        for s in services
    }
    groups: list[Group] = []
    for ep in endpoints:
        meta = ep.get("metadata") or {}
        service = by_name.get((meta.get("namespace"), meta.get("name")))
        if service is None:
            continue
        common = {
            "__meta_kubernetes_namespace": str(meta.get("namespace", "")),
            "__meta_kubernetes_service_name": str(meta.get("name", "")),
            **_labels("__meta_kubernetes_service_label", service["metadata"].get("labels")),
        }
        for subset in ep.get("subsets") or []:
            ready = [(a, "true") for a in subset.get("addresses") or []]
            not_ready = [(a, "false") for a in subset.get("notReadyAddresses") or []]
            for address, is_ready in ready + not_ready:
                for port in subset.get("ports") or []:
                    ref = address.get("targetRef") or {}
                    groups.append(
                        {
                            "targets": [f"{address['ip']}:{port['port']}"],
                            "labels": {
                                **common,
                                "__meta_kubernetes_endpoint_port_name": str(port.get("name", "")),
                                "__meta_kubernetes_endpoint_ready": is_ready,
                                "__meta_kubernetes_pod_name": str(ref.get("name", "")),
                            },
                        }
                    )
    return groups


class Api:
    """GET on the API server as the pod's ServiceAccount."""

    def __init__(self) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))

    def items(self, path: str) -> list[dict[str, Any]]:
        token = (SERVICE_ACCOUNT / "token").read_text().strip()  # rotated: read each time
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
            items: list[dict[str, Any]] = json.load(response)["items"]
        return items


def write(path: Path, groups: list[Group]) -> None:
    text = json.dumps(groups, sort_keys=True)
    if path.exists() and path.read_text() == text:
        return  # unchanged: Prometheus need not re-read it
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods-in", default="", help="comma-separated namespaces (role: pod)")
    parser.add_argument(
        "--endpoints-in", default="", help="comma-separated namespaces (role: endpoints)"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of the target files")
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    pods_in = [n for n in args.pods_in.split(",") if n]
    endpoints_in = [n for n in args.endpoints_in.split(",") if n]
    api = Api()
    while True:
        try:
            pods = [p for ns in pods_in for p in api.items(f"/api/v1/namespaces/{ns}/pods")]
            eps = [
                e for ns in endpoints_in for e in api.items(f"/api/v1/namespaces/{ns}/endpoints")
            ]
            svcs = [
                s for ns in endpoints_in for s in api.items(f"/api/v1/namespaces/{ns}/services")
            ]
            write(args.out / "pods.json", pod_groups(pods))
            write(args.out / "endpoints.json", endpoint_groups(eps, svcs))
        except (OSError, ValueError, KeyError) as exc:  # the API server away: try again
            print(f"discovery: {exc!r}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
