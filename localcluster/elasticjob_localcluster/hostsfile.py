"""Per-pod ``/etc/hosts``: how Service names resolve inside pods (pure).

There is no cluster DNS and no kube-proxy: a Service name resolves straight to the addresses of
its backing pods (so ``port`` must equal ``targetPort``), in all the forms DNS would answer
(``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local``; the short form only within
the namespace), plus ``<hostname>.<subdomain>.<ns>.svc...`` per pod of a headless Service.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DOMAIN = "cluster.local"


@dataclass(frozen=True)
class PodEntry:
    namespace: str
    name: str
    ip: str
    labels: tuple[tuple[str, str], ...]
    ready: bool
    hostname: str
    subdomain: str
    terminating: bool


@dataclass(frozen=True)
class ServiceEntry:
    namespace: str
    name: str
    #: ``None``: no selector (its endpoints are not resolved, except the ``kubernetes`` Service).
    selector: tuple[tuple[str, str], ...] | None
    headless: bool
    publish_not_ready: bool


def _names(base: str, namespace: str, own_namespace: str) -> list[str]:
    names = [f"{base}.{namespace}.svc.{DOMAIN}", f"{base}.{namespace}.svc", f"{base}.{namespace}"]
    if namespace == own_namespace:
        names.append(base)
    return names


def backing_pods(service: ServiceEntry, pods: Iterable[PodEntry]) -> list[PodEntry]:
    """Pods a Service routes to: selected, with an address, not terminating; ready ones first.
    Not-ready pods count only with ``publishNotReadyAddresses`` or, for a ClusterIP Service,
    when none is ready (the name then resolves and connecting fails, as with a real ClusterIP)."""
    if service.selector is None:
        return []
    wanted = set(service.selector)
    selected = [
        p
        for p in pods
        if p.namespace == service.namespace
        and p.ip
        and not p.terminating
        and wanted <= set(p.labels)
    ]
    selected.sort(key=lambda p: (not p.ready, p.name))
    ready = [p for p in selected if p.ready]
    if service.publish_not_ready or (not service.headless and not ready):
        return selected
    return ready


def render_hosts(
    pod: PodEntry, services: Iterable[ServiceEntry], pods: Iterable[PodEntry], api_host: str
) -> str:
    """The whole ``/etc/hosts`` of ``pod``."""
    pods = list(pods)
    lines = [
        "# Managed by the elasticjob local cluster's node emulator.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    hostname = pod.hostname or pod.name
    own = [hostname]
    if pod.subdomain:
        own = [*_names(f"{hostname}.{pod.subdomain}", pod.namespace, ""), hostname]
    lines.append(f"{pod.ip}\t{' '.join(own)}")
    lines.append(f"{api_host}\t{' '.join(_names('kubernetes', 'default', pod.namespace))}")
    for service in sorted(services, key=lambda s: (s.namespace, s.name)):
        if service.namespace == "default" and service.name == "kubernetes":
            continue
        backing = backing_pods(service, pods)
        names = " ".join(_names(service.name, service.namespace, pod.namespace))
        lines.extend(f"{p.ip}\t{names}" for p in backing)
        if service.headless:
            for p in backing:
                if p.subdomain == service.name and p.hostname:
                    base = f"{p.hostname}.{service.name}"
                    lines.append(
                        f"{p.ip}\t{' '.join(_names(base, service.namespace, pod.namespace))}"
                    )
    return "\n".join(lines) + "\n"
