"""Checkpoint cost: how long a save blocks training, how long a restore takes, and what a job
restores after the node holding rank 0 is lost, with no shared storage.

    .venv/bin/python bench/checkpoint_bench.py --size-mib 256 [--repeats 3] [--json FILE]

Rows, each for one rank's state of ``--size-mib`` MiB (64 float32 tensors):

- ``elasticjob-shm``: ``Checkpointer.save`` of one rank under a real checkpoint service (the
  one ``elasticjob-agent`` runs): the copy into shared memory is what blocks; the checksums
  follow in the background, which is waited for between saves, as a training step would cover
  it. One rank, as each baseline is one process (the two-node job's figures, both ranks saving
  at once on this machine's two cores, are printed too). The first
  two saves allocate the node's memory and are reported apart; ``blocking_s`` is the median of
  the later ones. ``restore_s``: ``Checkpointer.load`` from the node's memory (checksums
  included).
- ``torch.save+fsync``: ``torch.save`` to a file on local disk, flushed and fsynced;
  ``restore_s``: ``torch.load`` of it with its pages dropped from the page cache first.
- ``dcp-disk``: ``torch.distributed.checkpoint.save`` with its ``FileSystemWriter`` (fsync on)
  to local disk; ``restore_s``: ``dcp.load`` into a preallocated state, cache dropped.

Node loss: two nodes (two checkpoint services with their own memory directories, two ranks as
real processes with gloo, peers over TLS on loopback, an embedded etcd), steps 1..5 saved; then
rank 0's node is killed and its memory and local disk deleted; a new node takes its place and
both ranks restore. ``restored_step`` against ``last_saved_step``; ``restore_s`` is rank 0's
restore (from the peer, while rank 1 restores from memory on the same two cores).

Targets: save blocking at most 1/4 of torch.save+fsync; restored step = last saved step;
restore from a peer within 2x of torch.load from local disk.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "agent"))
sys.path.insert(0, str(REPO / "operator"))

from elasticjob_agent.ports import free_port  # noqa: E402

TENSORS = 64
WARM_UP = 2
"""Saves before the steady state: the first ``stepsKept`` (2) allocate the tmpfs pages."""
READY_TIMEOUT = 180.0
RANK_TIMEOUT = 900.0


def make_state(size_mib: int, seed: int) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    per = size_mib * (1 << 20) // 4 // TENSORS
    g = torch.Generator().manual_seed(seed)
    return {f"layer{i}.weight": torch.rand(per, generator=g) for i in range(TENSORS)} | {
        "step": seed
    }


def drop_cache(path: Path) -> None:
    """Evict one file's pages (no global drop_caches: the machine is shared)."""
    for p in [path] if path.is_file() else [q for q in path.rglob("*") if q.is_file()]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# --- the ranks of the two-node job (this script re-run as a rank) -------------------------------


def rank_main(args: argparse.Namespace) -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    from elasticjob_agent.checkpoint.api import Checkpointer  # noqa: PLC0415

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    ckpt = Checkpointer()
    out: dict[str, Any] = {"rank": rank}
    if args.rank_role == "save":
        blocking, background = [], []
        for step in range(1, args.steps + 1):
            state = make_state(args.size_mib, step * 10 + rank)
            dist.barrier()
            started = time.perf_counter()
            ok = ckpt.save(step, state)
            blocking.append(time.perf_counter() - started)
            started = time.perf_counter()
            ckpt.flush(600)
            background.append(time.perf_counter() - started)
            dist.barrier()
            if not ok:
                raise SystemExit(f"save of step {step} refused: {ckpt.last_error}")
            del state
            gc.collect()
        out.update(blocking=blocking, background=background, last_saved_step=args.steps)
    else:
        dist.barrier()
        started = time.perf_counter()
        found = ckpt.load()
        took = time.perf_counter() - started
        restored_step: int | None = None
        ok = False
        if found is not None:
            restored_step, state = found
            want = make_state(args.size_mib, restored_step * 10 + rank)
            ok = all(
                torch.equal(state[k], v) for k, v in want.items() if isinstance(v, torch.Tensor)
            )
        out.update(step=restored_step, restore_s=took, source=ckpt.last_restore_source, ok=ok)
    dist.barrier()
    dist.destroy_process_group()
    Path(args.out).write_text(json.dumps(out))


# --- the nodes ------------------------------------------------------------------------------


