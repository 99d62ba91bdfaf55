"""What a fault cost a training run, from the training script's progress lines (pure).

``examples/train.py --progress-file F`` makes rank 0 append ``<unix time> start <step>`` when a
group starts training (the step it resumed from) and ``<unix time> step <n>`` when step ``n`` is
done on every rank. ``bench/goodput_bench.py`` reads that file (on a volume the host shares with
every node) and turns it into the rows of its table with the functions here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The JSON keys of one row, in this order (``--json`` writes exactly these).
ROW_KEYS = (
    "candidate",
    "spares",
    "fault",
    "recovery_s",
    "steps_lost",
    "restarts_reported",
    "goodput",
)


@dataclass(frozen=True)
class Progress:
    time: float
    event: str
    """``start`` (a group began at ``step``) or ``step`` (``step`` is done)."""
    step: int


def parse_progress(text: str) -> list[Progress]:
    """The progress lines in file order. A line being written (no newline yet) or malformed is
    skipped: the file is read while the job appends to it."""
    out = []
    for line in text.split("\n")[:-1]:
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ("start", "step"):
            continue
        try:
            when, step = float(parts[0]), int(parts[2])
        except ValueError:
            continue
        if math.isfinite(when) and step >= 0:
            out.append(Progress(when, parts[1], step))
    return out


def last_step(progress: Sequence[Progress], *, until: float = math.inf) -> int | None:
    """The highest step done at or before ``until``, or ``None`` when none is."""
    steps = [p.step for p in progress if p.event == "step" and p.time <= until]
    return max(steps) if steps else None


@dataclass(frozen=True)
class FaultCost:
    """One fault's cost: ``recovery_s`` from the fault to the first step done by the group that
    trains after it (``None``: none within the deadline); ``steps_lost`` done before that group
    started and done again by it; ``groups`` the groups that started training after the
    fault."""

    recovery_s: float | None
    steps_lost: int | None
    groups: int


def fault_cost(progress: Sequence[Progress], fault_at: float, *, until: float) -> FaultCost:
    """The cost of a fault at ``fault_at`` as seen in ``progress`` up to ``until`` (the next
    fault, or the end of the run).

    When a group started after the fault, recovery ends at the first step that group did (a
    step the old group finished in the moment after the fault is not a recovery). When none
    started, the old group trained on and recovery ends at its second step after the fault
    (the first may have been in flight when the fault hit)."""
    window = [p for p in progress if fault_at < p.time <= until]
    starts = [p for p in window if p.event == "start"]
    if starts:
        first = starts[0]
        after = [p for p in window if p.event == "step" and p.time >= first.time]
        # Whatever was done before the new group started (the old group may have trained on
        # for a while after the fault) and is done again.
        done_before = last_step(progress, until=first.time)
        lost = None if done_before is None else max(0, done_before - first.step)
    else:
        # The old group trained on. Its first step after the fault may have been in flight when
        # the fault hit (done, logged a moment later, the group dead): its second one counts.
        after = [p for p in window if p.event == "step"][1:]
        lost = 0
    recovery = after[0].time - fault_at if after else None
    return FaultCost(
        recovery_s=None if recovery is None else round(recovery, 2),
        steps_lost=lost if after else None,
        groups=len(starts),
    )


def goodput(
    progress: Sequence[Progress], *, step_time: float, end: float | None = None
) -> float | None:
    """Useful step time over wall time, from the first group's start to ``end`` (default: the
    last step). Useful: the steps the run's model holds at the end beyond where it started,
    each worth ``step_time`` (a recomputed step counts once)."""
    starts = [p for p in progress if p.event == "start"]
    final = last_step(progress)
    if not starts or final is None:
        return None
    first = starts[0]
    stop = end if end is not None else max(p.time for p in progress if p.event == "step")
    wall = stop - first.time
    if wall <= 0:
        return None
    return round(min(1.0, max(0, final - first.step) * step_time / wall), 4)


def row(  # noqa: PLR0917 (the row's keys, in the --json order)
    candidate: str,
    spares: int,
    fault: str,
    cost: FaultCost | None,
    restarts_reported: int | None,
    run_goodput: float | None,
) -> dict[str, Any]:
    """One ``--json`` row (``cost`` ``None``: the candidate was not measured)."""
    return {
        "candidate": candidate,
        "spares": spares,
        "fault": fault,
        "recovery_s": None if cost is None else cost.recovery_s,
        "steps_lost": None if cost is None else cost.steps_lost,
        "restarts_reported": restarts_reported,
        "goodput": run_goodput,
    }


def _cell(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def table(
    rows: Iterable[Mapping[str, Any]],
    *,
    peer: str,
    groups: Mapping[int, int] | None = None,
    notes: Mapping[int, str] | None = None,
) -> str:
    """The usual table, one line per row, with each row's recovery time as a ratio of the peer's
    (``peer``: the candidate name prefix, e.g. ``pytorchjob``) for the same shape and fault.
    ``groups``/``notes``: per row index, the groups seen starting and a remark."""
    rows = list(rows)
    peer_recovery: dict[tuple[str, str], float | None] = {}
    for r in rows:
        name = str(r["candidate"])
        if name.startswith(peer):
            peer_recovery[(name.partition("/")[2], str(r["fault"]))] = r["recovery_s"]
    header = (
        f"{'candidate':<20} {'spares':>6} {'fault':<16} {'recovery s':>10} {'vs peer':>8} "
        f"{'lost':>5} {'restarts':>8} {'groups':>6} {'goodput':>7}  note"
    )
    lines = [header, "-" * len(header)]
    for index, r in enumerate(rows):
        shape = str(r["candidate"]).partition("/")[2]
        mine, theirs = r["recovery_s"], peer_recovery.get((shape, str(r["fault"])))
        if str(r["candidate"]).startswith(peer) or mine is None:
            ratio = "-"
        elif theirs is None:
            ratio = "<1"  # the peer did not recover within the deadline
        else:
            ratio = f"{mine / theirs:.2f}" if theirs > 0 else "-"
        lines.append(
            f"{r['candidate']:<20} {r['spares']:>6} {r['fault']:<16} "
            f"{_cell(mine, '{:.1f}'):>10} {ratio:>8} {_cell(r['steps_lost']):>5} "
            f"{_cell(r['restarts_reported']):>8} {_cell((groups or {}).get(index)):>6} "
            f"{_cell(r['goodput'], '{:.3f}'):>7}  {(notes or {}).get(index, '')}".rstrip()
        )
    return "\n".join(lines)
