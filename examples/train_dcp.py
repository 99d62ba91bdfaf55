"""The DCP example: train.py's character transformer sharded with FSDP2 (``fully_shard``: every
rank holds a slice of each parameter and of its optimizer state), checkpointed with
``torch.distributed.checkpoint`` into the agents' memory, and resharded on restore into any
world size.

The one line that differs from a DCP script writing to a shared file system::

    dcp_save(state, storage_writer=ElasticJobWriter(step))   # was: checkpoint_id=f"/ckpt/{step}"
    dcp_load(state, storage_reader=ElasticJobReader())

Each rank's DCP files are its shard of the step, kept in its node's memory and replicated to
another node's agent (docs/checkpoints.md); after a resize the ranks of the new world read the
pieces their slices need from whichever old ranks wrote them, from memory or a peer. It runs
under ``elasticjob-agent`` with checkpoints on (``spec.checkpoint``), CPU and gloo; the model,
the text, the sampler and the log lines are train.py's (it sits beside this file in the
training image)::

    resumed from step=N rank=R world_size=W saved_world_size=V
    train step=N loss=L world_size=W epoch=E consumed=C samples=X
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from elasticjob_agent.checkpoint.dcp import ElasticJobReader, ElasticJobWriter
from elasticjob_agent.checkpoint.sampler import ElasticSampler
from elasticjob_agent.progress import report_done, report_step
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader

# train.py beside this file (a script's directory is the first entry of its import path).
from train import (  # type: ignore[import-not-found]
    TEXT,
    CharText,
    CharTransformer,
    batches,
    samples_digest,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="total training steps (default 20)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--text", default=str(TEXT), help="the text to learn")
    parser.add_argument("--context", type=int, default=64, help="characters per sample")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate")
    parser.add_argument("--seed", type=int, default=0, help="the model's and the data's seed")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.checkpoint_every < 1 or args.step_sleep < 0:
        parser.error("--steps >= 0, --checkpoint-every >= 1 and --step-sleep >= 0, please")
    return args


def sharded(model: torch.nn.Module, world_size: int) -> torch.nn.Module:
    """FSDP2 over all ranks: each block, then the rest (embeddings, head) at the root."""
    mesh = init_device_mesh("cpu", (world_size,))
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def restore(
    model: torch.nn.Module, optim: torch.optim.Optimizer, sampler: ElasticSampler
) -> tuple[int, int] | None:
    """``(step, saved world size)`` of the newest step complete on every rank, loaded into
    ``model``, ``optim`` and ``sampler`` (resharded by DCP); ``None`` when nothing was saved."""
    reader = ElasticJobReader()
    held = torch.tensor([len(reader.backend.candidates())])
    dist.all_reduce(held, op=dist.ReduceOp.MAX)
    if int(held.item()) == 0:
        return None  # a fresh start: no rank's node holds or reaches a checkpoint
    model_state, optim_state = get_state_dict(model, optim)
    state: dict[str, Any] = {
        "model": model_state,
        "optim": optim_state,
        "sampler": sampler.state_dict(),
    }
    # Raises (on every rank) when checkpoints exist but none is complete on every rank.
    dcp_load(state, storage_reader=reader)
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    sampler.load_state_dict(state["sampler"])
    if reader.step is None or reader.world_size is None:
        raise RuntimeError("DCP loaded without reading the checkpoint's metadata")
    return reader.step, reader.world_size


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("ELASTICJOB_CHECKPOINT_SOCKET"):
        sys.exit("run under elasticjob-agent with checkpoints on (spec.checkpoint.memoryLimit)")
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    speaker = int(os.environ.get("LOCAL_RANK", "0")) == 0
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(args.seed)
        data = CharText(Path(args.text).read_text(encoding="utf-8"), args.context)
        model = sharded(CharTransformer(len(data.vocab), args.context), world_size)
        optim = torch.optim.Adam(model.parameters(), lr=args.lr)
        sampler = ElasticSampler(len(data), seed=args.seed, drop_last=True)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
        if speaker:
            print(
                f"data samples={len(data)} seed={args.seed} batch={args.batch_size} "
                f"context={args.context} vocab={len(data.vocab)}",
                flush=True,
            )
        found = restore(model, optim, sampler)
        start = 0
        if found is not None:
            start, saved_world = found
            print(
                f"resumed from step={start} rank={rank} world_size={world_size} "
                f"saved_world_size={saved_world}",
                flush=True,
            )
        print(f"start step={start} rank={rank} world_size={world_size}", flush=True)
        loss = math.nan
        stream = batches(loader, sampler)
        for step in range(start, args.steps):
            indices, x, y = next(stream)
            logits = model(x)
            own: torch.Tensor = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            own.backward()  # type: ignore[no-untyped-call]
            optim.step()
            optim.zero_grad()
            sampler.advance(len(indices))
            done = step + 1
            mine = torch.cat([own.detach().reshape(1).double(), indices.double()])
            everyone = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(everyone, mine)
            loss = float(torch.stack([t[0] for t in everyone]).mean())
            if speaker:
                taken = [int(i) for t in everyone for i in t[1:].tolist()]
                print(
                    f"train step={done} loss={loss:.4f} world_size={world_size} "
                    f"epoch={sampler.epoch} consumed={sampler.consumed} "
                    f"samples={samples_digest(taken)}",
                    flush=True,
                )
            report_step(done)
            if done % args.checkpoint_every == 0 or done == args.steps:
                model_state, optim_state = get_state_dict(model, optim)
                state = {"model": model_state, "optim": optim_state}
                state["sampler"] = sampler.state_dict()
                dcp_save(state, storage_writer=ElasticJobWriter(done))
                if rank == 0:
                    print(f"checkpoint step={done} loss={loss:.4f} store=dcp", flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
        report_done()
        dist.barrier()
        print(f"done step={args.steps} rank={rank} loss={loss:.4f}", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    gc.collect()  # as train.py: join gloo's threads while the interpreter is whole
    sys.exit(code)
