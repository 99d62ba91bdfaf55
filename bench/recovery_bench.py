"""Recovery time after a failure: elasticjob-agent against torchrun (c10d) on the same script.

Two launchers of two gloo workers each run ``examples/train.py`` on loopback. Once every rank
trains, the benchmark kills (SIGKILL) either one worker, or a whole node (the agent and its
workers, as when a pod or machine dies), and measures the time from the kill until every rank
of the new group has printed ``start step=`` (the line just before its first step).

    .venv/bin/python bench/recovery_bench.py [--repeats 3] [--scenario worker|node|both]

Both launchers get the same flags: --monitor-interval, --max-restarts and the rendezvous timeouts
(join 120 s, last call --last-call s). torchrun runs with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
(see ``--torchrun-shared-store``), without which it does not come back from a worker failure.
It prints a table of medians and the ratio ours/torchrun; the target is at most 0.5 for both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "agent"))

from elasticjob_agent.ports import free_port  # noqa: E402
from elasticjob_agent.standalone import EmbeddedEtcd  # noqa: E402

TRAIN = REPO / "examples" / "train.py"
BIN = Path(sys.executable).parent
RECOVERY_CAP = 180.0
STEADY = 20.0
START = re.compile(rb"start step=\d+ rank=(\d+) world_size=(\d+)")


class Launcher:
    """One node: a launcher process in its own session, its output timestamped line by line."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str], health_port: int | None = None
    ) -> None:
        self.health_port = health_port
        self.lines: list[tuple[float, bytes]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            with self._lock:
                self.lines.append((time.monotonic(), line))

    def started(self, after: float, world_size: int) -> dict[int, float]:
        """rank -> time of its first ``start step`` line at ``world_size`` after ``after``."""
        out: dict[int, float] = {}
        with self._lock:
            lines = list(self.lines)
        for at, line in lines:
            # Several workers share the pipe: their lines can run together.
            for match in START.finditer(line):
                if at > after and int(match.group(2)) == world_size:
                    out.setdefault(int(match.group(1)), at)
        return out

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return [int(p) for p in children.read_text().split()]
        except OSError:
            return []

    def kill_node(self) -> None:
        """SIGKILL the launcher and every descendant, as when the machine or pod dies
        (torchrun starts its workers in their own sessions, so a group kill misses them)."""
        victims = _descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill_node()
        self.proc.wait(10)


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in children:
                found.append(int(child))
                todo.append(int(child))
    return found


def _python_children(launcher: Launcher) -> list[int]:
    if launcher.health_port is not None:
        # Our agent says which processes are its workers (spares are children too).
        url = f"http://127.0.0.1:{launcher.health_port}/status"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return [int(w["pid"]) for w in json.loads(resp.read())["workers"] if w["pid"]]
    # torchrun's workers are its direct children.
    pids = []
    for pid in launcher.worker_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"train.py" in cmd:
            pids.append(pid)
    return pids


def _all_started(nodes: Sequence[Launcher], after: float, world_size: int) -> float | None:
    merged: dict[int, float] = {}
    for node in nodes:
        for rank, at in node.started(after, world_size).items():
            merged[rank] = min(at, merged.get(rank, at))
    if set(merged) != set(range(world_size)):
        return None
    return max(merged.values())


def _wait(nodes: Sequence[Launcher], after: float, world_size: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = _all_started(nodes, after, world_size)
        if done is not None:
            return done
        time.sleep(0.02)
    tail = b"".join(line for _, line in nodes[0].lines[-20:]).decode(errors="replace")
    raise RuntimeError(f"no group of {world_size} started within {timeout}s; last lines:\n{tail}")


def one_run(
    kind: str,
    scenario: str,
    last_call: int,
    workdir: Path,
    keep_logs: str | None = None,
    *,
    shared_store: bool = False,
) -> float:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    ckpt = workdir / run_id
    common = [
        "--nproc-per-node", "2",
        "--max-restarts", "100",
        "--monitor-interval", "0.1",
        "--rdzv-id", run_id,
    ]  # fmt: skip
    nnodes = {"worker": "2:2", "node": "1:2", "single": "1:1"}[scenario]
    train = [str(TRAIN), "--steps", "100000", "--step-sleep", "0.05",
             "--checkpoint-every", "50", "--checkpoint-dir", str(ckpt)]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    etcd: EmbeddedEtcd | None = None
    ports: list[int | None] = [None, None]
    conf = f"join_timeout=120,last_call_timeout={int(last_call)}"
    if kind == "ours":
        etcd = EmbeddedEtcd()
        etcd.start()
        argv = [
            sys.executable, "-m", "elasticjob_agent", "--health-addr", "127.0.0.1",
            "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", etcd.endpoint,
            "--rdzv-conf", f"{conf},heartbeat=2",
            "--nnodes", nnodes, *common,
        ]  # fmt: skip
        ports = [free_port(), free_port()]
    else:
        if not shared_store:
            # torchrun's default shares its rendezvous TCPStore with the workers, keyed by a
            # restart count each agent keeps for itself: after a failure on one node the
            # counts differ, the workers read stale peer addresses and never reconnect
            # (pytorch/pytorch#135712). Its documented way out, so the peer can recover:
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        port = free_port()
        argv = [
            str(BIN / "torchrun"),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-conf", conf,
            "--nnodes", nnodes, *common,
        ]  # fmt: skip
    nodes: list[Launcher] = []

    def launch(index: int) -> Launcher:
        port = ports[index]
        extra = ["--health-port", str(port)] if port is not None else []
        return Launcher([argv[0], *argv[1:], *extra, *train], env, port)

    try:
        nodes.append(launch(0))
        if scenario != "single":
            time.sleep(1.0)  # torchrun's first node hosts the c10d store
            nodes.append(launch(1))
        full = 2 * len(nodes)
        _wait(nodes, 0.0, full, 600)
        # Training steady for a while (failures rarely strike right after a start): both
        # launchers get the same time to settle, e.g. our spare workers to finish importing.
        time.sleep(STEADY)
        if scenario in ("worker", "single"):
            victims = _python_children(nodes[-1])
            if not victims:
                raise RuntimeError("found no worker to kill")
            killed = time.monotonic()
            os.kill(victims[0], signal.SIGKILL)
            survivors, world = nodes, full
        else:
            killed = time.monotonic()
            nodes[1].kill_node()  # not the c10d store host: torchrun would not survive that
            survivors, world = nodes[:1], 2
        try:
            done = _wait(survivors, killed, world, RECOVERY_CAP)
        except RuntimeError as exc:
            print(f"  {kind} did not recover within {RECOVERY_CAP:g}s: {str(exc)[-300:]}")
            return math.inf
        return done - killed
    finally:
        for index, node in enumerate(nodes):
            node.close()
            if keep_logs:
                out = Path(keep_logs) / f"{kind}-{scenario}-{run_id}-node{index}.log"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(b"".join(f"{t:.3f} ".encode() + line for t, line in node.lines))
        if etcd is not None:
            etcd.close()
        shutil.rmtree(ckpt, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--scenario",
        choices=["worker", "node", "single", "both"],
        default="both",
        help="worker: kill one of 4 workers on 2 nodes; node: kill one of 2 nodes; single: "
        "kill one of 2 workers on a single node; both: worker and node",
    )
    parser.add_argument("--launchers", default="ours,torchrun", help="comma-separated subset")
    parser.add_argument("--keep-logs", help="write each run's output under this directory")
    parser.add_argument(
        "--torchrun-shared-store",
        action="store_true",
        help="run torchrun with its default shared TCPStore, which does not recover from a "
        "worker failure on two nodes (pytorch/pytorch#135712); by default the bench sets "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
    )
    parser.add_argument(
        "--last-call",
        type=int,
        default=30,
        help="last_call_timeout for both (s); torch's and our default is 30",
    )
    args = parser.parse_args()
    scenarios = ["worker", "node"] if args.scenario == "both" else [args.scenario]
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="elasticjob-bench-") as tmp:
        for scenario in scenarios:
            for _ in range(args.repeats):
                for kind in args.launchers.split(","):  # interleaved: same load for both
                    seconds = one_run(
                        kind,
                        scenario,
                        args.last_call,
                        Path(tmp),
                        args.keep_logs,
                        shared_store=args.torchrun_shared_store,
                    )
                    results.setdefault((scenario, kind), []).append(seconds)
                    print(f"  {scenario:6} {kind:8} {seconds:7.2f} s", flush=True)
    print()
    print("| scenario | elasticjob-agent (s) | torchrun c10d (s) | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    ok = True
    for scenario in scenarios:
        if (scenario, "ours") not in results or (scenario, "torchrun") not in results:
            continue  # a single launcher was asked for: its lines above are the result
        ours = statistics.median(results[(scenario, "ours")])
        theirs = statistics.median(results[(scenario, "torchrun")])
        ratio = ours / theirs if math.isfinite(theirs) else ours / RECOVERY_CAP
        ok &= ratio <= 0.5
        label = {
            "worker": "SIGKILL one worker (2 nodes x 2)",
            "node": "SIGKILL one node (2 nodes x 2)",
            "single": "SIGKILL one worker (1 node x 2)",
        }[scenario]
        shown = f"{theirs:.2f}" if math.isfinite(theirs) else f"> {RECOVERY_CAP:g} (no recovery)"
        runs = " / ".join(
            f"{s:.1f}" if math.isfinite(s) else "none" for s in results[(scenario, "torchrun")]
        )
        mine = " / ".join(f"{s:.1f}" for s in results[(scenario, "ours")])
        print(f"| {label} | {ours:.2f} ({mine}) | {shown} ({runs}) | {ratio:.2f} | <= 0.50 |")
    print(f"\nmedian of {args.repeats} runs each, last_call_timeout={args.last_call:g}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
