"""The hang benchmark's training script: all-reduce steps; one rank hangs in the first attempt.

Every step is an all-reduce on gloo, then ``report_step`` (a no-op under torchrun). Rank
``--hang-rank`` prints ``hanging`` at step ``--hang-at`` and sleeps for good inside the loop, so
every peer blocks in its next all-reduce; it does so once per run, recorded by creating
``--hang-marker`` (not by ``TORCHELASTIC_RESTART_COUNT``: torchrun keeps that count per agent and
does not raise it on the node whose group restarted for a membership change, so its rank would
hang again). Each rank prints ``running rank=R`` once its first all-reduce succeeded.
``--collective-timeout S`` passes ``timeout=timedelta(seconds=S)`` to ``init_process_group``
(the collective timeout "set the same way" for torchrun); without it torch's default applies.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

try:
    from elasticjob_agent.progress import report_step
except ImportError:  # under a launcher without the agent installed

    def report_step(step: int) -> None:
        del step


def _first_hang(marker: str) -> bool:
    """True the first time in a run (the marker is created atomically)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-marker", required=True, help="a path that does not exist yet")
    parser.add_argument("--hang-rank", type=int, default=1)
    parser.add_argument("--hang-at", type=int, default=20)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--collective-timeout", type=float, default=None)
    args = parser.parse_args()
    if args.collective_timeout is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=args.collective_timeout))
    rank = int(os.environ["RANK"])
    step = 0
    while True:
        step += 1
        if rank == args.hang_rank and step == args.hang_at and _first_hang(args.hang_marker):
            print(f"hanging rank={rank}", flush=True)
            time.sleep(10**6)
        total = torch.ones(1)
        dist.all_reduce(total)
        if step == 1:
            print(f"running rank={rank}", flush=True)
        report_step(step)
        time.sleep(args.step_sleep)


if __name__ == "__main__":
    main()
