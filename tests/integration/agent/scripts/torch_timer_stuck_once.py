"""A torchrun script using torch's own file-based expiration timers, unchanged.

Configured as torch documents it (``FileTimerClient`` on ``TORCHELASTIC_TIMER_FILE``). On the
first attempt rank 1 hangs inside ``expires(after=2)`` while rank 0 waits for it in a barrier;
later attempts finish.
"""

import os
import time

import torch.distributed as dist
from torch.distributed.elastic.timer.api import configure, expires
from torch.distributed.elastic.timer.file_based_local_timer import FileTimerClient

dist.init_process_group("gloo")
configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
with expires(after=60, scope="warmup"):
    pass  # acquire and release: the agent must forget a released timer
if first and os.environ["RANK"] == "1":
    with expires(after=2, scope="step"):
        print("stuck", flush=True)
        time.sleep(600)
dist.barrier()
print(f"finished rank={os.environ['RANK']}", flush=True)
dist.destroy_process_group()
