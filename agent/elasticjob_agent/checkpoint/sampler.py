"""A data sampler whose position survives an elastic resize exactly (pure: no torch, no I/O).

Why not ``DistributedSampler``: its position is per rank (each rank walks its own slice of the
epoch), so after a resize from W to W' ranks there is no way to say which samples the job has
seen. Here the position is one global number:

- the epoch's order is a permutation of ``range(length)`` fixed by ``(seed, epoch)``;
- ``consumed`` samples of it (a prefix) are done, whatever the world size was;
- from ``consumed`` on, rank ``r`` of ``W`` takes every ``W``-th sample: ``order[consumed + r]``,
  ``order[consumed + r + W]``, ... So after every rank took ``n`` samples, the job consumed
  exactly the prefix ``order[:consumed + n * W]`` (capped at the epoch's length), and the next
  world, of any size, continues from there.

The training loop tells the sampler what it consumed (``advance(n)`` after a step that took
``n`` samples on each rank), and saves ``state_dict()`` with the checkpoint, as an entry that
is the same on every rank. After a restore into any world size, ``load_state_dict`` puts the
sampler at the saved position: over all ranks, the samples consumed after the restored step
are each of the epoch's remaining samples exactly once.

At the end of an epoch the remaining samples may not divide by ``W``: ranks then get one sample
more or fewer (no sample is repeated to pad, as ``DistributedSampler`` does), so a rank may
have one batch fewer; ``drop_last=True`` drops that tail of fewer than ``W`` samples instead.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ElasticSampler", "SamplerState", "epoch_order", "rank_indices"]

STATE_VERSION = 1


@dataclass(frozen=True)
class SamplerState:
    """Where the job is in its data: the same on every rank (a replicated checkpoint entry)."""

    length: int
    seed: int
    epoch: int
    consumed: int

    def __post_init__(self) -> None:
        for name in ("length", "seed", "epoch", "consumed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"sampler state: {name} must be an integer >= 0, got {value!r}")
        if self.consumed > self.length:
            raise ValueError(
                f"sampler state: consumed {self.consumed} is more than the epoch's "
                f"{self.length} samples"
            )

    def as_dict(self) -> dict[str, int]:
        return {
            "version": STATE_VERSION,
            "length": self.length,
            "seed": self.seed,
            "epoch": self.epoch,
            "consumed": self.consumed,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> SamplerState:
        """The inverse of ``as_dict``; ``ValueError`` naming what is wrong."""
        if not isinstance(value, Mapping) or value.get("version") != STATE_VERSION:
            raise ValueError(f"not a sampler state of version {STATE_VERSION}: {value!r}")
        fields: list[Any] = [value.get(k) for k in ("length", "seed", "epoch", "consumed")]
        return cls(*fields)


def epoch_order(length: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The epoch's order of ``range(length)``: the same on every rank, in every world size."""
    order = list(range(length))
    if shuffle:
        random.Random(f"{seed}/{epoch}").shuffle(order)
    return order


def rank_indices(
    order: list[int], consumed: int, rank: int, world_size: int, drop_last: bool = False
) -> list[int]:
    """What rank ``rank`` of ``world_size`` takes from ``order`` after ``consumed`` samples."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size}")
    end = len(order)
    if drop_last:
        end -= (end - consumed) % world_size
    return order[consumed + rank : end : world_size]


class ElasticSampler:
    """A sampler for a ``DataLoader`` (``sampler=``) whose state is a global position.

    ``rank`` and ``world_size`` default to ``RANK`` and ``WORLD_SIZE`` (torchrun and
    elasticjob-agent set them). Use::

        sampler = ElasticSampler(len(dataset), seed=0)
        loader = DataLoader(dataset, batch_size=b, sampler=sampler)
        if restored: sampler.load_state_dict(state["sampler"])
        for epoch in range(sampler.epoch, epochs):
            sampler.set_epoch(epoch)     # keeps the position within the restored epoch
            for batch in loader:
                train(batch)
                sampler.advance(len(batch))   # samples this rank took in this step
                save(..., {"sampler": sampler.state_dict(), ...})

    ``advance(n)`` assumes every rank took ``n`` samples in the step (a synchronous data
    parallel step): the global position moves by ``n * world_size``, capped at the epoch's end.
    """

    def __init__(
        self,
        length: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.world_size = (
            int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
        )
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in a world of {self.world_size}")
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._state = SamplerState(length, seed, 0, 0)

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def consumed(self) -> int:
        """Samples of this epoch consumed by the whole job (all ranks, all world sizes)."""
        return self._state.consumed

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning; the current epoch (a restored one) keeps its
        position, so the usual ``for epoch in ...: set_epoch(epoch)`` loop resumes exactly."""
        if epoch != self._state.epoch:
            self._state = SamplerState(self._state.length, self._state.seed, epoch, 0)

    def advance(self, per_rank: int) -> None:
        """Every rank took ``per_rank`` more samples (one step)."""
        if per_rank < 0:
            raise ValueError(f"advance by a negative count {per_rank}")
        s = self._state
        consumed = min(s.length, s.consumed + per_rank * self.world_size)
        self._state = SamplerState(s.length, s.seed, s.epoch, consumed)

    def remaining(self) -> list[int]:
        """This rank's samples from the current position to the epoch's end."""
        s = self._state
        order = epoch_order(s.length, s.seed, s.epoch, self.shuffle)
        return rank_indices(order, s.consumed, self.rank, self.world_size, self.drop_last)

    def __iter__(self) -> Iterator[int]:
        # Computed at once: ``advance`` during the iteration must not move what it yields.
        return iter(self.remaining())

    def __len__(self) -> int:
        s = self._state
        end = s.length
        if self.drop_last:
            end -= (end - s.consumed) % self.world_size
        return max(0, (end - s.consumed - self.rank + self.world_size - 1) // self.world_size)

    def state_dict(self) -> dict[str, int]:
        """``{"version", "length", "seed", "epoch", "consumed"}``: the same on every rank."""
        return self._state.as_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved position (saved by any world size). ``ValueError`` when the
        state is not a sampler state or was saved for a dataset of another length."""
        loaded = SamplerState.from_dict(state)
        if loaded.length != self._state.length:
            raise ValueError(
                f"the sampler state was saved for {loaded.length} samples, this dataset has "
                f"{self._state.length}"
            )
        self._state = loaded