class Node:
    """One node's checkpoint service, its memory in its own tmpfs directory, no disk."""

    def __init__(
        self, base: Path, name: str, *, etcd: str, run_id: str, tls: Path, limit: int
    ) -> None:
        self.name = name
        self.work = base / name
        self.work.mkdir(parents=True)
        self.memory = Path("/dev/shm") / f"ej-bench-{uuid.uuid4().hex[:8]}-{name}"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
        env.update(
            ELASTICJOB_CHECKPOINT_MEMORY_LIMIT=str(limit),
            ELASTICJOB_CHECKPOINT_MEMORY_DIR=str(self.memory),
            ELASTICJOB_CHECKPOINT_PORT="0",
            ELASTICJOB_CHECKPOINT_ADDR="127.0.0.1",
            ELASTICJOB_CHECKPOINT_TIMEOUT="300",
            ELASTICJOB_CHECKPOINT_CACERT=str(tls / "ca.crt"),
            ELASTICJOB_CHECKPOINT_CERT=str(tls / "client.crt"),
            ELASTICJOB_CHECKPOINT_KEY=str(tls / "client.key"),
        )
        self._log = open(self.work / "service.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                *[sys.executable, "-u", "-m", "elasticjob_agent.checkpoint", "--etcd", etcd],
                *["--run-id", run_id, "--node", name, "--addr", "127.0.0.1"],
                *["--work-dir", str(self.work)],
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            start_new_session=True,
        )
        self.socket = self._ready()

    def _ready(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        os.set_blocking(self.proc.stdout.fileno(), False)
        seen = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            seen += self.proc.stdout.read() or b""
            for line in seen.splitlines():
                if line.startswith(b"ready "):
                    return line.split()[1].decode()
            time.sleep(0.05)
        raise SystemExit(f"node {self.name} did not start; see {self.work / 'service.log'}")

    def lose(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.memory, ignore_errors=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=60)
        self._log.close()
        shutil.rmtree(self.memory, ignore_errors=True)


def run_ranks(
    base: Path, sockets: list[str], role: str, args: argparse.Namespace, size_mib: int
) -> list[dict[str, Any]]:
    port = free_port()
    procs, outs = [], []
    for rank, sock in enumerate(sockets):
        out = base / f"{role}-{rank}-{uuid.uuid4().hex[:6]}.json"
        outs.append(out)
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK="0",
            WORLD_SIZE=str(len(sockets)),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            ELASTICJOB_CHECKPOINT_SOCKET=sock,
        )
        argv = [sys.executable, __file__, "--rank-role", role, "--out", str(out)]
        argv += ["--size-mib", str(size_mib), "--steps", str(args.steps)]
        procs.append(subprocess.Popen(argv, env=env))
    deadline = time.monotonic() + RANK_TIMEOUT
    for proc in procs:
        if proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
            for p in procs:
                p.kill()
            raise SystemExit(f"a rank of the {role} run failed")
    return [json.loads(o.read_text()) for o in outs]


