"""The versions and image refs the local cluster builds and runs, and the tests name.

The versions live in ``localcluster/versions.env`` (their one home: the shell scripts source it);
this module reads it once at import and composes the image refs. Standard library only, and it
imports nothing of this package: the image builder runs this file by path on the system Python
(``runpy``), where the package's own dependencies are not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

#: ``localcluster/versions.env``.
VERSIONS_FILE = Path(__file__).resolve().parents[1] / "versions.env"

# What a shell's `source` and this reader agree on: no quotes, spaces or expansions.
_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=([A-Za-z0-9][A-Za-z0-9._+-]*)$")


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """``NAME=value`` of each line of ``path``; blank lines and ``#`` comments are skipped.
    Raises ``ValueError`` naming the line when one is anything else, or a name repeats."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected NAME=value (no quotes or spaces): {raw!r}")
        name, value = match.groups()
        if name in versions:
            raise ValueError(f"{path}:{number}: {name} is set twice")
        versions[name] = value
    return versions


_VERSIONS = read_versions()

#: The Kubernetes release ``localcluster/build.sh`` builds (``ELASTICJOB_K8S_VERSION`` overrides).
K8S_VERSION = _VERSIONS["K8S_VERSION"]
#: The kube-router release ``localcluster/build.sh`` builds.
KUBE_ROUTER_VERSION = _VERSIONS["KUBE_ROUTER_VERSION"]
#: The Kueue release ``localcluster/kueue/build.sh`` builds.
KUEUE_VERSION = _VERSIONS["KUEUE_VERSION"]
#: The Kubeflow training operator release ``localcluster/kubeflow/build.sh`` builds.
KUBEFLOW_VERSION = _VERSIONS["KUBEFLOW_VERSION"]
ETCD_VERSION = _VERSIONS["ETCD_VERSION"]
COREDNS_VERSION = _VERSIONS["COREDNS_VERSION"]
PAUSE_VERSION = _VERSIONS["PAUSE_VERSION"]

#: The etcd image (etcd, etcdctl, etcdutl): the operator's default ``spec.etcd.image``.
ETCD_IMAGE = f"quay.io/coreos/etcd:{ETCD_VERSION}"
#: The cluster DNS of the real nodes.
COREDNS_IMAGE = f"registry.k8s.io/coredns/coredns:{COREDNS_VERSION}"
#: The real nodes' pod sandbox (containerd's ``sandbox_image``).
PAUSE_IMAGE = f"registry.k8s.io/pause:{PAUSE_VERSION}"
PROMETHEUS_DEBIAN_VERSION = _VERSIONS["PROMETHEUS_DEBIAN_VERSION"]
#: Prometheus from Debian's package, as a pod (``bench/dashboard_check.py``).
PROMETHEUS_IMAGE = "localhost/elasticjob/prometheus:" + PROMETHEUS_DEBIAN_VERSION.split("+")[0]
#: The images built from this repository, tagged with its release.
OPERATOR_IMAGE = "ghcr.io/elasticjob/elasticjob-operator:0.1.0"
TRAINING_IMAGE = "ghcr.io/elasticjob/training-example:0.1.0"
