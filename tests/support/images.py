"""Helpers of the image tests: build the images (localcluster/images/build.sh), run podman.

``Podman.build`` builds (or finds current, in seconds) the images a test names; ``Podman.run``
uses the same containers.conf and storage as the build (runc, cgroupfs, limits this machine
allows). A failed build fails the test with the build's output; nothing is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from elasticjob_localcluster.versions import (
    COREDNS_IMAGE,
    ETCD_IMAGE,
    OPERATOR_IMAGE,
    PAUSE_IMAGE,
    TRAINING_IMAGE,
)

from tests.support.paths import REPO

BUILD = REPO / "localcluster" / "images" / "build.sh"
REFS = {
    "pause": PAUSE_IMAGE,
    "coredns": COREDNS_IMAGE,
    "etcd": ETCD_IMAGE,
    "operator": OPERATOR_IMAGE,
    "training": TRAINING_IMAGE,
}


def images_root() -> Path:
    cache = Path(os.environ.get("ELASTICJOB_CACHE", Path.home() / ".cache" / "elasticjob"))
    return cache / "images"


def wait_until(
    what: str, check: Callable[[], bool], deadline_s: float, detail: Callable[[], str] = str
) -> None:
    """Poll ``check()`` until true; fail naming ``what`` (and ``detail()``) past the deadline."""
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}\n{detail()}")
        time.sleep(0.5)


class Podman:
    """podman with the build's configuration; containers it starts are removed at the end."""

    def __init__(self) -> None:
        conf = images_root() / "podman"
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(conf / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
        }
        self._names: list[str] = []

    def build(self, *names: str) -> list[str]:
        proc = subprocess.run(
            [str(BUILD), *names], capture_output=True, text=True, timeout=5400, check=False
        )
        if proc.returncode != 0:
            pytest.fail(f"{BUILD} {' '.join(names)} failed:\n{proc.stderr[-6000:]}")
        return [REFS[name] for name in names]

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        proc = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    def start(self, *args: str, image: str, command: Sequence[str] = ()) -> str:
        """``podman run -d`` under a fresh name (removed at teardown); returns the name."""
        name = f"ej-test-{uuid.uuid4().hex[:10]}"
        self._names.append(name)
        self.run("run", "-d", "--name", name, *args, image, *command)
        return name

    def inspect(self, name: str) -> dict[str, object]:
        (record,) = json.loads(self.run("container", "inspect", name))
        assert isinstance(record, dict)
        return record

    def cleanup(self) -> None:
        for name in self._names:
            self.run("rm", "--force", "--time", "0", name, check=False)
