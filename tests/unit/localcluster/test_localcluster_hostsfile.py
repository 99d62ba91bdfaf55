"""How Service names resolve inside pods (pure rendering of /etc/hosts)."""

from __future__ import annotations

import pytest
from elasticjob_localcluster.hostsfile import PodEntry, ServiceEntry, backing_pods, render_hosts


def pod(name: str, ip: str, *, ready: bool = True, ns: str = "ns", **kw: str) -> PodEntry:
    return PodEntry(
        namespace=ns,
        name=name,
        ip=ip,
        labels=(("app", kw.get("app", "db")),),
        ready=ready,
        hostname=kw.get("hostname", ""),
        subdomain=kw.get("subdomain", ""),
        terminating=kw.get("terminating", "") == "yes",
    )


def svc(
    name: str, *, headless: bool = False, publish: bool = False, ns: str = "ns"
) -> ServiceEntry:
    return ServiceEntry(
        namespace=ns,
        name=name,
        selector=(("app", "db"),),
        headless=headless,
        publish_not_ready=publish,
    )


@pytest.mark.parametrize(
    ("service", "pods", "expected"),
    [
        # ClusterIP: ready pods only while any is ready ...
        (svc("db"), [pod("a", "10.0.0.2"), pod("b", "10.0.0.3", ready=False)], ["a"]),
        # ... but the name still resolves when none is ready (a real ClusterIP always resolves).
        (svc("db"), [pod("b", "10.0.0.3", ready=False)], ["b"]),
        # Headless: not-ready pods are unpublished unless publishNotReadyAddresses.
        (svc("db", headless=True), [pod("b", "10.0.0.3", ready=False)], []),
        (svc("db", headless=True, publish=True), [pod("b", "10.0.0.3", ready=False)], ["b"]),
        # Terminating pods, pods without an address, other namespaces and labels are never backing.
        (svc("db"), [pod("t", "10.0.0.4", terminating="yes"), pod("n", "")], []),
        (svc("db"), [pod("x", "10.0.0.5", ns="other"), pod("y", "10.0.0.6", app="web")], []),
    ],
)
def test_backing_pods(service: ServiceEntry, pods: list[PodEntry], expected: list[str]) -> None:
    assert [p.name for p in backing_pods(service, pods)] == expected


def test_render_hosts_names_in_own_and_other_namespaces() -> None:
    me = pod("client", "10.0.0.9", ns="ns")
    services = [svc("db", ns="ns"), svc("db", ns="other")]
    pods = [pod("a", "10.0.0.2", ns="ns"), pod("b", "10.0.0.3", ns="other")]
    text = render_hosts(me, services, pods, api_host="10.0.0.1")
    lines = text.splitlines()
    assert "10.0.0.2\tdb.ns.svc.cluster.local db.ns.svc db.ns db" in lines
    # The short form resolves only within the pod's own namespace.
    assert "10.0.0.3\tdb.other.svc.cluster.local db.other.svc db.other" in lines
    assert any(line.startswith("10.0.0.1\tkubernetes.default.svc.cluster.local") for line in lines)
    assert "10.0.0.9\tclient" in lines


def test_render_hosts_headless_pod_names() -> None:
    me = pod("w-0", "10.0.0.2", hostname="w-0", subdomain="workers")
    peer = pod("w-1", "10.0.0.3", hostname="w-1", subdomain="workers")
    text = render_hosts(me, [svc("workers", headless=True)], [me, peer], api_host="10.0.0.1")
    lines = text.splitlines()
    own = "w-0.workers.ns.svc.cluster.local w-0.workers.ns.svc w-0.workers.ns w-0"
    assert f"10.0.0.2\t{own}" in lines
    assert (
        "10.0.0.3\tw-1.workers.ns.svc.cluster.local w-1.workers.ns.svc w-1.workers.ns w-1.workers"
        in lines
    )
