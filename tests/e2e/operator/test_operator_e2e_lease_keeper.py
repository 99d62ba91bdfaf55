"""The operator's Lease is renewed from a thread of its own (``election.LeaseKeeper``), against the
local cluster's API server: a main thread busy for longer than the renew deadline (as a mass
start of jobs keeps the operator's event loop) does not cost the Lease, and a Lease taken by
another holder is reported lost at once.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_operator.core.leadership import LeaseTimings
from elasticjob_operator.election import Elector, LeaseKeeper
from elasticjob_operator.kube import Kube

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TIMINGS = LeaseTimings(duration=3.0, renew_deadline=2.0, retry_period=0.5)
LEASE = "keeper-test"


def _elector(namespace: str, identity: str) -> Callable[[Kube], Elector]:
    def make(kube: Kube) -> Elector:
        return Elector(kube, namespace=namespace, name=LEASE, identity=identity, timings=TIMINGS)

    return make


def _lease(cluster: LocalCluster, namespace: str) -> dict[str, object]:
    out = cluster.kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json").stdout
    spec: dict[str, object] = json.loads(out)["spec"]
    return spec


def _renewed_at(spec: dict[str, object]) -> float:
    text = str(spec["renewTime"]).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text).timestamp()


def _connect(cluster: LocalCluster) -> Callable[[], Awaitable[Kube]]:
    return functools.partial(Kube.connect, str(cluster.kubeconfig))


def _acquire(cluster: LocalCluster, namespace: str) -> None:
    async def run() -> None:
        kube = await _connect(cluster)()
        try:
            await _elector(namespace, "me")(kube).acquire()
        finally:
            await kube.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_a_busy_main_thread_keeps_the_lease_and_a_taken_lease_is_lost_at_once(
    cluster: LocalCluster, namespace: str
) -> None:
    _acquire(cluster, namespace)
    lost: list[str] = []
    signalled = threading.Event()

    def on_lost(reason: str) -> None:
        lost.append(reason)
        signalled.set()

    keeper = LeaseKeeper(_connect(cluster), _elector(namespace, "me"), on_lost)
    keeper.start()
    try:
        # Pure Python work on the main thread for three renew deadlines.
        busy_from = time.time()
        end = time.monotonic() + 3 * TIMINGS.renew_deadline
        while time.monotonic() < end:
            sum(range(10_000))
        spec = _lease(cluster, namespace)
        assert spec["holderIdentity"] == "me" and not lost, (spec, lost)
        assert _renewed_at(spec) > busy_from + 2 * TIMINGS.renew_deadline, spec

        cluster.kubectl(
            "patch", "lease", LEASE, "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"holderIdentity": "someone-else"}}),
        )  # fmt: skip
        assert signalled.wait(5 * TIMINGS.retry_period), "the taken Lease was not reported lost"
        assert lost == [f"lease {namespace}/{LEASE} is now held by someone-else"], lost
    finally:
        keeper.stop(10)


def test_a_clean_stop_hands_the_lease_back(cluster: LocalCluster, namespace: str) -> None:
    _acquire(cluster, namespace)
    acquired = _lease(cluster, namespace)["renewTime"]
    lost: list[str] = []
    keeper = LeaseKeeper(_connect(cluster), _elector(namespace, "me"), lost.append)
    keeper.start()
    # Stopped once it holds the Lease by renewing it (not before it has run at all).
    cluster.wait_for(
        "the keeper's first renewal",
        lambda: _lease(cluster, namespace)["renewTime"] != acquired,
        timeout=10 * TIMINGS.retry_period,
    )
    keeper.stop(10)
    spec = _lease(cluster, namespace)
    assert not spec.get("holderIdentity") and not lost, (spec, lost)
