"""Fail fast: time from start to a failed job for a script with a bug at step 0.

Two launchers (nodes) of ``--nproc`` gloo workers each run ``bench/failfast_script.py`` on
loopback, which raises the same ``RuntimeError`` at step 0 on every run, with
``--max-restarts 5``. Measured: from starting the launchers until both have exited (the job is
failed and holds nothing any more). Three configurations, interleaved, on the same script:

- ``ours-failjob``: elasticjob-agent with a failure policy that fails the job on that error
  (``{"action": "FailJob", "onRootCause": {"pattern": "shapes cannot be multiplied"}}``);
- ``ours``: elasticjob-agent without a policy (the budget is spent first, as before);
- ``torchrun``: torchrun (c10d), which has no such policy.

    .venv/bin/python bench/failfast_bench.py [--repeats 3] [--nproc 1] [--json]

GPU-seconds wasted: the wall time times the workers the job holds (2 x ``--nproc``, one GPU
each on a GPU node), minus one run's worth (the first run, which any launcher must spend to see
the bug): what restarting a bug that no restart can fix costs. Kubeflow's PyTorchJob is not
measured here (it needs a cluster; see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from elasticjob_agent.ports import free_port
from elasticjob_agent.standalone import EmbeddedEtcd
from recovery_bench import BIN, REPO, Launcher

SCRIPT = Path(__file__).resolve().parent / "failfast_script.py"
KINDS = ("ours-failjob", "ours", "torchrun")
MAX_RESTARTS = 5
POLICY = {
    "rules": [{"action": "FailJob", "onRootCause": {"pattern": "shapes cannot be multiplied"}}]
}


def one_run(kind: str, nproc: int, cap: float, workdir: Path) -> tuple[float, list[int]]:
    """Seconds from start to both launchers exited, and their exit codes."""
    run_id = f"ff-{uuid.uuid4().hex[:8]}"
    common = [
        "--nnodes", "2:2",
        "--nproc-per-node", str(nproc),
        "--max-restarts", str(MAX_RESTARTS),
        "--monitor-interval", "0.1",
        "--rdzv-id", run_id,
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "agent"), env.get("PYTHONPATH", "")])
    etcd: EmbeddedEtcd | None = None
    extra: list[list[str]] = [[], []]
    if kind.startswith("ours"):
        etcd = EmbeddedEtcd()
        etcd.start()
        argv = [
            sys.executable, "-m", "elasticjob_agent", "--health-addr", "127.0.0.1",
            "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", etcd.endpoint,
            "--rdzv-conf", "join_timeout=300,last_call_timeout=1,heartbeat=2", *common,
        ]  # fmt: skip
        if kind == "ours-failjob":
            policy = workdir / f"{run_id}.json"
            policy.write_text(json.dumps(POLICY))
            argv += ["--failure-policy", str(policy)]
        extra = [["--health-port", str(free_port())] for _ in range(2)]
    else:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        argv = [
            str(BIN / "torchrun"),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv-conf", "join_timeout=300,last_call_timeout=1", *common,
        ]  # fmt: skip
    nodes: list[Launcher] = []
    started = time.monotonic()
    try:
        for index in range(2):
            nodes.append(Launcher([*argv, *extra[index], str(SCRIPT)], env))
        deadline = started + cap
        while time.monotonic() < deadline and any(n.proc.poll() is None for n in nodes):
            time.sleep(0.05)
        if any(n.proc.poll() is None for n in nodes):
            raise RuntimeError(f"{kind}: still running after {cap:g} s")
        return time.monotonic() - started, [int(n.proc.returncode) for n in nodes]
    finally:
        for node in nodes:
            node.close()
        if etcd is not None:
            etcd.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=1, help="workers per launcher (2 launchers)")
    parser.add_argument("--cap", type=float, default=600.0, help="give up on a run after this")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    results: dict[str, list[float]] = {k: [] for k in kinds}
    codes: dict[str, set[int]] = {k: set() for k in kinds}
    with tempfile.TemporaryDirectory(prefix="elasticjob-failfast-bench-") as tmp:
        for _ in range(args.repeats):
            for kind in kinds:  # interleaved: the same load for each
                seconds, exits = one_run(kind, args.nproc, args.cap, Path(tmp))
                results[kind].append(seconds)
                codes[kind].update(exits)
                print(f"  {kind:13} {seconds:6.1f} s  exit codes {exits}", flush=True)
    gpus = 2 * args.nproc
    medians = {k: statistics.median(v) for k, v in results.items()}
    first = medians.get("ours-failjob", min(medians.values()))
    print()
    print(f"maxRestarts {MAX_RESTARTS}, 2 nodes x {args.nproc} workers ({gpus} GPUs on GPU nodes)")
    print()
    print(
        "| launcher | runs (s) | median to failed (s) | GPU-seconds held "
        "| wasted vs ours-failjob | ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        shown = " / ".join(f"{s:.1f}" for s in results[kind])
        held = medians[kind] * gpus
        wasted = (medians[kind] - first) * gpus
        print(
            f"| {kind} | {shown} | {medians[kind]:.1f} | {held:.0f} | {wasted:.0f} | "
            f"{medians[kind] / first:.1f}x |"
        )
    if args.json:
        print(
            json.dumps(
                {
                    "maxRestarts": MAX_RESTARTS,
                    "gpus": gpus,
                    "runs": results,
                    "medianSeconds": medians,
                    "gpuSecondsHeld": {k: m * gpus for k, m in medians.items()},
                    "exitCodes": {k: sorted(v) for k, v in codes.items()},
                },
                sort_keys=True,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
