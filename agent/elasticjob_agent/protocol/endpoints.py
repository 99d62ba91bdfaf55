"""The one parser of etcd endpoint lists (``--rdzv-endpoint``) and their TLS settings, shared by
the agent (its flags, torch's parameters) and the operator (``spec.etcd.endpoints``, the agents'
command line, which it writes with ``format_endpoints`` and ``tls_conf``). Pure but for the
agent's look at the TLS files it is given (``tls_from_conf`` checks they exist, ``TlsFiles.read``
reads them at each connect).

An endpoint is ``[scheme://]host[:port]``; the port defaults to 2379 and IPv6 hosts are written
in brackets (``[::1]:2379``). TLS (docs/contracts.md) follows torchrun's ``--rdzv-conf`` names:

- ``https://`` endpoints use TLS, verified against ``cacert`` (else the system's CAs); never
  silently downgraded to plain HTTP.
- ``cacert``, ``cert``, ``key`` with an ``https://`` or scheme-less endpoint: TLS with those
  files (``cert`` and ``key``, the client certificate, go together).
- TLS options with an ``http://`` endpoint, or ``http://`` and ``https://`` mixed in one list,
  are an error: one of the two is a mistake, and guessing would either fail later or downgrade.
- torch's ``protocol`` key (``http``/``https``) is honoured the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from elasticjob_agent.protocol import defaults

DEFAULT_PORT = defaults.ETCD_CLIENT_PORT
TLS_KEYS = ("cacert", "cert", "key")
"""``--rdzv-conf`` keys of the TLS files (torchrun's names); ``protocol`` is torch's scheme key."""


@dataclass(frozen=True)
class TlsFiles:
    """Where the TLS material is. Files are read at every (re)connect, so a rotated
    certificate (a re-mounted Kubernetes Secret) is picked up by the next connection."""

    cacert: str | None = None
    """PEM CA bundle that signs etcd's server certificate; ``None``: the system's CAs."""
    cert: str | None = None
    """PEM client certificate (for etcd's ``--client-cert-auth``); needs ``key``."""
    key: str | None = None
    """PEM private key of ``cert``."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError(
                "TLS client certificate: give both cert=<path> and key=<path> in --rdzv-conf "
                "(or neither)"
            )

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """``(cacert, key, cert)`` contents; ``ValueError`` naming a file that cannot be read."""
        return _read(self.cacert, "cacert"), _read(self.key, "key"), _read(self.cert, "cert")


def _read(path: str | None, name: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"TLS {name} file {path!r} cannot be read: {exc.strerror}") from None


@dataclass(frozen=True)
class Endpoint:
    """One etcd client address. ``host`` may be a DNS name: it is resolved at every (re)connect.
    ``tls``: ``None`` for plain HTTP, else the TLS settings of the connection."""

    host: str
    port: int
    tls: TlsFiles | None = None

    def __str__(self) -> str:
        """``host:port``, the gRPC target."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """``http(s)://host:port``: round-trips through ``parse_endpoints`` with the same TLS
        options."""
        return f"{'https' if self.tls is not None else 'http'}://{self}"


def tls_from_conf(conf: Mapping[str, str | None]) -> tuple[TlsFiles | None, str | None]:
    """The TLS files and the ``protocol`` named by ``--rdzv-conf``; ``ValueError`` on a file
    that does not exist or a bad ``protocol``.

    Returns ``(None, protocol)`` when no TLS file is named.
    """
    protocol = conf.get("protocol")
    if protocol is not None and protocol not in ("http", "https"):
        raise ValueError(f"--rdzv-conf protocol={protocol!r} must be http or https")
    paths = {name: conf.get(name) or None for name in TLS_KEYS}
    for name, path in paths.items():
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"--rdzv-conf {name}={path!r}: no such file")
    if not any(paths.values()):
        return None, protocol
    return TlsFiles(**paths), protocol


def tls_conf(tls: TlsFiles | None) -> dict[str, str]:
    """The ``--rdzv-conf`` entries naming ``tls``'s files (what ``tls_from_conf`` reads back)."""
    if tls is None:
        return {}
    paths = {"cacert": tls.cacert, "cert": tls.cert, "key": tls.key}
    return {name: path for name, path in paths.items() if path is not None}


def format_endpoints(endpoints: Iterable[Endpoint]) -> str:
    """The ``--rdzv-endpoint`` text of ``endpoints``: ``https://host:port`` for TLS,
    ``host:port`` otherwise. ``parse_endpoints`` of it, with the ``tls_conf`` of their TLS
    files, gives the same endpoints back."""
    return ",".join(e.url if e.tls is not None else str(e) for e in endpoints)


def parse_endpoints(
    text: str,
    tls: TlsFiles | None = None,
    protocol: str | None = None,
    *,
    default_port: int | None = DEFAULT_PORT,
) -> tuple[Endpoint, ...]:
    """Parse ``[scheme://]host[:port][,...]`` with the TLS settings of ``--rdzv-conf``
    (``tls``, ``protocol``: see ``tls_from_conf``) into endpoints that say whether to use TLS.
    ``default_port=None``: every entry must name its port.

    Raises ``ValueError`` naming the bad entry or the contradiction (module docstring).
    """
    entries = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(entries):
        raise ValueError(f"invalid etcd endpoint list {text!r}: expected host:port[,host:port...]")
    parsed = [_parse_one(entry, default_port) for entry in entries]
    schemes = {scheme for scheme, _, _ in parsed if scheme is not None}
    if protocol is not None:
        schemes.add(protocol)
    if len(schemes) > 1:
        raise ValueError(
            f"etcd endpoints {text!r} mix http and https (or contradict protocol={protocol}): "
            "use one scheme"
        )
    scheme = schemes.pop() if schemes else None
    if scheme == "http" and tls is not None:
        raise ValueError(
            f"etcd endpoint {text!r} is plain http:// but TLS files (cacert/cert/key) are given: "
            "write https:// endpoints to use TLS, or drop the TLS options"
        )
    if scheme == "https" and tls is None:
        tls = TlsFiles()  # the system's CAs, no client certificate
    return tuple(Endpoint(host, port, tls) for _, host, port in parsed)


def _parse_one(entry: str, default_port: int | None) -> tuple[str | None, str, int]:
    rest = entry
    scheme: str | None = None
    if "://" in rest:
        scheme, _, rest = rest.partition("://")
        if scheme not in ("http", "https"):
            raise ValueError(f"invalid etcd endpoint {entry!r}: scheme must be http or https")
    rest = rest.rstrip("/")
    port_text: str | None = None
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"invalid etcd endpoint {entry!r}: unclosed '[' in IPv6 address")
        host = rest[1:close]
        after = rest[close + 1 :]
        if after:
            if not after.startswith(":"):
                raise ValueError(f"invalid etcd endpoint {entry!r}: expected ':' after ']'")
            port_text = after[1:]
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    elif ":" in rest:
        raise ValueError(f"invalid etcd endpoint {entry!r}: write IPv6 addresses as [addr]:port")
    else:
        host = rest
    if not host or "/" in host:
        raise ValueError(f"invalid etcd endpoint {entry!r}: expected host:port")
    if port_text is None:
        if default_port is None:
            raise ValueError(f"invalid etcd endpoint {entry!r}: expected host:port")
        return scheme, host, default_port
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"invalid etcd endpoint {entry!r}: port must be 1-65535")
    return scheme, host, int(port_text)
