"""A small elastic training script: a character-level transformer language model, DDP on gloo,
with checkpoint and resume into any world size.

Run it like any torchrun script (it reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` from the environment)::

    torchrun --nnodes 1:2 --nproc-per-node 2 --rdzv-backend etcd-v3 \
        --rdzv-endpoint 127.0.0.1:2379 --rdzv-id demo examples/train.py --steps 50

The model (2 layers, d_model 64, 4 heads, a context of 64 characters: about 110k parameters)
learns the text ``--text`` (``train-text.txt`` next to this file: our own prose, shipped in the
training image), one character at a time. A sample is the window of ``--context`` characters
starting at one position of the text; ``ElasticSampler`` (``elasticjob_agent.checkpoint.
sampler``) deals the epoch's samples to the ranks from one global position, so after a resize
the job reads each remaining sample of the epoch exactly once.

Every ``--checkpoint-every`` steps the script checkpoints the model, the optimizer and the
sampler's position, in one of two places:

- under ``elasticjob-agent`` with checkpoints on (``spec.checkpoint``: the agent sets
  ``ELASTICJOB_CHECKPOINT_SOCKET``), every rank hands its state to its node's agent, which keeps
  it in memory and replicates it to another node's agent; on start every rank restores the
  newest step complete on every rank, from memory or a peer, whatever world size saved it
  (docs/checkpoints.md). A replaced node resumes without shared storage.
- otherwise rank 0 writes ``step-N.pt`` into ``--checkpoint-dir`` (a temporary file, then a
  rename, so a kill never leaves a torn file); on start rank 0 reads the newest one there and
  sends it to every rank.

``--checkpoint-store`` picks one by hand.
One line per event goes to stdout: ``start step=N``, ``resumed from step=N``, ``checkpoint
step=N``, ``done step=N``, and, from the first rank of every node (so every node's log holds
the whole run it took part in), one line per step and one when the data is ready::

    data samples=L seed=S batch=B context=T vocab=V params=P
    train step=N loss=L world_size=W epoch=E consumed=C samples=X

``loss`` is the step's mean loss over all ranks; ``epoch`` and ``consumed`` are the sampler's
position after the step (samples of the epoch consumed by the whole job); ``samples`` is the
CRC-32 (8 hex digits) of the step's sample indices over all ranks, sorted and joined by commas:
the step consumed ``epoch_order(L, S, E)[C - B * W:C]`` exactly when it matches (a step at
the end of an epoch ends it). The exit code is 0 when all steps are done. ``main`` runs under
torch's ``@record``, so an exception reaches the agent (``TORCHELASTIC_ERROR_FILE``), and
``--fail-at-step`` injects one. Each rank reports every finished step to the agent
(``elasticjob_agent.progress.report_step``; a no-op elsewhere).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import re
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from elasticjob_agent.checkpoint.sampler import ElasticSampler
from elasticjob_agent.progress import report_done, report_step, step_timer
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

_CHECKPOINT = re.compile(r"^step-(\d+)\.pt$")
TEXT = Path(__file__).resolve().with_name("train-text.txt")

D_MODEL = 64
LAYERS = 2
HEADS = 4


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
    parser.add_argument(
        "--text", default=str(TEXT), help="the text to learn (default train-text.txt beside me)"
    )
    parser.add_argument("--context", type=int, default=64, help="characters per sample")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate")
    parser.add_argument("--seed", type=int, default=0, help="the model's and the data's seed")
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
    if args.context < 1 or args.batch_size < 1:
        parser.error("--context and --batch-size must be >= 1")
    return args


class CharText(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Sample ``i``: ``(i, text[i:i+context], text[i+1:i+context+1])`` as character ids."""

    def __init__(self, text: str, context: int) -> None:
        if len(text) <= context:
            raise ValueError(f"the text has {len(text)} characters, fewer than a context + 1")
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        self.ids = torch.tensor([index[c] for c in text], dtype=torch.long)
        self.context = context

    def __len__(self) -> int:
        return len(self.ids) - self.context

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.ids[i : i + self.context], self.ids[i + 1 : i + self.context + 1]


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, each around a residual."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class CharTransformer(nn.Module):
    """A tiny GPT: character and position embeddings, ``LAYERS`` blocks, a linear head."""

    def __init__(self, vocab: int, context: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, D_MODEL)
        self.pos = nn.Embedding(context, D_MODEL)
        self.blocks = nn.Sequential(*(Block(D_MODEL, HEADS) for _ in range(LAYERS)))
        self.ln = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        logits: torch.Tensor = self.head(self.ln(self.blocks(self.tok(ids) + self.pos(pos))))
        return logits


