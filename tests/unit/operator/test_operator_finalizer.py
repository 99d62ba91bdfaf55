"""No finalizer on jobs: deleting a job, or the CRD, never waits for the operator.

The garbage collector removes what a job owns (every object the operator creates carries an
ownerReference to it), so the operator needs no say in a job's deletion; its loop ends on the
job's DELETED event instead.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest
from elasticjob_operator import handlers
from elasticjob_operator.core import names
from elasticjob_operator.core.manifests import (
    build_etcd_pod,
    build_etcd_service,
    build_etcd_tls_secret,
    build_worker_pod,
    build_workers_service,
)
from elasticjob_operator.core.netpol import Peer, build_network_policies

from tests.support.operator_model import JOB, job_spec


def test_no_handler_puts_a_finalizer_on_jobs() -> None:
    registry = kopf.get_default_registry()
    spawning = registry._spawning.get_all_handlers()
    assert any(h.fn is handlers.reconcile_job for h in spawning)
    assert not [h.id for h in spawning if h.requires_finalizer]
    assert not [h.id for h in registry._changing.get_all_handlers() if h.requires_finalizer]


def _children() -> list[dict[str, Any]]:
    spec = job_spec()
    operator = Peer.in_namespace("ops", {"app": "op"})
    return [
        build_worker_pod(JOB, spec, 0, 0),
        build_etcd_pod(JOB, spec, 1),
        build_etcd_service(JOB),
        build_workers_service(JOB),
        build_etcd_tls_secret(JOB, {names.TLS_CA: "ca"}),
        *build_network_policies(JOB, operator, None, managed_etcd=True),
    ]


@pytest.mark.parametrize("child", _children(), ids=lambda c: f"{c['kind']}")
def test_every_object_of_a_job_is_collected_with_it(child: dict[str, Any]) -> None:
    # What the garbage collector needs to delete it with the job (and the e2e test's selector).
    (owner,) = child["metadata"]["ownerReferences"]
    assert owner["uid"] == JOB.uid and owner["kind"] == names.KIND
    assert child["metadata"]["labels"][names.LABEL_JOB] == JOB.name


# kopf types the decorated handler as its own callback protocol (every kwarg it passes).
_job_changed = cast(Any, handlers.job_changed)


async def test_a_deleted_job_ends_its_loop() -> None:
    key = (JOB.namespace, JOB.name)
    wake = handlers._wakeups.setdefault(key, asyncio.Event())
    try:
        await _job_changed(type="DELETED", namespace=JOB.namespace, name=JOB.name, uid=JOB.uid)
        assert JOB.uid in handlers._gone and wake.is_set()
    finally:
        handlers._wakeups.pop(key, None)
        handlers._gone.discard(JOB.uid)


async def test_a_deletion_without_a_loop_leaves_nothing_behind() -> None:
    await _job_changed(type="DELETED", namespace="elsewhere", name="x", uid="u-1")
    assert "u-1" not in handlers._gone
