"""A rank of a test job: saves or restores through its node's checkpoint service (plain API or
DCP) with real torch.distributed (gloo), and writes what it saw to ``--out`` as JSON."""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
from typing import Any

import torch
import torch.distributed as dist
from elasticjob_agent.checkpoint.api import Checkpointer
from elasticjob_agent.checkpoint.dcp import ElasticJobReader, ElasticJobWriter
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save


def state_for(step: int, rank: int, n: int) -> dict[str, Any]:
    return {
        "w": torch.full((n,), float(step * 10 + rank)),
        "b": torch.arange(7, dtype=torch.int64) + step,
        "step": step,
        "rank": rank,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["save", "load", "save-dcp", "load-dcp"], required=True)
    parser.add_argument("--steps", default="1,2,3")
    parser.add_argument("--n", type=int, default=1 << 16)
    parser.add_argument("--oversize-step", type=int, default=-1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    result: dict[str, object] = {"rank": rank}
    if args.mode == "save":
        ckpt = Checkpointer()
        saved = []
        for step in (int(s) for s in args.steps.split(",")):
            n = args.n * 64 if step == args.oversize_step else args.n
            saved.append([step, ckpt.save(step, state_for(step, rank, n))])
        result.update(saved=saved, error=ckpt.last_error, flushed=ckpt.flush(120))
    elif args.mode == "load":
        ckpt = Checkpointer()
        found = ckpt.load()
        if found is None:
            result.update(step=None)
        else:
            step, state = found
            want = state_for(step, rank, args.n)
            ok = all(
                torch.equal(state[k], want[k])
                if isinstance(want[k], torch.Tensor)
                else state[k] == want[k]
                for k in want
            )
            result.update(step=step, source=ckpt.last_restore_source, ok=ok)
    elif args.mode == "save-dcp":
        for step in (int(s) for s in args.steps.split(",")):
            dcp_save(
                {"model": {"w": torch.full((args.n,), float(step))}, "step": step},
                storage_writer=ElasticJobWriter(step),
            )
        result.update(saved=True)
    else:
        target: dict[str, Any] = {"model": {"w": torch.zeros(args.n)}, "step": -1}
        reader = ElasticJobReader()
        dcp_load(target, storage_reader=reader)
        loaded = reader.step
        ok = loaded is not None and torch.equal(
            target["model"]["w"], torch.full((args.n,), float(loaded or 0))
        )
        result.update(
            step=loaded,
            ok=ok and target["step"] == loaded,
            sources=reader.sources,
            report=None if reader.report is None else reader.report.as_status(),
        )
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
