"""What examples/train.py's log says about a run: its loss per step, its world sizes, the restores
between them, and whether every step consumed exactly the samples the sampler's position says.

train.py's first rank on every node prints (its docstring has the contract)::

    data samples=L seed=S batch=B context=T vocab=V params=P
    train step=N loss=X world_size=W epoch=E consumed=C samples=D

``D`` is the CRC-32 of the step's sample indices over all ranks, sorted and joined by commas.
A step that continued from position ``(E, c)`` consumed ``epoch_order(L, S, E)[c:C]`` with
``C - c == B * W``; the first step of an epoch continues from ``(E - 1, c)`` only when fewer
than ``B * W`` samples were left (the tail that ``drop_last`` skips). So when every step checks
out, the steps after a restore at step ``s`` consume each of the epoch's remaining samples
(from step ``s``'s position on) exactly once, in any world size.
"""

from __future__ import annotations

import itertools
import re
import zlib
from dataclasses import dataclass

from elasticjob_agent.checkpoint.sampler import epoch_order

DATA = re.compile(r"data samples=(\d+) seed=(\d+) batch=(\d+)")
TRAIN = re.compile(
    r"train step=(\d+) loss=(\S+) world_size=(\d+) epoch=(\d+) consumed=(\d+) "
    r"samples=([0-9a-f]{8})"
)


@dataclass(frozen=True)
class Data:
    """The run's dataset: its length, the sampler's seed, the batch per rank."""

    samples: int
    seed: int
    batch: int


@dataclass(frozen=True)
class Step:
    """One ``train`` line: the step's mean loss and the sampler's position after it."""

    step: int
    loss: float
    world_size: int
    epoch: int
    consumed: int
    samples: str


@dataclass(frozen=True)
class Change:
    """Where one run of the group ended and the next began (a restart, maybe a resize)."""

    before: tuple[Step, ...]
    after: tuple[Step, ...]

    @property
    def restored_step(self) -> int:
        """The step the new run resumed from (its first step is the one after)."""
        return self.after[0].step - 1

    @property
    def last_loss_before(self) -> float:
        return self.before[-1].loss

    @property
    def first_loss_after(self) -> float:
        return self.after[0].loss


def data_of(log: str) -> Data:
    """The first ``data`` line of ``log``; ``ValueError`` when there is none."""
    match = DATA.search(log)
    if match is None:
        raise ValueError("no 'data samples=...' line in the log")
    return Data(*(int(g) for g in match.groups()))


def steps_of(log: str) -> list[Step]:
    """Every ``train`` line of ``log``, in the log's order."""
    return [
        Step(int(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6])
        for m in TRAIN.finditer(log)
    ]


def runs_of(steps: list[Step]) -> list[tuple[Step, ...]]:
    """``steps`` cut into runs of the group: a new run starts where the world size changes or
    the step does not follow the one before (a restart resumed from an older step)."""
    out: list[list[Step]] = []
    for s in steps:
        if out and out[-1][-1].world_size == s.world_size and out[-1][-1].step + 1 == s.step:
            out[-1].append(s)
        else:
            out.append([s])
    return [tuple(r) for r in out]


def changes_of(runs: list[tuple[Step, ...]]) -> list[Change]:
    """Each pair of consecutive runs."""
    return [Change(a, b) for a, b in itertools.pairwise(runs)]


def digest(indices: list[int]) -> str:
    """train.py's ``samples=``: CRC-32 of the sorted indices joined by commas."""
    return f"{zlib.crc32(','.join(str(i) for i in sorted(indices)).encode('ascii')):08x}"


def sample_problems(data: Data, runs: list[tuple[Step, ...]]) -> list[str]:
    """Every step whose samples are not the next ones of the epoch's order after the position
    it continued from: the step before it in its run, or, for a run's first step, the same
    step of the newest earlier run that had it (the saved position the run restored; step 0 is
    the start of epoch 0). Empty when every sample was consumed exactly as the sampler says."""
    problems: list[str] = []
    seen: dict[int, Step] = {}
    for run in runs:
        first = run[0]
        previous = seen.get(first.step - 1)
        if previous is None and first.step - 1 != 0:
            problems.append(
                f"step {first.step}: the position of step {first.step - 1} is not in the log"
            )
            continue
        position = (0, 0) if previous is None else (previous.epoch, previous.consumed)
        for s in run:
            problem = _step_problem(data, position, s)
            if problem:
                problems.append(problem)
            position = (s.epoch, s.consumed)
        seen.update({s.step: s for s in run})
    return problems


def _step_problem(data: Data, position: tuple[int, int], s: Step) -> str | None:
    epoch, consumed = position
    per_step = data.batch * s.world_size
    if s.epoch == epoch + 1:
        if data.samples - consumed >= per_step:
            return (
                f"step {s.step}: a new epoch {s.epoch} with {data.samples - consumed} samples of "
                f"epoch {epoch} left (at least one batch on every rank)"
            )
        epoch, consumed = s.epoch, 0
    if s.epoch != epoch or s.consumed - consumed != per_step:
        return (
            f"step {s.step} (world size {s.world_size}): at epoch {s.epoch} position "
            f"{s.consumed}, after epoch {epoch} position {consumed}: expected position "
            f"{consumed + per_step} of epoch {epoch}"
        )
    expected = digest(epoch_order(data.samples, data.seed, epoch)[consumed : s.consumed])
    if s.samples != expected:
        return (
            f"step {s.step}: its samples (crc {s.samples}) are not epoch {epoch}'s "
            f"[{consumed}:{s.consumed}] (crc {expected})"
        )
    return None
