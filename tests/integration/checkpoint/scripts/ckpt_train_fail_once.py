"""A training script under elasticjob-agent: the first attempt saves steps 1..3 and then rank 1
fails; the restarted group restores and writes the step and source each rank got."""

from __future__ import annotations

import datetime
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
from elasticjob_agent.checkpoint.api import Checkpointer


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    ckpt = Checkpointer()
    found = ckpt.load()
    if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) == 0:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": torch.full((1000,), float(step * 10 + rank)), "step": step})
        ckpt.flush(60)
        dist.barrier()
        if rank == 1:
            sys.exit(1)
        dist.barrier()  # rank 0 waits here until the agent restarts the group
    else:
        assert found is not None, "nothing restored"
        step, state = found
        ok = bool(torch.equal(state["w"], torch.full((1000,), float(step * 10 + rank))))
        with open(f"{out}.{rank}", "w") as f:
            json.dump({"step": step, "source": ckpt.last_restore_source, "ok": ok}, f)
    dist.destroy_process_group()
    gc.collect()


if __name__ == "__main__":
    main()
