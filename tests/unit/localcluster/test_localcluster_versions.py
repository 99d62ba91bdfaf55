"""The local cluster's versions have one home (localcluster/versions.env): the shell scripts and
Python read the same values, and the operator's default etcd image (which may not import the
local cluster) cannot drift from the image the local cluster builds; the CRD names no second
default (the operator's, or its ``ELASTICJOB_ETCD_IMAGE``, applies)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from elasticjob_localcluster import versions
from elasticjob_localcluster.config import repo_root
from elasticjob_operator.core.spec import EtcdSpec

REPO = repo_root()


def test_the_operators_default_etcd_image_is_the_one_the_local_cluster_builds() -> None:
    assert EtcdSpec().image == versions.ETCD_IMAGE


def test_the_crd_sets_no_default_etcd_image() -> None:
    for crd in (REPO / "crds", REPO / "charts" / "elasticjob-operator" / "crds"):
        doc: dict[str, Any] = yaml.safe_load((crd / "elasticjob.yaml").read_text())
        schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        etcd = schema["properties"]["spec"]["properties"]["etcd"]
        assert "default" not in etcd["properties"]["image"], crd


def test_the_shell_reads_the_same_versions_as_python() -> None:
    names = sorted(versions.read_versions())
    script = f'set -eu; source "{versions.VERSIONS_FILE}"; ' + "; ".join(
        f'echo "{name}=${{{name}}}"' for name in names
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [f"{n}={versions.read_versions()[n]}" for n in names]
    assert {"K8S_VERSION", "ETCD_VERSION", "COREDNS_VERSION", "PAUSE_VERSION"} <= set(names)


def test_the_image_refs_carry_their_versions() -> None:
    assert versions.ETCD_IMAGE.endswith(":" + versions.ETCD_VERSION)
    assert versions.COREDNS_IMAGE.endswith(":" + versions.COREDNS_VERSION)
    assert versions.PAUSE_IMAGE.endswith(":" + versions.PAUSE_VERSION)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('K8S_VERSION="v1"\n', ":1: expected NAME=value"),
        ("# fine\n\nK8S_VERSION = v1\n", ":3: expected NAME=value"),
        ("K8S_VERSION=$OTHER\n", "expected NAME=value"),
        ("K8S_VERSION=v1\nK8S_VERSION=v2\n", "K8S_VERSION is set twice"),
    ],
)
def test_a_line_both_sides_might_read_differently_is_rejected(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "versions.env"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        versions.read_versions(path)


def test_the_shell_scripts_take_their_versions_from_the_one_home() -> None:
    for script in ("build.sh", "kueue/build.sh", "kubeflow/build.sh"):
        text = (REPO / "localcluster" / script).read_text()
        assert "versions.env" in text, script
        for value in versions.read_versions().values():
            assert value not in text, f"{script} writes {value} itself"
