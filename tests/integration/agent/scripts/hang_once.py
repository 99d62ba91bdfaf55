"""All-reduce steps that report progress; in the first attempt rank 1 hangs at step 5.

The hung rank sleeps inside the loop, so its peers block in the next all-reduce (gloo's default
timeout, 30 minutes, is far away). Later attempts run all ``STEPS`` steps and finish.
"""

import os
import time

import torch
import torch.distributed as dist
from elasticjob_agent.progress import report_done, report_step

STEPS = 20
dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
for step in range(1, STEPS + 1):
    if first and rank == 1 and step == 5:
        print("hanging", flush=True)
        time.sleep(3600)
    total = torch.ones(1)
    dist.all_reduce(total)
    report_step(step)
    time.sleep(0.1)
report_done()  # destroying the process group may be slow on a busy machine
print(f"finished rank={rank} restarts={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
dist.destroy_process_group()
