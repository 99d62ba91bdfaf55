"""Readiness and liveness probes (exec, httpGet, tcpSocket) of one running container."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"probe port {value!r} names no port of container {container.get('name')!r}")


async def probe_once(
    probe: Mapping[str, Any],
    container: Mapping[str, Any],
    pod_ip: str,
    shim_pid: int,
    env: Mapping[str, str],
) -> bool:
    """Run one probe attempt; True on success. Exec probes run inside the container's network,
    mount and UTS namespaces (entered through the container's init process ``shim_pid``)."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "exec" in probe:
            command = [str(c) for c in probe["exec"].get("command") or []]
            proc = await asyncio.create_subprocess_exec(
                "nsenter", "-t", str(shim_pid), "-n", "-m", "-u", "--", *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=dict(env),
            )  # fmt: skip
            try:
                return await asyncio.wait_for(proc.wait(), timeout) == 0
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return False
        if "httpGet" in probe:
            get = probe["httpGet"]
            scheme = str(get.get("scheme", "HTTP")).lower()
            host = get.get("host") or pod_ip
            url = f"{scheme}://{host}:{_port(get['port'], container)}{get.get('path', '/')}"
            headers = {str(h["name"]): str(h["value"]) for h in get.get("httpHeaders") or []}
            async with (
                aiohttp.ClientSession() as session,
                session.get(
                    url,
                    headers=headers,
                    ssl=False,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                    allow_redirects=False,
                ) as response,
            ):
                return 200 <= response.status < 400
        if "tcpSocket" in probe:
            port = _port(probe["tcpSocket"]["port"], container)
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(pod_ip, port), timeout)
            writer.close()
            return True
    except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
        return False
    # grpc probes are not supported: they count as passing (documented).
    return True
