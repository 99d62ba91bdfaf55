"""A worker that trains one collective with its group, then: rank 0 exits 0 at once, the other
ranks stay alive until the file ``argv[1]`` exists, then exit 0 (a rank slow to exit)."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
rank = dist.get_rank()
print(f"done rank={rank} sum={t.item():.0f}", flush=True)
dist.destroy_process_group()
go = Path(sys.argv[1])
deadline = time.monotonic() + 300
while rank != 0 and not go.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print(f"exiting rank={rank} restart_count={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
