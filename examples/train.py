"""A tiny elastic training script: DDP on gloo over synthetic data, with checkpoint and resume.

Run it like any torchrun script (it reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` from the environment)::

    torchrun --nnodes 1:2 --nproc-per-node 2 --rdzv-backend etcd-v3 \
        --rdzv-endpoint 127.0.0.1:2379 --rdzv-id demo examples/train.py --steps 50

Every ``--checkpoint-every`` steps the script checkpoints, in one of two places:

- under ``elasticjob-agent`` with checkpoints on (``spec.checkpoint``: the agent sets
  ``ELASTICJOB_CHECKPOINT_SOCKET``), every rank hands its state to its node's agent, which keeps
  it in memory and replicates it to another node's agent; on start every rank restores the
  newest step complete on every rank, from memory or a peer (docs/checkpoints.md). A replaced
  node resumes without shared storage.
- otherwise rank 0 writes ``step-N.pt`` into ``--checkpoint-dir`` (a temporary file, then a
  rename, so a kill never leaves a torn file) and every rank resumes from the newest one there.

``--checkpoint-store`` picks one by hand.
One line per event goes to stdout: ``start step=N``, ``resumed from step=N``, ``checkpoint
step=N``, ``done step=N``. The exit code is 0 when all steps are done. ``main`` runs under
torch's ``@record``, so an exception reaches the agent (``TORCHELASTIC_ERROR_FILE``), and
``--fail-at-step`` injects one. Each rank reports every finished step to the agent
(``elasticjob_agent.progress.report_step``; a no-op elsewhere).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

try:
    # Opt-in progress reporting: the agent shows the step, and with --progress-timeout restarts
    # a group that stopped advancing. A no-op outside the agent.
    from elasticjob_agent.progress import report_done, report_step
except ImportError:  # the agent is not installed here (plain torchrun): report nowhere

    def report_step(step: int) -> None:
        del step

    def report_done() -> None:
        pass


_CHECKPOINT = re.compile(r"^step-(\d+)\.pt$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="total training steps (default 20)")
    parser.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("ELASTICJOB_CHECKPOINT_DIR", "./checkpoints"),
        help="where checkpoints live (default $ELASTICJOB_CHECKPOINT_DIR or ./checkpoints)",
    )
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints")
    parser.add_argument(
        "--checkpoint-store",
        choices=("auto", "agent", "file"),
        default="auto",
        help="agent: the node's elasticjob-agent (memory, a peer); file: --checkpoint-dir; "
        "auto (default): the agent when it offers checkpoints, else the directory",
    )
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="pad every step to this many seconds (a fixed step time, for benchmarks)",
    )
    parser.add_argument(
        "--progress-file",
        default=None,
        help="rank 0 appends '<unix time> start|step <n>' lines here (benchmarks read them)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fail-at-step",
        type=int,
        default=None,
        help="failure injection: --fail-rank raises a RuntimeError when it reaches this step",
    )
    parser.add_argument("--fail-rank", type=int, default=0, help="the rank that fails (default 0)")
    parser.add_argument(
        "--fail-times",
        type=int,
        default=1,
        help="fail only while TORCHELASTIC_RESTART_COUNT is below this (default 1: first run)",
    )
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    if args.checkpoint_every < 1:
        parser.error(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    if args.step_sleep < 0:
        parser.error(f"--step-sleep must be >= 0, got {args.step_sleep}")
    if args.step_time < 0:
        parser.error(f"--step-time must be >= 0, got {args.step_time}")
    return args


def newest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    """The checkpoint with the highest step in ``directory``, or ``None``."""
    best: tuple[int, Path] | None = None
    if not directory.is_dir():
        return None
    for path in directory.iterdir():
        match = _CHECKPOINT.match(path.name)
        if match and (best is None or int(match.group(1)) > best[0]):
            best = (int(match.group(1)), path)
    return best


def save_checkpoint(
    directory: Path, step: int, model: nn.Module, optim: torch.optim.Optimizer
) -> None:
    """Write ``step-<step>.pt`` atomically: a reader sees the whole file or none of it."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}.pt"
    tmp = directory / f".step-{step}.pt.tmp-{os.getpid()}"
    torch.save({"step": step, "model": model.state_dict(), "optim": optim.state_dict()}, tmp)
    os.replace(tmp, final)


