"""Certificates of a job's managed etcd: one CA, a server and a client certificate (no I/O).

Generated once per job by the operator (``cryptography``), kept in a Secret the job owns
(``manifests.build_etcd_tls_secret``) and never regenerated while the job lives: the Secret is
created if absent and read otherwise. The CA's private key is not kept anywhere: nothing can
issue another certificate for this etcd, so the only clients it accepts are the holders of the
one client certificate (the job's worker pods and the operator).

The server certificate names the etcd Service in every form a client in the cluster uses
(``<job>-etcd``, ``.<ns>``, ``.<ns>.svc``, ``.<ns>.svc.cluster.local``) plus ``localhost``;
the operator, which connects to the pod's IP, checks the certificate against the Service name.
Keys are ECDSA P-256 (fast to make, small); certificates are valid for ``VALIDITY_DAYS``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import names

VALIDITY_DAYS = 3650
"""Certificates outlive any job: they are never renewed while the job lives."""
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class JobPki:
    """PEM texts of the job's etcd certificates (the Secret's data)."""

    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str

    def secret_data(self) -> dict[str, str]:
        return {
            names.TLS_CA: self.ca_cert,
            names.TLS_CERT: self.server_cert,
            names.TLS_KEY: self.server_key,
            names.TLS_CLIENT_CERT: self.client_cert,
            names.TLS_CLIENT_KEY: self.client_key,
        }

    @classmethod
    def from_secret_data(cls, data: dict[str, str]) -> JobPki:
        """The inverse of ``secret_data``; ``ValueError`` naming a missing key."""
        missing = [
            k
            for k in (
                names.TLS_CA,
                names.TLS_CERT,
                names.TLS_KEY,
                names.TLS_CLIENT_CERT,
                names.TLS_CLIENT_KEY,
            )
            if k not in data
        ]
        if missing:
            raise ValueError(f"etcd TLS Secret lacks {', '.join(missing)}")
        return cls(
            data[names.TLS_CA],
            data[names.TLS_CERT],
            data[names.TLS_KEY],
            data[names.TLS_CLIENT_CERT],
            data[names.TLS_CLIENT_KEY],
        )


def server_names(service: str, namespace: str) -> list[str]:
    """DNS names clients use for the etcd Service (the certificate's SANs, ``localhost`` too)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}",
        "localhost",
    ]


def generate(job: str, namespace: str, service: str, now: datetime.datetime) -> JobPki:
    """A fresh CA, server and client certificate for the managed etcd of ``namespace/job``."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "elasticjob"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"elasticjob etcd CA {namespace}/{job}"[:64]),
        ]
    )
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    names = server_names(service, namespace)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    server_key, server = _leaf(
        ca,
        ca_key,
        f"{service}.{namespace}.svc"[:64],
        now=now,
        # clientAuth too: etcd's own HTTP/JSON gateway dials its gRPC server with this
        # certificate, and --client-cert-auth checks it like any client's.
        usage=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        sans=sans,
    )
    client_key, client = _leaf(
        ca,
        ca_key,
        f"elasticjob {namespace}/{job}"[:64],
        now=now,
        # serverAuth too: the agents serve each other checkpoints over mutual TLS with this
        # certificate (docs/checkpoints.md). It names no host, so no client that checks
        # etcd's name (agents, operator) takes it for the etcd server.
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[],
    )
    return JobPki(
        ca_cert=_pem(ca),
        server_cert=_pem(server),
        server_key=_key_pem(server_key),
        client_cert=_pem(client),
        client_key=_key_pem(client_key),
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
    )


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    now: datetime.datetime,
    usage: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        _builder(subject, ca.subject, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
