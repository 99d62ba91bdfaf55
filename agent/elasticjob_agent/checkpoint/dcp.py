"""``torch.distributed.checkpoint`` (DCP) storage on the agents' memory: the one-line change.

```python
dcp.save(state_dict, storage_writer=ElasticJobWriter(step))   # was checkpoint_id=path
reader = ElasticJobReader()
dcp.load(state_dict, storage_reader=reader)                    # reader.step: the step loaded
```

The files are DCP's own (``FileSystemWriter``'s format: ``__<rank>_<n>.distcp`` per rank and
the coordinator's ``.metadata``), written into a reservation in the node's shared memory
instead of a directory on disk; each rank's files are its shard of the step (the coordinator's
shard carries ``.metadata``). So DCP's planners, resharding and deduplication work unchanged.
On load the ranks agree on the newest step complete on every rank (as the plain API does) when
DCP reads the metadata, and each rank fetches the shards its plan reads (its own, and those of
the ranks that wrote deduplicated items), verified, from memory, a peer or disk.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import time
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import (
    FileSystemReader,
    FileSystemWriter,
    _StoragePrefix,
)
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from elasticjob_agent.checkpoint.api import Backend, agree_and_fetch, open_backend, rank_and_world
from elasticjob_agent.checkpoint.manifest import ShardId
from elasticjob_agent.checkpoint.store import CheckpointError, Reservation
from elasticjob_agent.protocol.checkpoint import RestoreReport

METADATA = ".metadata"
_SLACK = 1 << 20
"""Reserved beyond the plan's tensor bytes: DCP's per-item framing, byte items, metadata."""
_RANK_FILE = re.compile(r"^__(\d+)_\d+\.distcp$")

_backend: Backend | None = None


def default_backend() -> Backend:
    """One backend per process, shared by every writer and reader that is given none."""
    global _backend  # noqa: PLW0603 - one connection to the agent per process
    if _backend is None:
        _backend = open_backend()
    return _backend


def _plan_bytes(plan: SavePlan) -> int:
    total = _SLACK
    for item in plan.items:
        data = item.tensor_data
        if data is None:
            total += 64 << 10
            continue
        n = data.properties.dtype.itemsize
        for dim in data.size:
            n *= dim
        total += n + 4096  # torch.save framing of each tensor
    return total


class ElasticJobWriter(FileSystemWriter):
    """Writes this rank's DCP files for ``step`` into its node's checkpoint memory."""

    def __init__(self, step: int, backend: Backend | None = None) -> None:
        super().__init__("/nonexistent-elasticjob-checkpoint", sync_files=False, overwrite=True)
        self.step = step
        self.backend = backend or default_backend()
        self._reservation: Reservation | None = None
        self._coordinator = False

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self._coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        # No directory to create or check: the reservation is made once the plan is final.
        if self.rank is not None and not self.use_collectives:
            plan = dataclasses.replace(plan, storage_data=_StoragePrefix(f"__{self.rank}_"))
        return plan

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        rank, world = rank_and_world()
        self._reservation = self.backend.reserve(ShardId(self.step, rank, world), _plan_bytes(plan))
        self.path = self._reservation.directory
        try:
            result = super().write_data(plan, planner)
            result.wait()
        except BaseException:
            self._abort()
            raise
        if not self._coordinator:
            self._commit()
        return result

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        try:
            super().finish(metadata, results)
        except BaseException:
            self._abort()
            raise
        self._commit()

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=f"elasticjob-step-{self.step}", save_id=self.save_id)

    def _commit(self) -> None:
        reservation, self._reservation = self._reservation, None
        if reservation is not None:
            self.backend.commit(reservation.token)

    def _abort(self) -> None:
        reservation, self._reservation = self._reservation, None
        if reservation is not None:
            self.backend.abort(reservation.token)


class ElasticJobReader(FileSystemReader):
    """Reads the newest DCP step complete on every rank; ``step`` says which one it was. Once
    this rank's shards are read, the node's agent is told what was restored (as the plain
    API's ``restore`` does): its health report carries it to ``status.checkpoint.lastRestore``,
    and the node drops shards newer than the step (an abandoned timeline)."""

    def __init__(self, backend: Backend | None = None) -> None:
        super().__init__("/nonexistent-elasticjob-checkpoint")
        self.backend = backend or default_backend()
        self.step: int | None = None
        self.world_size: int | None = None
        """The world size that saved ``step``."""
        self.sources: dict[int, str] = {}
        """Where each writer rank's shard came from (``memory``, ``peer <node>``, ``disk``)."""
        self.report: RestoreReport | None = None
        self._started = time.monotonic()

    def read_metadata(self, *args: Any) -> Metadata:  # no **kwargs: no per-rank fallback
        self._started = time.monotonic()
        rank, _ = rank_and_world()
        shards = self.backend.candidates()
        worlds: dict[int, int] = {}
        for s in shards:
            worlds[s.step] = max(worlds.get(s.step, 0), s.world_size)

        def metadata_shard(step: int) -> ShardId:
            return ShardId(step, 0, worlds[step])

        found = agree_and_fetch(self.backend, rank, None, metadata_shard)
        if found is None:
            raise CheckpointError("no checkpoint step is complete on every rank")
        self.step, source = found
        self.world_size = worlds[self.step]
        self.sources[0] = source.kind
        with open(source.directory / METADATA, "rb") as f:
            metadata: Metadata = pickle.load(f)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        if self.step is None or self.world_size is None:
            raise CheckpointError("read_data before read_metadata")
        by_rank: dict[int, list[Any]] = {}
        for item in plan.items:
            name = self.storage_data[item.storage_index].relative_path
            match = _RANK_FILE.match(name)
            if match is None:
                raise CheckpointError(f"unexpected DCP file name {name!r} in step {self.step}")
            by_rank.setdefault(int(match.group(1)), []).append(item)
        for writer_rank, items in sorted(by_rank.items()):
            source = self.backend.fetch(ShardId(self.step, writer_rank, self.world_size))
            self.sources[writer_rank] = source.kind
            self.path = Path(source.directory)
            super().read_data(dataclasses.replace(plan, items=items), planner).wait()
        self.report = RestoreReport(
            self.step,
            self.world_size,
            rank_and_world()[1],
            restore_source(self.sources),
            time.monotonic() - self._started,
        )
        self.backend.restored(self.step, self.report)
        done: Future[None] = Future()
        done.set_result(None)
        return done


def restore_source(sources: dict[int, str]) -> str:
    """One source for the restore report: the first shard (by writer rank) that did not come
    from this node's memory, since that is what the restore had to fetch; else ``memory``."""
    fetched = [kind for _, kind in sorted(sources.items()) if kind != "memory"]
    return fetched[0] if fetched else "memory"
