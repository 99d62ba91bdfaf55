"""Hang recovery: from the moment a rank hangs to every rank running again.

Two launchers (nodes) of ``--nproc`` gloo workers each run ``bench/hang_script.py`` on loopback.
Once per run, rank 1 prints ``hanging`` at step 20 and sleeps for good inside its loop; its
peers block in the next all-reduce. Measured: from that line (as the launcher's output
reader saw it) until every rank of the new group printed ``running`` (its first all-reduce of the
new attempt succeeded). Three configurations, interleaved, on the same script:

- ``ours``: elasticjob-agent with ``--progress-timeout 30`` (the script reports its steps);
- ``torchrun-30s``: torchrun (c10d) with the collective timeout set the same way, 30 s, passed
  to ``init_process_group(timeout=...)`` by the script (``--collective-timeout 30``);
- ``torchrun-default``: torchrun with torch's defaults (gloo: 30 minutes), capped at ``--cap``.

    .venv/bin/python bench/hang_bench.py [--repeats 2] [--cap 150] [--nproc 1]

Both launchers get ``--monitor-interval 0.1``, ``--max-restarts 100`` and last call 1 s; torchrun
runs with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (see recovery_bench.py: without it torchrun
does not come back from a worker failure on two nodes). Prints a table of medians; the target
for ours is at most 30 s + 10 s.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from elasticjob_agent.ports import free_port
from elasticjob_agent.standalone import EmbeddedEtcd
from recovery_bench import BIN, REPO, Launcher

SCRIPT = Path(__file__).resolve().parent / "hang_script.py"
PROGRESS_TIMEOUT = 30
TARGET = PROGRESS_TIMEOUT + 10.0
HANGING = re.compile(rb"hanging rank=(\d+)")
RUNNING = re.compile(rb"running rank=(\d+)")
KINDS = ("ours", "torchrun-30s", "torchrun-default")


def _first(nodes: Sequence[Launcher], pattern: re.Pattern[bytes]) -> float | None:
    for node in nodes:
        for at, line in list(node.lines):
            if pattern.search(line):
                return at
    return None


def _running_again(nodes: Sequence[Launcher], after: float, world: int) -> float | None:
    """When the last rank of a group started after ``after`` printed ``running``, or ``None``."""
    seen: dict[int, float] = {}
    for node in nodes:
        for at, line in list(node.lines):
            for match in RUNNING.finditer(line):
                if at > after:
                    seen.setdefault(int(match.group(1)), at)
    if set(seen) != set(range(world)):
        return None
    return max(seen.values())


def _wait(deadline: float, probe: Callable[[], float | None]) -> float | None:
    while time.monotonic() < deadline:
        got = probe()
        if got is not None:
            return got
        time.sleep(0.05)
    return None


def one_run(kind: str, nproc: int, cap: float, workdir: Path, logs: Path | None) -> float:
    run_id = f"hang-{uuid.uuid4().hex[:8]}"
    common = [
        "--nnodes", "2:2",
        "--nproc-per-node", str(nproc),
        "--max-restarts", "100",
        "--monitor-interval", "0.1",
        "--rdzv-id", run_id,
    ]  # fmt: skip
    script = [str(SCRIPT), "--hang-marker", str(workdir / f"{run_id}.hung")]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    etcd: EmbeddedEtcd | None = None
    extra: list[list[str]] = [[], []]
    if kind == "ours":
        etcd = EmbeddedEtcd()
        etcd.start()
        argv = [
            sys.executable, "-m", "elasticjob_agent", "--health-addr", "127.0.0.1",
            "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", etcd.endpoint,
            "--rdzv-conf", "join_timeout=300,last_call_timeout=1,heartbeat=2",
            "--progress-timeout", str(PROGRESS_TIMEOUT), *common,
        ]  # fmt: skip
        extra = [["--health-port", str(free_port())] for _ in range(2)]
    else:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        argv = [
            str(BIN / "torchrun"),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv-conf", "join_timeout=300,last_call_timeout=1", *common,
        ]  # fmt: skip
        if kind == "torchrun-30s":
            script += ["--collective-timeout", str(PROGRESS_TIMEOUT)]
    nodes: list[Launcher] = []
    try:
        for index in range(2):
            nodes.append(Launcher([*argv, *extra[index], *script], env))
            time.sleep(1.0)  # torchrun's first node hosts the c10d store
        hung = _wait(time.monotonic() + 600, lambda: _first(nodes, HANGING))
        if hung is None:
            raise RuntimeError(f"{kind}: no rank hung within 600 s")
        back = _wait(
            hung + cap,
            lambda: _running_again(nodes, hung, 2 * nproc),
        )
        return math.inf if back is None else back - hung
    finally:
        for index, node in enumerate(nodes):
            node.close()
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                out = logs / f"{kind}-{run_id}-node{index}.log"
                out.write_bytes(b"".join(f"{t:.3f} ".encode() + line for t, line in node.lines))
        if etcd is not None:
            etcd.close()


def _show(seconds: float, cap: float) -> str:
    return f"{seconds:.1f}" if math.isfinite(seconds) else f"> {cap:g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cap", type=float, default=150.0, help="give up on a run after this")
    parser.add_argument("--nproc", type=int, default=1, help="workers per launcher (2 launchers)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    parser.add_argument("--keep-logs", type=Path, help="write each run's output here")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    results: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="elasticjob-hang-bench-") as tmp:
        for _ in range(args.repeats):
            for kind in kinds:  # interleaved: the same load for each
                seconds = one_run(kind, args.nproc, args.cap, Path(tmp), args.keep_logs)
                results[kind].append(seconds)
                print(f"  {kind:17} {_show(seconds, args.cap)} s", flush=True)
    print()
    print("| launcher | hang detection | runs (s) | median (s) |")
    print("| --- | --- | --- | --- |")
    how = {
        "ours": f"--progress-timeout {PROGRESS_TIMEOUT} (report_step)",
        "torchrun-30s": f"init_process_group(timeout={PROGRESS_TIMEOUT} s)",
        "torchrun-default": "torch's default (gloo 1800 s)",
    }
    for kind in kinds:
        runs = results[kind]
        median = statistics.median(runs)
        shown = " / ".join(_show(s, args.cap) for s in runs)
        print(f"| {kind} | {how[kind]} | {shown} | {_show(median, args.cap)} |")
    if "ours" in results:
        ours = statistics.median(results["ours"])
        print(
            f"\nours: median {_show(ours, args.cap)} s, target <= {TARGET:g} s: "
            f"{'met' if ours <= TARGET else 'NOT met'}"
        )
        return 0 if ours <= TARGET else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
