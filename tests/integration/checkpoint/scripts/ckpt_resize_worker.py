"""A rank of a test job that trains a tiny DDP model on an ``ElasticSampler`` and saves every
step (``--mode save``), or restores into whatever world it runs in and finishes the epoch
(``--mode load``), with real torch.distributed (gloo); writes what it saw to ``--out``."""

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
from elasticjob_agent.checkpoint.restore import NothingRestoredError, UnmappableEntryError
from elasticjob_agent.checkpoint.sampler import ElasticSampler
from torch import nn
from torch.nn.parallel import DistributedDataParallel

LENGTH = 48
BATCH = 2


def digest(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["save", "load"], required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sharded-entry", action="store_true")
    parser.add_argument("--like-width", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ElasticSampler(LENGTH, seed=5)
    data = torch.arange(LENGTH * 4, dtype=torch.float32).reshape(LENGTH, 4) / 100
    ckpt = Checkpointer()
    result: dict[str, Any] = {"rank": rank, "world": world}
    consumed: list[list[int]] = []
    step = 0
    if args.mode == "load":
        like = {"model": nn.Linear(4, args.like_width).state_dict()}
        try:
            found = ckpt.load(like=like)
        except NothingRestoredError as exc:
            entry = exc.entry if isinstance(exc, UnmappableEntryError) else None
            result.update(error=type(exc).__name__, reason=exc.reason, entry=entry)
            found = None
        if found is not None:
            step, state = found
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
            sampler.load_state_dict(state["sampler"])
            assert ckpt.last_restore is not None
            result.update(
                restored=ckpt.last_restore.as_status(),
                digest=digest(model),
                per_rank=state["per_rank"]["rank"],
                rng=state["per_rank"]["rng"].tolist(),
            )
    if "error" not in result:
        ddp = DistributedDataParallel(model)
        sampler.set_epoch(0)
        indices = sampler.remaining()
        limit = args.steps if args.mode == "save" else len(indices)
        while indices and len(consumed) < limit:
            batch, indices = indices[:BATCH], indices[BATCH:]
            consumed.append(batch)
            optim.zero_grad()
            ddp(data[batch]).pow(2).mean().backward()
            optim.step()
            sampler.advance(BATCH)
            step += 1
            if args.mode == "save":
                state = {
                    "model": model.state_dict(),
                    "optim": optim.state_dict(),
                    "sampler": sampler.state_dict(),
                    "step": step,
                    "per_rank": {"rank": rank, "rng": torch.tensor([rank, step])},
                }
                if args.sharded_entry:  # a tensor-parallel piece, outside DCP
                    state["model"]["tp"] = torch.zeros(2 + rank)
                ckpt.save(step, state)
        result.update(consumed=consumed, step=step, digest_end=digest(model))
        if args.mode == "save":
            result.update(flushed=ckpt.flush(120))
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