def batches(
    loader: DataLoader[Any], sampler: ElasticSampler
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Batches forever, epoch after epoch, from the sampler's (restored) position on."""
    epoch = sampler.epoch
    while True:
        sampler.set_epoch(epoch)  # the restored epoch keeps its position; a new one starts at 0
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty and sampler.consumed == 0:
            raise ValueError("the text is too short for one batch on every rank")
        epoch += 1


def samples_digest(indices: list[int]) -> str:
    """CRC-32 of the sorted indices joined by commas (the ``samples=`` of a step line)."""
    text = ",".join(str(i) for i in sorted(indices))
    return f"{zlib.crc32(text.encode('ascii')):08x}"


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


def save_checkpoint(directory: Path, step: int, state: dict[str, Any]) -> None:
    """Write ``step-<step>.pt`` atomically: a reader sees the whole file or none of it."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}.pt"
    tmp = directory / f".step-{step}.pt.tmp-{os.getpid()}"
    torch.save(state, tmp)
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


def restore(agent: Any, ckpt_dir: Path, rank: int, like: dict[str, Any]) -> dict[str, Any] | None:
    """The state to resume from, the same on every rank, or ``None`` (a fresh start)."""
    if agent is not None:
        # Collective: every rank gets the newest step complete on every rank, mapped onto this
        # world size whatever size saved it; ``like`` names a mismatched key.
        found = agent.load(like=like)
        return found[1] if found is not None else None
    # Nodes may not share the directory: rank 0's newest checkpoint wins, sent to every rank.
    box: list[Any] = [None]
    if rank == 0:
        newest = newest_checkpoint(ckpt_dir)
        box[0] = torch.load(newest[1], weights_only=True) if newest is not None else None
    dist.broadcast_object_list(box, src=0)
    state: dict[str, Any] | None = box[0]
    return state


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
    # The first rank of each node logs every step, so every node's log holds the whole run.
    speaker = int(os.environ.get("LOCAL_RANK", "0")) == 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    # A tiny model on shared CPUs: one thread per rank (more only contend with the other ranks).
    torch.set_num_threads(1)
    # init from the env:// variables torchrun (or elasticjob-agent) set for us.
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(args.seed)
        data = CharText(Path(args.text).read_text(encoding="utf-8"), args.context)
        model = CharTransformer(len(data.vocab), args.context)
        optim = torch.optim.Adam(model.parameters(), lr=args.lr)
        # drop_last on both: every rank gets the same number of full batches in every epoch (a
        # DDP step needs all ranks), whatever world size resumes the epoch.
        sampler = ElasticSampler(len(data), seed=args.seed, drop_last=True)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
        if speaker:
            params = sum(p.numel() for p in model.parameters())
            print(
                f"data samples={len(data)} seed={args.seed} batch={args.batch_size} "
                f"context={args.context} vocab={len(data.vocab)} params={params}",
                flush=True,
            )
        agent = agent_checkpointer(args.checkpoint_store)
        like = {"model": model.state_dict()}
        state = restore(agent, Path(args.checkpoint_dir), rank, like)
        start = 0
        if state is not None:
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
            sampler.load_state_dict(state["sampler"])
            start = int(state["step"])
            source = f" source={agent.last_restore_source}" if agent is not None else ""
            print(f"resumed from step={start} rank={rank}{source}", flush=True)
        ddp = DistributedDataParallel(model)
        print(f"start step={start} rank={rank} world_size={world_size}", flush=True)
        if rank == 0:
            log_progress(args.progress_file, "start", start)
        loss = math.nan
        stream = batches(loader, sampler)
        for step in range(start, args.steps):
            began = time.monotonic()
            inject_failure(args, rank, step)
            optim.zero_grad()
            # The rank's own compute, which the operator compares across nodes to find a
            # straggler: the batch and the forward pass only (the backward pass waits for the
            # slowest rank, so it would make every node look as slow as that one).
            with step_timer():
                indices, x, y = next(stream)
                logits = ddp(x)
                own: torch.Tensor = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
                )
            own.backward()  # type: ignore[no-untyped-call]
            optim.step()
            sampler.advance(len(indices))
            done = step + 1
            # One collective for the log line: every rank's loss and sample indices.
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
                state = {
                    "step": done,
                    "model": model.state_dict(),
                    "optim": optim.state_dict(),
                    "sampler": sampler.state_dict(),
                }
                if agent is not None:
                    # Every rank holds its shard; the copy into memory is all the step waits for.
                    saved = agent.save(done, state)
                    if rank == 0 and saved:
                        print(f"checkpoint step={done} loss={loss:.4f} store=agent", flush=True)
                elif rank == 0:
                    save_checkpoint(Path(args.checkpoint_dir), done, state)
                    print(f"checkpoint step={done} loss={loss:.4f}", flush=True)
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
        print(f"done step={args.steps} rank={rank} loss={loss:.4f}", flush=True)
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
