"""A training script under elasticjob-agent: the first attempt saves steps 1..3 and then rank 1
fails; the restarted group restores and writes the step and source each rank got, and rank 0
what its agent's health report (``HEALTH_PORT``, when set) says the checkpoints kept."""

from __future__ import annotations

import datetime
import gc
import json
import os
import sys
import time
import urllib.request
from typing import Any

import torch
import torch.distributed as dist
from elasticjob_agent.checkpoint.api import Checkpointer


def agent_report(port: int) -> dict[str, Any]:
    """The agent's report once it carries this node's restore (within 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
            report: dict[str, Any] = json.load(answer)
        if report.get("lastRestore") is not None or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


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
        result: dict[str, Any] = {"step": step, "source": ckpt.last_restore_source, "ok": ok}
        if rank == 0 and os.environ.get("HEALTH_PORT"):
            report = agent_report(int(os.environ["HEALTH_PORT"]))
            result["report"] = {k: report.get(k) for k in ("lastSavedStep", "lastRestore")}
        with open(f"{out}.{rank}", "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
    gc.collect()


if __name__ == "__main__":
    main()