def agent_checkpointer(store: str) -> Any:
    """The agent's ``Checkpointer`` for ``--checkpoint-store`` (``None``: use the directory)."""
    offered = bool(os.environ.get("ELASTICJOB_CHECKPOINT_SOCKET"))
    if store == "file" or (store == "auto" and not offered):
        return None
    if not offered:
        sys.exit(
            "--checkpoint-store agent: ELASTICJOB_CHECKPOINT_SOCKET is not set (run under "
            "elasticjob-agent with checkpoints on: spec.checkpoint.memoryLimit)"
        )
    from elasticjob_agent.checkpoint.api import Checkpointer  # noqa: PLC0415

    return Checkpointer()


def synthetic_batch(step: int, rank: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch for (step, rank): y = x @ w + noise, so the loss goes down."""
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(batch_size, 16, generator=gen)
    w = torch.arange(16, dtype=torch.float32).unsqueeze(1) / 16.0
    y = x @ w + 0.01 * torch.randn(batch_size, 1, generator=gen)
    return x, y


def inject_failure(args: argparse.Namespace, rank: int, step: int) -> None:
    """``--fail-at-step``: raise on ``--fail-rank`` at that step while the job has restarted
    fewer than ``--fail-times`` times (under ``@record``, the agent reports the exception)."""
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if step == args.fail_at_step and rank == args.fail_rank and restarts < args.fail_times:
        raise RuntimeError(f"injected failure at step {step} on rank {rank}")


def log_progress(path: str | None, event: str, step: int) -> None:
    """One ``<unix time> <event> <step>`` line, appended and flushed at once: a benchmark reads
    the file while the job runs and after a fault killed the writer (a shared volume)."""
    if path is None:
        return
    with open(path, "a", encoding="ascii") as out:
        out.write(f"{time.time():.3f} {event} {step}\n")


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    # init from the env:// variables torchrun (or elasticjob-agent) set for us.
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(args.seed)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        optim = torch.optim.SGD(model.parameters(), lr=0.05)
        ckpt_dir = Path(args.checkpoint_dir)
        agent = agent_checkpointer(args.checkpoint_store)
        start = 0
        if agent is not None:
            # Collective: every rank gets the newest step complete on every rank.
            restored = agent.load()
            state = restored[1] if restored is not None else None
            source = f" source={agent.last_restore_source}"
        else:
            newest = newest_checkpoint(ckpt_dir)
            state = torch.load(newest[1], weights_only=True) if newest is not None else None
            source = ""
        if state is not None:
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
            start = int(state["step"])
            print(f"resumed from step={start} rank={rank}{source}", flush=True)
        # Nodes may not share the checkpoint directory: rank 0's step wins (DDP also broadcasts
        # rank 0's parameters when it wraps the model).
        start_t = torch.tensor([start])
        dist.broadcast(start_t, src=0)
        start = int(start_t.item())
        ddp = DistributedDataParallel(model)
        print(f"start step={start} rank={rank} world_size={world_size}", flush=True)
        if rank == 0:
            log_progress(args.progress_file, "start", start)
        loss_fn = nn.MSELoss()
        loss = torch.tensor(0.0)
        for step in range(start, args.steps):
            began = time.monotonic()
            inject_failure(args, rank, step)
            x, y = synthetic_batch(step, rank, args.batch_size)
            optim.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optim.step()
            done = step + 1
            report_step(done)
            if done % args.checkpoint_every == 0 or done == args.steps:
                if agent is not None:
                    # Every rank holds its shard; the copy into memory is all the step waits for.
                    state = {"step": done, "model": model.state_dict(), "optim": optim.state_dict()}
                    saved = agent.save(done, state)
                    if rank == 0 and saved:
                        print(
                            f"checkpoint step={done} loss={loss.item():.4f} store=agent", flush=True
                        )
                elif rank == 0:
                    save_checkpoint(ckpt_dir, done, model, optim)
                    print(f"checkpoint step={done} loss={loss.item():.4f}", flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if args.step_time:
                time.sleep(max(0.0, args.step_time - (time.monotonic() - began)))
            if rank == 0:
                # After the step's collective: every rank finished it.
                log_progress(args.progress_file, "step", done)
        # The loop is over: the final barrier and the teardown are not watched for hangs.
        report_done()
        # Nobody leaves before rank 0's last checkpoint is on disk.
        dist.barrier()
        print(f"done step={args.steps} rank={rank} loss={loss.item():.4f}", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # The DDP model's reference cycles keep the gloo process group alive until the interpreter's
    # last collection, when its worker threads can no longer take the GIL to release their last
    # work: SIGABRT, "terminate called without an active exception" (pytorch/pytorch#179291).
    # Collected now, the group joins its threads while the interpreter is whole.
    gc.collect()
    sys.exit(code)
