"""Plain ``torchrun --rdzv-backend=etcd-v3`` runs a real DDP script through our handler."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from elasticjob_agent.rendezvous.handler import EtcdRendezvousHandler
from torch.distributed.elastic.rendezvous import RendezvousParameters

from tests.support.etcd_server import EtcdServer

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_entry_point_creates_our_handler(etcd_server: EtcdServer) -> None:
    (ep,) = [e for e in entry_points(group="torchrun.handlers") if e.name == "etcd-v3"]
    creator = ep.load()()
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint=etcd_server.endpoint,
        run_id="plugin",
        min_nodes=1,
        max_nodes=2,
        join_timeout="30",
        timeout=900,  # torchrun always adds this legacy key
    )
    handler = creator(params)
    try:
        assert isinstance(handler, EtcdRendezvousHandler)
        assert handler.get_backend() == "etcd-v3"
        assert handler.config.join_timeout == 30.0
        assert handler.get_run_id() == "plugin"
    finally:
        handler.shutdown()


def test_entry_point_rejects_bad_conf(etcd_server: EtcdServer) -> None:
    (ep,) = [e for e in entry_points(group="torchrun.handlers") if e.name == "etcd-v3"]
    params = RendezvousParameters(
        backend="etcd-v3",
        endpoint=etcd_server.endpoint,
        run_id="plugin",
        min_nodes=1,
        max_nodes=2,
        last_call_timeout="soon",
    )
    with pytest.raises(ValueError, match="last_call_timeout"):
        ep.load()()(params)


@pytest.mark.timeout(180)
def test_torchrun_trains_two_nodes_and_resumes(etcd_server: EtcdServer, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"

    def launch(steps: int, run_id: str) -> list[subprocess.Popen[str]]:
        cmd = [
            str(TORCHRUN),
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=etcd-v3",
            f"--rdzv-endpoint={etcd_server.endpoint}",
            f"--rdzv-id={run_id}",
            "--rdzv-conf=last_call_timeout=1,heartbeat=2,join_timeout=60",
            "--monitor-interval=0.5",
            str(REPO / "examples" / "train.py"),
            f"--steps={steps}",
            f"--checkpoint-dir={ckpt}",
            "--checkpoint-every=2",
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        return [
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
            for _ in range(2)
        ]

    def finish(procs: list[subprocess.Popen[str]]) -> str:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        for p, out in zip(procs, outputs, strict=True):
            assert p.returncode == 0, out[-3000:]
        return "\n".join(outputs)

    first = finish(launch(4, "train-a"))
    assert "start step=0 rank=0 world_size=2" in first
    assert "start step=0 rank=1 world_size=2" in first
    assert first.count("done step=4") == 2
    # Our handler ran the rendezvous: its keys are in etcd under the run id.
    keys = etcd_server.etcdctl("get", "--prefix", "--keys-only", "/elasticjob/train-a/rdzv/ctl/")
    assert "/elasticjob/train-a/rdzv/ctl/complete/0" in keys.split()

    second = finish(launch(8, "train-b"))
    assert "resumed from step=4" in second
    assert second.count("done step=8") == 2
