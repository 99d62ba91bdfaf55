"""examples/kueue/ passes the API server's validation (Kueue's CRDs and webhooks, our CRD's
schema and CEL rules): server-side dry runs against the local cluster with Kueue."""

from __future__ import annotations

from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster
from elasticjob_localcluster.kueue import MANAGED_NAMESPACE_LABEL

from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples" / "kueue"


def test_kueue_examples_pass_server_validation(
    cluster: LocalCluster, kueue: dict[str, Any]
) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "crds" / "elasticjob.yaml"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/elasticjobs.elasticjob.dev", "--timeout=60s"
    )
    if cluster.kubectl("get", "namespace", "team-a", check=False).returncode != 0:
        cluster.kubectl("create", "namespace", "team-a")
    cluster.kubectl(
        "label", "namespace", "team-a", f"{MANAGED_NAMESPACE_LABEL}=true", "--overwrite"
    )
    queues = cluster.kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES / "queues.yaml"))
    assert queues.stdout.count("(server dry run)") == 6, queues.stdout
    job = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "team-a", "-f", str(EXAMPLES / "elasticjob-queued.yaml")
    )
    assert "elasticjob.elasticjob.dev/train-queued created (server dry run)" in job.stdout

    # A wrong queueName is refused by the schema, with the field named.
    bad = (
        (EXAMPLES / "elasticjob-queued.yaml")
        .read_text()
        .replace("queueName: main", "queueName: Not_A_Queue")
    )
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "team-a", "-f", "-", input=bad, check=False
    )
    assert done.returncode != 0 and "spec.queueName" in done.stderr
