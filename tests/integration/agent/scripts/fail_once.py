"""On its first attempt rank 1 fails (``raise``: an exception under torch's ``@record``;
``kill``: SIGKILL to itself) while rank 0 waits in an all-reduce; the next attempt idles."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def explode(step: int) -> None:
    raise ValueError(f"loss is nan at step {step}")


@record
def main() -> None:
    dist.init_process_group("gloo")
    first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
    if first and os.environ["RANK"] == "1":
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        explode(7)
    if first:
        dist.all_reduce(torch.ones(1))
    print(f"attempt running rank={os.environ['RANK']}", flush=True)
    time.sleep(600)  # the test reads the report, then kills the agent


if __name__ == "__main__":
    main()
