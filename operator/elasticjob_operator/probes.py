"""Network I/O towards the workloads: agents' health reports, etcd probes, the restart seed.

Every call is bounded by a short timeout and reports failure as a value, never by raising, so one
dead (or hostile) pod cannot hold up the loop that watches a whole job. What a pod sends is
untrusted input: a report body is read up to ``MAX_REPORT_BYTES`` and no further (the cap holds
while reading, so a huge body costs the operator at most that much), never decompressed, and
parsed strictly (``HealthReport.loads``). etcd is reached through its JSON gateway (``/health``,
``/v3/kv/...``) with ``aiohttp``, so one TLS context (the job's client certificate) serves the
probe and the seed alike.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from elasticjob_agent.protocol.health import (
    DEFAULT_HEALTH_PORT,
    MAX_REPORT_BYTES,
    HealthReport,
    HealthReportError,
)

from .core import seeding

log = logging.getLogger(__name__)

_CHUNK = 8192
STARVED = 0.5
"""A probe's timeout that fires this much later than due (fraction of the timeout) says the
operator's own event loop was starved of CPU: the pod may have answered in time, so the probe
is inconclusive rather than failed."""


class ProbeGate:
    """At most ``limit`` probes in flight across all jobs (0: no bound).

    A probe's timeout starts once it holds a slot: waiting behind the operator's own backlog
    (thousands of jobs due at once, hostile pods holding slots to their timeout) never reads
    as a pod or an etcd that did not answer. Without it, every probe of a loaded operator
    competes for the same connection pool and times out together, which is what turns load
    into false remediation.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"probe concurrency must not be negative, got {limit}")
        self._slots = asyncio.Semaphore(limit) if limit else None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield


_UNBOUNDED = ProbeGate(0)


class PatientTimeout:
    """``asyncio.timeout(within)`` that does not blame a pod for the operator's own lateness.

    When the timer fires late (by more than ``STARVED`` of ``within``), the operator's event
    loop was starved: the answer may well be waiting, unread, in the socket. Cutting the request
    then would throw the answer away and, with it, the connection (a new TCP connection, or TLS
    handshake, at the next probe: more work for an operator that is already late). So the first
    late expiry grants ``within`` more; a second late one leaves ``starved`` set (no verdict), an
    expiry on time means the pod had its time and did not answer.
    """

    def __init__(self, within: float) -> None:
        self.within = within
        self.starved = False
        """The timeout fired, late both times: say nothing of the pod."""
        self._timeout = asyncio.timeout(None)
        self._extended = False
        self._deadline = 0.0
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> PatientTimeout:
        await self._timeout.__aenter__()
        self._arm(asyncio.get_running_loop().time() + self.within)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()
        await self._timeout.__aexit__(*exc)  # raises TimeoutError once it expired

    def _arm(self, deadline: float) -> None:
        self._deadline = deadline
        self._handle = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        now = asyncio.get_running_loop().time()
        late = now - self._deadline > STARVED * self.within
        if late and not self._extended:
            self._extended = True
            self._arm(now + self.within)
            return
        self.starved = late
        self._timeout.reschedule(now)


