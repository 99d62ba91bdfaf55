"""A worker whose first attempt hangs inside an expiration timer; later attempts finish."""

import os
import time

import torch.distributed as dist
from elasticjob_agent.timers import expires

dist.init_process_group("gloo")
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
with expires(after=2, scope="step"):
    if first and os.environ["RANK"] == "1":
        print("stuck", flush=True)
        time.sleep(600)
    dist.barrier()
print(f"finished rank={os.environ['RANK']}", flush=True)
dist.destroy_process_group()
