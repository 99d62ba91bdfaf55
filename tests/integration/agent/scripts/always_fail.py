"""A worker that joins the group, then fails (exit 3): spends the restart budget."""

import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"attempt restart_count={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
time.sleep(0.5)
sys.exit(3)