def new_session() -> aiohttp.ClientSession:
    """The operator's session towards pods: no automatic decompression (a small gzip body can
    inflate to gigabytes), small header limits, no cookies kept between pods."""
    return aiohttp.ClientSession(
        # No pool bound here (``ProbeGate`` bounds what is in flight) and connections kept for
        # longer than a steady job's probe period, so a job's etcd keeps one TLS session.
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
        auto_decompress=False,
        read_bufsize=64 * 1024,
        max_line_size=4096,
        max_field_size=4096,
        max_headers=32,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


@dataclass(frozen=True)
class Reports:
    """The outcome of polling a job's agents."""

    valid: dict[str, HealthReport] = field(default_factory=dict)
    """Reports by pod name."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Why a pod's answer was refused, by pod name (pods that did not answer are in neither)."""
    no_verdict: frozenset[str] = frozenset()
    """Pods whose probe timed out while the operator itself was starved of CPU (``STARVED``):
    they may well have answered in time, so this says nothing about them either way."""


class NoVerdict:
    """A probe that timed out only because the operator's own event loop was late."""


NO_VERDICT = NoVerdict()


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body of ``response``, raising ``HealthReportError`` as soon as it exceeds ``limit``."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise HealthReportError(f"health report has Content-Encoding {encoding[:40]!r}")
    declared = response.content_length
    if declared is not None and declared > limit:
        raise HealthReportError(f"health report declares {declared} bytes (limit {limit})")
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            raise HealthReportError(f"health report is larger than {limit} bytes")
    return bytes(body)


async def fetch_report(
    session: aiohttp.ClientSession,
    ip: str,
    within: float = 1.0,
    port: int = DEFAULT_HEALTH_PORT,
    gate: ProbeGate = _UNBOUNDED,
) -> HealthReport | str | NoVerdict | None:
    """The agent's ``/status`` on ``ip``: the report, why it was refused (a ``str``), ``None``
    when the agent did not answer (not listening yet, no 200, timed out before its headers), or
    ``NO_VERDICT`` when the timeout fired while the operator itself was starved of CPU."""
    async with gate.slot():
        return await _fetch_report(session, f"http://{ip}:{port}/status", within)


async def _fetch_report(
    session: aiohttp.ClientSession, url: str, within: float
) -> HealthReport | str | NoVerdict | None:
    headers_seen = False
    patience = PatientTimeout(within)
    try:
        async with patience, session.get(url, allow_redirects=False) as response:
            headers_seen = True
            if response.status != 200:
                return None
            try:
                body = await read_capped(response, MAX_REPORT_BYTES)
            except HealthReportError:
                response.close()  # drop the connection rather than drain a hostile body
                raise
            return HealthReport.loads(body)
    except HealthReportError as exc:
        return str(exc)
    except TimeoutError:
        if patience.starved:
            return NO_VERDICT
        if not headers_seen:
            return None
        return f"health report not complete within {within:g} s"
    except (aiohttp.ClientResponseError, aiohttp.ClientPayloadError) as exc:
        # The pod answered, with something that is not HTTP we accept (header limits, a bad
        # status line, a broken body).
        return f"malformed HTTP response: {str(getattr(exc, 'message', exc))[:200]}"
    except (aiohttp.ClientError, OSError, ValueError):
        return None  # not listening, refused, reset: no answer


async def fetch_reports(
    session: aiohttp.ClientSession,
    pods: Mapping[str, str],
    within: float = 1.0,
    port: int = DEFAULT_HEALTH_PORT,
    gate: ProbeGate = _UNBOUNDED,
) -> Reports:
    """Reports of the pods ``{name: ip}``, fetched concurrently (within ``gate``'s bound)."""
    names = list(pods)
    results = await asyncio.gather(
        *(fetch_report(session, pods[n], within, port, gate) for n in names)
    )
    valid: dict[str, HealthReport] = {}
    invalid: dict[str, str] = {}
    starved: set[str] = set()
    for name, result in zip(names, results, strict=True):
        if isinstance(result, HealthReport):
            valid[name] = result
        elif isinstance(result, str):
            invalid[name] = result
        elif isinstance(result, NoVerdict):
            starved.add(name)
    return Reports(valid, invalid, frozenset(starved))


def _url(endpoint: str, tls: EtcdTls | None, path: str) -> str:
    """``endpoint`` is ``host:port`` or a URL; the scheme follows ``tls`` when it has none."""
    if "://" in endpoint:
        return endpoint.rstrip("/") + path
    return f"{'https' if tls is not None else 'http'}://{endpoint}{path}"


@dataclass(frozen=True)
class EtcdTls:
    """How the operator speaks TLS to a job's etcd: the job's CA and client certificate, and
    the name to check the server's certificate against when connecting to a pod IP."""

    context: ssl.SSLContext
    server_hostname: str | None = None


def client_tls(ca: str, cert: str, key: str, server_hostname: str | None = None) -> EtcdTls:
    """A TLS context that trusts only ``ca`` and presents ``cert``/``key`` (PEM texts)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca)
    # ssl loads a key pair from files only: a private directory that lives for this call.
    with tempfile.TemporaryDirectory(prefix="elasticjob-tls-") as folder:
        cert_path, key_path = Path(folder, "tls.crt"), Path(folder, "tls.key")
        for path, text in ((cert_path, cert), (key_path, key)):
            path.touch(mode=0o600)
            path.write_text(text)
        context.load_cert_chain(cert_path, key_path)
    return EtcdTls(context, server_hostname)


def _tls_kwargs(tls: EtcdTls | None) -> dict[str, Any]:
    if tls is None:
        return {}
    kwargs: dict[str, Any] = {"ssl": tls.context}
    if tls.server_hostname is not None:
        kwargs["server_hostname"] = tls.server_hostname
    return kwargs


async def probe_etcd(
    session: aiohttp.ClientSession,
    endpoints: Iterable[str],
    within: float = 1.0,
    tls: EtcdTls | None = None,
    gate: ProbeGate = _UNBOUNDED,
) -> bool | None:
    """Whether any endpoint answers etcd's ``/health`` with a healthy member; ``None`` when none
    did but a timeout fired while the operator was starved of CPU (no verdict)."""
    starved = False
    for endpoint in endpoints:
        async with gate.slot():
            healthy = await _probe_one(session, endpoint, within, tls)
        if healthy:
            return True
        starved = starved or healthy is None
    return None if starved else False


async def _probe_one(
    session: aiohttp.ClientSession, endpoint: str, within: float, tls: EtcdTls | None
) -> bool | None:
    """One endpoint's ``/health``: healthy or not (no answer in time is not), ``None`` when it
    timed out while the operator was starved (``PatientTimeout``)."""
    patience = PatientTimeout(within)
    try:
        async with (
            patience,
            session.get(
                _url(endpoint, tls, "/health"), allow_redirects=False, **_tls_kwargs(tls)
            ) as response,
        ):
            body = json.loads(await read_capped(response, 4096))
            return response.status == 200 and str(body.get("health")) == "true"
    except TimeoutError:  # an OSError too: judged here, before the clause below
        return None if patience.starved else False
    except (aiohttp.ClientError, OSError, ValueError, AttributeError, HealthReportError):
        return False


def _b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


async def _gateway(
    session: aiohttp.ClientSession,
    endpoint: str,
    tls: EtcdTls | None,
    path: str,
    request: Mapping[str, Any],
) -> dict[str, Any]:
    async with session.post(
        _url(endpoint, tls, path), json=request, allow_redirects=False, **_tls_kwargs(tls)
    ) as response:
        body = json.loads(await read_capped(response, 1024 * 1024))
        if response.status != 200 or not isinstance(body, dict):
            raise ValueError(f"etcd {path}: HTTP {response.status}: {str(body)[:200]}")
        return body


async def write_seed(
    session: aiohttp.ClientSession,
    endpoint: str,
    keys: seeding.SeedKeys,
    seed: Mapping[str, int],
    *,
    within: float = 5.0,
    tls: EtcdTls | None = None,
) -> bool:
    """Seed the restart counters of a recreated etcd (``seeding.plan_seed``); ``False`` when it
    could not (the caller retries on its next step). Idempotent: a seeded etcd is left alone."""
    try:
        async with asyncio.timeout(within):
            for _ in range(5):  # an agent's concurrent increment makes the guard fail: re-read
                stored: dict[str, seeding.Stored] = {}
                for key in (keys.seed, *keys.counters.values()):
                    got = await _gateway(session, endpoint, tls, "/v3/kv/range", {"key": _b64(key)})
                    for kv in got.get("kvs", [])[:1]:
                        stored[key] = seeding.Stored(
                            base64.b64decode(kv.get("value", "")).decode(),
                            int(kv.get("mod_revision", 0)),
                        )
                txn = seeding.plan_seed(keys, seed, stored)
                if txn is None:
                    return True
                done = await _gateway(
                    session,
                    endpoint,
                    tls,
                    "/v3/kv/txn",
                    {
                        "compare": [
                            {
                                "key": _b64(key),
                                "target": "MOD",
                                "result": "EQUAL",
                                "mod_revision": str(revision),
                            }
                            for key, revision in txn.guards.items()
                        ],
                        "success": [
                            {"request_put": {"key": _b64(key), "value": _b64(value)}}
                            for key, value in txn.puts.items()
                        ],
                    },
                )
                if done.get("succeeded"):
                    return True
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError) as exc:
        # ValueError includes seeding.SeedStateError (a corrupt counter): logged, retried.
        log.warning("cannot write restart seed to etcd at %s: %r", endpoint, exc)
        return False
    log.warning("cannot write restart seed to etcd at %s: it kept changing", endpoint)
    return False
