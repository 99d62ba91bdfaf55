"""The training image in real containers (podman, runc): the agent as the container's PID 1.

Each test runs ``elasticjob-agent --standalone`` inside the image built from
examples/training-image/Dockerfile, with real torch.distributed workers (gloo, CPU). The image has
no etcd (a user's image need not: the operator's pods use the managed etcd), so the test mounts the
``etcd`` binary of the etcd image that the same build made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.images import REFS, Podman, wait_until

# A worker that makes an orphan (a background `sleep` whose shell exits at once, so the kernel
# re-parents it to PID 1), records SIGTERM, and otherwise waits to be stopped.
WORKER = """\
import os, signal, subprocess, sys, time

rank = int(os.environ["RANK"])


def note(text):
    with open(f"/out/rank{rank}.log", "a") as f:
        f.write(text + "\\n")


def on_term(signum, frame):
    note("sigterm")
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
if rank == 0:
    subprocess.run(["sh", "-c", "sleep 2 & echo $! > /out/orphan.pid"], check=True)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
note(f"allreduce {int(t.item())}")
while True:
    time.sleep(0.2)
"""

# Prints the orphan's state letter (Z: a zombie nobody reaped) or "gone" once it was reaped.
PROC_STATE = """\
import sys
try:
    with open(f"/proc/{sys.argv[1]}/stat") as f:
        print(f.read().rsplit(")", 1)[1].split()[0])
except FileNotFoundError:
    print("gone")
"""


def _etcd_binary(podman: Podman, dest: Path) -> Path:
    holder = f"ej-etcd-copy-{dest.name}"
    podman.run("create", "--name", holder, REFS["etcd"])
    try:
        podman.run("cp", f"{holder}:/usr/local/bin/etcd", str(dest / "etcd"))
    finally:
        podman.run("rm", "--force", holder, check=False)
    return dest / "etcd"


@pytest.fixture
def training(podman: Podman, tmp_path: Path) -> tuple[Podman, list[str]]:
    """The built images and the podman arguments every training container gets."""
    podman.build("etcd", "training")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)  # the image runs as uid 10001
    etcd = _etcd_binary(podman, bin_dir)
    args = ["--network", "none", "-v", f"{etcd}:/usr/local/bin/etcd:ro", "-v", f"{out}:/out"]
    return podman, args


def test_example_trains_to_the_end_in_the_image(
    training: tuple[Podman, list[str]], tmp_path: Path
) -> None:
    podman, args = training
    name = podman.start(
        *args,
        image=REFS["training"],
        command=[
            "elasticjob-agent",
            "--standalone",
            "--nproc-per-node",
            "2",
            "/workspace/train.py",
            "--steps",
            "12",
            "--checkpoint-dir",
            "/out/ckpt",
        ],
    )
    code = podman.run("wait", name, timeout=600).strip()
    logs = podman.run("logs", name)
    assert code == "0", logs
    assert "done step=12" in logs, logs
    assert sorted(p.name for p in (tmp_path / "out" / "ckpt").iterdir()), "no checkpoint written"


def test_agent_as_pid1_reaps_orphans_and_forwards_sigterm(
    training: tuple[Podman, list[str]], tmp_path: Path
) -> None:
    podman, args = training
    job = tmp_path / "job"
    job.mkdir()
    (job / "worker.py").write_text(WORKER)
    out = tmp_path / "out"
    name = podman.start(
        *args,
        "-v",
        f"{job}:/job:ro",
        image=REFS["training"],
        command=["elasticjob-agent", "--standalone", "--nproc-per-node", "2", "/job/worker.py"],
    )

    def logs() -> str:
        return podman.run("logs", name, check=False)

    def both_ranks_ran() -> bool:
        return all(
            (out / f"rank{r}.log").is_file() and "allreduce 2" in (out / f"rank{r}.log").read_text()
            for r in (0, 1)
        )

    wait_until("both workers' all_reduce", both_ranks_ran, 300, logs)
    orphan = (out / "orphan.pid").read_text().strip()
    states: list[str] = []

    def reaped() -> bool:
        state = podman.run("exec", name, "python3", "-c", PROC_STATE, orphan).strip()
        states.append(state)
        return state == "gone"

    # The orphan sleeps 2 s, then exits; unreaped, it stays a zombie (state Z) for good.
    wait_until(f"the orphan {orphan} to be reaped", reaped, 60, lambda: f"states seen: {states}")

    # `docker stop` / the kubelet: SIGTERM to PID 1, SIGKILL after the grace period (137).
    podman.run("stop", "--time", "60", name, timeout=120)
    state = podman.inspect(name)["State"]
    assert isinstance(state, dict)
    assert state["ExitCode"] == 143, f"exit {state['ExitCode']} (137: SIGKILLed)\n{logs()}"
    for rank in (0, 1):
        assert "sigterm" in (out / f"rank{rank}.log").read_text(), logs()
