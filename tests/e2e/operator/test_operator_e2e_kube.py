"""The operator's API boundary (``kube.Kube``) against the local cluster's API server, for the
calls whose answer it does not read (``_preload_content=False``): success, the tolerated
statuses, and a refusal that says what to fix."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_operator.core.names import JobRef
from elasticjob_operator.kube import Kube, PermanentKubeError

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            # Never scheduled: no node has this label.
            "nodeSelector": {"elasticjob.dev/nowhere": "true"},
            "containers": [{"name": "c", "image": "x"}],
        },
    }


def test_unread_calls_succeed_tolerate_and_refuse_with_the_servers_message(
    cluster: LocalCluster, namespace: str
) -> None:
    async def run() -> None:
        kube = await Kube.connect(str(cluster.kubeconfig))
        try:
            assert await kube.create(_pod(namespace, "p")) is True
            assert await kube.create(_pod(namespace, "p")) is False  # 409: exists already
            await kube.annotate_pod(namespace, "p", {"elasticjob.dev/test": "yes"})
            await kube.annotate_pod(namespace, "missing", {"a": "b"})  # 404 tolerated
            job = JobRef(namespace, "some-job", str(uuid.uuid4()))
            await kube.post_event(job, "Normal", "KubeTest", "hello", time.time())
            bad = _pod(namespace, "Not_A_Name")
            with pytest.raises(PermanentKubeError) as refused:
                await kube.create(bad)
            assert "create Pod" in str(refused.value) and "Not_A_Name" in str(refused.value)
            await kube.delete_pod(namespace, "p", force=True)
            await kube.delete_pod(namespace, "p", force=True)  # 404 tolerated
        finally:
            await kube.close()

    asyncio.run(asyncio.wait_for(run(), 60))
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
    assert not [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")], pods
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=KubeTest", "-o", "name"
    ).stdout
    assert events.strip(), "the Event was not posted"
