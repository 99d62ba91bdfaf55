"""The hang benchmark's training script: all-reduce steps; one rank hangs in the first attempt.

Every step is an all-reduce on gloo, then ``report_step`` (a no-op under torchrun). In the first
attempt (``TORCHELASTIC_RESTART_COUNT=0``) rank ``--hang-rank`` prints ``hanging`` at step
``--hang-at`` and sleeps for good inside the loop, so every peer blocks in its next all-reduce.
Each rank prints ``running rank=R restart=N`` once its first all-reduce of an attempt succeeded.
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


def main() -> None:
    parser = argparse.ArgumentParser()
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
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    step = 0
    while True:
        step += 1
        if restart == "0" and rank == args.hang_rank and step == args.hang_at:
            print(f"hanging rank={rank}", flush=True)
            time.sleep(10**6)
        total = torch.ones(1)
        dist.all_reduce(total)
        if step == 1:
            print(f"running rank={rank} restart={restart}", flush=True)
        report_step(step)
        time.sleep(args.step_sleep)


if __name__ == "__main__":
    main()
