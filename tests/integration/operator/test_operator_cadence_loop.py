"""A job's loop on the steady cadence (``reconciler.JobLoop`` with ``cadence.py``), its agents and
etcd real HTTP servers on loopback, the clock injected, the API behind an in-memory stand-in of
our own ``Kube`` boundary.

A calm job is probed watchfully (everything, every step) until it has been calm for ``settle``
seconds; then its etcd alone is checked between polls of its agents, with no plan and no
status write; an etcd that stops answering makes the next step a full, watchful one.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from elasticjob_agent.protocol.health import DEFAULT_HEALTH_PORT
from elasticjob_operator import probes
from elasticjob_operator.core import cadence, names
from elasticjob_operator.core.names import JobRef
from elasticjob_operator.core.observed import PodView
from elasticjob_operator.core.spec import JobSpec, parse_spec
from elasticjob_operator.core.status import JobStatus, Phase
from elasticjob_operator.kube import Kube
from elasticjob_operator.reconciler import JobLoop, LoopSettings, OwnedPod

from tests.support.operator_model import JOB, T0, Cluster, raw_spec, report, step
from tests.support.waiting import wait_until

SPEC = raw_spec(replicas=2, minNodes=2, maxNodes=2, etcd={"insecure": True})


class Api:
    """The job as the API server holds it, and what the loop asked of it."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {
            "metadata": {"uid": JOB.uid, "generation": 1, "resourceVersion": "1"},
            "spec": SPEC,
        }
        self.calls: Counter[str] = Counter()

    async def patch_job_status(
        self, job: JobRef, status: dict[str, Any], resource_version: str | None
    ) -> str:
        self.calls["status"] += 1
        self.body["status"] = copy.deepcopy(status)
        version = str(int(self.body["metadata"]["resourceVersion"]) + 1)
        self.body["metadata"]["resourceVersion"] = version
        return version

    async def post_event(self, *args: Any) -> None:
        self.calls["event"] += 1

    async def create(self, manifest: Any) -> bool:
        self.calls["create"] += 1
        return True

    async def annotate_pod(self, *args: Any) -> None:
        self.calls["annotate"] += 1


class Served:
    """HTTP servers on one loopback address: the agents' ``/status`` and etcd's ``/health``."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0
        """Requests answered."""
        self.asked = 0
        """Requests received."""
        self.down = False
        """Drop every connection without an answer (a process that died)."""
        self.held: asyncio.Event | None = None
        """Answer only once this is set (a process that is slow to answer)."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.asked += 1
                if self.held is not None:
                    await self.held.wait()
                if self.down:
                    return
                self.requests += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(self.body), self.body)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _running_pods() -> tuple[list[PodView], list[PodView]]:
    """The job's two worker pods and its etcd pod, running and ready on loopback addresses of
    their own."""
    cluster = Cluster()
    step(cluster, JobStatus(), _spec(), T0)
    base = f"127.{10 + uuid.uuid4().int % 200}.{uuid.uuid4().int % 250}"
    cluster.run_all(ip_prefix=f"{base}.")
    for name in list(cluster.pods):
        cluster.set(name, ready=True)
    return cluster.workers(), cluster.etcd()


@pytest.fixture
async def world() -> AsyncIterator[tuple[list[OwnedPod], Served, Served, asyncio.Server]]:
    """Two running workers whose agents report a formed group, and a running etcd pod."""
    workers, etcd = _running_pods()
    agents = Served(b"")
    etcd_server = Served(b'{"health": "true"}')
    servers = []
    for pod in workers:
        agents.body = report(pod.name, world_size=2).dumps().encode()
        servers.append(await asyncio.start_server(agents.handle, pod.ip, DEFAULT_HEALTH_PORT))
    etcd_listener = await asyncio.start_server(
        etcd_server.handle, etcd[0].ip, names.ETCD_CLIENT_PORT
    )
    pods = [OwnedPod(JOB.uid, p) for p in [*workers, *etcd]]
    yield pods, agents, etcd_server, etcd_listener
    for server in [*servers, etcd_listener]:
        server.close()


def _spec() -> JobSpec:
    return parse_spec(SPEC)


