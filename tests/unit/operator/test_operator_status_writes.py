"""Status writes guarded by resourceVersion: a conflict re-reads the job and never lowers a count
(JobLoop against an in-memory stand-in of our own ``Kube`` boundary)."""

from __future__ import annotations

import copy
from typing import Any, cast

import aiohttp
from elasticjob_operator.core.names import JobRef
from elasticjob_operator.core.status import EtcdState, JobStatus
from elasticjob_operator.kube import ConflictKubeError, Kube
from elasticjob_operator.reconciler import JobLoop, LoopSettings

from tests.support.operator_model import JOB


class StoredJob:
    """The job as the API server holds it: a resourceVersion that every write bumps."""

    def __init__(self, status: JobStatus) -> None:
        self.body: dict[str, Any] = {
            "metadata": {"uid": JOB.uid, "resourceVersion": "5"},
            "status": status.to_json(),
        }
        self.conflicts = 0

    async def patch_job_status(
        self, job: JobRef, status: dict[str, Any], resource_version: str | None
    ) -> str:
        current = self.body["metadata"]["resourceVersion"]
        if resource_version != current:
            self.conflicts += 1
            raise ConflictKubeError(f"409: expected {resource_version}, have {current}")
        return self.write(status)

    def write(self, status: dict[str, Any]) -> str:
        self.body["status"] = copy.deepcopy(status)
        version = str(int(self.body["metadata"]["resourceVersion"]) + 1)
        self.body["metadata"]["resourceVersion"] = version
        return version

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.body)


async def test_a_conflicting_write_is_merged_so_no_count_goes_down() -> None:
    stored = StoredJob(JobStatus(restarts={"failure": 1}, attempts={0: 1}))
    loop = JobLoop(cast(Kube, stored), cast(aiohttp.ClientSession, None), JOB, LoopSettings())
    loop.adopt(stored.body)
    # Another writer (a lost leader's last write, a kopf patch) moves the job on meanwhile.
    stored.write(
        JobStatus(
            restarts={"failure": 3, "membership": 1},
            attempts={0: 2},
            etcd=EtcdState(generation=1, ready_generation=1, seeded_generation=1),
        ).to_json()
    )
    ours = JobStatus(restarts={"failure": 2, "preemption": 1}, attempts={0: 1, 1: 0})
    written = await loop.status_writer.write(ours)
    assert stored.conflicts == 1
    assert written.restarts == {"failure": 3, "membership": 1, "preemption": 1}
    assert written.attempts == {0: 2, 1: 0}
    assert written.etcd.generation == 1 and written.etcd.seeded_generation == 1
    assert stored.body["status"] == written.to_json()
    # The next write carries the version it got back: no conflict.
    await loop.status_writer.write(written.evolve(round=4))
    assert stored.conflicts == 1 and stored.body["status"]["round"] == 4
