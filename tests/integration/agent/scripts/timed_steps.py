"""All-reduce steps whose local compute is timed with ``step_timer``.

``SLOW_SECONDS`` (the environment) is this node's compute per step, a sleep inside the timer;
the all-reduce waits outside it. ``BAD_TIMINGS=1`` also reports a negative timing every step
(a broken clock), which the agent must ignore and count. Runs until ``STOP_FILE`` exists, then
finishes its step and exits.
"""

import os
import time

import torch
import torch.distributed as dist
from elasticjob_agent.progress import report_compute, report_done, report_step, step_timer

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
slow = float(os.environ["SLOW_SECONDS"])
bad = os.environ.get("BAD_TIMINGS") == "1"
stop = os.environ["STOP_FILE"]
step = 0
while True:
    with step_timer():
        time.sleep(slow)
    if bad:
        report_compute(-1.0)
    total = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
    dist.all_reduce(total)  # every rank stops at the same step once any rank saw the file
    step += 1
    report_step(step)
    if total.item() > 0:
        break
report_done()
print(f"finished rank={rank} steps={step}", flush=True)
dist.destroy_process_group()