def node_loss(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from elasticjob_agent.standalone import EmbeddedEtcd  # noqa: PLC0415
    from elasticjob_operator.core import pki  # noqa: PLC0415

    tls = base / "tls"
    tls.mkdir()
    job = pki.generate("bench", "default", "bench-etcd", datetime.datetime.now(datetime.UTC))
    for name, pem in (
        ("ca.crt", job.ca_cert),
        ("client.crt", job.client_cert),
        ("client.key", job.client_key),
    ):
        (tls / name).write_text(pem)
    # own + replica, ``keep`` steps each, plus the step being written
    limit = 6 * args.node_loss_size_mib * (1 << 20) + (64 << 20)
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    with EmbeddedEtcd() as etcd:
        a = Node(base, "node-a", etcd=etcd.endpoint, run_id=run_id, tls=tls, limit=limit)
        b = Node(base, "node-b", etcd=etcd.endpoint, run_id=run_id, tls=tls, limit=limit)
        replacement: Node | None = None
        try:
            size = args.node_loss_size_mib
            saved = run_ranks(base, [a.socket, b.socket], "save", args, size)
            local = run_ranks(base, [a.socket, b.socket], "load", args, size)
            a.lose()  # the node holding rank 0: its memory is gone, and there is no shared disk
            replacement = Node(
                base, "node-a2", etcd=etcd.endpoint, run_id=run_id, tls=tls, limit=limit
            )
            restored = run_ranks(base, [replacement.socket, b.socket], "load", args, size)
        finally:
            for node in (a, b, replacement):
                if node is not None:
                    node.stop()
        # The save row: one rank on one node, as the baselines save from one process (two
        # ranks on this machine's two cores would share what two nodes would not).
        alone = Node(
            base,
            "node-s",
            etcd=etcd.endpoint,
            run_id=f"{run_id}-s",
            tls=tls,
            limit=3 * args.size_mib * (1 << 20) + (64 << 20),
        )
        try:
            single_saved = run_ranks(base, [alone.socket], "save", args, args.size_mib)
            single_local = run_ranks(base, [alone.socket], "load", args, args.size_mib)
        finally:
            alone.stop()
    return {
        "saved": single_saved,
        "local": single_local,
        "job_saved": saved,
        "job_local": local,
        "restored": restored,
    }


# --- the disk baselines ---------------------------------------------------------------------


def torch_save_row(args: argparse.Namespace, disk: Path) -> tuple[list[float], list[float]]:
    import torch  # noqa: PLC0415

    blocking, restore = [], []
    for i in range(args.repeats):
        state = make_state(args.size_mib, i)
        path = disk / f"torch-{i}.pt"
        started = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        blocking.append(time.perf_counter() - started)
        del state
        gc.collect()
        drop_cache(path)
        started = time.perf_counter()
        loaded = torch.load(path, weights_only=True)
        restore.append(time.perf_counter() - started)
        del loaded
        path.unlink()
        gc.collect()
    return blocking, restore


def dcp_row(args: argparse.Namespace, disk: Path) -> tuple[list[float], list[float]]:
    from torch.distributed.checkpoint import filesystem  # noqa: PLC0415
    from torch.distributed.checkpoint.state_dict_loader import load  # noqa: PLC0415
    from torch.distributed.checkpoint.state_dict_saver import save  # noqa: PLC0415

    blocking, restore = [], []
    for i in range(args.repeats):
        state = make_state(args.size_mib, i)
        path = disk / f"dcp-{i}"
        started = time.perf_counter()
        save(state, storage_writer=filesystem.FileSystemWriter(str(path), sync_files=True))
        blocking.append(time.perf_counter() - started)
        drop_cache(path)
        started = time.perf_counter()
        load(state, storage_reader=filesystem.FileSystemReader(str(path)))
        restore.append(time.perf_counter() - started)
        del state
        shutil.rmtree(path)
        gc.collect()
    return blocking, restore


def _versions() -> str:
    import platform  # noqa: PLC0415

    import torch  # noqa: PLC0415

    return f"python {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument(
        "--node-loss-size-mib",
        type=int,
        default=None,
        help="state per rank of the two-node job (default --size-mib; smaller to fit memory)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="steps saved before the node loss")
    parser.add_argument(
        "--disk-dir",
        default=None,
        help="local disk for the baselines (default: a temp dir under /var/tmp)",
    )
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--rank-role", choices=["save", "load"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node_loss_size_mib is None:
        args.node_loss_size_mib = args.size_mib
    if args.rank_role:
        rank_main(args)
        return
    load_before = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="elasticjob-ckpt-bench-", dir=args.disk_dir or "/var/tmp"))
    try:
        # The first ``keep`` saves allocate the node's memory; later ones reuse it.
        args.steps = max(args.steps, args.repeats + WARM_UP)
        job = node_loss(args, base)
        saved0 = job["saved"][0]
        torch_b, torch_r = torch_save_row(args, base)
        dcp_b, dcp_r = dcp_row(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = statistics.median
    local0 = job["local"][0]
    restored = job["restored"]
    rows = [
        {
            "method": "elasticjob-shm",
            "blocking_s": med(saved0["blocking"][WARM_UP:]),
            "restore_s": local0["restore_s"],
        },
        {"method": "torch.save+fsync", "blocking_s": med(torch_b), "restore_s": med(torch_r)},
        {"method": "dcp-disk", "blocking_s": med(dcp_b), "restore_s": med(dcp_r)},
    ]
    loss = {
        "restored_step": restored[0]["step"]
        if all(r["step"] == restored[0]["step"] for r in restored)
        else None,
        "last_saved_step": args.steps,
        "restore_s": restored[0]["restore_s"],
    }
    ratio_save = rows[0]["blocking_s"] / rows[1]["blocking_s"]
    ratio_restore = loss["restore_s"] / rows[1]["restore_s"]
    intact = all(r["ok"] for r in restored)
    print(f"checkpoint_bench: {args.size_mib} MiB per rank, medians; {_versions()}")
    print(f"load average at the start {load_before:.1f}, at the end {os.getloadavg()[0]:.1f}")
    print(f"{'method':<20}{'blocking_s':>12}{'restore_s':>12}")
    for row in rows:
        print(f"{row['method']:<20}{row['blocking_s']:>12.3f}{row['restore_s']:>12.3f}")
    print(
        f"elasticjob-shm: first save (fresh pages) {saved0['blocking'][0]:.3f}s; steady saves "
        f"{', '.join(f'{b:.3f}' for b in saved0['blocking'][WARM_UP:])}s; background per save "
        f"(checksums) median {med(saved0['background']):.3f}s"
    )
    job0 = job["job_saved"][0]
    print(
        f"two-node job (both ranks saving at once on this machine's 2 cores): rank 0 steady "
        f"saves {', '.join(f'{b:.3f}' for b in job0['blocking'][WARM_UP:])}s, background "
        f"(checksums, replica to the peer) median {med(job0['background']):.3f}s, restore from "
        f"memory {job['job_local'][0]['restore_s']:.3f}s"
    )
    print(f"save blocking ratio elasticjob/torch.save+fsync: {ratio_save:.3f} (target <= 0.25)")
    print(
        f"node loss ({args.node_loss_size_mib} MiB per rank): last saved step "
        f"{loss['last_saved_step']}, restored step {loss['restored_step']} (rank 0 from "
        f"{restored[0]['source']}, data {'intact' if intact else 'WRONG'}), "
        f"restore {loss['restore_s']:.3f}s"
    )
    if args.size_mib == args.node_loss_size_mib:
        print(f"restore ratio peer/torch.load from local disk: {ratio_restore:.2f} (target <= 2)")
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps({"rows": rows, "node_loss": loss}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
