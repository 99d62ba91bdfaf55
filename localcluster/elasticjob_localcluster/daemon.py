"""The cluster process: owns the control plane, the pod network and the node emulator.

``python -m elasticjob_localcluster serve`` runs it in the foreground; ``up`` and the pytest
fixture start it in the background. It writes ``<state>/cluster.json`` once every node is Ready
and, on SIGTERM/SIGINT, stops the pods, the components and removes the network it made. Its
children die with it even if it is SIGKILLed (``PR_SET_PDEATHSIG``); ``down`` then removes the
network leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import network
from .config import INFO_FILE, ClusterConfig, cache_dir, etcd_data_dir
from .controlplane import ControlPlane, start_control_plane, version
from .emulator import NodeEmulator, control_server
from .kubeapi import KubeApi
from .kueue import KueueProcess
from .realnodes.fleet import Fleet
from .realnodes.node import remove_leftovers as remove_real_node_leftovers

log = logging.getLogger(__name__)


def serve(config: ClusterConfig, owner_pid: int = 0) -> int:
    """Run the cluster until SIGTERM/SIGINT (or until process ``owner_pid``, if given, is gone);
    returns the process exit code."""
    started = time.monotonic()
    state = config.state_dir
    state.mkdir(parents=True, exist_ok=True)
    (state / INFO_FILE).unlink(missing_ok=True)
    for stale in ("records", "pods"):
        shutil.rmtree(state / stale, ignore_errors=True)
    subnet, slot_lock = network.acquire_slot(cache_dir() / "cluster" / "slots")
    (state / "slot").write_text(str(subnet.slot))

    def request_stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, request_stop)
    cp: ControlPlane | None = None
    try:
        remove_real_node_leftovers(subnet)  # of a cluster that died on this slot
        network.create_bridge(subnet)
        cp = start_control_plane(
            state, subnet.gateway, etcd_data_dir(config), real_nodes=config.real_node_names()
        )
        control_plane_s = time.monotonic() - started
        log.info("control plane ready in %.1f s", control_plane_s)
        asyncio.run(
            _run(
                config,
                cp,
                subnet=subnet,
                started=started,
                cp_s=control_plane_s,
                owner_pid=owner_pid,
            )
        )
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        (state / INFO_FILE).unlink(missing_ok=True)
        if cp is not None:
            cp.stop()
        remove_real_node_leftovers(subnet)
        network.delete_bridge(subnet)
        shutil.rmtree(etcd_data_dir(config), ignore_errors=True)
        if not network.other_slots_in_use(subnet.slot):
            # Only the last cluster to stop may remove them: rmdir detaches the mounts that
            # other clusters' pods hold on the same paths.
            remove_created_mount_points(network.created_mount_points_file())
        (state / "control.sock").unlink(missing_ok=True)
        shutil.rmtree(state / "records", ignore_errors=True)
        slot_lock.close()
        log.info("cluster %s stopped", config.name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_created_mount_points(record: Path) -> None:
    """Remove the empty mount points pods made on the host, deepest first; keep anything that
    has content or is still a mount point (another cluster may use it)."""
    try:
        paths = {Path(line) for line in record.read_text().splitlines() if line.strip()}
    except OSError:
        return
    for path in sorted(paths, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            if path.is_mount():
                continue
            if path.is_dir():
                path.rmdir()
            elif path.is_file() and path.stat().st_size == 0:
                path.unlink()
    record.unlink(missing_ok=True)


async def _run(
    config: ClusterConfig,
    cp: ControlPlane,
    *,
    subnet: network.Subnet,
    started: float,
    cp_s: float,
    owner_pid: int,
) -> None:
    state = config.state_dir
    ca_pem = cp.pki.ca_cert.read_text()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    fleet = Fleet(config, cp, subnet) if config.real_nodes else None
    async with KubeApi(cp.server, cp.tokens["node-emulator"], cp.pki.ca_cert) as api:
        emulator = NodeEmulator(
            config=config,
            api=api,
            subnet=subnet,
            api_port=cp.api_port,
            ca_pem=ca_pem,
            tls=(cp.pki.serving_cert, cp.pki.serving_key),
        )
        try:
            await emulator.start()
            if fleet is not None:
                await asyncio.to_thread(fleet.start)

            def real(node: str) -> bool:
                return fleet is not None and node in fleet.nodes

            async def lose(req: dict[str, Any]) -> Any:
                node = str(req["node"])
                if fleet is not None and real(node):
                    return await asyncio.to_thread(fleet.lose, node)
                return await emulator.lose_node(node)

            async def restore(req: dict[str, Any]) -> Any:
                node = str(req["node"])
                if fleet is not None and real(node):
                    await asyncio.to_thread(fleet.restore, node)
                else:
                    await emulator.restore_node(node)
                return None

            async def cut(req: dict[str, Any]) -> Any:
                if fleet is None:
                    raise ValueError("cut_node needs a real node; this cluster has none")
                await asyncio.to_thread(fleet.cut, str(req["node"]))
                return None

            async def ping(_req: dict[str, Any]) -> Any:
                return "pong"

            kueue = KueueProcess(
                state, cp.kubeconfig("admin"), subnet.gateway, cp.pki.ca_cert, cp.pki.ca_key
            )
            server = await control_server(
                state / "control.sock",
                {
                    "lose_node": lose,
                    "restore_node": restore,
                    "cut_node": cut,
                    "ping": ping,
                    **kueue.control_ops(),
                },
            )
            await _wait_nodes_ready(api, config, fleet.check_alive if fleet else None)
            if fleet is not None:
                await asyncio.to_thread(fleet.deploy_dns)
            if config.kueue:
                await asyncio.to_thread(kueue.start)
            info = {
                "name": config.name,
                "pid": os.getpid(),
                "kubeconfig": str(cp.kubeconfig("admin")),
                "server": cp.server,
                "version": version(cp),
                "slot": subnet.slot,
                "gateway": subnet.gateway,
                "api_port": cp.api_port,
                "nodes": config.node_names() + config.real_node_names(),
                "virtual_nodes": config.node_names(),
                "real_nodes": fleet.node_info() if fleet is not None else {},
                "network_policies": fleet is not None and config.network_policies,
                "gpus_per_node": config.gpus_per_node,
                "control_plane_seconds": round(cp_s, 1),
                **(fleet.timings if fleet is not None else {}),
                "start_seconds": round(time.monotonic() - started, 1),
            }
            tmp = state / (INFO_FILE + ".tmp")
            tmp.write_text(json.dumps(info, indent=2))
            tmp.replace(state / INFO_FILE)
            log.info("cluster %s ready in %.1f s", config.name, time.monotonic() - started)
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), 1)
                cp.check_alive()
                if fleet is not None:
                    fleet.check_alive()
                if owner_pid and not _alive(owner_pid):
                    log.info("owner process %d is gone: stopping", owner_pid)
                    stopping.set()
            server.close()
            kueue.stop()
        finally:
            try:
                await asyncio.wait_for(emulator.shutdown(), 30)
            except Exception as err:
                log.warning("emulator shutdown: %s", err)
            if fleet is not None:
                await asyncio.to_thread(fleet.stop)


async def _wait_nodes_ready(
    api: KubeApi,
    config: ClusterConfig,
    check_alive: Callable[[], None] | None = None,
    limit_s: float = 120,
) -> None:
    deadline = time.monotonic() + limit_s
    want = config.nodes + config.real_nodes
    while True:
        if check_alive is not None:
            check_alive()
        nodes = (await api.get("/api/v1/nodes")).get("items", [])
        ready = [
            n
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            )
            and not any(
                t.get("key") == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", [])
            )
        ]
        if len(ready) >= want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(ready)} of {want} nodes became Ready in {limit_s:.0f} s")
        await asyncio.sleep(0.3)
