"""Fixtures of the checkpoint tests: the job's TLS material and a factory of node services
(``checkpoint_harness.Node``) on one run id, cleaned up after the test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.checkpoint_harness import Node


@pytest.fixture
def tls(etcd_tls_server: object) -> dict[str, Path]:
    material = etcd_tls_server.tls  # type: ignore[attr-defined]
    return {"ca": material.ca, "cert": material.client_cert, "key": material.client_key}


@pytest.fixture
def nodes(
    tmp_path: Path, etcd_tls_server: object, tls: dict[str, Path]
) -> Iterator[Callable[..., Node]]:
    run_id = f"ckpt-{uuid.uuid4().hex[:8]}"
    started: list[Node] = []

    def start(name: str, **kwargs: object) -> Node:
        kwargs.setdefault("tls", tls)
        node = Node(
            tmp_path,
            name,
            etcd=etcd_tls_server.endpoint,  # type: ignore[attr-defined]
            run_id=run_id,
            **kwargs,  # type: ignore[arg-type]
        )
        started.append(node)
        return node

    yield start
    for node in started:
        node.cleanup()
