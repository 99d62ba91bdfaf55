"""The main example resized while it trains, on real nodes: a new user's path.

``kubectl apply`` of ``examples/elasticjob.yaml`` as written but for a larger ``--steps`` (2
nodes x 2 ranks of the character transformer in ``examples/train.py``, checkpoints held by the
agents, no shared storage); once ``status.checkpoint.lastSavedStep`` >= 10, ``kubectl scale
--replicas=3``: ``status.checkpoint.lastRestore`` shows the step saved by 4 ranks restored into
6; then ``--replicas=1`` in one step, as a user might type it (saved by 6, restored into 2):
``worker-1`` and ``worker-2`` leave together, and the example's ``checkpoint.replicas: 2`` keeps
a copy of each node's shards on both other nodes, so the survivor ``worker-0`` holds them all.
At each change the restored step is no older than the last saved step read before it and within
one checkpoint interval of the last step trained, the first loss after is within 20% of the
last loss before, and every step consumed exactly the next samples of the epoch from the
restored position (the sampler's accounting, checked on the log of ``worker-0``, whose first
rank logs every step of the job). The job ends ``Succeeded``.

The DCP example (``examples/elasticjob-dcp.yaml``: the same model sharded with FSDP2, saved with
``torch.distributed.checkpoint`` into the agents' memory) is scaled from 2 nodes to 1 the same
way: the 2 ranks left load the slices 4 ranks saved, those of the removed node from the copies
the surviving node's agent holds, and train on with the loss and the data position they had.

The session cluster has 2 real nodes (``ELASTICJOB_E2E_REAL_NODES``) of the whole machine's 2
CPUs each: 3 workers of the example (500m each) fit, so the third worker shares a real node
with another one, as the scheduler places them (the example asks for no spread). The checkpoint
replicas go to another agent, not another machine; what a lost machine costs is the node-loss
tests' subject (test_realnodes_node_loss.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from elasticjob_localcluster import LocalCluster

from tests.support.jobs import phase
from tests.support.realnodes import Release, apply_job, diagnostics, wait_job
from tests.support.resize import (
    example,
    last_restore,
    last_saved,
    main_example,
    trainer_flag,
    world_size,
)
from tests.support.training_log import (
    Change,
    changes_of,
    data_of,
    runs_of,
    sample_problems,
    steps_of,
)

pytestmark = pytest.mark.e2e

NAME = "train-demo"
STEPS = 2000
"""Long enough to train on through the two changes (a few steps a second on 2 shared cores)."""
DCP_NAME = "train-dcp"
DCP_STEPS = 500
DCP_RESUMED = re.compile(r"resumed from step=(\d+) rank=\d+ world_size=2 saved_world_size=4")


def _until(
    cluster: LocalCluster,
    ns: str,
    what: str,
    predicate: Callable[[dict[str, Any]], bool],
    name: str = NAME,
) -> dict[str, Any]:
    """``wait_job`` that stops at once, with the evidence, when the job failed or finished."""

    def check(job: dict[str, Any]) -> bool:
        if predicate(job):
            return True
        if phase(job) in ("Failed", "Succeeded"):
            pytest.fail(
                f"{name} is {phase(job)} while waiting for {what}: "
                f"{json.dumps(job.get('status'), indent=1)}\n{diagnostics(cluster, ns, name)}",
                pytrace=False,
            )
        return False

    return wait_job(cluster, ns, name, what, check, timeout=420)


def _saved_by(world: int, since: float) -> Callable[[dict[str, Any]], bool]:
    """The job runs ``world`` ranks and holds a step they saved (not only one they restored).
    ``lastSavedStep`` moves with the progress sample only (every 30 s at most): a sample from
    before ``since`` (when the restore into this world was seen) may still show a step of the
    world before."""

    def saved(job: dict[str, Any]) -> bool:
        sampled = float(((job.get("status") or {}).get("progress") or {}).get("sampledAt") or 0)
        return (
            world_size(job) == world
            and sampled > since
            and last_saved(job) >= 10
            and last_saved(job) > int(last_restore(job).get("step", -1))
        )

    return saved


def _resize(
    cluster: LocalCluster, ns: str, *, replicas: int, saved_world: int, new_world: int, since: float
) -> tuple[dict[str, Any], float]:
    """Once the current world (``saved_world`` ranks, formed before ``since``) holds a
    checkpoint of its own, scale to ``replicas`` and wait for the restore into ``new_world``
    ranks; its ``lastRestore`` and when it was seen."""
    before = last_restore(_until(cluster, ns, "a running job", lambda j: True))
    job = _until(
        cluster, ns, f"a checkpoint saved by {saved_world} ranks", _saved_by(saved_world, since)
    )
    saved = last_saved(job)
    cluster.kubectl("scale", f"ej/{NAME}", "-n", ns, f"--replicas={replicas}")
    job = _until(
        cluster,
        ns,
        f"a restore into {new_world} ranks",
        lambda j: (
            last_restore(j).get("worldSize") == new_world
            and last_restore(j).get("round") != before.get("round")
        ),
    )
    seen = time.time()
    restore = last_restore(job)
    evidence = f"read lastSavedStep {saved} before the scale; status: {job.get('status')}"
    assert restore["savedWorldSize"] == saved_world, evidence
    assert restore["step"] >= saved, evidence
    assert restore["source"] in ("memory", "peer", "disk"), evidence
    return restore, seen


def _change(changes: list[Change], old: int, new: int, step: int, log: str) -> Change:
    found = [
        c
        for c in changes
        if c.before[-1].world_size == old
        and c.after[0].world_size == new
        and c.restored_step == step
    ]
    summary = [
        (c.before[-1].step, c.before[-1].world_size, c.after[0].step, c.after[0].world_size)
        for c in changes
    ]
    assert len(found) == 1, (
        f"no single change from {old} to {new} ranks restoring step {step} in worker-0's log: "
        f"(last step, world) -> (first step, world): {summary}\n{log[-3000:]}"
    )
    return found[0]


def test_the_main_example_keeps_its_training_scaled_from_2_to_3_nodes_and_straight_to_1(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = main_example(STEPS)
    every = int(trainer_flag(manifest, "--checkpoint-every"))
    apply_job(cluster, work, manifest)

    up, seen = _resize(cluster, work, replicas=3, saved_world=4, new_world=6, since=0)
    alone, _ = _resize(cluster, work, replicas=1, saved_world=6, new_world=2, since=seen)

    final = wait_job(
        cluster, work, NAME, "Succeeded", lambda j: phase(j) in ("Succeeded", "Failed"), timeout=900
    )
    assert phase(final) == "Succeeded", (final.get("status"), diagnostics(cluster, work, NAME))
    print(f"restarts: {final['status']['restarts']}")

    # worker-0 took part in every world: its first rank logged every step of the job.
    log = cluster.pod_logs(work, f"{NAME}-worker-0-0")
    data = data_of(log)
    runs = runs_of(steps_of(log))
    assert runs and runs[-1][-1].step == STEPS, log[-3000:]
    changes = changes_of(runs)
    for restore, (old, new) in ((up, (4, 6)), (alone, (6, 2))):
        change = _change(changes, old, new, restore["step"], log)
        last = change.before[-1]
        first = change.after[0]
        print(
            f"{old} -> {new} ranks: step {restore['step']} restored from {restore['source']} "
            f"in {restore['seconds']}s; last step before {last.step} (loss {last.loss}), first "
            f"after {first.step} (loss {first.loss})"
        )
        # Every rank passed the save of the last checkpoint step before the one it trained last.
        assert last.step - change.restored_step <= every, (restore, last)
        assert abs(first.loss - last.loss) <= 0.2 * last.loss, (restore, last, first)
    # Every step, across the two resizes, consumed exactly the epoch's next samples.
    assert sample_problems(data, runs) == [], log[-3000:]


def test_the_dcp_example_reshards_its_checkpoint_when_scaled_down(
    cluster: LocalCluster, release: Release, work: str
) -> None:
    manifest = example("elasticjob-dcp.yaml", DCP_STEPS)
    every = int(trainer_flag(manifest, "--checkpoint-every"))
    apply_job(cluster, work, manifest)
    job = _until(cluster, work, "a checkpoint saved by 4 ranks", _saved_by(4, 0), name=DCP_NAME)
    saved = last_saved(job)
    cluster.kubectl("scale", f"ej/{DCP_NAME}", "-n", work, "--replicas=1")
    pod = f"{DCP_NAME}-worker-0-0"
    cluster.wait_for(
        f"{pod}'s ranks resuming in a world of 2 from a step 4 ranks saved",
        lambda: DCP_RESUMED.search(cluster.pod_logs(work, pod)) is not None,
        timeout=420,
        interval=2,
    )
    # ElasticJobReader reports the DCP restore like a plain one.
    restore = last_restore(
        _until(
            cluster,
            work,
            "status.checkpoint.lastRestore of the restore into 2 ranks",
            lambda j: last_restore(j).get("worldSize") == 2,
            name=DCP_NAME,
        )
    )
    final = wait_job(
        cluster,
        work,
        DCP_NAME,
        "Succeeded",
        lambda j: phase(j) in ("Succeeded", "Failed"),
        timeout=900,
    )
    assert phase(final) == "Succeeded", (final.get("status"), diagnostics(cluster, work, DCP_NAME))
    print(f"restarts: {final['status']['restarts']}")

    log = cluster.pod_logs(work, pod)
    match = DCP_RESUMED.search(log)
    assert match is not None, log[-3000:]
    step = int(match.group(1))
    assert step >= saved, (step, saved)
    assert (restore["step"], restore["savedWorldSize"]) == (step, 4), (restore, step)
    assert restore["source"] in ("memory", "peer", "disk"), restore
    runs = runs_of(steps_of(log))
    assert runs and runs[-1][-1].step == DCP_STEPS, log[-3000:]
    change = _change(changes_of(runs), 4, 2, step, log)
    last, first = change.before[-1], change.after[0]
    print(
        f"DCP 4 -> 2 ranks: step {step} restored (lastSavedStep {saved} before the scale); last "
        f"step before {last.step} (loss {last.loss}), first after {first.step} (loss {first.loss})"
    )
    assert last.step - step <= every, (step, last)
    assert abs(first.loss - last.loss) <= 0.2 * last.loss, (step, last, first)
    assert sample_problems(data_of(log), runs) == [], log[-3000:]
