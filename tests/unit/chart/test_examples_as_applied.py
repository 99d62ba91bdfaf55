"""Every example runs as applied, as far as a reading can tell without a cluster.

The end-to-end suites run most examples (tests/e2e/realnodes/test_realnodes_examples.py) and
dry-run the Kueue ones; these checks catch, in `make test-fast`, the mistakes an example can make
that the CRD's schema cannot see: a script the training image does not hold where the command
looks for it, a pod that the PodSecurity ``baseline`` profile refuses, and an autoscaler whose
metric has nothing to measure against.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dockerfile import parse
from tests.support.paths import REPO

EXAMPLES = sorted((REPO / "examples").rglob("*.yaml"))
TRAINING_IMAGE_DOCKERFILE = REPO / "examples" / "training-image" / "Dockerfile"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pod_specs(path: Path) -> list[tuple[str, dict[str, Any]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in _docs(path)
        if d.get("kind") == "ElasticJob"
    ]


def _trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (trainer,) = [c for c in pod_spec["containers"] if c["name"] == "trainer"]
    return dict(trainer)


def _training_image_files() -> tuple[str, set[str]]:
    """The training image's WORKDIR and the absolute paths its COPY lines create."""
    _, stages = parse(TRAINING_IMAGE_DOCKERFILE.read_text())
    workdir, copied = "/", set()
    for instruction in stages[-1].instructions:
        if instruction.keyword == "WORKDIR":
            workdir = posixpath.join(workdir, instruction.argument)
        elif instruction.keyword == "COPY":
            dest = instruction.argument.split()[-1]
            copied.add(posixpath.normpath(posixpath.join(workdir, dest)))
    return workdir, copied


def _ids(paths: list[Path]) -> list[str]:
    return [p.relative_to(REPO / "examples").as_posix() for p in paths]


@pytest.mark.parametrize("path", EXAMPLES, ids=_ids(EXAMPLES))
def test_a_python_script_is_where_the_training_image_puts_it(path: Path) -> None:
    """``python <script>.py``, relative to the image's WORKDIR or absolute, names a file the
    training image copies in (the image the e2e suites run every example's trainer in)."""
    workdir, copied = _training_image_files()
    for job, pod_spec in _pod_specs(path):
        command = [*_trainer(pod_spec).get("command", []), *_trainer(pod_spec).get("args", [])]
        scripts = [w for w in command[1:2] if command[0] == "python" and w.endswith(".py")]
        for script in scripts:
            where = posixpath.normpath(posixpath.join(workdir, script))
            assert where in copied, (
                f"{path.name} ({job}) runs {script}, i.e. {where}; the training image "
                f"holds {sorted(copied)}"
            )


@pytest.mark.parametrize("path", EXAMPLES, ids=_ids(EXAMPLES))
def test_the_worker_pods_pass_podsecurity_baseline(path: Path) -> None:
    """What ``baseline`` refuses and a template could ask for: host paths, host namespaces,
    privileged containers, host ports."""
    for job, pod_spec in _pod_specs(path):
        where = f"{path.name} ({job})"
        host_paths = [v["name"] for v in pod_spec.get("volumes", []) if "hostPath" in v]
        assert not host_paths, f"{where}: hostPath volumes {host_paths}"
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod_spec.get(key), f"{where}: {key}"
        for container in pod_spec["containers"]:
            assert not (container.get("securityContext") or {}).get("privileged"), where
            ports = [p for p in container.get("ports", []) if p.get("hostPort")]
            assert not ports, f"{where}: host ports {ports}"


@pytest.mark.parametrize("path", EXAMPLES, ids=_ids(EXAMPLES))
def test_an_autoscalers_resource_metric_has_a_request_to_measure_against(path: Path) -> None:
    """A Resource metric's utilisation is use over request: the target job's trainer must
    request that resource, or the HorizontalPodAutoscaler never scales."""
    jobs = dict(_pod_specs(path))
    for hpa in (d for d in _docs(path) if d.get("kind") == "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "ElasticJob" and target["name"] in jobs, (
            f"{path.name}: the autoscaler's target is not the job in the same file"
        )
        requests = _trainer(jobs[target["name"]]).get("resources", {}).get("requests", {})
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Resource":
                name = metric["resource"]["name"]
                assert name in requests, (
                    f"{path.name}: the autoscaler scales on {name}, which the trainer does "
                    f"not request"
                )
