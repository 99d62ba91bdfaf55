"""Network I/O towards the workloads: agents' health reports, etcd probes, the restart seed.

Every call is bounded by a short timeout and reports failure as a value, never by raising, so one
dead pod cannot hold up the loop that watches a whole job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

import aetcd
import aiohttp
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT, HealthReport, HealthReportError

log = logging.getLogger(__name__)


async def fetch_report(
    session: aiohttp.ClientSession, ip: str, within: float = 1.0
) -> HealthReport | None:
    """The agent's ``/status`` on ``ip``; ``None`` unless it answers with a valid report."""
    url = f"http://{ip}:{DEFAULT_HEALTH_PORT}/status"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=within)) as response:
            if response.status != 200:
                return None
            return HealthReport.loads(await response.read())
    except HealthReportError as exc:
        log.warning("agent at %s sent an invalid health report: %s", ip, exc)
        return None
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None


async def fetch_reports(
    session: aiohttp.ClientSession, pods: Mapping[str, str], within: float = 1.0
) -> dict[str, HealthReport]:
    """Reports of the pods ``{name: ip}`` that answered, fetched concurrently."""
    names = list(pods)
    results = await asyncio.gather(*(fetch_report(session, pods[n], within) for n in names))
    return {n: r for n, r in zip(names, results, strict=True) if r is not None}


async def probe_etcd(
    session: aiohttp.ClientSession, endpoints: Iterable[str], within: float = 1.0
) -> bool:
    """Whether any ``host:port`` endpoint answers etcd's ``/health`` with a healthy member."""
    for endpoint in endpoints:
        url = f"http://{endpoint}/health"
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=within)) as response:
                body = await response.json(content_type=None)
                if response.status == 200 and str(body.get("health")) == "true":
                    return True
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError):
            continue
    return False


async def write_seed(endpoint: str, key: str, value: str, within: float = 3.0) -> bool:
    """Put the restart seed into the etcd at ``host:port``; ``False`` when it could not."""
    host, _, port = endpoint.rpartition(":")
    try:
        async with asyncio.timeout(within):
            async with aetcd.Client(host=host, port=int(port), timeout=max(1, int(within))) as etcd:
                await etcd.put(key.encode(), value.encode())
    except Exception as exc:
        log.warning("cannot write restart seed to etcd at %s: %r", endpoint, exc)
        return False
    return True