async def test_a_calm_job_turns_steady_then_checks_only_etcd_and_writes_nothing(
    world: tuple[list[OwnedPod], Served, Served, asyncio.Server],
) -> None:
    pods, agents, etcd, etcd_listener = world
    now = [T0 + 10]
    settings = LoopSettings(
        cadence=cadence.CadenceSettings(etcd_interval=3.0, report_interval=10.0, settle=20.0)
    )
    api = Api()
    async with probes.new_session() as session:
        loop = JobLoop(
            cast(Kube, api), session, JOB, settings, clock=lambda: now[0], gate=probes.ProbeGate(4)
        )
        services = frozenset({names.workers_service_name(JOB.name)})

        async def tick(seconds: float) -> float:
            result = await loop.step(api.body, pods, frozenset(), services)
            now[0] += seconds
            return result.next_interval

        # Watchful: every step polls both agents and etcd, until 20 s of calm.
        for _ in range(4):
            assert await tick(2.0) == settings.interval
        assert JobStatus.from_json(api.body["status"]).phase is Phase.RUNNING
        polled, probed = agents.requests, etcd.requests
        assert (polled, probed) == (8, 4)
        for _ in range(8):  # past the 20 s of calm
            await tick(2.0)

        # Steady: 30 s later the agents were polled about every 10 s and etcd every 3 s, and
        # the steps between polls of the agents made no plan and wrote nothing.
        writes = api.calls["status"]
        polled, probed = agents.requests, etcd.requests
        start = now[0]
        while now[0] < start + 30:
            wait = await tick(0.0)
            assert 0 < wait <= 3.0
            now[0] += wait
        assert agents.requests - polled <= 2 * 4
        assert etcd.requests - probed >= 9
        assert api.calls["status"] == writes, "a steady job wrote its status"

        # etcd stops answering: the next check finds it and the step after is watchful.
        etcd.down = True
        etcd_listener.close()
        polled = agents.requests
        for _ in range(3):
            await tick(3.0)
        assert agents.requests - polled >= 4, "the job did not turn watchful"
        stored = JobStatus.from_json(api.body["status"])
        assert stored.etcd.unreachable_since is None  # the agents and the kubelet still vouch


async def test_a_refused_agent_is_polled_again_only_after_a_growing_back_off() -> None:
    # One agent answers with something that is not a report; the other with a valid one.
    (good_pod, bad_pod), etcd = _running_pods()
    good = Served(report(good_pod.name, world_size=2).dumps().encode())
    bad = Served(b"NaN")
    etcd_server = Served(b'{"health": "true"}')
    servers = [
        await asyncio.start_server(good.handle, good_pod.ip, DEFAULT_HEALTH_PORT),
        await asyncio.start_server(bad.handle, bad_pod.ip, DEFAULT_HEALTH_PORT),
        await asyncio.start_server(etcd_server.handle, etcd[0].ip, names.ETCD_CLIENT_PORT),
    ]
    pods = [OwnedPod(JOB.uid, p) for p in [good_pod, bad_pod, *etcd]]
    now = [T0 + 10]
    api = Api()
    try:
        async with probes.new_session() as session:
            loop = JobLoop(
                cast(Kube, api),
                session,
                JOB,
                LoopSettings(),
                clock=lambda: now[0],
                gate=probes.ProbeGate(4),
            )
            services = frozenset({names.workers_service_name(JOB.name)})
            # 120 s of steps every 2 s; a refused report does not break the calm, so after 20 s
            # the job is steady and its agents are polled every 10 s.
            for _ in range(60):
                await loop.step(api.body, pods, frozenset(), services)
                stored = JobStatus.from_json(api.body["status"])
                assert bad_pod.name in stored.invalid_reports, stored.invalid_reports
                now[0] += 2.0
    finally:
        for server in servers:
            server.close()
    assert good.requests >= 18, good.requests
    # Polled at 0, then no sooner than 4, 8, 16, 32 and 60 s later: at most 6 times in 120 s.
    assert 4 <= bad.requests <= 6, (bad.requests, good.requests)


