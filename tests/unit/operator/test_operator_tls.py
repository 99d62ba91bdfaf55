"""The managed etcd's certificates and how pods use them (pure builders)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID
from elasticjob_operator.core import manifests, names, pki
from elasticjob_operator.core.spec import SpecError

from tests.support.operator_model import JOB, job_spec

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def job_pki() -> pki.JobPki:
    return pki.generate(JOB.name, JOB.namespace, names.etcd_service_name(JOB.name), NOW)


def _cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_server_certificate_names_the_service_as_clients_use_it(job_pki: pki.JobPki) -> None:
    server = _cert(job_pki.server_cert)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) >= {
        "demo-etcd",
        "demo-etcd.ns",
        "demo-etcd.ns.svc",
        "demo-etcd.ns.svc.cluster.local",
    }
    usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # clientAuth as well: etcd's JSON gateway dials its own gRPC server with this certificate.
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


def test_both_leaves_are_signed_by_the_jobs_ca_and_the_client_names_no_host(
    job_pki: pki.JobPki,
) -> None:
    ca = _cert(job_pki.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for pem in (job_pki.server_cert, job_pki.client_cert):
        leaf = _cert(pem)
        leaf.verify_directly_issued_by(ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert leaf.not_valid_after_utc - NOW > datetime.timedelta(days=3000)
    client = _cert(job_pki.client_cert)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # serverAuth too: the agents serve each other checkpoints with it (docs/checkpoints.md).
    # With no host name in it, no client that checks etcd's name takes it for etcd.
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
    with pytest.raises(x509.ExtensionNotFound):
        client.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_another_jobs_ca_does_not_sign_this_jobs_certificates(job_pki: pki.JobPki) -> None:
    other = pki.generate("other", "ns", "other-etcd", NOW)
    with pytest.raises((ValueError, InvalidSignature)):
        _cert(job_pki.client_cert).verify_directly_issued_by(_cert(other.ca_cert))


def test_the_secret_is_owned_by_the_job_and_round_trips(job_pki: pki.JobPki) -> None:
    secret = manifests.build_etcd_tls_secret(JOB, job_pki.secret_data())
    assert secret["metadata"]["name"] == "demo-etcd-tls"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert pki.JobPki.from_secret_data(secret["stringData"]) == job_pki
    with pytest.raises(ValueError, match=r"client\.key"):
        pki.JobPki.from_secret_data(
            {k: v for k, v in secret["stringData"].items() if k != "client.key"}
        )


def _volume(pod: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in pod["spec"]["volumes"] if v["name"] == manifests.ETCD_TLS_VOLUME)


def test_managed_etcd_requires_client_certificates_over_https() -> None:
    pod = manifests.build_etcd_pod(JOB, job_spec(), 0)
    command = pod["spec"]["containers"][0]["command"]
    assert "--client-cert-auth" in command
    assert "--listen-client-urls=https://0.0.0.0:2379" in command
    assert "--advertise-client-urls=https://demo-etcd.ns.svc:2379" in command
    assert "--trusted-ca-file=/etc/etcd/tls/ca.crt" in command
    items = {i["key"] for i in _volume(pod)["secret"]["items"]}
    assert items == {"ca.crt", "tls.crt", "tls.key"}  # the server's own key and certificate


def test_workers_mount_only_the_client_side_and_the_agent_speaks_https() -> None:
    pod = manifests.build_worker_pod(JOB, job_spec(), 0, 0)
    secret = _volume(pod)["secret"]
    assert secret["secretName"] == "demo-etcd-tls"
    assert {(i["key"], i["path"]) for i in secret["items"]} == {
        ("ca.crt", "ca.crt"),
        ("client.crt", "tls.crt"),
        ("client.key", "tls.key"),
    }
    trainer = pod["spec"]["containers"][0]
    assert {
        "name": manifests.ETCD_TLS_VOLUME,
        "mountPath": "/etc/elasticjob/etcd-tls",
        "readOnly": True,
    } in trainer["volumeMounts"]
    assert "--rdzv-endpoint=https://demo-etcd.ns.svc:2379" in trainer["args"]


def test_insecure_managed_etcd_is_plain_http_without_certificates() -> None:
    spec = job_spec(etcd={"insecure": True})
    etcd = manifests.build_etcd_pod(JOB, spec, 0)
    assert "--client-cert-auth" not in etcd["spec"]["containers"][0]["command"]
    worker = manifests.build_worker_pod(JOB, spec, 0, 0)
    assert all(v["name"] != manifests.ETCD_TLS_VOLUME for v in worker["spec"].get("volumes", []))
    assert "--rdzv-endpoint=demo-etcd.ns.svc:2379" in worker["spec"]["containers"][0]["args"]


def test_external_etcd_with_a_tls_secret() -> None:
    spec = job_spec(
        etcd={
            "mode": "External",
            "endpoints": ["e1:2379", "e2:2379"],
            "tlsSecretName": "my-etcd-client",
        }
    )
    worker = manifests.build_worker_pod(JOB, spec, 0, 0)
    secret = _volume(worker)["secret"]
    assert secret["secretName"] == "my-etcd-client"
    assert {i["path"] for i in secret["items"]} == {"ca.crt", "tls.crt", "tls.key"}
    args = worker["spec"]["containers"][0]["args"]
    assert "--rdzv-endpoint=https://e1:2379,https://e2:2379" in args


@pytest.mark.parametrize(
    ("etcd", "says"),
    [
        ({"tlsSecretName": "x"}, "tlsSecretName is for External mode"),
        ({"mode": "External", "endpoints": ["e:1"], "insecure": True}, "insecure is for Managed"),
        ({"mode": "External", "endpoints": ["e:1"], "tlsSecretName": "Bad_Name"}, "tlsSecretName"),
        ({"insecure": "yes"}, "spec.etcd.insecure"),
    ],
)
def test_bad_tls_settings_are_refused(etcd: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError, match=says):
        job_spec(etcd=etcd)
