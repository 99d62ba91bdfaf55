"""The operator's side of the managed etcd's mutual TLS against a real etcd.

etcd runs exactly as the managed etcd pod does (``--client-cert-auth``, https only, the job's
server certificate); the operator's probe and restart seed present the job's client certificate
and check the server against the Service name. Clients without it, with another job's
certificate, or in plain HTTP are refused. (The agents' side is tested with the agent.)
"""

from __future__ import annotations

import asyncio
import datetime
import shutil
import ssl
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from elasticjob_agent.ports import free_port
from elasticjob_agent.protocol.keys import JobKeys
from elasticjob_operator import probes
from elasticjob_operator.core import manifests, names, pki, seeding

from tests.support.etcd_server import etcd_binary
from tests.support.operator_model import job_spec

SERVICE = "demo-etcd.ns.svc"
NOW = datetime.datetime.now(datetime.UTC)


@dataclass
class TlsEtcd:
    endpoint: str
    job: pki.JobPki


def _etcd_command(folder: Path, port: int, peer: int) -> list[str]:
    binary = etcd_binary()
    # The managed etcd pod's flags (manifests.build_etcd_pod), on loopback ports.
    pod = manifests.build_etcd_pod(names.JobRef("ns", "demo", "u"), job_spec(), 0)
    tls_flags = [
        f.replace(names.ETCD_SERVER_TLS_DIR, str(folder))
        for f in pod["spec"]["containers"][0]["command"]
        if f == "--client-cert-auth"
        or f.startswith(("--trusted-ca-file", "--cert-file", "--key-file"))
    ]
    assert len(tls_flags) == 4, tls_flags
    return [
        binary,
        "--name=default",
        f"--data-dir={folder / 'data'}",
        f"--listen-client-urls=https://127.0.0.1:{port}",
        f"--advertise-client-urls=https://127.0.0.1:{port}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=default=http://127.0.0.1:{peer}",
        "--log-level=warn",
        *tls_flags,
    ]


def _tls(job: pki.JobPki) -> probes.EtcdTls:
    return probes.client_tls(job.ca_cert, job.client_cert, job.client_key, SERVICE)


@pytest.fixture
async def etcd() -> AsyncIterator[TlsEtcd]:
    folder = Path(tempfile.mkdtemp(prefix="elasticjob-tls-etcd-"))
    job = pki.generate("demo", "ns", "demo-etcd", NOW)
    for name, text in {
        "ca.crt": job.ca_cert,
        "tls.crt": job.server_cert,
        "tls.key": job.server_key,
    }.items():
        (folder / name).write_text(text)
    port, peer = free_port(), free_port()
    log = (folder / "etcd.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *_etcd_command(folder, port, peer), stdout=log, stderr=log
    )
    endpoint = f"127.0.0.1:{port}"
    try:
        async with probes.new_session() as session:
            for _ in range(200):  # at most 20 s
                if proc.returncode is not None:
                    raise RuntimeError((folder / "etcd.log").read_text()[-2000:])
                if await probes.probe_etcd(session, [endpoint], 1.0, _tls(job)):
                    break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("TLS etcd did not answer the probe within 20 s")
        yield TlsEtcd(endpoint, job)
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


async def test_the_operator_probes_and_seeds_with_the_jobs_client_certificate(
    etcd: TlsEtcd,
) -> None:
    keys = seeding.SeedKeys.of(JobKeys("/elasticjob", f"run-{uuid.uuid4().hex[:8]}"))
    async with probes.new_session() as session:
        assert await probes.probe_etcd(session, [etcd.endpoint], 2.0, _tls(etcd.job))
        assert await probes.write_seed(
            session, etcd.endpoint, keys, {"failure": 2}, tls=_tls(etcd.job)
        )


async def test_strangers_are_refused(etcd: TlsEtcd) -> None:
    other = pki.generate("other", "ns", "other-etcd", NOW)
    async with probes.new_session() as session:
        # Another job's client certificate (and CA): the server does not trust it.
        mixed = probes.client_tls(etcd.job.ca_cert, other.client_cert, other.client_key, SERVICE)
        assert not await probes.probe_etcd(session, [etcd.endpoint], 2.0, mixed)
        # The job's CA but no client certificate at all.
        bare = ssl.create_default_context(cadata=etcd.job.ca_cert)
        assert not await probes.probe_etcd(
            session, [etcd.endpoint], 2.0, probes.EtcdTls(bare, SERVICE)
        )
        # Plain HTTP.
        assert not await probes.probe_etcd(session, [etcd.endpoint], 2.0, None)
        # The right client certificate, but a server name the certificate does not carry.
        wrong = probes.client_tls(
            etcd.job.ca_cert, etcd.job.client_cert, etcd.job.client_key, "evil.example"
        )
        assert not await probes.probe_etcd(session, [etcd.endpoint], 2.0, wrong)
        keys = seeding.SeedKeys.of(JobKeys("/elasticjob", "run-x"))
        assert not await probes.write_seed(session, etcd.endpoint, keys, {"failure": 1}, tls=mixed)


async def _etcdctl(*args: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        "etcdctl", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(proc.wait(), 30)


async def test_a_client_certificate_of_another_job_is_refused_by_etcdctl_too(
    etcd: TlsEtcd, tmp_path: Path
) -> None:
    """The same refusal seen by a stock client (etcdctl), as a stranger's pod would run it."""
    other = pki.generate("other", "ns", "other-etcd", NOW)
    files = {"ca.crt": etcd.job.ca_cert, "c.crt": other.client_cert, "c.key": other.client_key}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    base = [f"--endpoints=https://{etcd.endpoint}", "--dial-timeout=3s", "--command-timeout=3s"]
    stranger = [
        f"--cacert={tmp_path / 'ca.crt'}",
        f"--cert={tmp_path / 'c.crt'}",
        f"--key={tmp_path / 'c.key'}",
    ]
    assert await _etcdctl(*base, *stranger, "put", "/elasticjob/x", "y") != 0
    assert await _etcdctl(*base, "--insecure-skip-tls-verify", "get", "/", "--prefix") != 0
