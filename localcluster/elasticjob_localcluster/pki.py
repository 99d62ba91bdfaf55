"""Certificates and keys of one cluster, made with the ``openssl`` command line tool."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from pathlib import Path

from .openssl import openssl


class PkiError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`make_pki` writes into one directory."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        """Serves the API (and the emulated kubelets' log endpoint)."""
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        """Signs ServiceAccount tokens."""
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def token_file(self) -> Path:
        """Static tokens of the admin and the control-plane components."""
        return self.directory / "tokens.csv"


#: Static identities: (user, groups). The admin and the node emulator are cluster admins; the
#: controller-manager and scheduler use the identities RBAC's bootstrap policy grants rights to.
IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "node-emulator": ("elasticjob:node-emulator", ("system:masters", "system:nodes")),
}


_openssl = functools.partial(openssl, error=PkiError)


#: The identity (token and kubeconfig name) of the real nodes' NetworkPolicy enforcer
#: (kube-router's firewall), and its user name, which its ClusterRoleBinding names
#: (``realnodes.render``).
NETWORK_POLICY_IDENTITY = "kube-router"
NETWORK_POLICY_USER = "elasticjob:kube-router"


def node_identities(nodes: list[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Static identities of real nodes: each kubelet as ``system:node:<name>`` (what the Node
    authorizer and NodeRestriction expect) under ``node-<name>``, kube-proxy as
    ``system:kube-proxy`` (bound to ``system:node-proxier`` by RBAC's bootstrap policy), and the
    NetworkPolicy enforcer as :data:`NETWORK_POLICY_USER` (bound when the nodes start)."""
    identities: dict[str, tuple[str, tuple[str, ...]]] = {
        f"node-{name}": (f"system:node:{name}", ("system:nodes",)) for name in nodes
    }
    if nodes:
        identities["kube-proxy"] = ("system:kube-proxy", ())
        identities[NETWORK_POLICY_IDENTITY] = (NETWORK_POLICY_USER, ())
    return identities


def _serial() -> str:
    """A random serial number for one certificate. Not ``-CAcreateserial``: that reads and
    rewrites one ``ca.srl`` file, and the real nodes issue their certificates in parallel (one
    node read the file while another wrote it: "Unable to load number from ca.srl")."""
    return str(secrets.randbits(120) + 1)


def issue_certificate(
    pki: Pki,
    name: str,
    *,
    common_name: str,
    organization: str = "",
    ip_sans: list[str] | None = None,
    dns_sans: list[str] | None = None,
    usage: str = "serverAuth",
) -> tuple[Path, Path]:
    """A key and a certificate signed by the cluster CA, written as ``<name>.key``/``.crt`` in
    ``pki.directory``; ``usage`` is the extendedKeyUsage (``serverAuth``, ``clientAuth`` or
    both, comma-separated). Returns (certificate, key)."""
    directory = pki.directory
    subject = f"/CN={common_name}" + (f"/O={organization}" if organization else "")
    ext = [f"extendedKeyUsage={usage}", "basicConstraints=CA:FALSE",
           "keyUsage=digitalSignature,keyEncipherment"]  # fmt: skip
    sans = [f"IP:{ip}" for ip in ip_sans or []] + [f"DNS:{n}" for n in dns_sans or []]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    (directory / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", subject, cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-set_serial", _serial(), "-days", "3650", "-out", f"{name}.crt", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.key").chmod(0o600)
    return directory / f"{name}.crt", directory / f"{name}.key"


def make_pki(
    directory: Path,
    ip_sans: list[str],
    dns_sans: list[str],
    extra_identities: dict[str, tuple[str, tuple[str, ...]]] | None = None,
) -> tuple[Pki, dict[str, str]]:
    """Create a CA, a serving certificate valid for ``ip_sans``/``dns_sans``, the ServiceAccount
    key pair and a static token per identity in :data:`IDENTITIES` and ``extra_identities``.

    Returns the paths and the token of each identity. Overwrites what ``directory`` held.
    """
    identities = {**IDENTITIES, **(extra_identities or {})}
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "3650", "-subj", "/CN=elasticjob-local-ca", cwd=directory,
    )  # fmt: skip
    sans = ",".join([f"IP:{ip}" for ip in ip_sans] + [f"DNS:{name}" for name in dns_sans])
    (directory / "serving.ext").write_text(
        f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n"
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key",
        "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-set_serial", _serial(), "-days", "3650", "-out", "apiserver.crt",
        "-extfile", "serving.ext", cwd=directory,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    tokens = {name: secrets.token_hex(24) for name in identities}
    lines = []
    for name, (user, groups) in identities.items():
        line = f"{tokens[name]},{user},{user}"
        if groups:
            line += ',"' + ",".join(groups) + '"'
        lines.append(line)
    pki.token_file.write_text("\n".join(lines) + "\n")
    for secret in (pki.ca_key, pki.serving_key, pki.sa_key, pki.token_file):
        secret.chmod(0o600)
    return pki, tokens