async def test_a_step_does_not_wait_for_a_slow_etcd_and_a_failed_answer_wakes_the_job(
    world: tuple[list[OwnedPod], Served, Served, asyncio.Server],
) -> None:
    pods, agents, etcd, _listener = world
    etcd.held = asyncio.Event()
    woken = asyncio.Event()
    now = [T0 + 10]
    # The probe timeout is far beyond the deadlines below: a step that waited for the probe
    # would miss them.
    settings = LoopSettings(probe_timeout=120.0, probe_wait=0.1)
    api = Api()
    services = frozenset({names.workers_service_name(JOB.name)})
    async with probes.new_session() as session:
        loop = JobLoop(
            cast(Kube, api),
            session,
            JOB,
            settings,
            clock=lambda: now[0],
            gate=probes.ProbeGate(4),
            wake=woken.set,
        )
        async with asyncio.timeout(30):
            await loop.step(api.body, pods, frozenset(), services)
        assert agents.requests == 2  # the agents' answers came within the step
        assert etcd.asked == 1 and not woken.is_set()

        # A step while the round is still out starts no second one.
        now[0] += 2.0
        async with asyncio.timeout(30):
            await loop.step(api.body, pods, frozenset(), services)
        assert agents.requests == 2 and etcd.asked == 1

        etcd.down = True  # released, it drops the connection: no answer
        etcd.held.set()
        async with asyncio.timeout(30):
            await woken.wait()
        now[0] += 0.2
        async with asyncio.timeout(30):
            await loop.step(api.body, pods, frozenset(), services)
        # The next step read the round's answers instead of asking again (the second request
        # is aiohttp's own retry of the dropped one, within the same round).
        assert etcd.asked == 2
        assert agents.requests == 2
        after = JobStatus.from_json(api.body["status"])
    assert after.phase is Phase.RUNNING, after


async def test_a_steady_etcd_check_with_no_verdict_keeps_the_job_steady_and_asks_again_soon(
    world: tuple[list[OwnedPod], Served, Served, asyncio.Server],
) -> None:
    # A probe that timed out only because the operator's own loop was stopped says nothing of
    # etcd. It used to make the job watchful (every agent polled every step for 20 s), which
    # at 1000 jobs starved the loop further; now the job stays steady and etcd is asked again
    # after one interval instead of its steady period.
    pods, agents, etcd, _listener = world
    now = [T0 + 10]
    settings = LoopSettings(
        probe_timeout=0.2,
        probe_wait=0.1,
        cadence=cadence.CadenceSettings(etcd_interval=10.0, report_interval=60.0, settle=20.0),
    )
    api = Api()
    services = frozenset({names.workers_service_name(JOB.name)})
    async with probes.new_session() as session:
        loop = JobLoop(
            cast(Kube, api), session, JOB, settings, clock=lambda: now[0], gate=probes.ProbeGate(4)
        )

        async def tick() -> float:
            async with asyncio.timeout(30):
                result = await loop.step(api.body, pods, frozenset(), services)
            return result.next_interval

        while True:  # watchful until 20 s of calm, then steady (the wait grows past 2 s)
            wait = await tick()
            now[0] += wait
            if wait > settings.interval:
                break
            assert now[0] < T0 + 60, "the job never turned steady"
        polled = agents.requests
        assert etcd.requests >= 1

        # etcd's answer is held; while its probe waits, the whole process stops for 1 s, and
        # again in the extra time the late timeout grants.
        etcd.held = asyncio.Event()
        asked = etcd.asked
        check = asyncio.ensure_future(tick())
        await wait_until(lambda: etcd.asked != asked, "the probe asking etcd")
        assert etcd.asked == asked + 1
        asyncio.get_running_loop().call_later(1.1, time.sleep, 1.0)
        time.sleep(1.0)  # noqa: ASYNC251 - a starved operator is the point
        wait = await check
        # Steps go on (the round ends during one of them, with no verdict) until etcd is
        # asked again: after about one interval of the job's clock, not a steady period.
        started = now[0]
        while etcd.asked == asked + 1:
            now[0] += min(wait, settings.interval)
            assert now[0] - started <= 3 * settings.interval, "etcd was not asked again soon"
            wait = await tick()
        etcd.held.set()
        assert agents.requests == polled, "a verdict-less probe made the job watchful"
