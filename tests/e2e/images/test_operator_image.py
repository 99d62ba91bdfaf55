"""The operator image in a real container, under the chart's securityContext, against the real
local control plane: uid 10001, read-only root filesystem with only /tmp writable, no
capabilities, no privilege escalation. It must come up healthy and act on an ElasticJob.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from elasticjob_agent.ports import free_port
from elasticjob_localcluster import LocalCluster

from tests.support.images import REFS, Podman
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_operator_image_runs_read_only_as_uid_10001(
    cluster: LocalCluster, podman: Podman, tmp_path: Path
) -> None:
    podman.build("operator")
    namespace = f"img-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "elasticjob.yaml"))
        # The admin kubeconfig, readable by uid 10001 (the chart uses a ServiceAccount instead).
        kubeconfig = tmp_path / "kubeconfig"
        shutil.copy(cluster.kubeconfig, kubeconfig)
        kubeconfig.chmod(0o644)
        health, metrics = free_port(), free_port()
        name = podman.start(
            "--network=host",
            "--user=10001:10001",
            "--read-only",
            "--read-only-tmpfs=false",  # only what the chart mounts: an emptyDir on /tmp
            "--tmpfs=/tmp:size=64m",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            f"--volume={kubeconfig}:/etc/elasticjob/kubeconfig:ro",
            "--env=KUBECONFIG=/etc/elasticjob/kubeconfig",
            f"--env=ELASTICJOB_METRICS_PORT={metrics}",
            f"--env=ELASTICJOB_HEALTH_PORT={health}",
            image=REFS["operator"],
            command=[f"--namespace={namespace}", f"--liveness=http://127.0.0.1:{health}/healthz"],
        )

        def running() -> bool:
            state = podman.inspect(name)["State"]
            assert isinstance(state, dict)
            if state["Status"] != "running":
                pytest.fail(f"the operator exited {state['ExitCode']}:\n{podman.run('logs', name)}")
            return True

        def healthy() -> bool:
            return running() and _healthy(f"http://127.0.0.1:{health}/healthz")

        cluster.wait_for("the operator's /healthz", healthy, timeout=180)
        uid = podman.run("top", name, "huser", "hgroup").split()
        assert uid[2:4] == ["10001", "10001"], uid

        job = (REPO / "examples" / "elasticjob-cpu.yaml").read_text()
        cluster.apply(job, namespace=namespace)

        def acted() -> Any:
            running()
            status = cluster.get_json("elasticjob", "cpu-tiny", "-n", namespace).get("status")
            return status and status.get("phase")

        phase = cluster.wait_for("the operator to set the job's phase", acted, timeout=180)
        assert phase in {"Pending", "Running"}, phase
        assert _healthy(f"http://127.0.0.1:{metrics}/metrics")
        assert running()
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
